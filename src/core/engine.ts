import { randomUUID, utf8Length } from '#platform';
import type { Attempt } from './attempt.js';
import { type EngineClock, realClock } from './clock.js';
import { hashRecordId, type IdempotencyEvent } from './events.js';
import { fingerprint } from './fingerprint.js';
import { type Answer, guardStore } from './guarded-store.js';
import {
  IdempotencyError,
  inProgressError,
  isIdempotencyErrorInstance,
  storeFailureKind,
} from './idempotency-error.js';
import { decodeStored, markerOf } from './outcome.js';
import { jsonCodec, type OutcomeCodec } from './outcome-codec.js';
import { checkEngineOptions, checkTransaction, type ResolvedPolicy, resolvePolicy } from './policy.js';
import { currentRun } from './protected-run.js';
import { boundedRecordId, nameOfRecordId } from './record-id.js';
import { runClaimed } from './run-under-claim.js';
import type { EngineRuntime } from './runtime.js';
import { unprotectedRun } from './steps.js';
import type { IdempotencyStore } from './store.js';
import { timersOf } from './timing.js';
import type { ExecuteInput, ExecuteResult, IdempotencyEngine, IdempotencyEngineOptions } from './types.js';
import { claimOrWait } from './wait.js';

/**
 * The engine: one protected call, told top to bottom in `execute`.
 *
 * 1. Claim the key (`guarded-store.ts`: a timeout on every store operation, a
 *    deadline on every claim, each failure reported), or in `inFlight: 'wait'`
 *    mode wait for its holder (`wait.ts`).
 * 2. By the answer: run the operation under the claim (`run-under-claim.ts`),
 *    replay the stored outcome (`outcome.ts`), or refuse (409 in flight, 422
 *    another payload, 503 store unavailable, or run unprotected when failing open).
 * 3. After a run, `classify.ts` decides to store the outcome or give the key
 *    back, and `settle.ts` does it, retrying a completion in the background.
 */
export function createEngine(
  options: IdempotencyEngineOptions & {
    store: IdempotencyStore;
    /** Internal, for tests on virtual time (clock.ts); not a documented option. @default realClock */
    clock?: EngineClock;
  },
): IdempotencyEngine {
  // initialized config
  const { store, retryAfter, onEvent } = checkEngineOptions(options);
  const clock = options.clock ?? realClock;
  const now = options.now ?? clock.wallNow;
  const timers = timersOf(clock);
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
  const runtime: EngineRuntime = {
    store: guardStore(store, emit, timers),
    emit,
    observed: onEvent !== undefined,
    now,
    clock,
    timers,
    retryAfter,
  };
  if (onEvent !== undefined) {
    store.onEvicted?.((id, what) => {
      const event: IdempotencyEvent = {
        result: 'evicted',
        name: nameOfRecordId(id),
        keyHash: hashRecordId(id),
        durationMs: 0,
      };
      if (what === 'steps') event.reason = 'steps';
      emit(event);
    });
  }

  // initialized for request
  async function execute<T>(input: ExecuteInput<T>): Promise<ExecuteResult<T>> {
    const policy = input.policy ?? defaults;
    const { name } = input;
    const id = boundedRecordId(input.scope, name, input.key);
    const attempt: Attempt = {
      id,
      fp: fingerprint(name, input.payload, policy.exclude),
      token: randomUUID(),
      policy,
      codec: (input.codec ?? jsonCodec) as OutcomeCodec<unknown>,
      name,
      keyHash: onEvent === undefined ? undefined : hashRecordId(id),
      claimSentAt: 0,
    };
    const { keyHash } = attempt;

    // 1. Claim the key, or wait for its holder.
    // Durations are for events only: no clock reads when nobody listens.
    const checkStart = onEvent === undefined ? 0 : clock.now();
    let claimed: Answer;
    try {
      claimed = await (isWaitMode(policy)
        ? claimOrWait(runtime, attempt, input.signal)
        : runtime.store.claim(attempt, false));
    } catch (error) {
      return storeFailed(attempt, input, error, onEvent === undefined ? 0 : clock.now() - checkStart);
    }
    const durationMs = onEvent === undefined ? 0 : clock.now() - checkStart;

    // 2. Run it, replay it, or refuse.
    if (claimed.state === 'acquired') {
      const recorded = claimed.steps;
      if (recorded !== undefined && recorded.fingerprint !== attempt.fp) {
        return stepsOfAnotherPayload(attempt, durationMs);
      }
      if (onEvent !== undefined) emit({ result: 'acquired', name, keyHash, durationMs });
      // Awaited rather than returned: adopting a returned promise takes extra microtask turns.
      return await runClaimed(runtime, attempt, input, recorded?.steps);
    }
    if (claimed.fingerprint !== attempt.fp) {
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
    return replay(attempt, claimed, durationMs);
  }

  /**
   * The claim took a record whose steps were recorded by a request with
   * another payload (its claim expired or was released): the key is given
   * back with those steps, for that request's retry to resume, and this one is refused.
   */
  async function stepsOfAnotherPayload(attempt: Attempt, durationMs: number): Promise<never> {
    // If the release fails, the claim expires after lockTtl; until then its own retry meets 409.
    await runtime.store.release(attempt).catch(() => {});
    emit({ result: 'mismatch', name: attempt.name, keyHash: attempt.keyHash, durationMs });
    throw new IdempotencyError(
      'payload_mismatch',
      'This idempotency key was already used with a different payload, whose operation stopped after some of its steps. ' +
        'Use a new key for a new operation; the first payload, retried with this key, resumes after its completed steps.',
    );
  }

  /** The stored outcome, as the first run returned it (or the error saying it cannot be replayed). */
  function replay<T>(
    attempt: Attempt,
    stored: { state: 'completed' | 'failed'; body?: string | undefined },
    durationMs: number,
  ): ExecuteResult<T> {
    const { state } = stored;
    const body = stored.body ?? '';
    const marker = state === 'failed' ? markerOf(body) : undefined;
    if (onEvent !== undefined) {
      const bytes = marker === undefined ? utf8Length(body) : 0;
      const reason = marker === undefined ? {} : { reason: marker };
      emit({ result: 'replayed', name: attempt.name, keyHash: attempt.keyHash, durationMs, state, bytes, ...reason });
    }
    return decodeStored({ state, body, marker }, attempt.codec, attempt.policy.maxResponseBytes);
  }

  /** The claim failed (the guard reported it): 409 on contention, run unprotected on an outage when failing open, else 503. */
  async function storeFailed<T>(
    attempt: Attempt,
    input: ExecuteInput<T>,
    error: unknown,
    durationMs: number,
  ): Promise<ExecuteResult<T>> {
    const kind = storeFailureKind(error);
    if (kind === 'contention') throw inProgressError(retryAfter);
    // Only an outage may let a request run unprotected: never a full store, a missing table or a bug.
    if (kind === 'unavailable' && attempt.policy.onStoreError === 'fail-open') {
      emit({ result: 'unprotected', name: attempt.name, keyHash: attempt.keyHash, durationMs, reason: 'store_error' });
      try {
        const unprotected = unprotectedRun(runtime, attempt, input.signal ?? new AbortController().signal);
        return { ok: true, value: await currentRun.exit(() => input.run(unprotected)), replayed: false };
      } catch (runError) {
        return { ok: false, error: runError, replayed: false };
      }
    }
    if (isIdempotencyErrorInstance(error) && error.reason !== 'store_unavailable') throw error;
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
