import type { TRPCCombinedDataTransformer } from '@trpc/server';
import { IdempotencyConfigError } from '../core/idempotency-error.js';
import { checkBoolean, checkFunction, checkHeaderName, configError, describeValue } from '../core/options.js';
import type { IdempotencyPolicyOptions } from '../core/policy.js';
import type { IdempotencyEngine, IdempotencyEngineOptions } from '../core/types.js';

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

/** The engine's own options: with a shared `engine`, withIdempotency would ignore them. */
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
 * The options' types, checked once when the builder is created: a wrong type
 * would otherwise surface per request as a TypeError, or silently (a
 * `required: 'no'` is truthy). Engine options are checked by the engine.
 */
export function checkOptions(options: unknown): void {
  const where = 'withIdempotency';
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw configError(where, `options must be an object, with at least scope, got ${describeValue(options)}.`);
  }
  const o = options as Record<string, unknown>;
  if (o.scope !== undefined && o.scope !== 'global') {
    checkFunction(
      o.scope,
      'scope',
      where,
      "a function that returns whose key it is, such as ({ ctx }) => ctx.user.id, or 'global'",
    );
  }
  if (o.getKey !== undefined) {
    checkFunction(o.getKey, 'getKey', where, 'a function that returns the key, such as ({ input }) => input.requestId');
  }
  if (o.required !== undefined) checkBoolean(o.required, 'required', where);
  if (o.header !== undefined) checkHeaderName(o.header, 'header', where, ", such as 'Idempotency-Key'");
  if (o.replayedHeader !== undefined) {
    checkHeaderName(o.replayedHeader, 'replayedHeader', where, ", such as 'Idempotent-Replayed'");
  }
  if (o.engine !== undefined) checkEngine(o.engine);
  if (o.scope === undefined) {
    throw configError(
      where,
      "say whose keys these are. Pass scope: ({ ctx }) => ctx.user.id (your authenticated user or tenant), so that one caller's key never replays another's response; " +
        "or scope: 'global' if every caller may share every key (a procedure without users, whose responses are not private).",
    );
  }
  if (o.engine !== undefined) {
    const ignored = ENGINE_OPTIONS.filter((name) => o[name] !== undefined);
    if (ignored.length > 0) {
      throw configError(
        where,
        `${ignored.join(', ')} would be ignored, because an engine is given (it has its own). ` +
          'Set them on createIdempotencyEngine, or per procedure in meta.idempotency.',
      );
    }
  }
}

function checkEngine(value: unknown): void {
  const engine = value as Partial<Record<keyof IdempotencyEngine, unknown>> | null;
  const missing =
    typeof engine !== 'object' || engine === null
      ? describeValue(engine)
      : ((['execute', 'policy', 'emit'] as const)
          .filter((method) => typeof engine[method] !== 'function')
          .map((method) => `an object without ${method}()`)[0] ??
        (typeof engine.defaults !== 'object' || engine.defaults === null ? 'an object without defaults' : undefined));
  if (missing !== undefined) {
    throw configError(
      'withIdempotency',
      `engine must be an engine made by createIdempotencyEngine(), got ${missing}. Leave it out to let withIdempotency make one.`,
    );
  }
}

/**
 * A procedure's `meta.idempotency`, checked when `.mutation()` builds it:
 * `false` (protection off), the options, or undefined (the builder's defaults).
 */
export function procedureOptions(meta: unknown): IdempotencyProcedureOptions | false | undefined {
  if (meta === false || meta === undefined) return meta;
  const where = 'meta.idempotency';
  if (typeof meta !== 'object' || meta === null || Array.isArray(meta)) {
    throw new IdempotencyConfigError(
      `${where} must be an object of options, or false to turn protection off, got ${describeValue(meta)}. Leave it out for the builder's defaults.`,
    );
  }
  const overrides = meta as IdempotencyProcedureOptions;
  if (overrides.required !== undefined) checkBoolean(overrides.required, 'required', where);
  return overrides;
}
