import { performance } from 'node:perf_hooks';
import type { Attempt } from './attempt.js';
import type { Settlement } from './classify.js';
import { describeError } from './events.js';
import type { EngineRuntime } from './runtime.js';
import type { CompleteInput, CompleteResult } from './store.js';
import { engineTime } from './store-clock.js';

/** What settling needs to know of the run (its lease): when it started, and how to report the claim lost. */
export interface RunReport {
  readonly started: number;
  /** Reports that another request holds the key now (once, whoever notices first). */
  fenced(): void;
}

/**
 * Stores the outcome or gives the key back. A completion the store does not
 * take in time is tried again in the background ({@link completeLater}); a
 * release that fails is left to expire after lockTtl (the client's retry
 * meets 409 until then). The guard reports each store failure.
 */
export async function settle(
  runtime: EngineRuntime,
  attempt: Attempt,
  settlement: Settlement,
  run: RunReport,
  clearSteps = false,
): Promise<void> {
  const { store, emit } = runtime;
  const { id, fp, token, policy, name, keyHash } = attempt;
  const settleStart = runtime.observed ? performance.now() : 0; // for events only
  if (settlement.kind === 'fenced') return; // nothing to release: the claim is someone else's
  if (settlement.kind === 'release') {
    const released = await store.release(attempt).catch(() => undefined);
    if (released === true) {
      emit({
        result: 'released',
        name,
        keyHash,
        durationMs: performance.now() - settleStart,
        reason: settlement.reason,
      });
    } else if (released === false) {
      run.fenced();
    }
    return;
  }
  const { state, body, reason } = settlement;
  const input: CompleteInput = { id, fingerprint: fp, token, state, body, ttl: policy.ttl };
  if (clearSteps) input.clearSteps = true;
  let result: CompleteResult;
  try {
    result = await store.complete(attempt, input);
  } catch {
    void completeLater(runtime, attempt, { input, state, reason, run });
    return;
  }
  if (result === 'stored') reportCompleted(runtime, attempt, { state, reason, run }, false);
  else if (result === 'finished') run.fenced();
  // Another claim is live: it may be one that reached the store after its
  // caller gave up, and is given back at once. Keep trying until lockTtl.
  else void completeLater(runtime, attempt, { input, state, reason, run });
}

/** The `completed` event, when someone listens. */
function reportCompleted(
  runtime: EngineRuntime,
  attempt: Attempt,
  completion: { state: 'completed' | 'failed'; reason: string | undefined; run: RunReport },
  late: boolean,
): void {
  if (!runtime.observed) return;
  const { state, reason, run } = completion;
  const why = reason ?? (late ? 'completed_late' : undefined);
  runtime.emit({
    result: 'completed',
    name: attempt.name,
    keyHash: attempt.keyHash,
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
  runtime: EngineRuntime,
  attempt: Attempt,
  opts: {
    input: CompleteInput;
    state: 'completed' | 'failed';
    reason: string | undefined;
    run: RunReport;
  },
): Promise<void> {
  const { input, state, reason, run } = opts;
  const { policy, name, keyHash } = attempt;
  const deadline = engineTime() + policy.lockTtl;
  const inFlight = new Set<Promise<CompleteResult>>();
  let done = false;
  let lastError: unknown;
  const finish = (result: CompleteResult) => {
    if (done) return;
    done = true;
    if (result === 'stored') reportCompleted(runtime, attempt, { state, reason, run }, true);
    else run.fenced();
  };
  for (let delay = 100; !done; delay = Math.min(delay * 2, 2_000)) {
    const remaining = deadline - engineTime();
    if (remaining <= 0) break;
    await new Promise<void>((resolve) => setTimeout(resolve, Math.min(delay, remaining)).unref());
    if (done) return;
    try {
      const result = await runtime.store.complete(attempt, input, {
        quiet: true,
        // An attempt given up on may still land: its answer counts then.
        sent: (pending) => {
          inFlight.add(pending);
          pending.then(
            (answer) => {
              inFlight.delete(pending);
              if (answer === 'stored') finish(answer);
            },
            () => inFlight.delete(pending),
          );
        },
      });
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
  runtime.emit({
    result: 'store_error',
    name,
    keyHash,
    durationMs: 0,
    operation: 'complete',
    reason: 'gave_up',
    error: describeError(lastError),
  });
}
