import type { Attempt } from './attempt.js';
import { classify, type Settlement } from './classify.js';
import { inProgressError } from './idempotency-error.js';
import { Lease } from './lease.js';
import { markerError } from './outcome.js';
import { ClaimedRun, runAsCurrent } from './protected-run.js';
import type { EngineRuntime } from './runtime.js';
import { settle } from './settle.js';
import type { RecordedStep } from './store.js';
import type { ExecuteInput, ExecuteResult } from './types.js';

/**
 * Runs the operation under the claim, renewing the claim while it runs, then
 * stores its outcome or gives the key back ({@link classify} decides,
 * {@link settle} does it). In transactional mode the outcome is stored in the
 * operation's own transaction.
 */
export async function runClaimed<T>(
  runtime: EngineRuntime,
  attempt: Attempt,
  input: ExecuteInput<T>,
  recorded: readonly RecordedStep[] | undefined,
): Promise<ExecuteResult<T>> {
  const { emit } = runtime;
  const { policy, name, keyHash } = attempt;
  const lease = new Lease(runtime, attempt);

  let outcome: ExecuteResult<T>;
  let settlement: Settlement | undefined;
  let claimed: ClaimedRun | undefined;
  try {
    if (policy.transaction) {
      const value = await runInTransaction(runtime, attempt, {
        input,
        lease,
        recorded,
        settled: (s) => (settlement = s),
        // Its steps are deleted with an outcome stored after a rollback too (a 4xx it threw).
        running: (c) => (claimed = c),
      });
      emit({ result: 'completed', name, keyHash, durationMs: runtime.clock.now() - lease.started, state: 'completed' });
      return { ok: true, value, replayed: false };
    }
    claimed = new ClaimedRun(runtime, attempt, lease, undefined, recorded);
    const run = claimed;
    const value = await runAsCurrent(run, () => input.run(run));
    lease.stop();
    // Every recorded step reached, none left running: else the outcome is that error, and the key is released.
    const stepError = claimed.steps?.finish();
    outcome =
      stepError === undefined ? { ok: true, value, replayed: false } : { ok: false, error: stepError, replayed: false };
  } catch (error) {
    outcome = { ok: false, error, replayed: false };
  } finally {
    lease.stop();
  }
  // It ran: even a result that cannot be replayed is recorded, so a retry never runs it again.
  settlement ??= classify(outcome, attempt.codec, policy);
  await settle(runtime, attempt, settlement, lease, claimed?.steps?.used === true);
  return outcome;
}

/**
 * The operation's writes and its stored outcome commit together, or neither
 * does: a crash before the commit leaves a claim that expires. What is not
 * stored in the transaction is reported through `settled`, for the caller to
 * settle after the rollback.
 */
async function runInTransaction<T>(
  runtime: EngineRuntime,
  attempt: Attempt,
  run: {
    input: ExecuteInput<T>;
    lease: Lease;
    recorded: readonly RecordedStep[] | undefined;
    settled: (settlement: Settlement) => void;
    running: (attempt: ClaimedRun) => void;
  },
): Promise<T> {
  const { store } = runtime;
  const { id, token, policy } = attempt;
  return store.transaction(async (tx) => {
    // Steps are recorded outside this transaction: their effects happened even if it rolls back.
    const inTx = new ClaimedRun(runtime, attempt, run.lease, tx.handle, run.recorded);
    run.running(inTx);
    const result = await runAsCurrent(inTx, () => run.input.run(inTx));
    const stepError = inTx.steps?.finish();
    if (stepError !== undefined) throw stepError;
    const settlement = classify({ ok: true, value: result }, attempt.codec, policy);
    if (settlement.kind === 'release') {
      // Rolled back, so nothing happened: the key is given back for a retry.
      run.settled(settlement);
      throw markerError(settlement.reason as 'unreplayable' | 'response_too_large', policy.maxResponseBytes);
    }
    // From here the row lock held by this transaction fences the claim.
    run.lease.stop();
    const stored = await store.completeIn(tx, attempt, {
      id,
      fingerprint: attempt.fp,
      token,
      state: 'completed',
      body: settlement.body,
      ttl: policy.ttl,
      ...(inTx.steps?.used === true ? { clearSteps: true } : {}),
    });
    if (stored !== 'stored') {
      run.lease.fenced();
      run.settled({ kind: 'fenced' });
      throw inProgressError(
        runtime.retryAfter,
        'the claim on this key expired while the operation ran, so its transaction was rolled back, and another request now holds the key',
      );
    }
    return result;
  });
}
