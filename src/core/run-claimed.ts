import { performance } from 'node:perf_hooks';
import type { Call, EngineScope } from './call.js';
import { classify, type Settlement } from './classify.js';
import { claimedCall, runAsCall } from './context.js';
import type { ExecuteInput, ExecuteResult } from './engine.js';
import { inProgressError } from './errors.js';
import { Lease } from './lease.js';
import { markerError } from './outcome.js';
import { settle } from './settle.js';

/**
 * Runs the operation under the claim, renewing the claim while it runs, then
 * stores its outcome or gives the key back ({@link classify} decides,
 * {@link settle} does it). In transactional mode the outcome is stored in the
 * operation's own transaction.
 */
export async function runClaimed<T>(scope: EngineScope, call: Call, input: ExecuteInput<T>): Promise<ExecuteResult<T>> {
  const { emit } = scope;
  const { policy, name, keyHash } = call;
  const lease = new Lease(scope, call);

  let outcome: ExecuteResult<T>;
  let settlement: Settlement | undefined;
  try {
    if (policy.transaction) {
      const value = await runInTransaction(scope, call, { input, lease, settled: (s) => (settlement = s) });
      emit({ result: 'completed', name, keyHash, durationMs: performance.now() - lease.started, state: 'completed' });
      return { ok: true, value, replayed: false };
    }
    const claimed = claimedCall(lease, undefined);
    const value = await runAsCall(claimed, () => input.run(claimed));
    lease.stop();
    outcome = { ok: true, value, replayed: false };
  } catch (error) {
    outcome = { ok: false, error, replayed: false };
  } finally {
    lease.stop();
  }
  // It ran: even a result that cannot be replayed is recorded, so a retry never runs it again.
  settlement ??= classify(outcome, call.codec, policy);
  await settle(scope, call, settlement, lease);
  return outcome;
}

/**
 * The operation's writes and its stored outcome commit together, or neither
 * does: a crash before the commit leaves a claim that expires. What is not
 * stored in the transaction is reported through `settled`, for the caller to
 * settle after the rollback.
 */
async function runInTransaction<T>(
  scope: EngineScope,
  call: Call,
  run: {
    input: ExecuteInput<T>;
    lease: Lease;
    settled: (settlement: Settlement) => void;
  },
): Promise<T> {
  const { store } = scope;
  const { id, token, policy } = call;
  return store.raw.transaction!(async (tx) => {
    const inTx = claimedCall(run.lease, tx.handle);
    const result = await runAsCall(inTx, () => run.input.run(inTx));
    const settlement = classify({ ok: true, value: result }, call.codec, policy);
    if (settlement.kind === 'release') {
      // Rolled back, so nothing happened: the key is given back for a retry.
      run.settled(settlement);
      throw markerError(settlement.reason as 'unreplayable' | 'response_too_large', policy.maxResponseBytes);
    }
    if (settlement.kind !== 'store') throw new Error('unreachable: classify stores or releases a value');
    // From here the row lock held by this transaction fences the claim.
    run.lease.stop();
    const stored = await store.call('complete', policy.storeTimeout, () =>
      tx.complete({ id, fingerprint: call.fp, token, state: 'completed', body: settlement.body, ttl: policy.ttl }),
    );
    if (stored !== 'stored') {
      run.lease.fenced();
      run.settled({ kind: 'fenced' });
      throw inProgressError(
        scope.retryAfter,
        'the claim on this key expired while the operation ran, so its transaction was rolled back, and another request now holds the key',
      );
    }
    return result;
  });
}
