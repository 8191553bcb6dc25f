/**
 * `TimerQueue`, the one timer behind every store timeout and claim renewal:
 * an entry fires no earlier than its delay, in the order added, never once
 * removed, and entries re-queued by a callback wait for their own turn.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, vi } from 'vitest';
import { type Timed, TimerQueue, withTimeout } from '../../src/core/timing.js';
import { connectRedis } from '../helpers/redis.js';
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
    const queue = new TimerQueue(40);
    const log: { name: string; at: number }[] = [];
    const added = new Map<string, number>();
    for (const name of ['a', 'b', 'c', 'd']) {
      const e = entry(name, log);
      const now = performance.now();
      added.set(name, now);
      queue.add(e, now);
      if (name === 'b') queue.remove(e);
      await sleep(10);
    }
    await sleep(120);
    expect(log.map((l) => l.name)).toEqual(['a', 'c', 'd']);
    for (const { name, at } of log) expect(at - added.get(name)!).toBeGreaterThanOrEqual(39);
  });

  it('re-arms for entries queued by a callback, one delay later', async () => {
    const queue = new TimerQueue(30);
    const log: { name: string; at: number }[] = [];
    let left = 3;
    const start = performance.now();
    const renewing: Timed = entry('renew', log, () => {
      if (--left > 0) queue.add(renewing, performance.now());
    });
    queue.add(renewing, start);
    await sleep(200);
    expect(log).toHaveLength(3);
    log.forEach(({ at }, i) => {
      expect(at - start).toBeGreaterThanOrEqual(30 * (i + 1) - 1);
    });
    queue.remove(renewing); // already fired: a no-op
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
    await expect(withTimeout(Promise.resolve(1), 30, () => new Error('late'))).resolves.toBe(1);
    await expect(withTimeout(Promise.reject(new Error('no')), 30, () => new Error('late'))).rejects.toThrow('no');
    const started = performance.now();
    await expect(withTimeout(new Promise(() => {}), 30, () => new Error('late'))).rejects.toThrow('late');
    expect(performance.now() - started).toBeGreaterThanOrEqual(29);
  });

  it('an answer that arrived while the event loop was busy is taken, not timed out on the loop lag', async () => {
    const redis = connectRedis();
    try {
      await redis.ping();
      for (let i = 0; i < 5; i++) {
        const sent = performance.now();
        const answered = withTimeout(redis.ping(), 30, () => new Error('timed out'));
        // The command is written; Redis answers within a millisecond, into a socket nobody reads while
        // this loop spins past the timeout. Node.js runs the due timer before it reads the socket.
        while (performance.now() - sent < 100) {}
        await expect(answered).resolves.toBe('PONG');
      }
    } finally {
      redis.disconnect();
    }
  });
});
