import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/index.js';

export interface StoreHarness {
  store: IdempotencyStore;
  /** Lets `ms` pass for the store: a fake clock for the memory store, real time for a server. */
  advance(ms: number): Promise<void>;
}

/**
 * The contract every store must keep, run against each of them on a real
 * service. `lockTtl` values are small so real-time stores finish quickly.
 */
export function describeStoreContract(
  name: string,
  create: () => Promise<StoreHarness> | StoreHarness,
  capabilities: { notifies: boolean } = { notifies: true },
) {
  describe(`store contract: ${name}`, () => {
    const id = () => `scope:contract.op:${randomUUID()}`;
    const LOCK = 400;

    it('claims an absent record, then reports it in progress with its fingerprint', async () => {
      const { store } = await create();
      const rec = id();
      expect(await store.claim({ id: rec, fingerprint: 'fp1', token: 'a', lockTtl: LOCK })).toEqual({ state: 'acquired' });
      expect(await store.claim({ id: rec, fingerprint: 'fp1', token: 'b', lockTtl: LOCK })).toEqual({
        state: 'in_progress',
        fingerprint: 'fp1',
      });
      expect(await store.claim({ id: rec, fingerprint: 'other', token: 'c', lockTtl: LOCK })).toEqual({
        state: 'in_progress',
        fingerprint: 'fp1',
      });
    });

    it('exactly one of many concurrent claims wins', async () => {
      const { store } = await create();
      const rec = id();
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => store.claim({ id: rec, fingerprint: 'fp', token: `t${i}`, lockTtl: LOCK })),
      );
      expect(results.filter((r) => r.state === 'acquired')).toHaveLength(1);
      expect(results.filter((r) => r.state === 'in_progress')).toHaveLength(49);
    });

    it('completes with the holding token and replays the body to a matching fingerprint only', async () => {
      const { store } = await create();
      const rec = id();
      await store.claim({ id: rec, fingerprint: 'fp', token: 'a', lockTtl: LOCK });
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'a', state: 'completed', body: '{"ok":1}', ttl: 60_000 })).toBe(true);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'b', lockTtl: LOCK })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
        body: '{"ok":1}',
      });
      expect(await store.claim({ id: rec, fingerprint: 'different', token: 'c', lockTtl: LOCK })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
      });
    });

    it('stores failures, empty bodies and large unicode bodies as they are', async () => {
      const { store } = await create();
      const failed = id();
      await store.claim({ id: failed, fingerprint: 'fp', token: 'a', lockTtl: LOCK });
      await store.complete({ fingerprint: 'fp', id: failed, token: 'a', state: 'failed', body: '{"code":"BAD_REQUEST"}', ttl: 60_000 });
      expect(await store.claim({ id: failed, fingerprint: 'fp', token: 'b', lockTtl: LOCK })).toMatchObject({
        state: 'failed',
        body: '{"code":"BAD_REQUEST"}',
      });

      const empty = id();
      await store.claim({ id: empty, fingerprint: 'fp', token: 'a', lockTtl: LOCK });
      await store.complete({ fingerprint: 'fp', id: empty, token: 'a', state: 'completed', body: '', ttl: 60_000 });
      expect(await store.claim({ id: empty, fingerprint: 'fp', token: 'b', lockTtl: LOCK })).toMatchObject({ body: '' });

      const large = id();
      const body = 'é€😀'.repeat(100_000);
      await store.claim({ id: large, fingerprint: 'fp', token: 'a', lockTtl: LOCK });
      await store.complete({ fingerprint: 'fp', id: large, token: 'a', state: 'completed', body, ttl: 60_000 });
      const replay = await store.claim({ id: large, fingerprint: 'fp', token: 'b', lockTtl: LOCK });
      expect(replay.state === 'completed' && replay.body === body).toBe(true);
    });

    it('refuses complete, release and extend from a token that does not hold the claim', async () => {
      const { store } = await create();
      const rec = id();
      await store.claim({ id: rec, fingerprint: 'fp', token: 'holder', lockTtl: LOCK });
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'intruder', state: 'completed', body: 'x', ttl: 60_000 })).toBe(false);
      expect(await store.release({ id: rec, token: 'intruder' })).toBe(false);
      expect(await store.extend({ id: rec, token: 'intruder', lockTtl: LOCK })).toBe(false);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'x', lockTtl: LOCK })).toEqual({ state: 'in_progress', fingerprint: 'fp' });
      // a completed record: its holder's completion sent twice succeeds again (a driver's
      // re-send after a reconnect), anyone else's is refused, and it cannot be released
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'holder', state: 'completed', body: 'first', ttl: 60_000 })).toBe(true);
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'holder', state: 'completed', body: 'first', ttl: 60_000 })).toBe(true);
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'intruder', state: 'completed', body: 'other', ttl: 60_000 })).toBe(false);
      expect(await store.release({ id: rec, token: 'holder' })).toBe(false);
      expect(await store.extend({ id: rec, token: 'holder', lockTtl: LOCK })).toBe(false);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'y', lockTtl: LOCK })).toMatchObject({ body: 'first' });
    });

    it('release frees the key for a new claim', async () => {
      const { store } = await create();
      const rec = id();
      await store.claim({ id: rec, fingerprint: 'fp', token: 'a', lockTtl: LOCK });
      expect(await store.release({ id: rec, token: 'a' })).toBe(true);
      expect(await store.claim({ id: rec, fingerprint: 'fp2', token: 'b', lockTtl: LOCK })).toEqual({ state: 'acquired' });
    });

    it('an expired claim is taken over, and the old holder is fenced out', async () => {
      const { store, advance } = await create();
      const rec = id();
      await store.claim({ id: rec, fingerprint: 'fp', token: 'old', lockTtl: LOCK });
      await advance(LOCK + 100);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'new', lockTtl: LOCK })).toEqual({ state: 'acquired' });
      expect(await store.extend({ id: rec, token: 'old', lockTtl: LOCK })).toBe(false);
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'old', state: 'completed', body: 'stale', ttl: 60_000 })).toBe(false);
      expect(await store.release({ id: rec, token: 'old' })).toBe(false);
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'new', state: 'completed', body: 'fresh', ttl: 60_000 })).toBe(true);
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'old', state: 'completed', body: 'stale', ttl: 60_000 })).toBe(false);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'z', lockTtl: LOCK })).toMatchObject({ body: 'fresh' });
    });

    it('extend keeps a claim alive past its original lifetime', async () => {
      const { store, advance } = await create();
      const rec = id();
      await store.claim({ id: rec, fingerprint: 'fp', token: 'a', lockTtl: LOCK });
      for (let i = 0; i < 3; i++) {
        await advance(LOCK / 2);
        expect(await store.extend({ id: rec, token: 'a', lockTtl: LOCK })).toBe(true);
      }
      // 1.5 x lockTtl after the claim, it is still held
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'b', lockTtl: LOCK })).toMatchObject({ state: 'in_progress' });
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'a', state: 'completed', body: 'done', ttl: 60_000 })).toBe(true);
    });

    it('a finished record expires after its ttl', async () => {
      const { store, advance } = await create();
      const rec = id();
      await store.claim({ id: rec, fingerprint: 'fp', token: 'a', lockTtl: LOCK });
      await store.complete({ fingerprint: 'fp', id: rec, token: 'a', state: 'completed', body: 'done', ttl: 500 });
      await advance(200);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'b', lockTtl: LOCK })).toMatchObject({ state: 'completed' });
      await advance(400);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'c', lockTtl: LOCK })).toEqual({ state: 'acquired' });
    });

    it('a holder whose claim expired with no one taking it over cannot extend it, but can still store its outcome', async () => {
      const { store, advance } = await create();
      const rec = id();
      await store.claim({ id: rec, fingerprint: 'fp', token: 'late', lockTtl: LOCK });
      await advance(LOCK + 100);
      expect(await store.extend({ id: rec, token: 'late', lockTtl: LOCK })).toBe(false);
      // no one else holds the key or ran the operation: keeping its result beats running it again
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'late', state: 'completed', body: 'kept', ttl: 60_000 })).toBe(true);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'next', lockTtl: LOCK })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
        body: 'kept',
      });
    });

    it('a holder whose record vanished (released by a newer holder, or lost) can store its outcome', async () => {
      const { store, advance } = await create();
      const rec = id();
      await store.claim({ id: rec, fingerprint: 'fp', token: 'old', lockTtl: LOCK });
      await advance(LOCK + 100);
      await store.claim({ id: rec, fingerprint: 'fp', token: 'new', lockTtl: LOCK });
      expect(await store.release({ id: rec, token: 'new' })).toBe(true);
      expect(await store.complete({ fingerprint: 'fp', id: rec, token: 'old', state: 'completed', body: 'from old', ttl: 60_000 })).toBe(true);
      expect(await store.claim({ id: rec, fingerprint: 'fp', token: 'x', lockTtl: LOCK })).toMatchObject({ state: 'completed', body: 'from old' });
    });

    if (capabilities.notifies) {
      it('notifies waiters when a claim they wait on settles', async () => {
        const { store } = await create();
        expect(store.onSettled).toBeTypeOf('function');
        const completed = id();
        const released = id();
        await store.claim({ id: completed, fingerprint: 'fp', token: 'a', lockTtl: 5_000 });
        await store.claim({ id: released, fingerprint: 'fp', token: 'a', lockTtl: 5_000 });
        // a waiter announces itself through its claim
        await store.claim({ id: completed, fingerprint: 'fp', token: 'w', lockTtl: 5_000, waiting: true });
        await store.claim({ id: released, fingerprint: 'fp', token: 'w', lockTtl: 5_000, waiting: true });
        const events: string[] = [];
        const offA = await store.onSettled!(completed, () => events.push('completed'));
        const offB = await store.onSettled!(released, () => events.push('released'));
        await store.complete({ fingerprint: 'fp', id: completed, token: 'a', state: 'completed', body: 'x', ttl: 60_000 });
        await store.release({ id: released, token: 'a' });
        await expect.poll(() => [...events].sort(), { timeout: 2_000 }).toEqual(['completed', 'released']);
        offA();
        offB();
      });
    } else {
      it('has no notifications, so waiters poll with backoff', async () => {
        const { store } = await create();
        expect(store.onSettled).toBeUndefined();
      });
    }
  });
}
