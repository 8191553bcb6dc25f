import { getTRPCErrorFromUnknown, type TRPCCombinedDataTransformer, type TRPCProcedureBuilder } from '@trpc/server';
import { createIdempotencyEngine, type IdempotencyEngine, type IdempotencyEngineOptions } from '../core/engine.js';
import {
  IdempotencyConfigError,
  IdempotencyConflictError,
  IdempotencyKeyError,
  isIdempotencyError,
} from '../core/errors.js';
import { parseIdempotencyKey } from '../core/key.js';
import { idempotentCall, isClaimedCall } from '../core/context.js';
import type { IdempotencyPolicyOptions, ResolvedPolicy } from '../core/policy.js';
import { trpcCodec } from './codec.js';
import { toTRPCError } from './errors.js';
import { hasRequestHeaders, isBatchRequest, isWebSocket, readKeyHeader, setResponseHeader } from './http.js';

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
   * operations. Return the authenticated user or tenant id. Without a scope,
   * anyone who learns a key can read its stored response: set it whenever
   * responses are private.
   * @default no scope: keys are global per procedure
   */
  scope?: (opts: { ctx: TContext; path: string }) => string | number | null | undefined | Promise<string | number | null | undefined>;
  /**
   * Reads the raw key instead of the request header (websockets, server-side
   * callers, a key inside the input). Return `undefined` for "no key".
   * @default the `header` of the request found in `ctx.req`, `ctx.request` or `ctx.headers`
   */
  getKey?: (opts: { ctx: TContext; path: string; batchIndex: number; input: unknown }) =>
    | string
    | null
    | undefined
    | Promise<string | null | undefined>;
  /** An engine to share with other builders or with non-tRPC consumers; the options above then only configure the adapter. */
  engine?: IdempotencyEngine;
}

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

type AnyBuilder = TRPCProcedureBuilder<any, any, any, any, any, any, any, any, any>;
type ContextOf<B> = B extends TRPCProcedureBuilder<infer C, any, infer CO, any, any, any, any, any, any>
  ? Omit<C, keyof CO> & CO
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
  options: WithIdempotencyOptions<ContextOf<TBuilder>> = {},
): TBuilder {
  // initialized config
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
  const { scope, getKey } = options;
  const defaultRequired = options.required ?? true;
  if (!/^[A-Za-z0-9-]+$/.test(header) || !/^[A-Za-z0-9-]+$/.test(replayedHeader)) {
    throw new IdempotencyConfigError('withIdempotency: header and replayedHeader must be header names (letters, digits, dashes).');
  }
  const transformer = (base._def as { config?: { transformer?: TRPCCombinedDataTransformer } }).config?.transformer;
  const codec = trpcCodec(transformer);

  // initialized per procedure, when `.mutation()` is called
  /**
   * The check wraps the resolver rather than being one more middleware: it
   * still runs after every middleware, and a middleware level is a costly
   * step on the hot path (tRPC copies the call's options twice per level).
   * The resolver gets the claim's `signal`, which a middleware cannot replace.
   */
  function createResolver(resolver: (opts: any) => unknown, path: string, policy: ResolvedPolicy, required: boolean) {
    return async function idempotentResolver(opts: any) {
      const { ctx, batchIndex, input, signal } = opts;
      // Outside a protected call, a nested procedure must not see the caller's claim.
      if (opts.type !== 'mutation') return idempotentCall.exit(() => resolver(opts));
      const procedurePath: string = opts.path ?? path;

      let raw: string | null | undefined;
      if (getKey !== undefined) {
        raw = await getKey({ ctx, path: procedurePath, batchIndex, input });
      } else {
        if (isWebSocket(ctx)) {
          throw new IdempotencyConfigError(
            `Procedure ${procedurePath}: over a WebSocket the request headers are those of the connection, shared by all its calls, ` +
              'so they cannot carry a key per mutation. Pass getKey (for example, read the key from the input).',
          );
        }
        if (!hasRequestHeaders(ctx)) {
          throw new IdempotencyConfigError(
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
        const where = isBatchRequest(ctx) && batchIndex > 0 ? ` This call is #${batchIndex} of a batch: send ${headerLabel}-${batchIndex}.` : '';
        throw toTRPCError(
          new IdempotencyKeyError(
            'key_missing',
            `This mutation requires an ${headerLabel} header. Generate a unique key (such as a UUID v4) when the user starts the operation and send it on every retry.${where}`,
          ),
        );
      }

      let key: string;
      try {
        key = parseIdempotencyKey(String(raw), headerLabel);
      } catch (error) {
        engine.emit({ result: 'rejected', name: procedurePath, durationMs: 0, reason: 'key_invalid' });
        throw isIdempotencyError(error) ? toTRPCError(error) : error;
      }

      const scopeValue = scope === undefined ? undefined : checkScope(await scope({ ctx, path: procedurePath }), procedurePath);

      let result;
      try {
        result = await engine.execute({
          key,
          name: procedurePath,
          scope: scopeValue,
          payload: input,
          policy,
          codec,
          signal,
          run: async (call) => {
            try {
              return await resolver(isClaimedCall(call) ? withClaimSignal(opts, call) : opts);
            } catch (error) {
              // What a middleware would have seen: tRPC's error for what the resolver threw.
              throw getTRPCErrorFromUnknown(error);
            }
          },
        });
      } catch (error) {
        if (!isIdempotencyError(error)) throw error;
        if (error instanceof IdempotencyConflictError || error.retryAfter !== undefined) {
          setResponseHeader(ctx, 'Retry-After', String(error.retryAfter ?? 1));
        }
        throw toTRPCError(error);
      }

      if (result.replayed) {
        setResponseHeader(ctx, isBatchRequest(ctx) ? `${replayedHeader}-${batchIndex}` : replayedHeader, 'true');
      }
      if (!result.ok) throw isIdempotencyError(result.error) ? toTRPCError(result.error) : result.error;
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
            const meta = (target._def.meta as IdempotencyMeta | undefined)?.idempotency;
            if (meta === false) return target.mutation(resolver);
            const where = 'meta.idempotency';
            const policy = meta === undefined ? engine.defaults : engine.policy(meta, where);
            const required = meta?.required ?? defaultRequired;
            return target.mutation(createResolver(resolver, '', policy, required));
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

/**
 * A scope must say whose key it is, or say explicitly (`null`) that the call
 * is unscoped: `undefined` (a missing `ctx.user?.id`), an empty string or an
 * object would silently put every caller in one scope.
 */
function checkScope(value: unknown, path: string): string | undefined {
  if (value === null) return undefined;
  if (typeof value === 'string' && value !== '') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw new IdempotencyConfigError(
    `Procedure ${path}: scope returned ${value === '' ? 'an empty string' : typeof value}. ` +
      'Return the user or tenant id (a non-empty string or a number), or null for a call that is deliberately unscoped.',
  );
}

const claim = Symbol('claim');
// The resolver's `signal` is the claim's, read through so that it is made only
// for a resolver that reads it. One shared getter: an object literal with a
// getter of its own gets a hidden class of its own, which slows every young GC.
const CLAIM_SIGNAL: PropertyDescriptor = {
  get(this: { [claim]: { readonly signal: AbortSignal } }) {
    return this[claim].signal;
  },
  enumerable: true,
  configurable: true,
};

function withClaimSignal(opts: Record<string | symbol, unknown>, call: { readonly signal: AbortSignal }): unknown {
  const { signal: _, ...rest } = opts;
  rest[claim] = call;
  return Object.defineProperty(rest, 'signal', CLAIM_SIGNAL);
}

function isBuilder(value: unknown): value is AnyBuilder {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as AnyBuilder).mutation === 'function' &&
    (value as AnyBuilder)._def?.procedure === true
  );
}
