import { randomFillSync } from 'node:crypto';
import {
  IdempotencyConfigError,
  IdempotencyError,
  IdempotencyConflictError,
  IdempotencyMismatchError,
  IdempotencyResponseTooLargeError,
  IdempotencyStoreError,
  isIdempotencyError,
  isRetryable,
} from './errors.js';
import { describeError, hashRecordId, type IdempotencyEvent, type IdempotencyEventHandler } from './events.js';
import { claimedCall, idempotentCall, runAsCall } from './context.js';
import { fingerprint } from './fingerprint.js';
import { recordId } from './key.js';
import { startLease } from './lease.js';
import { type IdempotencyPolicyOptions, positiveMs, type ResolvedPolicy, resolvePolicy } from './policy.js';
import type { ClaimResult, IdempotencyStore } from './store.js';
import { interruptibleSleep, withTimeout } from './timing.js';
import { jsonCodec, type OutcomeCodec } from './codec.js';
import { memoryStore } from '../stores/memory.js';

export interface IdempotencyEngineOptions extends IdempotencyPolicyOptions {
  /**
   * Where claims and outcomes live. Use a shared store (Redis, PostgreSQL)
   * as soon as more than one process serves the same operations.
   * @default memoryStore()
   */
  store?: IdempotencyStore;
  /**
   * The longest a single store call may take, in milliseconds; past it the
   * call counts as a store failure (see `onStoreError`).
   * @default 1_000
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

/** What the operation receives. */
export interface RunOptions {
  /** Aborts when the caller's signal does, or when the claim is lost (the operation may then run elsewhere). */
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
   * The operation. `signal` aborts if the caller's signal does or if the
   * claim is lost; `transaction` is the store's transaction in transactional mode.
   */
  run: (opts: RunOptions) => Promise<T>;
  /** How outcomes are serialized and which errors are stored. */
  codec?: OutcomeCodec<T>;
  /** A policy from {@link IdempotencyEngine.policy}; the engine's own when omitted. */
  policy?: ResolvedPolicy;
  /** The caller's signal: aborts waiting, and is passed on to `run`. */
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
   * fresh. Throws only idempotency errors (conflict, mismatch, store unavailable,
   * response too large); the operation's own error is returned, not thrown.
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

const FIRST_POLL_MS = 25;
const MAX_POLL_MS = 1_000;

// Claim tokens: 16 random bytes each (base64url), drawn from a pool refilled
// 256 tokens at a time, since a randomBytes call per request costs a system call.
const TOKEN_BYTES = 16;
const tokenPool = Buffer.alloc(TOKEN_BYTES * 256);
let tokenOffset = tokenPool.length;
function newToken(): string {
  if (tokenOffset === tokenPool.length) {
    randomFillSync(tokenPool);
    tokenOffset = 0;
  }
  tokenOffset += TOKEN_BYTES;
  return tokenPool.toString('base64url', tokenOffset - TOKEN_BYTES, tokenOffset);
}

/**
 * Creates the framework-agnostic engine. The tRPC adapter is built on it, and
 * it can protect any async operation, such as a queue consumer keyed by
 * message id or a webhook handler keyed by event id.
 */
export function createIdempotencyEngine(options: IdempotencyEngineOptions = {}): IdempotencyEngine {
  // initialized config
  const store = options.store ?? memoryStore(options.now === undefined ? {} : { now: options.now });
  const storeTimeout = options.storeTimeout ?? 1_000;
  positiveMs(storeTimeout, 'storeTimeout', 'idempotency options');
  const retryAfter = options.retryAfter ?? 1;
  if (!Number.isInteger(retryAfter) || retryAfter < 0) {
    throw new IdempotencyConfigError(`idempotency options: retryAfter must be a whole number of seconds >= 0, got ${String(retryAfter)}.`);
  }
  const onEvent = options.onEvent;
  const storeName = store.name ?? 'custom';
  const now = options.now ?? Date.now;
  const defaults = resolvePolicy(options, {}, 'idempotency options');
  if (defaults.transaction && store.transaction === undefined) {
    throw new IdempotencyConfigError('idempotency options: transaction: true needs a store with transactions (the Drizzle store); this store has none.');
  }

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

  /** An adapter's event: copied rather than changed in place. */
  function emitFromAdapter(event: IdempotencyEvent) {
    if (onEvent !== undefined) emit({ ...event });
  }

  function storeCall<T>(operation: NonNullable<IdempotencyEvent['operation']>, call: () => Promise<T>): Promise<T> {
    let promise: Promise<T>;
    try {
      promise = call();
    } catch (cause) {
      promise = Promise.reject(cause);
    }
    return withTimeout(promise, storeTimeout, () => timedOut(operation));
  }

  function timedOut(operation: NonNullable<IdempotencyEvent['operation']>): IdempotencyStoreError {
    return new IdempotencyStoreError('store_unavailable', `The idempotency store did not answer ${operation} within ${storeTimeout} ms.`);
  }

  async function claimOnce(id: string, fp: string, token: string, policy: ResolvedPolicy, waiting: boolean): Promise<ClaimResult> {
    let pending: Promise<ClaimResult>;
    try {
      pending = Promise.resolve(store.claim({ id, fingerprint: fp, token, lockTtl: policy.lockTtl, waiting }));
    } catch (error) {
      pending = Promise.reject(error);
    }
    try {
      return await withTimeout(pending, storeTimeout, () => timedOut('claim'));
    } catch (error) {
      // A claim that lands after we gave up would block the key until lockTtl: give it back.
      pending.then(
        (late) => late.state === 'acquired' && store.release({ id, token }).catch(() => {}),
        () => {},
      );
      throw error;
    }
  }

  async function claim(
    id: string,
    fp: string,
    token: string,
    policy: ResolvedPolicy,
    signal: AbortSignal | undefined,
    keyHash: string | undefined,
    name: string,
  ): Promise<ClaimResult> {
    const waitMode = isWaitMode(policy);
    let result = await claimOnce(id, fp, token, policy, waitMode);
    if (!waitMode || result.state !== 'in_progress' || result.fingerprint !== fp) return result;

    // Wait for the holder: woken by the store's notification when it has one,
    // and polling with bounded, jittered backoff in any case (a crashed holder
    // sends nothing; its claim just expires).
    const deadline = now() + policy.waitTimeout;
    let notified = false;
    let wakeCurrent: (() => void) | undefined;
    const onSettled = () => {
      notified = true;
      wakeCurrent?.();
    };
    let unsubscribe: (() => void) | undefined;
    if (store.onSettled !== undefined) {
      const pending = (async () => store.onSettled!(id, onSettled))();
      try {
        unsubscribe = await storeCall('subscribe', () => pending);
      } catch (error) {
        // A subscription that lands after we gave up must not leak its listener.
        pending.then((late) => late(), () => {});
        emit({ result: 'store_error', name, keyHash, durationMs: 0, operation: 'subscribe', error: describeError(error) });
      }
    }
    try {
      let delay = FIRST_POLL_MS;
      // Claim again now that we listen, so a completion between the first
      // claim and the subscription is not missed.
      for (;;) {
        notified = false;
        try {
          result = await claimOnce(id, fp, token, policy, true);
        } catch {
          // The holder was seen running: a store failure now must not let
          // this request run unprotected beside it (fail-open), so it gets 409.
          return result;
        }
        if (result.state !== 'in_progress') return result;
        const remaining = deadline - now();
        if (remaining <= 0 || signal?.aborted) return result;
        if (notified) continue; // settled while we were claiming
        const sleep = interruptibleSleep(Math.min(delay * (0.5 + Math.random() / 2), remaining), signal);
        wakeCurrent = sleep.wake;
        await sleep.promise;
        wakeCurrent = undefined;
        delay = Math.min(delay * 2, MAX_POLL_MS);
      }
    } finally {
      unsubscribe?.();
    }
  }

  async function execute<T>(input: ExecuteInput<T>): Promise<ExecuteResult<T>> {
    const policy = input.policy ?? defaults;
    const codec = (input.codec ?? jsonCodec) as OutcomeCodec<T>;
    const { name } = input;
    const fp = fingerprint(name, input.payload, policy.exclude);
    const id = recordId(input.scope, name, input.key);
    const keyHash = onEvent === undefined ? undefined : hashRecordId(id);
    const token = newToken();

    const checkStart = performance.now();
    let claimed: ClaimResult;
    try {
      // Without waiting, a claim is one store call: no need for the waiting loop's frame.
      claimed = await (isWaitMode(policy) ? claim(id, fp, token, policy, input.signal, keyHash, name) : claimOnce(id, fp, token, policy, false));
    } catch (error) {
      const durationMs = performance.now() - checkStart;
      emit({ result: 'store_error', name, keyHash, durationMs, operation: 'claim', error: describeError(error) });
      if (policy.onStoreError === 'fail-open') {
        emit({ result: 'unprotected', name, keyHash, durationMs, reason: 'store_error' });
        return runUnprotected(input);
      }
      if (isIdempotencyError(error) && !(error instanceof IdempotencyStoreError)) throw error;
      throw new IdempotencyStoreError(
        'store_unavailable',
        // Driver messages can name internal hosts: they go to events, not to clients.
        'The idempotency store is unavailable, so the request was not run. Retry later with the same key.',
        { cause: error, retryAfter },
      );
    }
    const durationMs = performance.now() - checkStart;

    if (claimed.state === 'acquired') {
      if (onEvent !== undefined) emit({ result: 'acquired', name, keyHash, durationMs });
      return runClaimed(input, codec, policy, id, fp, token, keyHash);
    }
    if (claimed.fingerprint !== fp) {
      emit({ result: 'mismatch', name, keyHash, durationMs });
      throw new IdempotencyMismatchError(
        'payload_mismatch',
        'This idempotency key was already used with a different payload. Use a new key for a new operation.',
      );
    }
    if (claimed.state === 'in_progress') {
      emit({ result: 'in_progress', name, keyHash, durationMs });
      throw new IdempotencyConflictError(
        'in_progress',
        `A request with this idempotency key is still being processed. Retry with the same key after ${retryAfter} s.`,
        { retryAfter },
      );
    }
    const body = claimed.body ?? '';
    if (onEvent !== undefined) {
      const marker = body === UNREPLAYABLE;
      const bytes = marker ? 0 : Buffer.byteLength(body);
      emit({ result: 'replayed', name, keyHash, durationMs, state: claimed.state, bytes, ...(marker ? { reason: 'unreplayable' } : {}) });
    }
    if (claimed.state === 'completed') return { ok: true, value: codec.deserialize(body), replayed: true };
    if (body === UNREPLAYABLE) return { ok: false, error: unreplayable(), replayed: true };
    return { ok: false, error: codec.deserializeError(body), replayed: true };
  }

  async function runUnprotected<T>(input: ExecuteInput<T>): Promise<ExecuteResult<T>> {
    try {
      const signal = input.signal ?? new AbortController().signal;
      return { ok: true, value: await idempotentCall.exit(() => input.run({ signal })), replayed: false };
    } catch (error) {
      return { ok: false, error, replayed: false };
    }
  }

  async function runClaimed<T>(
    input: ExecuteInput<T>,
    codec: OutcomeCodec<T>,
    policy: ResolvedPolicy,
    id: string,
    fp: string,
    token: string,
    keyHash: string | undefined,
  ): Promise<ExecuteResult<T>> {
    const { name } = input;
    const started = performance.now();
    const lease = startLease({
      lockTtl: policy.lockTtl,
      maxRunTime: policy.maxRunTime,
      now,
      extend: async () => {
        const renewStart = onEvent === undefined ? 0 : performance.now();
        const held = await storeCall('extend', () => store.extend({ id, token, lockTtl: policy.lockTtl }));
        if (held && onEvent !== undefined) emit({ result: 'renewed', name, keyHash, durationMs: performance.now() - renewStart });
        return held;
      },
      onError: (error) =>
        emit({ result: 'store_error', name, keyHash, durationMs: 0, operation: 'extend', error: describeError(error) }),
      onLost: (reason) => emit({ result: 'lease_lost', name, keyHash, durationMs: performance.now() - started, reason }),
    });

    /** The stored form of a result, or an error saying why it cannot be stored. */
    const encode = (value: T): { body: string } | { error: unknown; reason: string } => {
      if (isStream(value)) {
        return { error: new TypeError('A streamed output (async iterable, stream, observable) cannot be stored and replayed.'), reason: 'unreplayable' };
      }
      let body: string;
      try {
        body = codec.serialize(value);
      } catch (error) {
        return { error, reason: 'unreplayable' };
      }
      return byteLengthExceeds(body, policy.maxResponseBytes) ? { error: tooLarge(policy), reason: 'response_too_large' } : { body };
    };

    let outcome: ExecuteResult<T>;
    let pending: { state: 'completed' | 'failed'; body: string } | undefined;
    let releaseReason = 'error';
    try {
      if (policy.transaction) {
        // The operation's writes and its stored outcome commit together, or
        // neither does: a crash before the commit leaves a claim that expires.
        const value = await store.transaction!(async (tx) => {
          const call = claimedCall(lease, tx.handle);
          const result = await runAsCall(call, () => input.run(call));
          const encoded = encode(result);
          if ('error' in encoded) {
            releaseReason = encoded.reason;
            throw encoded.error;
          }
          // From here the row lock held by this transaction fences the claim.
          lease.stop();
          const stored = await storeCall('complete', () =>
            tx.complete({ id, fingerprint: fp, token, state: 'completed', body: encoded.body, ttl: policy.ttl }),
          );
          if (!stored) {
            emit({ result: 'lease_lost', name, keyHash, durationMs: performance.now() - started, reason: 'fenced' });
            releaseReason = 'fenced'; // nothing to release: the claim is someone else's
            throw new IdempotencyConflictError(
              'in_progress',
              'The claim on this key expired while the operation ran, so its transaction was rolled back; another request now holds the key. Retry with the same key.',
              { retryAfter },
            );
          }
          return result;
        });
        emit({ result: 'completed', name, keyHash, durationMs: performance.now() - started, state: 'completed' });
        return { ok: true, value, replayed: false };
      }
      const call = claimedCall(lease, undefined);
      const value = await runAsCall(call, () => input.run(call));
      lease.stop();
      const encoded = encode(value);
      if ('error' in encoded && encoded.reason === 'unreplayable') {
        // It ran, but its result cannot be stored: retries must not run it
        // again, so they get outcome_unreplayable instead of a replay.
        outcome = { ok: true, value, replayed: false };
        pending = { state: 'failed', body: UNREPLAYABLE };
      } else if ('error' in encoded) {
        releaseReason = encoded.reason;
        outcome = { ok: false, error: encoded.error, replayed: false };
      } else {
        outcome = { ok: true, value, replayed: false };
        pending = { state: 'completed', body: encoded.body };
      }
    } catch (error) {
      outcome = { ok: false, error, replayed: false };
    } finally {
      lease.stop();
    }

    // A failure: stored and replayed as it is, or the key released for a retry.
    if (!outcome.ok && releaseReason === 'error') {
      if (isRetryable(outcome.error)) {
        releaseReason = 'retryable';
      } else {
        try {
          const body = codec.serializeError(outcome.error);
          if (body !== undefined) pending = { state: 'failed', body };
        } catch {
          // An error that cannot be serialized is released, like a 5xx.
        }
      }
    }

    const settleStart = performance.now();
    if (releaseReason === 'fenced') return outcome;
    if (pending === undefined) {
      try {
        const released = await storeCall('release', () => store.release({ id, token }));
        emit(
          released
            ? { result: 'released', name, keyHash, durationMs: performance.now() - settleStart, reason: releaseReason }
            : { result: 'lease_lost', name, keyHash, durationMs: performance.now() - started, reason: 'fenced' },
        );
      } catch (error) {
        // The claim expires after lockTtl anyway; the client's retry meets 409 until then.
        emit({ result: 'store_error', name, keyHash, durationMs: performance.now() - settleStart, operation: 'release', error: describeError(error) });
      }
      return outcome;
    }
    const { state, body } = pending;
    const complete = () => storeCall('complete', () => store.complete({ id, fingerprint: fp, token, state, body, ttl: policy.ttl }));
    const settled = (stored: boolean, reason?: string) =>
      emit(
        stored
          ? { result: 'completed', name, keyHash, durationMs: performance.now() - started, state, ...(body === UNREPLAYABLE ? { reason: 'unreplayable' } : reason === undefined ? {} : { reason }) }
          : { result: 'lease_lost', name, keyHash, durationMs: performance.now() - started, reason: 'fenced' },
      );
    try {
      settled(await complete());
    } catch (error) {
      // The operation ran; its caller gets the outcome now, and the completion
      // is retried in the background (it is fenced, and idempotent for this
      // token) for as long as the claim would have lived: past that, a retry
      // of the client may run the operation again, and the events say so.
      emit({ result: 'store_error', name, keyHash, durationMs: performance.now() - settleStart, operation: 'complete', error: describeError(error) });
      void completeLater(complete, settled, now() + policy.lockTtl, name, keyHash);
    }
    return outcome;
  }

  async function completeLater(
    complete: () => Promise<boolean>,
    settled: (stored: boolean, reason?: string) => void,
    deadline: number,
    name: string,
    keyHash: string | undefined,
  ): Promise<void> {
    let delay = 100;
    for (;;) {
      await new Promise<void>((resolve) => setTimeout(resolve, Math.min(delay, Math.max(deadline - now(), 0))).unref());
      try {
        return settled(await complete(), 'completed_late');
      } catch (error) {
        if (now() >= deadline) {
          emit({ result: 'store_error', name, keyHash, durationMs: 0, operation: 'complete', reason: 'gave_up', error: describeError(error) });
          return;
        }
      }
      delay = Math.min(delay * 2, 2_000);
    }
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
      if (policy.transaction && store.transaction === undefined) {
        throw new IdempotencyConfigError(
          `${where}: transaction: true needs a store with transactions (the Drizzle store); this store has none.`,
        );
      }
      return policy;
    },
    execute,
    run,
    emit: emitFromAdapter,
  };
}

function isWaitMode(policy: ResolvedPolicy): boolean {
  return policy.inFlight === 'wait' && policy.waitTimeout > 0;
}

/** The stored body of an outcome that ran but could not be serialized (no codec writes a NUL first). */
const UNREPLAYABLE = '\u0000unreplayable';

function unreplayable(): IdempotencyError {
  return new IdempotencyError(
    'outcome_unreplayable',
    'The operation with this idempotency key ran, but its result could not be stored, so it cannot be replayed. ' +
      'It will not run again with this key: check its effect by other means (for example, list the resource).',
  );
}

function isStream(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  return (
    Symbol.asyncIterator in value ||
    typeof (value as { getReader?: unknown }).getReader === 'function' ||
    typeof (value as { subscribe?: unknown }).subscribe === 'function'
  );
}

function tooLarge(policy: ResolvedPolicy): IdempotencyResponseTooLargeError {
  return new IdempotencyResponseTooLargeError(
    'response_too_large',
    `The result is larger than maxResponseBytes (${policy.maxResponseBytes} bytes) and was not stored; the key was released. ` +
      'Return a smaller result or raise maxResponseBytes.',
  );
}

function byteLengthExceeds(body: string, max: number): boolean {
  // A UTF-16 code unit is 1 to 3 UTF-8 bytes: skip the exact count when the length decides.
  if (body.length > max) return true;
  if (body.length * 3 <= max) return false;
  return Buffer.byteLength(body) > max;
}
