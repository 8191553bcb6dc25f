/**
 * How many lost renewals a claim survives, on virtual time (no sleeps): two engines share one memory
 * store; A's renewals are lost (sent, never answered) or delayed on the way; B, another instance,
 * tries the same key the first millisecond A's claim could have expired, as a client's retry sent to
 * another instance by a load balancer would. The
 * bound docs/getting-started.md states: a claim survives k consecutive lost renewals when
 * lockTtl / 3 + k × storeTimeout + d < lockTtl (d: the time a renewal takes to reach the store), so
 * one lost renewal at every storeTimeout the options allow.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type IdempotencyEvent, memoryStore } from '../../src/index.js';
import {
  elapse,
  networkStore,
  useRealTime,
  useVirtualTime,
  virtualEngine,
  virtualNow,
} from '../helpers/virtual-time.js';

beforeEach(useVirtualTime);
afterEach(useRealTime);

interface Case {
  lockTtl: number;
  storeTimeout: number;
  /** Which of A's renewals (numbered from 1) are lost. */
  lost: (n: number) => boolean;
  /** Each call of A's takes this long to reach the store, and its answer as long to come back. */
  delay?: number;
  /** How long A's operation runs. */
  duration?: number;
}

/**
 * A runs the operation; B, another instance with an instant store, tries the key at the first
 * millisecond A's claim could be free: lockTtl after each claim or renewal of A's took hold.
 */
async function race({ lockTtl, storeTimeout, lost, delay = 0, duration = 2 * lockTtl + 1 }: Case) {
  const memory = memoryStore();
  const input = { key: 'pay-1', name: 'pay', payload: { amount: 1000 } };
  const options = { lockTtl, storeTimeout, ttl: 60_000 };
  const runs: string[] = [];
  const engineB = virtualEngine({ ...options, store: memory });
  const retries: Promise<unknown>[] = [];
  const start = virtualNow(); // times below are from here
  let takenAt: number | undefined;
  const retryB = () =>
    retries.push(
      engineB
        .run(input, async () => {
          takenAt ??= virtualNow() - start;
          runs.push('B');
          return 'B';
        })
        .catch((error: unknown) => error),
    );
  const a = networkStore(
    memory,
    { claim: () => ({ delay }), complete: () => ({ delay }), extend: (n) => (lost(n) ? { lost: true } : { delay }) },
    () => setTimeout(retryB, lockTtl),
  );
  const events: IdempotencyEvent[] = [];
  const engineA = virtualEngine({ ...options, store: a.store, onEvent: (e) => events.push(e) });
  let abortedAt: number | undefined;
  const first = engineA.run(input, async ({ signal }) => {
    runs.push('A');
    signal.addEventListener('abort', () => (abortedAt = virtualNow() - start));
    await elapse(duration);
    return 'A';
  });
  await vi.advanceTimersByTimeAsync(duration + 2 * delay + 2 * lockTtl);
  memory.close();
  await vi.runAllTimersAsync(); // no timer left for the next case
  return { first: await first, retries: await Promise.all(retries), runs, events, abortedAt, takenAt };
}

/** The bound: k consecutive lost renewals are survived when lockTtl / 3 + k × storeTimeout + delay < lockTtl. */
const survives = (lockTtl: number, storeTimeout: number, k: number, delay: number) =>
  Math.floor(lockTtl / 3) + k * storeTimeout + delay < lockTtl;

describe('a claim whose renewals are lost', () => {
  it('survives one lost renewal at every storeTimeout the options allow (lockTtl 300: 1 to 100 ms), with or without delay', async () => {
    const lockTtl = 300;
    for (let storeTimeout = 1; storeTimeout <= lockTtl / 3; storeTimeout++) {
      // the longest a call may take each way and still be answered within storeTimeout
      for (const delay of new Set([0, Math.max(Math.ceil(storeTimeout / 2) - 1, 0)])) {
        for (const which of [1, 3]) {
          const { first, runs, events } = await race({ lockTtl, storeTimeout, delay, lost: (n) => n === which });
          const where = `storeTimeout ${storeTimeout}, delay ${delay}, renewal ${which} lost`;
          expect(runs, where).toEqual(['A']);
          expect(first, where).toEqual({ value: 'A', replayed: false });
          expect(
            events.filter((e) => e.result === 'lease_lost'),
            where,
          ).toEqual([]);
        }
      }
    }
  });

  it('survives k lost renewals in a row exactly as the bound says, and past it aborts the operation before another instance takes the key', async () => {
    const lockTtl = 300;
    for (const storeTimeout of [20, 50, 100]) {
      for (let k = 1; survives(lockTtl, storeTimeout, k - 1, 0); k++) {
        const { runs, events, abortedAt, takenAt } = await race({ lockTtl, storeTimeout, lost: (n) => n <= k });
        const where = `storeTimeout ${storeTimeout}, ${k} lost in a row`;
        // one run of failures, one report: the first
        expect(events.filter((e) => e.result === 'store_error').length, where).toBe(1);
        if (survives(lockTtl, storeTimeout, k, 0)) {
          expect(runs, where).toEqual(['A']);
          expect(
            events.filter((e) => e.result === 'lease_lost'),
            where,
          ).toEqual([]);
        } else {
          // Renewals failed for a whole lockTtl: A is told, no later than B can take the key.
          expect(
            events.filter((e) => e.result === 'lease_lost').map((e) => e.reason),
            where,
          ).toEqual(['unconfirmed']);
          expect(runs, where).toEqual(['A', 'B']);
          expect(abortedAt, where).toBeLessThanOrEqual(takenAt!);
        }
      }
    }
  });

  it('aborts the operation the moment the claim may expire unconfirmed, whatever lockTtl (not only a multiple of 3)', async () => {
    for (const lockTtl of [301, 1_000, 10_000]) {
      const storeTimeout = Math.min(1_000, Math.floor(lockTtl / 3)); // the default
      const { runs, events, abortedAt, takenAt } = await race({ lockTtl, storeTimeout, lost: () => true });
      const where = `lockTtl ${lockTtl}`;
      expect(
        events.filter((e) => e.result === 'lease_lost').map((e) => e.reason),
        where,
      ).toEqual(['unconfirmed']);
      // the claim was sent at 0: it may expire at lockTtl, when B takes it
      expect([abortedAt, takenAt], where).toEqual([lockTtl, lockTtl]);
      expect(runs, where).toEqual(['A', 'B']);
    }
  });

  it('aborts the operation when maxRunTime passes, not at the next renewal', async () => {
    const memory = memoryStore();
    const events: IdempotencyEvent[] = [];
    const engine = virtualEngine({
      store: memory,
      lockTtl: 300,
      maxRunTime: 150,
      onEvent: (e) => events.push(e),
    });
    let abortedAt: number | undefined;
    const run = engine.run({ key: 'k', name: 'op', payload: {} }, ({ signal }) => {
      signal.addEventListener('abort', () => (abortedAt = virtualNow()));
      return elapse(400).then(() => 'done');
    });
    await vi.advanceTimersByTimeAsync(500);
    expect(await run).toEqual({ value: 'done', replayed: false });
    expect(abortedAt).toBe(150);
    expect(events.filter((e) => e.result === 'lease_lost').map((e) => e.reason)).toEqual(['max_run_time']);
    memory.close();
  });

  it('with the defaults (lockTtl 30 s, storeTimeout 1 s) survives 19 lost renewals in a row', async () => {
    const lockTtl = 30_000;
    const storeTimeout = 1_000;
    expect(survives(lockTtl, storeTimeout, 19, 0)).toBe(true);
    const { runs, events } = await race({ lockTtl, storeTimeout, lost: (n) => n <= 19, duration: 45_000 });
    expect(runs).toEqual(['A']);
    expect(events.filter((e) => e.result === 'lease_lost')).toEqual([]);
  });

  it('a renewal that fails at once is sent again a storeTimeout after it was sent, not in a busy loop', async () => {
    const memory = memoryStore();
    const a = networkStore(memory, { extend: (n) => (n <= 4 ? { error: new Error('ECONNRESET') } : {}) });
    const events: IdempotencyEvent[] = [];
    const engine = virtualEngine({
      store: a.store,
      lockTtl: 300,
      storeTimeout: 40,
      onEvent: (e) => events.push(e),
    });
    const sent: number[] = [];
    const extend = a.store.extend;
    a.store.extend = (input) => {
      sent.push(virtualNow());
      return extend(input);
    };
    const run = engine.run({ key: 'k', name: 'op', payload: {} }, () => elapse(350).then(() => 'done'));
    await vi.advanceTimersByTimeAsync(500);
    expect(await run).toEqual({ value: 'done', replayed: false });
    // 100 ms (lockTtl / 3) after the claim; then 40 ms (storeTimeout) after each failed one; the next
    // one would be 100 ms after the one that held (360), after the operation ended
    expect(sent).toEqual([100, 140, 180, 220, 260]);
    // four failures in a row, one report
    expect(events.filter((e) => e.result === 'store_error')).toHaveLength(1);
    expect(events.filter((e) => e.result === 'lease_lost')).toEqual([]);
    memory.close();
  });
});
