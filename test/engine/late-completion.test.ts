/**
 * A completion the store does not confirm, on virtual time (no sleeps): it is retried in the
 * background, and every such run ends in one event that says how, within 2 × lockTtl of the first
 * failure, even when a request is sent and never answered (docs/reference/events.md, "A completion
 * that fails"). A completion that lands later than that is reported when it lands.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type IdempotencyEvent, memoryStore } from '../../src/index.js';
import {
  elapse,
  type Fate,
  networkStore,
  useRealTime,
  useVirtualTime,
  virtualEngine,
  virtualNow,
} from '../helpers/virtual-time.js';

beforeEach(useVirtualTime);
afterEach(useRealTime);

const lockTtl = 300;
const storeTimeout = 100;
const input = { key: 'pay-1', name: 'pay', payload: { amount: 1000 } };

/** The events that end a run whose completion failed: how it ended, and when. */
const terminal = (events: (IdempotencyEvent & { at: number })[]) =>
  events
    .filter(
      (e) =>
        (e.result === 'completed' && e.reason === 'completed_late') ||
        e.result === 'lease_lost' ||
        (e.result === 'store_error' && e.reason === 'gave_up'),
    )
    .map((e) => ({ result: e.result, reason: e.reason, at: e.at }));

/** A's completions meet `complete` (numbered from 1); A's operation takes 50 ms. */
function instanceA(memory: ReturnType<typeof memoryStore>, complete: (n: number) => Fate) {
  const a = networkStore(memory, { complete });
  const events: (IdempotencyEvent & { at: number })[] = [];
  const engine = virtualEngine({
    store: a.store,
    lockTtl,
    storeTimeout,
    onEvent: (e) => events.push({ ...e, at: virtualNow() }),
  });
  const runs: string[] = [];
  const answer = engine.run(input, async () => {
    runs.push('A');
    await elapse(50);
    return 'A';
  });
  return { engine, events, runs, answer };
}

describe('a completion the store does not confirm', () => {
  it('that is never answered, nor any retry of it, ends in one gave_up within 2 × lockTtl of the failure', async () => {
    const memory = memoryStore();
    const a = instanceA(memory, () => ({ lost: true }));
    await vi.advanceTimersByTimeAsync(10 * lockTtl);
    expect(await a.answer).toEqual({ value: 'A', replayed: false });
    // sent at 50, timed out at 150
    expect(a.events.find((e) => e.result === 'store_error')).toMatchObject({ operation: 'complete', at: 150 });
    const ended = terminal(a.events);
    expect(ended).toEqual([{ result: 'store_error', reason: 'gave_up', at: expect.any(Number) }]);
    expect(ended[0]!.at).toBeLessThanOrEqual(150 + 2 * lockTtl);
    memory.close();
  });

  it('whose retries learn that another request took the key over says so (lease_lost, fenced), within the bound', async () => {
    const memory = memoryStore();
    // the first two attempts are lost; the later ones arrive, and find B's claim
    const a = instanceA(memory, (n) => (n <= 2 ? { lost: true } : {}));
    const engineB = virtualEngine({ store: memory, lockTtl, storeTimeout });
    const runs = a.runs;
    // B, a retry on another instance, the moment A's claim (taken at 0, never renewed) expires
    await vi.advanceTimersByTimeAsync(lockTtl);
    const b = engineB.run(input, async () => {
      runs.push('B');
      await elapse(4 * lockTtl);
      return 'B';
    });
    await vi.advanceTimersByTimeAsync(10 * lockTtl);
    expect(await a.answer).toEqual({ value: 'A', replayed: false });
    expect(await b).toEqual({ value: 'B', replayed: false });
    expect(runs).toEqual(['A', 'B']);
    const ended = terminal(a.events);
    expect(ended).toEqual([{ result: 'lease_lost', reason: 'fenced', at: expect.any(Number) }]);
    expect(ended[0]!.at).toBeLessThanOrEqual(150 + 2 * lockTtl);
    memory.close();
  });

  it('that lands while its attempts are waited for ends in completed_late alone', async () => {
    const memory = memoryStore();
    // the first attempt's answer comes back at 50 + 2 × 300 = 650: after the retries (until 450),
    // before the end of the wait for attempts on their way (750)
    const a = instanceA(memory, (n) => (n === 1 ? { delay: 300 } : { lost: true }));
    await vi.advanceTimersByTimeAsync(10 * lockTtl);
    expect(await a.answer).toEqual({ value: 'A', replayed: false });
    expect(terminal(a.events)).toEqual([{ result: 'completed', reason: 'completed_late', at: 650 }]);
    memory.close();
  });

  it('that lands after a takeover whose holder gave the key back is reported when it lands, after the fenced', async () => {
    const memory = memoryStore();
    // the first attempt's answer comes back at 50 + 2 × 700 = 1,450; the second is lost; later ones arrive
    const a = instanceA(memory, (n) => (n === 1 ? { delay: 700 } : n === 2 ? { lost: true } : {}));
    await vi.advanceTimersByTimeAsync(lockTtl);
    // B takes the expired claim at 300, fails at 600: its key is given back
    const engineB = virtualEngine({ store: memory, lockTtl, storeTimeout });
    const b = engineB
      .run(input, async () => {
        a.runs.push('B');
        await elapse(300);
        throw new Error('declined');
      })
      .catch((error: Error) => error.message);
    await vi.advanceTimersByTimeAsync(10 * lockTtl);
    expect([await a.answer, await b]).toEqual([{ value: 'A', replayed: false }, 'declined']);
    expect(a.runs).toEqual(['A', 'B']);
    // the retries found B's claim (fenced); then A's first attempt reached the free key and stored A
    expect(terminal(a.events).map((e) => `${e.result}/${e.reason}`)).toEqual([
      'lease_lost/fenced',
      'completed/completed_late',
    ]);
    const retry = a.engine.run(input, async () => 'again');
    await vi.advanceTimersByTimeAsync(1);
    expect(await retry).toEqual({ value: 'A', replayed: true });
    memory.close();
  });

  it('that lands after the retries gave up is reported when it lands, as completed_late, and the retry replays it', async () => {
    const memory = memoryStore();
    // the first attempt takes 900 ms to reach the store, and its answer as long to come back; every retry is lost
    const a = instanceA(memory, (n) => (n === 1 ? { delay: 900 } : { lost: true }));
    await vi.advanceTimersByTimeAsync(10 * lockTtl);
    expect(await a.answer).toEqual({ value: 'A', replayed: false });
    const ended = terminal(a.events);
    expect(ended.map((e) => e.reason)).toEqual(['gave_up', 'completed_late']);
    expect(ended[0]!.at).toBeLessThanOrEqual(150 + 2 * lockTtl);
    expect(ended[1]!.at).toBe(50 + 2 * 900); // when its answer arrives
    const retry = a.engine.run(input, async () => 'again');
    await vi.advanceTimersByTimeAsync(1);
    expect(await retry).toEqual({ value: 'A', replayed: true });
    expect(a.runs).toEqual(['A']);
    memory.close();
  });
});
