import { getTRPCErrorFromUnknown, TRPCError } from '@trpc/server';
import { IdempotencyError, isIdempotencyErrorInstance } from '../core/idempotency-error.js';
import { describeValue } from '../core/options.js';
import type { OutcomeCodec } from '../core/outcome-codec.js';
import type { ResolvedPolicy } from '../core/policy.js';
import { currentRun } from '../core/protected-run.js';
import { parseIdempotencyKey } from '../core/record-id.js';
import type { ExecuteResult, IdempotencyEngine, RunOptions } from '../core/types.js';
import { toTRPCError } from './error-shape.js';
import { batchOf, hasRequestHeaders, isWebSocket, readKeyHeader, setResponseHeader } from './http.js';
import type { WithIdempotencyOptions } from './options.js';
import { type OutputMiddleware, outputStage } from './output.js';
import { withClaimSignal } from './steps.js';

/** What withIdempotency resolves once, for every procedure it builds. */
export interface AdapterConfig {
  engine: IdempotencyEngine;
  /** The key header, in lower case. */
  header: string;
  /** The key header as messages name it. */
  headerLabel: string;
  replayedHeader: string;
  getKey: WithIdempotencyOptions<any>['getKey'];
  /** Undefined for `'global'`. */
  scope: Exclude<WithIdempotencyOptions<any>['scope'], 'global'> | undefined;
  codec: OutcomeCodec<unknown>;
}

/** What `.mutation()` resolves once, for one procedure. */
export interface ProcedureConfig {
  policy: ResolvedPolicy;
  required: boolean;
  /** Its `.output()` parsers, innermost last. */
  outputs: readonly OutputMiddleware[];
}

/**
 * The resolver of a protected mutation: the check wraps the resolver rather
 * than being one more middleware, so it runs after every middleware, sees the
 * parsed input, and hands the resolver the claim's `signal` (which a
 * middleware cannot replace).
 */
export function idempotentResolver(
  adapter: AdapterConfig,
  procedure: ProcedureConfig,
  resolver: (opts: any) => unknown,
) {
  const { engine, getKey, scope } = adapter;

  // initialized for request
  return async function idempotentResolver(opts: any) {
    const { ctx, batchIndex, input, signal } = opts;
    const path: string = opts.path ?? '';

    let raw: unknown =
      getKey === undefined ? headerKey(adapter, ctx, batchIndex, path) : getKey({ ctx, path, batchIndex, input });
    if (isThenable(raw)) raw = await raw;
    const key = keyOf(adapter, procedure.required, raw, batchIndex, path);
    // Run without a key, it must not see the run of a mutation that called it (its transaction).
    if (key === undefined) return currentRun.exit(() => resolver(opts));

    let given: unknown = scope === undefined ? null : scope({ ctx, path });
    if (isThenable(given)) given = await given;
    const scopeValue = checkScope(given, path);

    const outputs = procedure.outputs.length === 0 ? undefined : outputStage(adapter.codec, procedure.outputs, opts);
    let result: ExecuteResult<unknown>;
    try {
      result = await engine.execute({
        key,
        name: path,
        scope: scopeValue,
        payload: input,
        policy: procedure.policy,
        codec: outputs?.codec ?? adapter.codec,
        signal,
        run:
          outputs === undefined
            ? (run) => runResolver(resolver, opts, run)
            : (run) => runResolver(resolver, opts, run).then(outputs.parse),
      });
    } catch (error) {
      if (!isIdempotencyErrorInstance(error)) throw error;
      throw refusal(ctx, error);
    }
    return answer(adapter, ctx, batchIndex, result);
  };
}

/** The key header's value, once the context is known to carry the request's own headers. */
function headerKey(adapter: AdapterConfig, ctx: unknown, batchIndex: number, path: string): string | undefined {
  if (isWebSocket(ctx)) {
    throw misconfigured(
      `Procedure ${path}: over a WebSocket the request headers are those of the connection, shared by all its calls, ` +
        'so they cannot carry a key per mutation. Pass getKey (for example, read the key from the input).',
    );
  }
  if (!hasRequestHeaders(ctx)) {
    throw misconfigured(
      `Procedure ${path}: the tRPC context has no request headers to read ${adapter.headerLabel} from. ` +
        'Return the request from createContext (`({ req, res }) => ({ req, res })`, or `({ req, resHeaders })` with the fetch adapter), or pass getKey.',
    );
  }
  try {
    return readKeyHeader(ctx, adapter.header, batchIndex, adapter.headerLabel);
  } catch (error) {
    throw refusedKey(adapter.engine, path, 'key_invalid', error);
  }
}

/** The call's key, parsed; undefined when it has none and may run without one. */
function keyOf(
  adapter: AdapterConfig,
  required: boolean,
  raw: unknown,
  batchIndex: number,
  path: string,
): string | undefined {
  if (raw === undefined || raw === null) {
    if (!required) {
      adapter.engine.emit({ result: 'unprotected', name: path, durationMs: 0, reason: 'no_key' });
      return undefined;
    }
    const label = adapter.headerLabel;
    const where = batchIndex > 0 ? ` This call is #${batchIndex} of a batch: send ${label}-${batchIndex}.` : '';
    const missing = new IdempotencyError(
      'key_missing',
      `This mutation requires an ${label} header. Generate a unique key (such as a UUID v4) when the user starts the operation and send it on every retry.${where}`,
    );
    throw refusedKey(adapter.engine, path, 'key_missing', missing);
  }
  // Only getKey can return another type. String() would make one key of every object ("[object Object]"): shared by every caller.
  if (typeof raw !== 'string') {
    throw misconfigured(
      `Procedure ${path}: getKey returned ${describeValue(raw)}. Return the key as a string, or undefined (or null) when the call has none.`,
    );
  }
  try {
    return parseIdempotencyKey(raw, adapter.headerLabel);
  } catch (error) {
    throw refusedKey(adapter.engine, path, 'key_invalid', error);
  }
}

/** Reports a refused key; what to throw is the client's 400 for an idempotency error. */
function refusedKey(
  engine: IdempotencyEngine,
  path: string,
  reason: 'key_missing' | 'key_invalid',
  error: unknown,
): unknown {
  engine.emit({ result: 'rejected', name: path, durationMs: 0, reason });
  return isIdempotencyErrorInstance(error) ? toTRPCError(error) : error;
}

/** A scope's value: an id, or `null` for a deliberately unscoped call (see the `scope` option for why nothing else). */
function checkScope(value: unknown, path: string): string | undefined {
  if (value === null) return undefined;
  if (typeof value === 'string' && value !== '') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw misconfigured(
    `Procedure ${path}: scope returned ${value === '' ? 'an empty string' : describeValue(value)}. ` +
      'Return the user or tenant id (a non-empty string or a number), or null for a call that is deliberately unscoped.',
  );
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

/** Runs the resolver with the claim's signal; it fails with what a middleware would have seen: tRPC's error for what it threw. */
function runResolver(resolver: (opts: any) => unknown, opts: any, run: RunOptions): Promise<unknown> {
  let value: unknown;
  try {
    value = resolver(withClaimSignal(opts, run));
  } catch (error) {
    return Promise.reject(getTRPCErrorFromUnknown(error));
  }
  return isThenable(value) ? Promise.resolve(value).then(undefined, rethrowAsTRPCError) : Promise.resolve(value);
}

/** What the resolver gives tRPC for an outcome: its value (with the replay header on a replay), or its error. */
function answer(adapter: AdapterConfig, ctx: unknown, batchIndex: number, result: ExecuteResult<unknown>): unknown {
  if (result.replayed) {
    // Call 0 of a context that cannot tell a batch from a single call gets both names.
    const batch = batchOf(ctx, batchIndex);
    if (batch !== false) setResponseHeader(ctx, `${adapter.replayedHeader}-${batchIndex}`, 'true');
    if (batch !== true) setResponseHeader(ctx, adapter.replayedHeader, 'true');
  }
  if (result.ok) return result.value;
  // A step's error (a claim lost before a step was recorded, a step result that could not be) reaches
  // here wrapped as tRPC wraps whatever a resolver throws: it answers as the idempotency error it is.
  const found = idempotencyErrorOf(result.error);
  throw found === undefined ? result.error : refusal(ctx, found);
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
  if (isIdempotencyErrorInstance(error)) return error;
  if (error instanceof TRPCError && error.code === 'INTERNAL_SERVER_ERROR' && isIdempotencyErrorInstance(error.cause)) {
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
