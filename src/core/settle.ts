import { performance } from 'node:perf_hooks';
import type { Call, EngineScope } from './call.js';
import type { Settlement } from './classify.js';
import { describeError } from './events.js';
import { start } from './guarded-store.js';
import type { CompleteInput, CompleteResult } from './store.js';
import { engineTime } from './store-clock.js';
import { withTimeout } from './timing.js';

/** What settling needs to know of the run (its lease): when it started, and how to report the claim lost. */
export interface RunReport {
  readonly started: number;
  /** Reports that another request holds the key now (once, whoever notices first). */
  fenced(): void;
}

/**
 * Stores the outcome or gives the key back. A completion the store does not
 * take in time is tried again in the background ({@link completeLater}); a
 * release that fails is left to expire after lockTtl.
 */
export async function settle(
  scope: EngineScope,
  call: Call,
  settlement: Settlement,
  run: RunReport,
  clearSteps = false,
): Promise<void> {
  const { store, emit } = scope;
  const { id, fp, token, policy, name, keyHash } = call;
  const settleStart = scope.observed ? performance.now() : 0; // for events only
  if (settlement.kind === 'fenced') return; // nothing to release: the claim is someone else's
  if (settlement.kind === 'release') {
    try {
      const released = await store.call('release', policy.storeTimeout, () => store.raw.release({ id, token }));
      if (released)
        emit({
          result: 'released',
          name,
          keyHash,
          durationMs: performance.now() - settleStart,
          reason: settlement.reason,
        });
      else run.fenced();
    } catch (error) {
      // The claim expires after lockTtl anyway; the client's retry meets 409 until then.
      emit({
        result: 'store_error',
        name,
        keyHash,
        durationMs: performance.now() - settleStart,
        operation: 'release',
        error: describeError(error),
      });
    }
    return;
  }
  const { state, body, reason } = settlement;
  const complete: CompleteInput = { id, fingerprint: fp, token, state, body, ttl: policy.ttl };
  if (clearSteps) complete.clearSteps = true;
  const attempt = () => start(() => store.raw.complete(complete));
  let result: CompleteResult;
  try {
    result = await withTimeout(attempt(), policy.storeTimeout, () => store.timedOut('complete', policy.storeTimeout));
  } catch (error) {
    emit({
      result: 'store_error',
      name,
      keyHash,
      durationMs: performance.now() - settleStart,
      operation: 'complete',
      error: describeError(error),
    });
    void completeLater(scope, call, { attempt, state, reason, run });
    return;
  }
  if (result === 'stored') reportCompleted(scope, call, { state, reason, run }, false);
  else if (result === 'finished') run.fenced();
  // Another claim is live: it may be one that reached the store after its
  // caller gave up, and is given back at once. Keep trying until lockTtl.
  else void completeLater(scope, call, { attempt, state, reason, run });
}

/** The `completed` event, when someone listens. */
function reportCompleted(
  scope: EngineScope,
  call: Call,
  completion: { state: 'completed' | 'failed'; reason: string | undefined; run: RunReport },
  late: boolean,
): void {
  if (!scope.observed) return;
  const { state, reason, run } = completion;
  const why = reason ?? (late ? 'completed_late' : undefined);
  scope.emit({
    result: 'completed',
    name: call.name,
    keyHash: call.keyHash,
    durationMs: performance.now() - run.started,
    state,
    ...(why === undefined ? {} : { reason: why }),
  });
}

/**
 * The operation ran; its caller has the outcome. The completion is tried
 * again in the background (it is fenced, and idempotent for this token)
 * for as long as the claim would have lived: past that, a retry of the
 * client may run the operation again, and the events say so. `gave_up` is
 * reported only once no attempt is still on its way: a driver can deliver a
 * queued command after a reconnect, long after the caller stopped waiting.
 */
async function completeLater(
  scope: EngineScope,
  call: Call,
  opts: {
    attempt: () => Promise<CompleteResult>;
    state: 'completed' | 'failed';
    reason: string | undefined;
    run: RunReport;
  },
): Promise<void> {
  const { attempt, state, reason, run } = opts;
  const { policy, name, keyHash } = call;
  const deadline = engineTime() + policy.lockTtl;
  const inFlight = new Set<Promise<CompleteResult>>();
  let done = false;
  let lastError: unknown;
  const finish = (result: CompleteResult) => {
    if (done) return;
    done = true;
    if (result === 'stored') reportCompleted(scope, call, { state, reason, run }, true);
    else run.fenced();
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
      const result = await withTimeout(pending, policy.storeTimeout, () =>
        scope.store.timedOut('complete', policy.storeTimeout),
      );
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
  scope.emit({
    result: 'store_error',
    name,
    keyHash,
    durationMs: 0,
    operation: 'complete',
    reason: 'gave_up',
    error: describeError(lastError),
  });
}
