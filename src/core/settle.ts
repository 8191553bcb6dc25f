import type { Attempt } from './attempt.js';
import type { Settlement } from './classify.js';
import { describeError } from './events.js';
import type { EngineRuntime } from './runtime.js';
import type { CompleteInput, CompleteResult } from './store.js';

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
  const { store, emit, clock } = runtime;
  const { id, fp, token, policy, name, keyHash } = attempt;
  const settleStart = runtime.observed ? clock.now() : 0; // for events only
  if (settlement.kind === 'fenced') return; // nothing to release: the claim is someone else's
  if (settlement.kind === 'release') {
    const released = await store.release(attempt).catch(() => undefined);
    if (released === true) {
      emit({
        result: 'released',
        name,
        keyHash,
        durationMs: clock.now() - settleStart,
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
  let first: Promise<CompleteResult> | undefined;
  try {
    result = await store.complete(attempt, input, { sent: (pending) => (first = pending) });
  } catch {
    void completeLater(runtime, attempt, { input, state, reason, run, first });
    return;
  }
  if (result === 'stored') reportCompleted(runtime, attempt, { state, reason, run }, false);
  else if (result === 'finished') run.fenced();
  // Another claim is live: it may be one that reached the store after its
  // caller gave up, and is given back at once. Keep trying until lockTtl.
  else void completeLater(runtime, attempt, { input, state, reason, run, first: undefined });
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
    durationMs: runtime.clock.now() - run.started,
    state,
    ...(why === undefined ? {} : { reason: why }),
  });
}

/**
 * The operation ran; its caller has the outcome. The completion is tried
 * again in the background (it is fenced, and idempotent for this token)
 * for as long as the claim would have lived: past that, a retry of the
 * client may run the operation again. It ends in one event, at most
 * 2 × lockTtl after the first failure, even if an attempt is never answered:
 *
 * - `completed` (`completed_late`): an attempt stored the outcome;
 * - `lease_lost` (`fenced`): the store answered that another request holds
 *   the key or finished it: the operation ran twice (reported once per claim);
 * - `store_error` (`gave_up`): no attempt was confirmed. It waits up to one
 *   more lockTtl for attempts still on their way (a driver can deliver a
 *   queued command after a reconnect); one that lands later still is
 *   reported then, as `completed_late`.
 */
async function completeLater(
  runtime: EngineRuntime,
  attempt: Attempt,
  opts: {
    input: CompleteInput;
    state: 'completed' | 'failed';
    reason: string | undefined;
    run: RunReport;
    /** The first attempt, if it may still land. */
    first: Promise<CompleteResult> | undefined;
  },
): Promise<void> {
  const { input, state, reason, run } = opts;
  const { policy, name, keyHash } = attempt;
  const { clock } = runtime;
  const deadline = clock.now() + policy.lockTtl;
  const onTheirWay = new Set<Promise<CompleteResult>>();
  let ended = false;
  let stored = false;
  const landed = (answer: CompleteResult) => {
    if (answer !== 'stored' || stored) return;
    stored = true;
    // After the end too: a completion that lands late corrects a gave_up or a fenced.
    ended = true;
    reportCompleted(runtime, attempt, { state, reason, run }, true);
  };
  const track = (pending: Promise<CompleteResult>) => {
    onTheirWay.add(pending);
    pending.then(
      (answer) => {
        onTheirWay.delete(pending);
        landed(answer);
      },
      () => onTheirWay.delete(pending),
    );
  };
  if (opts.first !== undefined) track(opts.first);
  let lastError: unknown;
  for (let delay = 100; !ended; delay = Math.min(delay * 2, 2_000)) {
    const remaining = deadline - clock.now();
    if (remaining <= 0) break;
    await new Promise<void>((resolve) => clock.setTimeout(resolve, Math.min(delay, remaining)));
    if (ended) return;
    try {
      // An attempt given up on may still land: its answer counts then.
      const result = await runtime.store.complete(attempt, input, { quiet: true, sent: track });
      if (result === 'stored') return landed(result);
      lastError = undefined;
      if (result === 'finished') break; // another request stored its outcome
      // 'held': another claim is live; it may be one given back yet
    } catch (error) {
      lastError = error;
    }
  }
  if (ended) return;
  if (lastError === undefined) {
    // The store answered last that another request holds or finished the key.
    ended = true;
    run.fenced();
    return;
  }
  // No attempt confirmed: wait, until a lockTtl after the retries' deadline, for those still on their way.
  const wait = deadline + policy.lockTtl - clock.now();
  if (onTheirWay.size > 0 && wait > 0) {
    let timer: unknown;
    await Promise.race([
      Promise.allSettled([...onTheirWay]),
      new Promise<void>((resolve) => {
        timer = clock.setTimeout(resolve, wait);
      }),
    ]);
    clock.clearTimeout(timer);
  }
  if (ended) return;
  ended = true;
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
