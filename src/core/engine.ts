// Imported: in Node 20 the global `performance` is an accessor, a getter call on every read.
import { performance } from 'node:perf_hooks';
import { type Call, type EngineScope, newToken } from './call.js';
import { jsonCodec, type OutcomeCodec } from './codec.js';
import { idempotentCall } from './context.js';
import {
  IdempotencyConfigError,
  IdempotencyError,
  inProgressError,
  isIdempotencyError,
  storeFailureKind,
} from './errors.js';
import { describeError, hashRecordId, type IdempotencyEvent, type IdempotencyEventHandler } from './events.js';
import { fingerprint } from './fingerprint.js';
import { type Answer, guardStore } from './guarded-store.js';
import { boundedRecordId, nameOfRecordId } from './key.js';
import { markerError, markerOf } from './outcome.js';
import { type IdempotencyPolicyOptions, type ResolvedPolicy, resolvePolicy, timerMs } from './policy.js';
import { runClaimed } from './run-claimed.js';
import { type IdempotencySteps, unrecordedCall } from './steps.js';
import type { IdempotencyStore } from './store.js';
import { claimOrWait } from './wait.js';

/**
 * The engine: one protected call, told top to bottom in `execute`.
 *
 * 1. Claim the key (`guarded-store.ts`: a timeout on every store call, a
 *    deadline on every claim), or in `inFlight: 'wait'` mode wait for its
 *    holder (`wait.ts`).
 * 2. By the answer: run the operation under the claim (`run-claimed.ts`),
 *    replay the stored outcome, or refuse (409 in flight, 422 another payload,
 *    503 store unavailable, or run unprotected when failing open).
 * 3. After a run, `classify.ts` decides to store the outcome or give the key
 *    back, and `settle.ts` does it, retrying a completion in the background.
 */

export interface IdempotencyEngineOptions extends IdempotencyPolicyOptions {
  /**
   * Where claims and outcomes live. Use a shared store (Redis, PostgreSQL)
   * as soon as more than one process serves the same operations.
   * @default memoryStore(), given by the entry points (`core/` imports no store)
   */
  store?: IdempotencyStore;
  /**
   * The longest a single store call may take, in milliseconds; past it the
   * call counts as a store failure (see `onStoreError`). At most lockTtl / 3.
   * @default 1_000, or lockTtl / 3 when that is less
   */
  storeTimeout?: number;
  /**
   * Seconds a client is told to wait (`Retry-After`) when its key is in flight.
   * @default 1
   */
  retryAfter?: number;
  /** Receives one structured event per check and per transition. Must not throw. */
  onEvent?: IdempotencyEventHandler;
  /**
   * The clock, for deadlines.
   * @default Date.now
   */
  now?: () => number;
}

/** What the operation receives: its signal, its transaction, and its steps (see {@link IdempotencySteps}). */
export interface RunOptions extends IdempotencySteps {
  /**
   * Aborts when the claim is lost (the operation may then run elsewhere). It does not follow the
   * caller's signal: a caller that gives up will retry, and the operation should finish so the retry
   * gets its outcome. (Run unprotected under fail-open, it is the caller's signal.)
   */
  signal: AbortSignal;
  /** With `transaction: true`: the store's transaction (a Drizzle transaction); make your writes through it. */
  transaction?: unknown;
}

/** One operation to run at most once per key. */
export interface ExecuteInput<T> {
  /** The client's key, already validated (see `parseIdempotencyKey`). */
  key: string;
  /** The operation's name (the procedure path): part of the record identity and of the fingerprint. */
  name: string;
  /** Who the key belongs to (user, tenant). Keys of different scopes never meet. */
  scope?: string | undefined;
  /** The operation's input, fingerprinted to detect reuse of a key with another payload. */
  payload: unknown;
  /**
   * The operation. `signal` aborts if the claim is lost; `transaction` is the
   * store's transaction in transactional mode.
   */
  run: (opts: RunOptions) => Promise<T>;
  /** How outcomes are serialized and which errors are stored. */
  codec?: OutcomeCodec<T>;
  /** A policy from {@link IdempotencyEngine.policy}; the engine's own when omitted. */
  policy?: ResolvedPolicy;
  /** The caller's signal: aborts waiting (`inFlight: 'wait'`); `run` gets it only when it runs unprotected (fail-open). */
  signal?: AbortSignal | undefined;
}

export type ExecuteResult<T> =
  | { ok: true; value: T; replayed: boolean }
  | { ok: false; error: unknown; replayed: boolean };

export interface IdempotencyEngine {
  /** The engine's resolved default policy. */
  readonly defaults: ResolvedPolicy;
  readonly store: IdempotencyStore;
  /** Resolves (and validates) a per-operation policy over the engine's defaults. Call it once, not per request. */
  policy(overrides?: IdempotencyPolicyOptions, where?: string): ResolvedPolicy;
  /**
   * Runs the operation once per key and returns its outcome, replayed or
   * fresh. Throws only idempotency errors (`in_progress`, `payload_mismatch`,
   * `store_unavailable`, `input_unsupported`); the operation's own error, and a
   * replayed `response_too_large` or `outcome_unreplayable`, are returned as `ok: false`.
   */
  execute<T>(input: ExecuteInput<T>): Promise<ExecuteResult<T>>;
  /**
   * Like {@link execute}, but returns the value and throws the operation's
   * error, fresh or replayed.
   */
  run<T>(input: Omit<ExecuteInput<T>, 'run'>, fn: ExecuteInput<T>['run']): Promise<{ value: T; replayed: boolean }>;
  /** Emits an event through `onEvent` (adapters report rejections before the engine runs). */
  emit(event: IdempotencyEvent): void;
}

/**
 * Creates the framework-agnostic engine. The tRPC adapter is built on it, and
 * it can protect any async operation, such as a queue consumer keyed by
 * message id or a webhook handler keyed by event id. `store` is required
 * here; the package's entry points default it to `memoryStore()`.
 */
export function createEngine(options: IdempotencyEngineOptions & { store: IdempotencyStore }): IdempotencyEngine {
  // initialized config
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') {
    throw new IdempotencyConfigError(
      `idempotency options: now must be a function that returns the time in ms, got ${typeof now}.`,
    );
  }
  const { store } = options;
  checkStore(store);
  if (options.storeTimeout !== undefined) timerMs(options.storeTimeout, 'storeTimeout', 'idempotency options');
  const retryAfter = options.retryAfter ?? 1;
  if (!Number.isInteger(retryAfter) || retryAfter < 0) {
    throw new IdempotencyConfigError(
      `idempotency options: retryAfter must be a whole number of seconds >= 0, got ${String(retryAfter)}.`,
    );
  }
  const onEvent = options.onEvent;
  if (onEvent !== undefined && typeof onEvent !== 'function') {
    throw new IdempotencyConfigError(
      `idempotency options: onEvent must be a function that takes an event, got ${typeof onEvent}.`,
    );
  }
  const storeName = store.name ?? 'custom';
  const defaults = resolvePolicy(options, {}, 'idempotency options');
  checkTransaction(defaults, store, 'idempotency options');

  /** Emits an event built here: a fresh object, so the store's name is set in place. */
  function emit(event: IdempotencyEvent) {
    if (onEvent === undefined) return;
    event.store ??= storeName;
    try {
      onEvent(event);
    } catch {
      // An observer must never change the outcome of a request.
    }
  }
  const scope: EngineScope = { store: guardStore(store), emit, observed: onEvent !== undefined, now, retryAfter };
  if (onEvent !== undefined) {
    store.onEvicted?.((id) =>
      emit({ result: 'evicted', name: nameOfRecordId(id), keyHash: hashRecordId(id), durationMs: 0 }),
    );
  }

  async function execute<T>(input: ExecuteInput<T>): Promise<ExecuteResult<T>> {
    const policy = input.policy ?? defaults;
    const { name } = input;
    const id = boundedRecordId(input.scope, name, input.key);
    const call: Call = {
      id,
      fp: fingerprint(name, input.payload, policy.exclude),
      token: newToken(),
      policy,
      codec: (input.codec ?? jsonCodec) as OutcomeCodec<unknown>,
      name,
      keyHash: onEvent === undefined ? undefined : hashRecordId(id),
    };
    const { keyHash } = call;

    // 1. Claim the key, or wait for its holder.
    // Durations are for events only: no clock reads when nobody listens.
    const checkStart = onEvent === undefined ? 0 : performance.now();
    let claimed: Answer;
    try {
      // Without waiting, a claim is one store call: no need for the waiting loop's frame.
      claimed = await (isWaitMode(policy) ? claimOrWait(scope, call, input.signal) : scope.store.claim(call, false));
    } catch (error) {
      return storeFailed(call, {
        input,
        error,
        durationMs: onEvent === undefined ? 0 : performance.now() - checkStart,
      });
    }
    const durationMs = onEvent === undefined ? 0 : performance.now() - checkStart;

    // 2. Run it, replay it, or refuse.
    if (claimed.state === 'acquired') {
      const recorded = claimed.steps;
      if (recorded !== undefined && recorded.fingerprint !== call.fp) return stepsOfAnotherPayload(call, durationMs);
      if (onEvent !== undefined) emit({ result: 'acquired', name, keyHash, durationMs });
      // Awaited rather than returned: an async function that returns a promise adopts it in two more turns.
      return await runClaimed(scope, call, input, recorded?.steps);
    }
    if (claimed.fingerprint !== call.fp) {
      emit({ result: 'mismatch', name, keyHash, durationMs });
      throw new IdempotencyError(
        'payload_mismatch',
        'This idempotency key was already used with a different payload. Use a new key for a new operation.',
      );
    }
    if (claimed.state === 'in_progress') {
      emit({ result: 'in_progress', name, keyHash, durationMs });
      throw inProgressError(retryAfter);
    }
    return replay(call, claimed, durationMs);
  }

  /**
   * The claim took a record whose steps were recorded by a request with
   * another payload (its claim expired or was released): the key is given
   * back with those steps, for that request's retry to resume, and this one is refused.
   */
  async function stepsOfAnotherPayload(call: Call, durationMs: number): Promise<never> {
    const { id, token, name, keyHash, policy } = call;
    try {
      await scope.store.call('release', policy.storeTimeout, () => store.release({ id, token }));
    } catch (error) {
      // It expires after lockTtl; until then its own retry meets 409.
      emit({ result: 'store_error', name, keyHash, durationMs, operation: 'release', error: describeError(error) });
    }
    emit({ result: 'mismatch', name, keyHash, durationMs });
    throw new IdempotencyError(
      'payload_mismatch',
      'This idempotency key was already used with a different payload, whose operation stopped after some of its steps. ' +
        'Use a new key for a new operation; the first payload, retried with this key, resumes after its completed steps.',
    );
  }

  /** The stored outcome, as the first run returned it (or the error saying it cannot be replayed). */
  function replay<T>(
    call: Call,
    stored: { state: 'completed' | 'failed'; body?: string | undefined },
    durationMs: number,
  ): ExecuteResult<T> {
    const { state } = stored;
    const body = stored.body ?? '';
    const marker = state === 'failed' ? markerOf(body) : undefined;
    if (onEvent !== undefined) {
      const bytes = marker === undefined ? Buffer.byteLength(body) : 0;
      emit({
        result: 'replayed',
        name: call.name,
        keyHash: call.keyHash,
        durationMs,
        state,
        bytes,
        ...(marker === undefined ? {} : { reason: marker }),
      });
    }
    if (state === 'completed') return { ok: true, value: call.codec.deserialize(body) as T, replayed: true };
    if (marker !== undefined)
      return { ok: false, error: markerError(marker, call.policy.maxResponseBytes), replayed: true };
    return { ok: false, error: call.codec.deserializeError(body), replayed: true };
  }

  /** The claim failed: 409 on contention, run unprotected on an outage when failing open, else 503. */
  async function storeFailed<T>(
    call: Call,
    failed: { input: ExecuteInput<T>; error: unknown; durationMs: number },
  ): Promise<ExecuteResult<T>> {
    const { name, keyHash, policy } = call;
    const { input, error, durationMs } = failed;
    emit({ result: 'store_error', name, keyHash, durationMs, operation: 'claim', error: describeError(error) });
    const kind = storeFailureKind(error);
    if (kind === 'contention') throw inProgressError(retryAfter);
    // Only an outage may let a request run unprotected: never a full store, a missing table or a bug.
    if (kind === 'unavailable' && policy.onStoreError === 'fail-open') {
      emit({ result: 'unprotected', name, keyHash, durationMs, reason: 'store_error' });
      try {
        const unprotected = unrecordedCall(scope, call, input.signal ?? new AbortController().signal);
        return { ok: true, value: await idempotentCall.exit(() => input.run(unprotected)), replayed: false };
      } catch (runError) {
        return { ok: false, error: runError, replayed: false };
      }
    }
    if (isIdempotencyError(error) && error.reason !== 'store_unavailable') throw error;
    throw new IdempotencyError(
      'store_unavailable',
      // Driver messages can name internal hosts: they go to events, not to clients.
      'The idempotency store is unavailable, so the request was not run. Retry later with the same key.',
      { cause: error, retryAfter },
    );
  }

  async function run<T>(input: Omit<ExecuteInput<T>, 'run'>, fn: ExecuteInput<T>['run']) {
    const result = await execute({ ...input, run: fn });
    if (!result.ok) throw result.error;
    return { value: result.value, replayed: result.replayed };
  }

  return {
    defaults,
    store,
    policy(overrides, where = 'idempotency options') {
      const policy = resolvePolicy(options, overrides, where);
      checkTransaction(policy, store, where);
      return policy;
    },
    execute,
    run,
    // An adapter's event: copied rather than changed in place.
    emit: (event) => {
      if (onEvent !== undefined) emit({ ...event });
    },
  };
}

function isWaitMode(policy: ResolvedPolicy): boolean {
  return policy.inFlight === 'wait' && policy.waitTimeout > 0;
}

function checkTransaction(policy: ResolvedPolicy, store: IdempotencyStore, where: string): void {
  if (policy.transaction && store.transaction === undefined) {
    throw new IdempotencyConfigError(
      `${where}: transaction: true needs a store with transactions (the Drizzle store); this store has none.`,
    );
  }
}

/** A store is an object with the four atomic operations; anything else fails here, not per request. */
function checkStore(store: unknown): asserts store is IdempotencyStore {
  const missing = ['claim', 'complete', 'release', 'extend'].filter(
    (method) => typeof (store as Record<string, unknown> | null)?.[method] !== 'function',
  );
  if (missing.length > 0) {
    throw new IdempotencyConfigError(
      `idempotency options: store must implement the IdempotencyStore interface (claim, complete, release, extend); it has no ${missing.join(', ')}. ` +
        'Pass memoryStore(), redisStore({ client }) or drizzleStore({ db }).',
    );
  }
}
