/**
 * Found while building steps-crash.test.ts (whose server names each event
 * after the request it belongs to, through AsyncLocalStorage, as an app
 * that logs request ids does): a claim's renewals run in the async context
 * of another request. The renewals share one timer per delay
 * (core/timing.ts), armed by whichever request queued the first entry, and a
 * Node.js timer runs its callback in the context it was created in. So the
 * `renewed`, `lease_lost` and extend `store_error` events of request B are
 * emitted in request A's context, and the store calls of B's renewals run
 * there too: an OpenTelemetry instrumentation of ioredis or pg files them
 * under A's trace, even once A has finished; and the re-armed timer keeps A's
 * context alive for as long as the queue never drains.
 *
 * Expected: each lease renews in the context of the request that took the
 * claim (or in none). This test fails on main at feaa8ed.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createIdempotencyEngine, memoryStore } from '../../src/index.js';
import { sleep } from '../helpers/redis.js';

describe('claim renewals and the async context', () => {
  it('a request’s renewals run in its own context, not in the context of the request that armed the shared timer', async () => {
    const request = new AsyncLocalStorage<string>();
    const owner = new Map<string, string>();
    const renewals: { of: string; context: string | undefined }[] = [];
    const engine = createIdempotencyEngine({
      store: memoryStore(),
      lockTtl: 300, // renewed every 100 ms
      onEvent: (event) => {
        if (event.result === 'acquired') owner.set(event.keyHash!, request.getStore()!);
        if (event.result === 'renewed') renewals.push({ of: owner.get(event.keyHash!)!, context: request.getStore() });
      },
    });
    await Promise.all(
      ['A', 'B'].map((name, i) =>
        request.run(name, async () => {
          await sleep(i * 20); // A arms the shared renewal timer
          await engine.run({ key: randomUUID(), name: 'op', payload: {} }, () => sleep(400));
        }),
      ),
    );
    expect(renewals.filter((r) => r.of === 'B').length).toBeGreaterThan(0);
    for (const renewal of renewals)
      expect(renewal.context, `a renewal of ${renewal.of}`).not.toBe(otherThan(renewal.of));
  });
});

const otherThan = (name: string) => (name === 'A' ? 'B' : 'A');
