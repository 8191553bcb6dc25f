/**
 * A store call's timeout (`withTimeout`, the process's timer queue) against a real Redis socket:
 * an answer that arrived while the event loop was busy counts, whatever the loop's lag.
 */
import { describe, expect, it } from 'vitest';
import { withTimeout } from '../../src/core/timing.js';
import { connectRedis } from '../helpers/redis.js';

describe('withTimeout on a busy event loop (Redis)', () => {
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
