/**
 * A claim's renewals and the async context. Renewals share one timer per
 * delay (core/timing.ts), and a Node.js timer runs its callback in the
 * context it was created in: armed inside request A, it would run request
 * B's renewals (their events, their store calls) in A's context, filing them
 * under A's trace. The queue's timers are armed outside any request, so a
 * request's renewals never run in another request's context.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createIdempotencyEngine, memoryStore } from '../../src/index.js';
import { gate } from '../helpers/trpc.js';

describe('claim renewals and the async context', () => {
  it('a request’s renewals never run in the context of the request that armed the shared timer', async () => {
    const request = new AsyncLocalStorage<string>();
    const owner = new Map<string, string>();
    const renewals: { of: string; context: string | undefined }[] = [];
    const aRunning = gate();
    const bRenewed = gate();
    // Real timers, not virtual time: a fake timer runs its callback in the context of whoever advances the clock.
    const engine = createIdempotencyEngine({
      store: memoryStore(),
      lockTtl: 300, // renewed every 100 ms
      onEvent: (event) => {
        if (event.result === 'acquired') owner.set(event.keyHash!, request.getStore()!);
        if (event.result === 'renewed') {
          renewals.push({ of: owner.get(event.keyHash!)!, context: request.getStore() });
          if (owner.get(event.keyHash!) === 'B') bRenewed.open();
        }
      },
    });
    await Promise.all(
      ['A', 'B'].map((name) =>
        request.run(name, async () => {
          if (name === 'B') await aRunning.opened; // A armed the shared renewal timer
          // each runs until B was renewed at least once
          await engine.run({ key: randomUUID(), name: 'op', payload: {} }, async () => {
            if (name === 'A') aRunning.open();
            await bRenewed.opened;
          });
        }),
      ),
    );
    expect(renewals.filter((r) => r.of === 'B').length).toBeGreaterThan(0);
    for (const renewal of renewals)
      expect(renewal.context, `a renewal of ${renewal.of}`).not.toBe(otherThan(renewal.of));
  });
});

const otherThan = (name: string) => (name === 'A' ? 'B' : 'A');
