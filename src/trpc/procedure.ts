import { getTRPCErrorFromUnknown, type TRPCCombinedDataTransformer, TRPCError } from '@trpc/server';
import { idempotentCall } from '../core/context.js';
import type { ExecuteResult, IdempotencyEngine, IdempotencyEngineOptions, RunOptions } from '../core/engine.js';
import { IdempotencyConfigError, IdempotencyError, isIdempotencyError } from '../core/errors.js';
import { parseIdempotencyKey } from '../core/key.js';
import type { IdempotencyPolicyOptions, ResolvedPolicy } from '../core/policy.js';
import { signalGetter } from '../core/signal-getter.js';
import type { IdempotencySteps } from '../core/steps.js';
import { createIdempotencyEngine } from '../engine.js';
import { isIdentity, trpcCodec } from './codec.js';
import { toTRPCError } from './errors.js';
import { batchOf, hasRequestHeaders, isWebSocket, readKeyHeader, setResponseHeader } from './http.js';
import { outputParsersOf, parsedOutput } from './output.js';

/** Per-procedure options, set with `.meta({ idempotency: { ... } })`. */
export interface IdempotencyProcedureOptions extends IdempotencyPolicyOptions {
  /**
   * `true`: a mutation without a key is refused with 400.
   * `false`: it runs unprotected (a key, when sent, is still honoured).
   * @default true
   */
  required?: boolean;
}

/**
 * Add it to your meta type: `initTRPC.meta<IdempotencyMeta>()`. `false`
 * turns protection off for one procedure built from an idempotent builder.
 */
export interface IdempotencyMeta {
  idempotency?: IdempotencyProcedureOptions | false;
}

/** Options of {@link withIdempotency}. */
export interface WithIdempotencyOptions<TContext> extends IdempotencyEngineOptions {
  /**
   * Whether mutations must send a key; overridable per procedure.
   * @default true
   */
  required?: boolean;
  /**
   * The request header that carries the key. In a batch, call `i` reads
   * `<header>-<i>` (the plain header applies to call 0 only).
   * @default 'Idempotency-Key'
   */
  header?: string;
  /**
   * The response header set to `true` on a replay (`<header>-<i>` per call in a batch).
   * @default 'Idempotent-Replayed'
   */
  replayedHeader?: string;
  /**
   * Who a key belongs to: the same key sent by two scopes names two
   * operations, and one caller never replays, blocks or learns of another's.
   * Return the authenticated user or tenant id (a non-empty string or a
   * number), or `null` for a call that is deliberately unscoped. `undefined`
   * is not accepted (a `ctx.user?.id` on a route without auth would put every
   * caller in one scope): the type refuses it, and at run time it, an empty
   * string or an object is a 500 that says what to return.
   * `'global'`: every caller shares every key, so anyone who learns a key can
   * read its stored response; only for procedures without users (a service
   * called by trusted systems) or whose responses are not private.
   * Required: an unscoped procedure is a choice made in code.
   */
  scope:
    | ((opts: { ctx: TContext; path: string }) => string | number | null | Promise<string | number | null>)
    | 'global';
  /**
   * Reads the raw key instead of the request header (websockets, server-side
   * callers, a key inside the input). Return `undefined` for "no key".
   * @default the `header` of the request found in `ctx.req`, `ctx.request` or `ctx.headers`
   */
  getKey?: (opts: {
    ctx: TContext;
    path: string;
    batchIndex: number;
    input: unknown;
  }) => string | null | undefined | Promise<string | null | undefined>;
  /** An engine to share with other builders or with non-tRPC consumers; the options above then only configure the adapter. */
  engine?: IdempotencyEngine;
  /**
   * The router's data transformer, the one given to `initTRPC.create({ transformer })`
   * (`null` when it has none): results are stored through it, so a replay
   * is what the first call returned (with superjson: the same Date, Map, BigInt).
   * Needed with `@trpc/server` 11.19 to 11.21, whose builders do not carry the
   * router's configuration; from 11.22 it is read from the builder, and a
   * transformer given here must be the router's.
   * @default the builder's (`@trpc/server` >= 11.22); required below
   */
  transformer?: DataTransformerOption | null;
}

/** A transformer as `initTRPC.create()` takes it: one object, or an `{ input, output }` pair. */
export type DataTransformerOption =
  | { serialize: (value: any) => any; deserialize: (value: any) => any }
  | TRPCCombinedDataTransformer;

const ENGINE_OPTIONS = [
  'store',
  'storeTimeout',
  'retryAfter',
  'onEvent',
  'now',
  'ttl',
  'lockTtl',
  'inFlight',
  'waitTimeout',
  'onStoreError',
  'maxResponseBytes',
  'excludeFields',
  'transaction',
  'maxRunTime',
] as const satisfies readonly (keyof IdempotencyEngineOptions)[];

/**
 * A procedure builder, by shape: `TRPCProcedureBuilder`'s number of type
 * parameters changed within tRPC 11 (8 in 11.19, 9 later), so naming it
 * would tie these declarations to one version.
 */
interface AnyBuilder {
  _def: { procedure?: boolean; meta?: unknown; middlewares?: unknown };
  mutation(resolver: (opts: any) => any): any;
}
/** The context a resolver of `B` gets, after its middlewares. */
type ContextOf<B> = B extends { mutation(resolver: (opts: infer O) => any): any }
  ? O extends { ctx: infer C }
    ? C
    : never
  : never;

/**
 * Makes every mutation built from `base` idempotent. Chain `.input()`,
 * `.use()` and `.meta()` in any order: the check always runs last, right
 * before the resolver, so it sees the parsed input and the context your
 * middlewares built. Queries and subscriptions are left untouched.
 *
 * @example
 * export const idempotentProcedure = withIdempotency(authedProcedure, {
 *   store: redisStore({ client: redis }),
 *   scope: ({ ctx }) => ctx.user.id,
 * });
 * pay: idempotentProcedure.input(z.object({ amount: z.number() })).mutation(({ input }) => charge(input)),
 */
export function withIdempotency<TBuilder extends AnyBuilder>(
  base: TBuilder,
  options: WithIdempotencyOptions<ContextOf<TBuilder>>,
): TBuilder {
  // initialized config
  // JavaScript callers may leave the options out: they learn what scope to pass.
  checkOptions(base, options === undefined ? {} : options);
  if (options.engine !== undefined) {
    const ignored = ENGINE_OPTIONS.filter((name) => options[name] !== undefined);
    if (ignored.length > 0) {
      throw new IdempotencyConfigError(
        `withIdempotency: ${ignored.join(', ')} would be ignored, because an engine is given (it has its own). ` +
          'Set them on createIdempotencyEngine, or per procedure in meta.idempotency.',
      );
    }
  }
  const engine = options.engine ?? createIdempotencyEngine(options);
  const header = (options.header ?? 'Idempotency-Key').toLowerCase();
  const headerLabel = options.header ?? 'Idempotency-Key';
  const replayedHeader = options.replayedHeader ?? 'Idempotent-Replayed';
  const { getKey } = options;
  const scope = options.scope === 'global' ? undefined : options.scope;
  const defaultRequired = options.required ?? true;
  const codec = trpcCodec(routerTransformer(base, options.transformer));

  // initialized per procedure, when `.mutation()` is called
  /**
   * The check wraps the resolver rather than being one more middleware: it
   * still runs after every middleware, and a middleware level is a costly
   * step on the hot path (tRPC copies the call's options twice per level).
   * The resolver gets the claim's `signal`, which a middleware cannot replace.
   */
  function createResolver(
    resolver: (opts: any) => unknown,
    policy: ResolvedPolicy,
    required: boolean,
    outputs: ReturnType<typeof outputParsersOf>,
  ) {
    return async function idempotentResolver(opts: any) {
      const { ctx, batchIndex, input, signal } = opts;
      // Outside a protected call, a nested procedure must not see the caller's claim.
      if (opts.type !== 'mutation') return idempotentCall.exit(() => resolver(opts));
      const procedurePath: string = opts.path ?? '';

      let raw: unknown;
      if (getKey !== undefined) {
        raw = getKey({ ctx, path: procedurePath, batchIndex, input });
        // Awaited only when it is a promise: an await of a plain value still costs a turn of the microtask queue.
        if (isThenable(raw)) raw = await raw;
        if (raw !== undefined && raw !== null && typeof raw !== 'string') {
          // String() would make one key of every object ("[object Object]"): shared by every caller.
          throw misconfigured(
            `Procedure ${procedurePath}: getKey returned ${describeType(raw)}. Return the key as a string, or undefined (or null) when the call has none.`,
          );
        }
      } else {
        if (isWebSocket(ctx)) {
          throw misconfigured(
            `Procedure ${procedurePath}: over a WebSocket the request headers are those of the connection, shared by all its calls, ` +
              'so they cannot carry a key per mutation. Pass getKey (for example, read the key from the input).',
          );
        }
        if (!hasRequestHeaders(ctx)) {
          throw misconfigured(
            `Procedure ${procedurePath}: the tRPC context has no request headers to read ${headerLabel} from. ` +
              'Return the request from createContext (`({ req, res }) => ({ req, res })`, or `({ req, resHeaders })` with the fetch adapter), or pass getKey.',
          );
        }
        try {
          raw = readKeyHeader(ctx, header, batchIndex, headerLabel);
        } catch (error) {
          engine.emit({ result: 'rejected', name: procedurePath, durationMs: 0, reason: 'key_invalid' });
          throw isIdempotencyError(error) ? toTRPCError(error) : error;
        }
      }

      if (raw === undefined || raw === null) {
        if (!required) {
          engine.emit({ result: 'unprotected', name: procedurePath, durationMs: 0, reason: 'no_key' });
          return idempotentCall.exit(() => resolver(opts));
        }
        engine.emit({ result: 'rejected', name: procedurePath, durationMs: 0, reason: 'key_missing' });
        const where =
          batchIndex > 0 ? ` This call is #${batchIndex} of a batch: send ${headerLabel}-${batchIndex}.` : '';
        throw toTRPCError(
          new IdempotencyError(
            'key_missing',
            `This mutation requires an ${headerLabel} header. Generate a unique key (such as a UUID v4) when the user starts the operation and send it on every retry.${where}`,
          ),
        );
      }

      let key: string;
      try {
        key = parseIdempotencyKey(raw as string, headerLabel);
      } catch (error) {
        engine.emit({ result: 'rejected', name: procedurePath, durationMs: 0, reason: 'key_invalid' });
        throw isIdempotencyError(error) ? toTRPCError(error) : error;
      }

      let scopeValue: string | undefined;
      if (scope !== undefined) {
        let given: unknown = scope({ ctx, path: procedurePath });
        if (isThenable(given)) given = await given;
        scopeValue = checkScope(given, procedurePath);
      }

      // Set by `.output()` parsing when the value cannot be replayed as it was answered.
      let unreplayable: { value: unknown } | undefined;
      const callCodec =
        outputs.length === 0
          ? codec
          : {
              ...codec,
              serialize(value: unknown) {
                if (unreplayable !== undefined && Object.is(value, unreplayable.value)) {
                  throw new TypeError('No stored form of this result passes the procedure’s output parser again.');
                }
                return codec.serialize(value);
              },
            };

      let result: ExecuteResult<unknown>;
      try {
        result = await engine.execute({
          key,
          name: procedurePath,
          scope: scopeValue,
          payload: input,
          policy,
          codec: callCodec,
          signal,
          run: (call) => {
            // What a middleware would have seen: tRPC's error for what the resolver threw. Not an async
            // function, whose await of the resolver's value would cost one more turn of the microtask queue.
            let value: unknown;
            try {
              value = resolver(withClaimSignal(opts, call));
            } catch (error) {
              return Promise.reject(getTRPCErrorFromUnknown(error));
            }
            const settled = isThenable(value)
              ? Promise.resolve(value).then(undefined, rethrowAsTRPCError)
              : Promise.resolve(value);
            if (outputs.length === 0) return settled;
            // What `.output()` lets through is what is stored (and what a replay must pass again).
            return settled.then(async (done) => {
              const parsed = await parsedOutput(done, outputs, opts, codec);
              if (!parsed.replayable) unreplayable = { value: parsed.value };
              return parsed.value;
            });
          },
        });
      } catch (error) {
        if (!isIdempotencyError(error)) throw error;
        throw refusal(ctx, error);
      }

      if (result.replayed) {
        // Call 0 of a context that cannot tell a batch from a single call gets both names.
        const batch = batchOf(ctx, batchIndex);
        if (batch !== false) setResponseHeader(ctx, `${replayedHeader}-${batchIndex}`, 'true');
        if (batch !== true) setResponseHeader(ctx, replayedHeader, 'true');
      }
      if (!result.ok) {
        // A step's error (a claim lost before a step was recorded, a step result that could not be) reaches
        // here wrapped as tRPC wraps whatever a resolver throws: it answers as the idempotency error it is.
        const found = idempotencyErrorOf(result.error);
        throw found === undefined ? result.error : refusal(ctx, found);
      }
      return result.value;
    };
  }

  // Every builder method returns a wrapped builder, and `.mutation()` wraps the
  // resolver with the check, so chaining order does not matter.
  function wrap(builder: AnyBuilder): AnyBuilder {
    return new Proxy(builder, {
      get(target, prop, receiver) {
        if (prop === 'mutation') {
          return (resolver: (opts: any) => unknown) => {
            const meta: unknown = (target._def.meta as IdempotencyMeta | undefined)?.idempotency;
            if (meta === false) return target.mutation(resolver);
            const where = 'meta.idempotency';
            if (meta !== undefined && (typeof meta !== 'object' || meta === null || Array.isArray(meta))) {
              throw new IdempotencyConfigError(
                `${where} must be an object of options, or false to turn protection off; got ${describeValue(meta)}. Leave it out for the builder's defaults.`,
              );
            }
            const overrides = meta as IdempotencyProcedureOptions | undefined;
            if (overrides?.required !== undefined && typeof overrides.required !== 'boolean') {
              throw new IdempotencyConfigError(
                `${where}: required must be true or false; got ${describeValue(overrides.required)}.`,
              );
            }
            const policy = overrides === undefined ? engine.defaults : engine.policy(overrides, where);
            const required = overrides?.required ?? defaultRequired;
            return target.mutation(createResolver(resolver, policy, required, outputParsersOf(target._def)));
          };
        }
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function' || prop === 'query' || prop === 'subscription') return value;
        return (...args: unknown[]) => {
          const out = (value as (...a: unknown[]) => unknown).apply(target, args);
          return isBuilder(out) ? wrap(out) : out;
        };
      },
    });
  }

  return wrap(base) as TBuilder;
}

const HEADER_NAME = /^[A-Za-z0-9-]+$/;

/**
 * The options' types, checked once when the builder is created: a wrong type
 * would otherwise surface per request as a TypeError, or silently (a
 * `required: 'no'` is truthy). Engine options are checked by the engine.
 */
function checkOptions(base: unknown, options: unknown): void {
  if (!isBuilder(base)) {
    throw new IdempotencyConfigError(
      `withIdempotency: the first argument must be a tRPC procedure builder, such as t.procedure or a procedure built from it; got ${describeValue(base)}.`,
    );
  }
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new IdempotencyConfigError(
      `withIdempotency: options must be an object, with at least scope; got ${describeValue(options)}.`,
    );
  }
  const o = options as Record<string, unknown>;
  if (o.scope !== undefined && o.scope !== 'global' && typeof o.scope !== 'function') {
    throw new IdempotencyConfigError(
      `withIdempotency: scope must be a function that returns whose key it is, such as ({ ctx }) => ctx.user.id, or 'global'; got ${describeValue(o.scope)}.`,
    );
  }
  if (o.getKey !== undefined && typeof o.getKey !== 'function') {
    throw new IdempotencyConfigError(
      `withIdempotency: getKey must be a function that returns the key, such as ({ input }) => input.requestId; got ${describeValue(o.getKey)}.`,
    );
  }
  if (o.required !== undefined && typeof o.required !== 'boolean') {
    throw new IdempotencyConfigError(
      `withIdempotency: required must be true or false; got ${describeValue(o.required)}.`,
    );
  }
  for (const [name, example] of [
    ['header', 'Idempotency-Key'],
    ['replayedHeader', 'Idempotent-Replayed'],
  ] as const) {
    const value = o[name];
    if (value !== undefined && (typeof value !== 'string' || !HEADER_NAME.test(value))) {
      throw new IdempotencyConfigError(
        `withIdempotency: ${name} must be a header name (letters, digits, dashes), such as '${example}'; got ${describeValue(value)}.`,
      );
    }
  }
  if (o.engine !== undefined) {
    const engine = o.engine as Partial<Record<keyof IdempotencyEngine, unknown>> | null;
    const missing =
      typeof engine !== 'object' || engine === null
        ? describeValue(engine)
        : ((['execute', 'policy', 'emit'] as const)
            .filter((method) => typeof engine[method] !== 'function')
            .map((method) => `an object without ${method}()`)[0] ??
          (typeof engine.defaults !== 'object' || engine.defaults === null ? 'an object without defaults' : undefined));
    if (missing !== undefined) {
      throw new IdempotencyConfigError(
        `withIdempotency: engine must be an engine made by createIdempotencyEngine(); got ${missing}. Leave it out to let withIdempotency make one.`,
      );
    }
  }
  if (o.scope === undefined) {
    throw new IdempotencyConfigError(
      "withIdempotency: say whose keys these are. Pass scope: ({ ctx }) => ctx.user.id (your authenticated user or tenant), so that one caller's key never replays another's response; " +
        "or scope: 'global' if every caller may share every key (a procedure without users, whose responses are not private).",
    );
  }
}

/**
 * The transformer results are stored through. From `@trpc/server` 11.22 a
 * builder carries its root config (`_def.config`); before, nothing a builder
 * or a middleware sees names the router's transformer, so the caller must
 * say it. Guessing would be worse than failing: a router with superjson whose
 * results were stored as plain JSON replays a Date as a string and a BigInt
 * as an error, without a word.
 */
function routerTransformer(
  base: AnyBuilder,
  given: DataTransformerOption | null | undefined,
): TRPCCombinedDataTransformer | undefined {
  const config = (base._def as { config?: { transformer?: TRPCCombinedDataTransformer } }).config;
  const own = config?.transformer;
  if (given === undefined) {
    if (config === undefined) {
      throw new IdempotencyConfigError(
        'withIdempotency: this @trpc/server (before 11.22) does not tell a procedure builder which data transformer the router uses, ' +
          'and replays must go through it. Pass the one given to initTRPC.create(): `transformer: superjson`, or `transformer: null` if the router has none.',
      );
    }
    return own;
  }
  const combined = given === null ? undefined : combine(given);
  // initTRPC keeps the transformer it was given as `output` (or the pair as is): the same object, or not the router's.
  if (
    own !== undefined &&
    combined !== undefined &&
    own.output !== combined.output &&
    own.output.serialize !== combined.output.serialize
  ) {
    throw new IdempotencyConfigError(
      'withIdempotency: transformer is not the one the router was created with (initTRPC.create({ transformer })). Pass the same one, or leave the option out (this @trpc/server reads it from the builder).',
    );
  }
  if (own !== undefined && combined === undefined && !isIdentity(own)) {
    throw new IdempotencyConfigError(
      'withIdempotency: transformer is null, but the router was created with a data transformer. Leave the option out (this @trpc/server reads it from the builder), or pass that transformer.',
    );
  }
  return combined ?? own;
}

function combine(given: DataTransformerOption): TRPCCombinedDataTransformer {
  const pair = given as Partial<TRPCCombinedDataTransformer>;
  if (isTransformer(pair.input) && isTransformer(pair.output)) return given as TRPCCombinedDataTransformer;
  if (isTransformer(given)) return { input: given, output: given };
  throw new IdempotencyConfigError(
    `withIdempotency: transformer must be a data transformer, such as superjson (an object with serialize and deserialize, or an { input, output } pair), or null; got ${describeValue(given)}.`,
  );
}

/** superjson's default export is a class with static methods: a function, not an object. */
function isTransformer(value: unknown): value is TRPCCombinedDataTransformer['output'] {
  const t = value as { serialize?: unknown; deserialize?: unknown } | null | undefined;
  return (
    (typeof t === 'object' || typeof t === 'function') &&
    t !== null &&
    typeof t.serialize === 'function' &&
    typeof t.deserialize === 'function'
  );
}

/** How a configuration message names a value it refuses: `the string "yes"`, `the number 5`, `an object`... */
function describeValue(value: unknown): string {
  if (typeof value === 'string')
    return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value)}`;
  if (typeof value === 'number') return `the number ${String(value)}`;
  if (value === null || value === undefined || typeof value === 'boolean') return String(value);
  return describeType(value);
}

function describeType(value: unknown): string {
  if (Array.isArray(value)) return 'an array';
  const type = typeof value;
  return type === 'object' || type === 'undefined' ? `an ${type}` : `a ${type}`;
}

/**
 * A mistake only a request can show (the context's shape, the scope's
 * value): not an `IdempotencyConfigError`, which is thrown when the builder
 * or the procedure is created, but a 500 whose message says what to change.
 * The procedure does not run.
 */
function misconfigured(message: string): TRPCError {
  return new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message });
}

/**
 * A scope must say whose key it is, or say explicitly (`null`) that the call
 * is unscoped: `undefined` (a missing `ctx.user?.id`), an empty string or an
 * object would silently put every caller in one scope.
 */
function checkScope(value: unknown, path: string): string | undefined {
  if (value === null) return undefined;
  if (typeof value === 'string' && value !== '') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw misconfigured(
    `Procedure ${path}: scope returned ${value === '' ? 'an empty string' : typeof value}. ` +
      'Return the user or tenant id (a non-empty string or a number), or null for a call that is deliberately unscoped.',
  );
}

// The resolver's `signal` is the claim's, read through so that it is made only
// for a resolver that reads it (see signalGetter). The call it is read from is
// also what `steps(opts)` finds.

const withCallSignal = signalGetter((call: RunOptions) => call.signal);

function withClaimSignal(opts: Record<string | symbol, unknown>, call: RunOptions): unknown {
  const { signal: _, ...rest } = opts;
  return withCallSignal(rest, call);
}

/**
 * The steps of a protected mutation, from the options its resolver receives:
 * `step(name, fn)` runs `fn` once per key and records its result, so that a
 * retry after a crash resumes after the last completed step; `stepKey(name)`
 * is the key to send downstream. See {@link IdempotencySteps}.
 *
 * @example
 * pay: idempotentProcedure.input(payment).mutation(async (opts) => {
 *   const { step } = steps(opts);
 *   const charge = await step('charge', ({ key }) => provider.charge(opts.input, { idempotencyKey: key }));
 *   return { chargeId: charge.id };
 * }),
 * @throws {IdempotencyError} `step_misuse` when `opts` are not those of a protected mutation's resolver.
 */
export function steps(opts: object): IdempotencySteps {
  const call = withCallSignal.sourceOf(opts);
  if (call === undefined) {
    throw new IdempotencyError(
      'step_misuse',
      "steps(opts) needs the options a protected mutation's resolver receives, as in `.mutation(async (opts) => { const { step } = steps(opts); ... })`. " +
        'These options are not: the procedure is not built with withIdempotency, is a query, runs without a key (required: false), or the options were rebuilt from their fields (pass the object the resolver received).',
    );
  }
  return call;
}

/** The TRPCError a client gets for an idempotency error, with `Retry-After` when a retry can succeed later. */
function refusal(ctx: unknown, error: IdempotencyError): TRPCError {
  if (error.reason === 'in_progress' || error.retryAfter !== undefined) {
    setResponseHeader(ctx, 'Retry-After', String(error.retryAfter ?? 1));
  }
  return toTRPCError(error);
}

/** The idempotency error an outcome's error is, directly or as tRPC's INTERNAL_SERVER_ERROR wrapping of it. */
function idempotencyErrorOf(error: unknown): IdempotencyError | undefined {
  if (isIdempotencyError(error)) return error;
  if (error instanceof TRPCError && error.code === 'INTERNAL_SERVER_ERROR' && isIdempotencyError(error.cause)) {
    return error.cause;
  }
  return undefined;
}

function rethrowAsTRPCError(error: unknown): never {
  throw getTRPCErrorFromUnknown(error);
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function';
}

function isBuilder(value: unknown): value is AnyBuilder {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as AnyBuilder).mutation === 'function' &&
    (value as AnyBuilder)._def?.procedure === true
  );
}
