import { randomFillSync } from 'node:crypto';
import {
  IdempotencyConfigError,
  IdempotencyConflictError,
  IdempotencyMismatchError,
  IN_PROGRESS_MESSAGE,
  IdempotencyStoreError,
  isIdempotencyError,
  isRetryable,
  storeFailure,
  storeFailureKind,
} from './errors.js';
import { describeError, hashRecordId, type IdempotencyEvent, type IdempotencyEventHandler } from './events.js';
import { claimedCall, idempotentCall, runAsCall } from './context.js';
import { fingerprint } from './fingerprint.js';
import { nameOfRecordId, recordId } from './key.js';
import { startLease } from './lease.js';
import { encodeResult, markerError, markerOf } from './outcome.js';
import { type IdempotencyPolicyOptions, type ResolvedPolicy, resolvePolicy, timerMs } from './policy.js';
import type { ClaimResult, CompleteResult, IdempotencyStore } from './store.js';
import { engineTime, StoreClock } from './store-clock.js';
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

const noop = () => {};

/** One protected call, as the engine's helpers need it. */
interface Call {
  readonly id: string;
  readonly fp: string;
  readonly token: string;
  readonly policy: ResolvedPolicy;
  readonly name: string;
  readonly keyHash: string | undefined;
}

/** A claim's answer the engine acts on: a late one is retried or thrown by claimOnce. */
type Answer = Exclude<ClaimResult, { state: 'late' }>;

/** What settles a claim once its operation ran: an outcome to store, or the key to give back. */
type Settlement =
  | { store: true; state: 'completed' | 'failed'; body: string; reason?: 'unreplayable' | 'response_too_large' }
  | { store: false; reason: 'error' | 'retryable' | 'unreplayable' | 'response_too_large' | 'fenced' };

/**
 * Creates the framework-agnostic engine. The tRPC adapter is built on it, and
 * it can protect any async operation, such as a queue consumer keyed by
 * message id or a webhook handler keyed by event id.
 */
export function createIdempotencyEngine(options: IdempotencyEngineOptions = {}): IdempotencyEngine {
  // initialized config
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') {
    throw new IdempotencyConfigError(`idempotency options: now must be a function that returns the time in ms, got ${typeof now}.`);
  }
  const store = options.store ?? memoryStore(options.now === undefined ? {} : { now: options.now });
  checkStore(store);
  if (options.storeTimeout !== undefined) timerMs(options.storeTimeout, 'storeTimeout', 'idempotency options');
  const retryAfter = options.retryAfter ?? 1;
  if (!Number.isInteger(retryAfter) || retryAfter < 0) {
    throw new IdempotencyConfigError(`idempotency options: retryAfter must be a whole number of seconds >= 0, got ${String(retryAfter)}.`);
  }
  const onEvent = options.onEvent;
  if (onEvent !== undefined && typeof onEvent !== 'function') {
    throw new IdempotencyConfigError(`idempotency options: onEvent must be a function that takes an event, got ${typeof onEvent}.`);
  }
  const storeName = store.name ?? 'custom';
  const defaults = resolvePolicy(options, {}, 'idempotency options');
  if (defaults.transaction && store.transaction === undefined) {
    throw new IdempotencyConfigError('idempotency options: transaction: true needs a store with transactions (the Drizzle store); this store has none.');
  }
  // What the engine knows of the store's clock, to put deadlines on claims.
  const clock = new StoreClock();
  if (onEvent !== undefined) {
    store.onEvicted?.((id) => emit({ result: 'evicted', name: nameOfRecordId(id), keyHash: hashRecordId(id), durationMs: 0 }));
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

  function timedOut(operation: NonNullable<IdempotencyEvent['operation']>, timeout: number): Error {
    return storeFailure('unavailable', new IdempotencyStoreError('store_unavailable', `The idempotency store did not answer ${operation} within ${timeout} ms.`));
  }

  /** Starts a store call; a synchronous throw becomes a rejection. */
  function start<T>(call: () => Promise<T>): Promise<T> {
    try {
      return Promise.resolve(call());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  function storeCall<T>(operation: NonNullable<IdempotencyEvent['operation']>, timeout: number, call: () => Promise<T>): Promise<T> {
    return withTimeout(start(call), timeout, () => timedOut(operation, timeout));
  }

  /**
   * One claim, with a deadline in the store's clock: if it reaches the store
   * after this engine gave up on it (it waited in a driver's queue through an
   * outage), the store changes nothing and it can never take the key from a
   * holder whose completion is on its way.
   */
  async function claimOnce(call: Call, waiting: boolean, again = false): Promise<Answer> {
    const { id, token, policy } = call;
    const timeout = policy.storeTimeout;
    const sentAt = engineTime();
    const deadline = clock.deadline(sentAt, timeout);
    const pending = start(() => store.claim({ id, fingerprint: call.fp, token, lockTtl: policy.lockTtl, waiting, deadline }));
    let result: ClaimResult;
    try {
      result = await withTimeout(pending, timeout, () => timedOut('claim', timeout));
    } catch (error) {
      // A claim that lands after we gave up (a store without deadlines, or one
      // answered just in time) must not keep the key for lockTtl: give it back.
      pending.then((late) => (late.state === 'acquired' || late.state === 'late') && store.release({ id, token }).catch(noop), noop);
      throw error;
    }
    if (result.time !== undefined) clock.observe(sentAt, result.time);
    if (result.state === 'late') {
      // Answered in time, but the store's clock is ahead of what we knew of it:
      // this answer taught us by how much, so the claim is sent once more.
      if (!again) return claimOnce(call, waiting, true);
      throw storeFailure('unavailable', new IdempotencyStoreError('store_unavailable', 'The idempotency store answered the claim as late twice: its clock jumps ahead of this process.'));
    }
    return result;
  }

  /** Claims, and in `inFlight: 'wait'` mode waits for a running holder to settle. */
  async function claimOrWait(call: Call, signal: AbortSignal | undefined): Promise<Answer> {
    const { id, fp, policy, name, keyHash } = call;
    let result = await claimOnce(call, true);
    if (result.state !== 'in_progress' || result.fingerprint !== fp) return result;

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
      const pending = start(() => store.onSettled!(id, onSettled));
      try {
        unsubscribe = await withTimeout(pending, policy.storeTimeout, () => timedOut('subscribe', policy.storeTimeout));
      } catch (error) {
        // A subscription that lands after we gave up must not leak its listener.
        pending.then((late) => late(), noop);
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
          result = await claimOnce(call, true);
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
    const id = recordId(input.scope, name, input.key);
    const call: Call = {
      id,
      fp: fingerprint(name, input.payload, policy.exclude),
      token: newToken(),
      policy,
      name,
      keyHash: onEvent === undefined ? undefined : hashRecordId(id),
    };
    const { keyHash } = call;

    const checkStart = performance.now();
    let claimed: Answer;
    try {
      // Without waiting, a claim is one store call: no need for the waiting loop's frame.
      claimed = await (isWaitMode(policy) ? claimOrWait(call, input.signal) : claimOnce(call, false));
    } catch (error) {
      const durationMs = performance.now() - checkStart;
      emit({ result: 'store_error', name, keyHash, durationMs, operation: 'claim', error: describeError(error) });
      const kind = storeFailureKind(error);
      if (kind === 'contention') throw inProgress();
      // Only an outage may let a request run unprotected: never a full store, a missing table or a bug.
      if (kind === 'unavailable' && policy.onStoreError === 'fail-open') {
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
      return runClaimed(input, codec, call);
    }
    if (claimed.fingerprint !== call.fp) {
      emit({ result: 'mismatch', name, keyHash, durationMs });
      throw new IdempotencyMismatchError(
        'payload_mismatch',
        'This idempotency key was already used with a different payload. Use a new key for a new operation.',
      );
    }
    if (claimed.state === 'in_progress') {
      emit({ result: 'in_progress', name, keyHash, durationMs });
      throw inProgress();
    }
    const body = claimed.body ?? '';
    const marker = claimed.state === 'failed' ? markerOf(body) : undefined;
    if (onEvent !== undefined) {
      const bytes = marker === undefined ? Buffer.byteLength(body) : 0;
      emit({ result: 'replayed', name, keyHash, durationMs, state: claimed.state, bytes, ...(marker === undefined ? {} : { reason: marker }) });
    }
    if (claimed.state === 'completed') return { ok: true, value: codec.deserialize(body), replayed: true };
    if (marker !== undefined) return { ok: false, error: markerError(marker, policy.maxResponseBytes), replayed: true };
    return { ok: false, error: codec.deserializeError(body), replayed: true };
  }

  function inProgress(): IdempotencyConflictError {
    return new IdempotencyConflictError(
      'in_progress',
      `${IN_PROGRESS_MESSAGE}. Retry with the same key after ${retryAfter} s.`,
      { retryAfter },
    );
  }

  async function runUnprotected<T>(input: ExecuteInput<T>): Promise<ExecuteResult<T>> {
    try {
      const signal = input.signal ?? new AbortController().signal;
      return { ok: true, value: await idempotentCall.exit(() => input.run({ signal })), replayed: false };
    } catch (error) {
      return { ok: false, error, replayed: false };
    }
  }

  /** Runs the operation under the claim, then stores its outcome or gives the key back. */
  async function runClaimed<T>(input: ExecuteInput<T>, codec: OutcomeCodec<T>, call: Call): Promise<ExecuteResult<T>> {
    const { id, token, policy, name, keyHash } = call;
    const started = performance.now();
    const lease = startLease({
      lockTtl: policy.lockTtl,
      maxRunTime: policy.maxRunTime,
      now,
      extend: async () => {
        const renewStart = onEvent === undefined ? 0 : performance.now();
        const held = await storeCall('extend', policy.storeTimeout, () => store.extend({ id, token, lockTtl: policy.lockTtl }));
        if (held && onEvent !== undefined) emit({ result: 'renewed', name, keyHash, durationMs: performance.now() - renewStart });
        return held;
      },
      onError: (error) =>
        emit({ result: 'store_error', name, keyHash, durationMs: 0, operation: 'extend', error: describeError(error) }),
      onLost: (reason) => emit({ result: 'lease_lost', name, keyHash, durationMs: performance.now() - started, reason }),
    });
    /** The claim was lost to another holder: reported once (the lease may have reported it already). */
    const fenced = () => {
      if (!lease.wasLost()) emit({ result: 'lease_lost', name, keyHash, durationMs: performance.now() - started, reason: 'fenced' });
    };

    let outcome: ExecuteResult<T>;
    let settlement: Settlement | undefined;
    try {
      if (policy.transaction) {
        // The operation's writes and its stored outcome commit together, or
        // neither does: a crash before the commit leaves a claim that expires.
        const value = await store.transaction!(async (tx) => {
          const inTx = claimedCall(lease, tx.handle);
          const result = await runAsCall(inTx, () => input.run(inTx));
          const encoded = encodeResult(result, codec, policy.maxResponseBytes);
          if (encoded.marker !== undefined) {
            // Rolled back, so nothing happened: the key is given back for a retry.
            settlement = { store: false, reason: encoded.marker };
            throw markerError(encoded.marker, policy.maxResponseBytes);
          }
          // From here the row lock held by this transaction fences the claim.
          lease.stop();
          const stored = await storeCall('complete', policy.storeTimeout, () =>
            tx.complete({ id, fingerprint: call.fp, token, state: 'completed', body: encoded.body, ttl: policy.ttl }),
          );
          if (stored !== 'stored') {
            fenced();
            settlement = { store: false, reason: 'fenced' }; // nothing to release: the claim is someone else's
            throw new IdempotencyConflictError(
              'in_progress',
              `${IN_PROGRESS_MESSAGE}: the claim on this key expired while the operation ran, so its transaction was rolled back, and another request now holds the key. Retry with the same key after ${retryAfter} s.`,
              { retryAfter },
            );
          }
          return result;
        });
        emit({ result: 'completed', name, keyHash, durationMs: performance.now() - started, state: 'completed' });
        return { ok: true, value, replayed: false };
      }
      const claimed = claimedCall(lease, undefined);
      const value = await runAsCall(claimed, () => input.run(claimed));
      lease.stop();
      // It ran: even a result that cannot be replayed is recorded, so a retry never runs it again.
      const encoded = encodeResult(value, codec, policy.maxResponseBytes);
      settlement = encoded.marker === undefined ? { store: true, state: 'completed', body: encoded.body } : { store: true, state: 'failed', body: encoded.body, reason: encoded.marker };
      outcome = { ok: true, value, replayed: false };
    } catch (error) {
      outcome = { ok: false, error, replayed: false };
      settlement ??= failure(error, codec);
    } finally {
      lease.stop();
    }
    await settle(call, settlement, { started, fenced });
    return outcome;
  }

  /** A failure is stored and replayed as it is, or releases the key for a retry. */
  function failure(error: unknown, codec: OutcomeCodec<unknown>): Settlement {
    if (isRetryable(error)) return { store: false, reason: 'retryable' };
    try {
      const body = codec.serializeError(error);
      if (body !== undefined) return { store: true, state: 'failed', body };
    } catch {
      // An error that cannot be serialized is released, like a 5xx.
    }
    return { store: false, reason: 'error' };
  }

  async function settle(call: Call, settlement: Settlement, run: { started: number; fenced: () => void }): Promise<void> {
    const { id, fp, token, policy, name, keyHash } = call;
    const settleStart = performance.now();
    if (!settlement.store) {
      if (settlement.reason === 'fenced') return;
      try {
        const released = await storeCall('release', policy.storeTimeout, () => store.release({ id, token }));
        if (released) emit({ result: 'released', name, keyHash, durationMs: performance.now() - settleStart, reason: settlement.reason });
        else run.fenced();
      } catch (error) {
        // The claim expires after lockTtl anyway; the client's retry meets 409 until then.
        emit({ result: 'store_error', name, keyHash, durationMs: performance.now() - settleStart, operation: 'release', error: describeError(error) });
      }
      return;
    }
    const { state, body, reason } = settlement;
    const attempt = () => start(() => store.complete({ id, fingerprint: fp, token, state, body, ttl: policy.ttl }));
    const completed = (late: boolean) => {
      if (onEvent === undefined) return;
      const why = reason ?? (late ? 'completed_late' : undefined);
      emit({ result: 'completed', name, keyHash, durationMs: performance.now() - run.started, state, ...(why === undefined ? {} : { reason: why }) });
    };
    let result: CompleteResult;
    try {
      result = await withTimeout(attempt(), policy.storeTimeout, () => timedOut('complete', policy.storeTimeout));
    } catch (error) {
      emit({ result: 'store_error', name, keyHash, durationMs: performance.now() - settleStart, operation: 'complete', error: describeError(error) });
      void completeLater({ call, attempt, completed, fenced: run.fenced });
      return;
    }
    if (result === 'stored') completed(false);
    else if (result === 'finished') run.fenced();
    // Another claim is live: it may be one that reached the store after its
    // caller gave up, and is given back at once. Keep trying until lockTtl.
    else void completeLater({ call, attempt, completed, fenced: run.fenced });
  }

  /**
   * The operation ran; its caller has the outcome. The completion is tried
   * again in the background (it is fenced, and idempotent for this token)
   * for as long as the claim would have lived: past that, a retry of the
   * client may run the operation again, and the events say so. `gave_up` is
   * reported only once no attempt is still on its way: a driver can deliver a
   * queued command after a reconnect, long after the caller stopped waiting.
   */
  async function completeLater(opts: {
    call: Call;
    attempt: () => Promise<CompleteResult>;
    completed: (late: boolean) => void;
    fenced: () => void;
  }): Promise<void> {
    const { call, attempt, completed, fenced } = opts;
    const { policy, name, keyHash } = call;
    const deadline = engineTime() + policy.lockTtl;
    const inFlight = new Set<Promise<CompleteResult>>();
    let done = false;
    let lastError: unknown;
    const finish = (result: CompleteResult) => {
      if (done) return;
      done = true;
      if (result === 'stored') completed(true);
      else fenced();
    };
    for (let delay = 100; !done; delay = Math.min(delay * 2, 2_000)) {
      const remaining = deadline - engineTime();
      if (remaining <= 0) break;
      await new Promise<void>((resolve) => setTimeout(resolve, Math.min(delay, remaining)).unref());
      if (done) return;
      const pending = attempt();
      inFlight.add(pending);
      // An attempt given up on below may still land: its answer counts then.
      pending.then(
        (late) => {
          inFlight.delete(pending);
          if (late === 'stored') finish(late);
        },
        () => inFlight.delete(pending),
      );
      try {
        const result = await withTimeout(pending, policy.storeTimeout, () => timedOut('complete', policy.storeTimeout));
        if (result !== 'held') return finish(result);
      } catch (error) {
        lastError = error;
      }
    }
    if (done) return;
    if (lastError === undefined) return finish('held'); // a live claim of another held the key all along
    await Promise.allSettled([...inFlight]);
    if (done) return;
    done = true;
    emit({ result: 'store_error', name, keyHash, durationMs: 0, operation: 'complete', reason: 'gave_up', error: describeError(lastError) });
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
