/**
 * `TimerQueue`, the one timer behind every store timeout and claim renewal:
 * an entry fires no earlier than its delay, in the order added, never once
 * removed, and entries re-queued by a callback wait for their own turn.
 */
import { describe, expect, it, vi } from 'vitest';
import { type Timed, TimerQueue, timerQueues, withTimeout } from '../../src/core/timing.js';
import { useRealTime, useVirtualTime, virtualClock } from '../helpers/virtual-time.js';

function entry(name: string, log: { name: string; at: number }[], onFire?: () => void): Timed {
  return {
    due: 0,
    prev: undefined,
    next: undefined,
    queue: undefined,
    fire() {
      log.push({ name, at: performance.now() });
      onFire?.();
    },
  };
}

describe('TimerQueue', () => {
  it('fires each entry no earlier than its delay, in the order added, and never a removed one', async () => {
    useVirtualTime();
    try {
      const queue = new TimerQueue(40, virtualClock());
      const log: { name: string; at: number }[] = [];
      for (const name of ['a', 'b', 'c', 'd']) {
        const e = entry(name, log);
        queue.add(e, performance.now());
        if (name === 'b') queue.remove(e);
        await vi.advanceTimersByTimeAsync(10);
      }
      await vi.advanceTimersByTimeAsync(29); // 69 ms: d (added at 30) is due at 70
      expect(log).toEqual([
        { name: 'a', at: 40 },
        { name: 'c', at: 60 },
      ]);
      await vi.advanceTimersByTimeAsync(1);
      expect(log).toEqual([
        { name: 'a', at: 40 },
        { name: 'c', at: 60 },
        { name: 'd', at: 70 },
      ]);
    } finally {
      await useRealTime();
    }
  });

  it('re-arms for entries queued by a callback, one delay later', async () => {
    useVirtualTime();
    try {
      const queue = new TimerQueue(30, virtualClock());
      const log: { name: string; at: number }[] = [];
      let left = 3;
      const renewing: Timed = entry('renew', log, () => {
        if (--left > 0) queue.add(renewing, performance.now());
      });
      queue.add(renewing, performance.now());
      await vi.advanceTimersByTimeAsync(200);
      expect(log.map(({ at }) => at)).toEqual([30, 60, 90]);
      queue.remove(renewing); // already fired: a no-op
    } finally {
      await useRealTime();
    }
  });

  it('an entry added since a time already past is placed by its due time, and re-arms the timer when it is due first', async () => {
    useVirtualTime();
    try {
      const queue = new TimerQueue(100, virtualClock());
      const log: { name: string; at: number }[] = [];
      queue.add(entry('a', log), 0); // due at 100
      await vi.advanceTimersByTimeAsync(50);
      queue.addSince(entry('b', log), 10); // due at 110: after a
      queue.addSince(entry('c', log), -20); // due at 80: before a, and before the timer armed for a
      await vi.advanceTimersByTimeAsync(100);
      expect(log).toEqual([
        { name: 'c', at: 80 },
        { name: 'a', at: 100 },
        { name: 'b', at: 110 },
      ]);
    } finally {
      await useRealTime();
    }
  });

  it('withTimeout settles with the promise, or rejects once the delay passed', async () => {
    useVirtualTime();
    try {
      const clock = virtualClock();
      let settled: unknown;
      withTimeout(new Promise(() => {}), 30, () => new Error('late'), clock.now(), timerQueues(clock)).catch(
        (error: Error) => (settled = error.message),
      );
      await vi.advanceTimersByTimeAsync(29);
      expect(settled).toBeUndefined();
      await vi.advanceTimersByTimeAsync(1);
      expect(settled).toBe('late');
    } finally {
      await useRealTime();
    }
    await expect(withTimeout(Promise.resolve(1), 30, () => new Error('late'))).resolves.toBe(1);
    await expect(withTimeout(Promise.reject(new Error('no')), 30, () => new Error('late'))).rejects.toThrow('no');
  });
});
