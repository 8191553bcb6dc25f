import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import fc from 'fast-check';
import { describe, expect, it as vitestIt } from 'vitest';
import { TOO_LARGE_BODY, UNREPLAYABLE_BODY } from '../../src/core/outcome.js';
import {
  type ClaimInput,
  type ClaimResult,
  type CompleteInput,
  deriveStepKey,
  recordId,
  type SaveStepInput,
} from '../../src/core.js';
import type { IdempotencyStore } from '../../src/index.js';
import { onSteadyWallClock, within } from '../helpers/steady-clock.js';
import { describeAdminContract } from './admin-contract.js';

/** `it`, run again when the wall clock stepped while it failed (the stores time expiries by it). */
const it = (name: string, test: () => Promise<void>, timeout?: number) =>
  vitestIt(name, () => onSteadyWallClock(test), timeout);

type Untimed<T> = T extends unknown ? Omit<T, 'time'> : never;

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
    /**
     * A claim (fingerprint `fp`, lockTtl LOCK unless given), and its answer without the store's time, which an
     * answer that takes the record (or is late) must carry.
     */
    const claim = async (
      store: IdempotencyStore,
      input: Pick<ClaimInput, 'id' | 'token'> & Partial<ClaimInput>,
    ): Promise<Untimed<ClaimResult>> => {
      const { time, ...rest } = await store.claim({ fingerprint: 'fp', lockTtl: LOCK, ...input });
      if (rest.state === 'acquired' || rest.state === 'late') expect(time).toBeTypeOf('number');
      else if (time !== undefined) expect(time).toBeTypeOf('number');
      return rest as Untimed<ClaimResult>;
    };
    /** A completion: fingerprint `fp`, a result kept for a minute, unless given. */
    const complete = (
      store: IdempotencyStore,
      input: Pick<CompleteInput, 'id' | 'token' | 'body'> & Partial<CompleteInput>,
    ) => store.complete({ fingerprint: 'fp', state: 'completed', ttl: 60_000, ...input });

    it('claims an absent record, then reports it in progress with its fingerprint', async () => {
      const { store } = await create();
      const rec = id();
      expect(await claim(store, { id: rec, token: 'a', fingerprint: 'fp1' })).toEqual({
        state: 'acquired',
      });
      expect(await claim(store, { id: rec, token: 'b', fingerprint: 'fp1' })).toEqual({
        state: 'in_progress',
        fingerprint: 'fp1',
      });
      expect(await claim(store, { id: rec, token: 'c', fingerprint: 'other' })).toEqual({
        state: 'in_progress',
        fingerprint: 'fp1',
      });
    });

    it('exactly one of many concurrent claims wins', async () => {
      const { store } = await create();
      const rec = id();
      // lockTtl long enough that the claim cannot expire while a busy machine serves the other 49
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          store.claim({ id: rec, fingerprint: 'fp', token: `t${i}`, lockTtl: 10_000 }),
        ),
      );
      expect(results.filter((r) => r.state === 'acquired')).toHaveLength(1);
      expect(results.filter((r) => r.state === 'in_progress')).toHaveLength(49);
    });

    it('calls of every kind on many records, issued at once, each get their own answer', async () => {
      // A store may send the calls of one turn of the event loop together (the Redis store does):
      // each answer must still be its own call's.
      const { store } = await create();
      const [free, held, done, toRelease, toExtend, toComplete] = [id(), id(), id(), id(), id(), id()];
      const hold = (rec: string, token: string) => claim(store, { id: rec, token, lockTtl: 10_000 });
      const finish = (rec: string, token: string, body: string) => complete(store, { id: rec, token, body });
      for (const [rec, token] of [
        [held, 'h'],
        [done, 'd'],
        [toRelease, 'r'],
        [toExtend, 'e'],
        [toComplete, 'c'],
      ] as const) {
        expect(await hold(rec, token)).toEqual({ state: 'acquired' });
      }
      expect(await finish(done, 'd', 'done body')).toBe('stored');

      const answers = await Promise.all([
        claim(store, { id: free, token: 'f' }),
        claim(store, { id: held, token: 'x', fingerprint: 'other' }),
        claim(store, { id: done, token: 'y' }),
        claim(store, { id: done, token: 'z', fingerprint: 'other' }),
        store.release({ id: toRelease, token: 'r' }),
        store.release({ id: held, token: 'intruder' }),
        store.extend({ id: toExtend, token: 'e', lockTtl: 10_000, fingerprint: 'fp' }),
        store.extend({ id: held, token: 'intruder', lockTtl: 10_000, fingerprint: 'fp' }),
        finish(toComplete, 'c', 'completed body'),
        finish(held, 'intruder', 'x'),
      ]);
      expect(answers).toEqual([
        { state: 'acquired' },
        { state: 'in_progress', fingerprint: 'fp' },
        { state: 'completed', fingerprint: 'fp', body: 'done body' },
        { state: 'completed', fingerprint: 'fp' },
        true,
        false,
        true,
        false,
        'stored',
        'held',
      ]);
      expect(await hold(toRelease, 'again')).toEqual({ state: 'acquired' });
      expect(await claim(store, { id: toComplete, token: 'w' })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
        body: 'completed body',
      });
    });

    it('completes with the holding token and replays the body to a matching fingerprint only', async () => {
      const { store } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'a' });
      expect(await complete(store, { id: rec, token: 'a', body: '{"ok":1}' })).toBe('stored');
      expect(await claim(store, { id: rec, token: 'b' })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
        body: '{"ok":1}',
      });
      expect(await claim(store, { id: rec, token: 'c', fingerprint: 'different' })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
      });
    });

    it('stores failures, empty bodies and large unicode bodies as they are', async () => {
      const { store } = await create();
      const failed = id();
      await claim(store, { id: failed, token: 'a' });
      await complete(store, { id: failed, token: 'a', state: 'failed', body: '{"code":"BAD_REQUEST"}' });
      expect(await claim(store, { id: failed, token: 'b' })).toMatchObject({
        state: 'failed',
        body: '{"code":"BAD_REQUEST"}',
      });

      const empty = id();
      await claim(store, { id: empty, token: 'a' });
      await complete(store, { id: empty, token: 'a', body: '' });
      expect(await claim(store, { id: empty, token: 'b' })).toMatchObject({
        body: '',
      });

      const large = id();
      const body = 'é€😀'.repeat(100_000);
      await claim(store, { id: large, token: 'a' });
      await complete(store, { id: large, token: 'a', body });
      const replay = await claim(store, { id: large, token: 'b' });
      expect(replay.state === 'completed' && replay.body === body).toBe(true);
    });

    it('refuses complete, release and extend from a token that does not hold the claim', async () => {
      const { store } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'holder' });
      expect(await complete(store, { id: rec, token: 'intruder', body: 'x' })).toBe('held');
      expect(await store.release({ id: rec, token: 'intruder' })).toBe(false);
      expect(await store.extend({ id: rec, token: 'intruder', lockTtl: LOCK, fingerprint: 'fp' })).toBe(false);
      expect(await claim(store, { id: rec, token: 'x' })).toEqual({
        state: 'in_progress',
        fingerprint: 'fp',
      });
      // a completed record: its holder's completion sent twice succeeds again (a driver's
      // re-send after a reconnect), anyone else's is refused, and it cannot be released
      expect(await complete(store, { id: rec, token: 'holder', body: 'first' })).toBe('stored');
      expect(await complete(store, { id: rec, token: 'holder', body: 'first' })).toBe('stored');
      expect(await complete(store, { id: rec, token: 'intruder', body: 'other' })).toBe('finished');
      expect(await store.release({ id: rec, token: 'holder' })).toBe(false);
      expect(await store.extend({ id: rec, token: 'holder', lockTtl: LOCK, fingerprint: 'fp' })).toBe(false);
      expect(await claim(store, { id: rec, token: 'y' })).toMatchObject({
        body: 'first',
      });
    });

    it('a completion sent again by its holder answers stored and changes nothing: not the body, state, expiry or claim time', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'a' });
      expect(await complete(store, { id: rec, token: 'a', body: 'first' })).toBe('stored');
      expect(store.admin).toBeDefined();
      const before = await store.admin!.inspect({ id: rec, body: true });
      await advance(20);
      // the same completion again (a driver's re-send, or the engine's retry of one whose answer was lost),
      // and one with another outcome and clearing steps (the engine sends none: a stored outcome is final)
      expect(await complete(store, { id: rec, token: 'a', body: 'first' })).toBe('stored');
      expect(
        await complete(store, { id: rec, token: 'a', body: 'second', state: 'failed', ttl: 120_000, clearSteps: true }),
      ).toBe('stored');
      const after = await store.admin!.inspect({ id: rec, body: true });
      expect({ ...after, time: 0, expiresAt: 0 }).toEqual({ ...before, time: 0, expiresAt: 0 });
      // Redis reads an expiry as its clock plus the key's PTTL, each rounded to the ms: 1 ms apart between two
      // reads (a completion that wrote again would have moved it by the 20 ms that passed, or its 120 s ttl)
      expect(Math.abs(after!.expiresAt! - before!.expiresAt!)).toBeLessThanOrEqual(1);
    });

    it('release frees the key for a new claim', async () => {
      const { store } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'a' });
      expect(await store.release({ id: rec, token: 'a' })).toBe(true);
      expect(await claim(store, { id: rec, token: 'b', fingerprint: 'fp2' })).toEqual({
        state: 'acquired',
      });
    });

    it('an expired claim is taken over, and the old holder is fenced out', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'old' });
      await advance(LOCK + 100);
      expect(await claim(store, { id: rec, token: 'new' })).toEqual({
        state: 'acquired',
      });
      expect(await store.extend({ id: rec, token: 'old', lockTtl: LOCK, fingerprint: 'fp' })).toBe(false);
      expect(await complete(store, { id: rec, token: 'old', body: 'stale' })).toBe('held');
      expect(await store.release({ id: rec, token: 'old' })).toBe(false);
      expect(await complete(store, { id: rec, token: 'new', body: 'fresh' })).toBe('stored');
      expect(await complete(store, { id: rec, token: 'old', body: 'stale' })).toBe('finished');
      expect(await claim(store, { id: rec, token: 'z' })).toMatchObject({
        body: 'fresh',
      });
    });

    it('extend keeps a claim alive past its original lifetime', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'a' });
      for (let i = 0; i < 3; i++) {
        await advance(LOCK / 2);
        expect(await store.extend({ id: rec, token: 'a', lockTtl: LOCK, fingerprint: 'fp' })).toBe(true);
      }
      // 1.5 x lockTtl after the claim, it is still held
      expect(await claim(store, { id: rec, token: 'b' })).toMatchObject({
        state: 'in_progress',
      });
      expect(await complete(store, { id: rec, token: 'a', body: 'done' })).toBe('stored');
    });

    it('a finished record expires after its ttl', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'a' });
      const storedAt = performance.now();
      await complete(store, { id: rec, token: 'a', body: 'done', ttl: 500 });
      await advance(200);
      within(storedAt, 480, 'the outcome cannot have expired yet');
      expect(await claim(store, { id: rec, token: 'b' })).toMatchObject({
        state: 'completed',
      });
      await advance(400);
      expect(await claim(store, { id: rec, token: 'c' })).toEqual({
        state: 'acquired',
      });
    });

    it('a holder whose claim expired with no one taking it over cannot extend it, but can still store its outcome', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'late' });
      await advance(LOCK + 100);
      expect(await store.extend({ id: rec, token: 'late', lockTtl: LOCK, fingerprint: 'fp' })).toBe(false);
      // no one else holds the key or ran the operation: keeping its result beats running it again
      expect(await complete(store, { id: rec, token: 'late', body: 'kept' })).toBe('stored');
      expect(await claim(store, { id: rec, token: 'next' })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
        body: 'kept',
      });
    });

    it('a holder whose record vanished (released by a newer holder, or lost) can store its outcome', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'old' });
      await advance(LOCK + 100);
      await claim(store, { id: rec, token: 'new' });
      expect(await store.release({ id: rec, token: 'new' })).toBe(true);
      expect(await complete(store, { id: rec, token: 'old', body: 'from old' })).toBe('stored');
      expect(await claim(store, { id: rec, token: 'x' })).toMatchObject({
        state: 'completed',
        body: 'from old',
      });
    });

    it('keeps every body as it is: the unreplayable and too-large markers, NUL, control characters', async () => {
      const { store } = await create();
      const bodies = [
        UNREPLAYABLE_BODY,
        TOO_LARGE_BODY,
        'a\u0000b',
        '\u0001starts with SOH',
        '\u0000',
        'tab\tnewline\nbell\u0007',
        '\u0001',
      ];
      for (const body of bodies) {
        const rec = id();
        await claim(store, { id: rec, token: 'a' });
        expect(await complete(store, { id: rec, token: 'a', state: 'failed', body })).toBe('stored');
        expect(await claim(store, { id: rec, token: 'b' })).toEqual({
          state: 'failed',
          fingerprint: 'fp',
          body,
        });
      }
    });

    it('a claim sent again with the token that holds the record (a driver re-send after a reconnect) holds it', async () => {
      const { store, advance } = await create();
      const rec = id();
      expect(await claim(store, { id: rec, token: 'mine' })).toEqual({
        state: 'acquired',
      });
      await advance(LOCK / 2);
      const renewedAt = performance.now();
      expect(await claim(store, { id: rec, token: 'mine' })).toEqual({
        state: 'acquired',
      });
      // it also renewed the claim: 1.25 x lockTtl after the first claim, it is still held
      await advance((LOCK * 3) / 4);
      within(renewedAt, LOCK - 20, 'the renewed claim cannot have expired yet');
      expect(await claim(store, { id: rec, token: 'other' })).toEqual({
        state: 'in_progress',
        fingerprint: 'fp',
      });
      expect(await complete(store, { id: rec, token: 'mine', body: 'done' })).toBe('stored');
      // once finished, the same token's claim is a replay like any other
      expect(await claim(store, { id: rec, token: 'mine' })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
        body: 'done',
      });
    });

    it('a claim that reaches the store after its deadline takes nothing: it answers late, or what is there', async () => {
      const { store } = await create();
      const probe = await store.claim({ id: id(), fingerprint: 'fp', token: 'probe', lockTtl: LOCK });
      const time = probe.time!;
      expect(time).toBeGreaterThan(1e12); // milliseconds since the epoch, not seconds
      const past = time - 1_000;
      const rec = id();
      // absent: not taken
      expect(await claim(store, { id: rec, token: 'late', deadline: past })).toEqual({
        state: 'late',
      });
      expect(await claim(store, { id: rec, token: 'a', deadline: time + 60_000 })).toEqual({ state: 'acquired' });
      // the holder's own token, late: not taken again (nor renewed)
      expect(await claim(store, { id: rec, token: 'a', deadline: past })).toEqual({
        state: 'late',
      });
      // another's claim or an outcome: nothing to take, so reporting it is as good as late
      const waiter = await claim(store, { id: rec, token: 'b', deadline: past, waiting: true });
      if (waiter.state !== 'late') expect(waiter).toMatchObject({ state: 'in_progress', fingerprint: 'fp' });
      // the late claims changed nothing: the holder still completes, and the outcome replays
      expect(await complete(store, { id: rec, token: 'a', body: 'once' })).toBe('stored');
      const replay = { state: 'completed', fingerprint: 'fp', body: 'once' };
      expect([{ state: 'late' }, replay]).toContainEqual(await claim(store, { id: rec, token: 'c', deadline: past }));
      expect(await claim(store, { id: rec, token: 'c', deadline: time + 60_000 })).toEqual(replay);
    });

    it('a completion refused by a live claim of another token succeeds once that claim is given back', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'holder' });
      // the record is lost (a restart without persistence); a claim lands that nobody waits for
      await advance(LOCK + 100);
      expect(await claim(store, { id: rec, token: 'abandoned' })).toEqual({
        state: 'acquired',
      });
      expect(await complete(store, { id: rec, token: 'holder', body: 'ran' })).toBe('held');
      expect(await store.release({ id: rec, token: 'abandoned' })).toBe(true);
      expect(await complete(store, { id: rec, token: 'holder', body: 'ran' })).toBe('stored');
      expect(await claim(store, { id: rec, token: 'retry' })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
        body: 'ran',
      });
    });

    it('a claim that expired with no one taking it over cannot be released', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'a' });
      await advance(LOCK + 100);
      expect(await store.release({ id: rec, token: 'a' })).toBe(false);
      expect(await claim(store, { id: rec, token: 'b', fingerprint: 'fp2' })).toEqual({
        state: 'acquired',
      });
      expect(await store.release({ id: rec, token: 'a' })).toBe(false);
      expect(await claim(store, { id: rec, token: 'c', fingerprint: 'fp2' })).toEqual({
        state: 'in_progress',
        fingerprint: 'fp2',
      });
    });

    it('under contention: one of many concurrent takeovers of an expired claim wins, and the others see it; no call fails', async () => {
      const { store, advance } = await create();
      const rec = id();
      await claim(store, { id: rec, token: 'crashed' });
      await advance(LOCK + 100);
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => claim(store, { id: rec, token: `t${i}`, lockTtl: 10_000 })),
      );
      expect(results.filter((r) => r.state === 'acquired')).toHaveLength(1);
      expect(results.filter((r) => r.state === 'in_progress')).toHaveLength(49);
    });

    it('under contention: claims racing the completion see the claim or the outcome; no call fails', async () => {
      const { store } = await create();
      for (let round = 0; round < 5; round++) {
        const rec = id();
        await claim(store, { id: rec, token: 'holder', lockTtl: 5_000 });
        const [completed, ...claims] = await Promise.all([
          complete(store, { id: rec, token: 'holder', body: 'out' }),
          ...Array.from({ length: 20 }, (_, i) => claim(store, { id: rec, token: `r${i}`, lockTtl: 5_000 })),
        ]);
        expect(completed).toBe('stored');
        for (const result of claims) {
          expect([
            { state: 'in_progress', fingerprint: 'fp' },
            { state: 'completed', fingerprint: 'fp', body: 'out' },
          ]).toContainEqual(result);
        }
      }
    });

    if (capabilities.notifies) {
      it('notifies waiters when a claim they wait on settles', async () => {
        const { store } = await create();
        expect(store.onSettled).toBeTypeOf('function');
        const completed = id();
        const released = id();
        await claim(store, { id: completed, token: 'a', lockTtl: 5_000 });
        await claim(store, { id: released, token: 'a', lockTtl: 5_000 });
        // a waiter announces itself through its claim
        await claim(store, { id: completed, token: 'w', lockTtl: 5_000, waiting: true });
        await claim(store, { id: released, token: 'w', lockTtl: 5_000, waiting: true });
        const events: string[] = [];
        const offA = await store.onSettled!(completed, () => events.push('completed'));
        const offB = await store.onSettled!(released, () => events.push('released'));
        await complete(store, { id: completed, token: 'a', body: 'x' });
        await store.release({ id: released, token: 'a' });
        await expect.poll(() => [...events].sort(), { timeout: 2_000 }).toEqual(['completed', 'released']);
        offA();
        offB();
      });

      it("answers a waiter's claim of a held record with how long that claim lives unless renewed (a crashed holder notifies no one)", async () => {
        const { store, advance } = await create();
        const rec = id();
        await claim(store, { id: rec, token: 'a', lockTtl: 5_000 });
        const expiresIn = async () => {
          const answer = await claim(store, { id: rec, token: 'w', waiting: true });
          expect(answer).toEqual({ state: 'in_progress', fingerprint: 'fp', expiresIn: expect.any(Number) });
          return (answer as { expiresIn: number }).expiresIn;
        };
        const first = await expiresIn();
        expect(first).toBeGreaterThan(0);
        expect(first).toBeLessThanOrEqual(5_000);
        await advance(100);
        expect(await expiresIn()).toBeLessThanOrEqual(first - 50); // it counts down
        // A claim that does not wait is refused (409) and told nothing more.
        expect(await claim(store, { id: rec, token: 'r' })).toEqual({ state: 'in_progress', fingerprint: 'fp' });
      });
    } else {
      it('has no notifications, so waiters poll with backoff', async () => {
        const { store } = await create();
        expect(store.onSettled).toBeUndefined();
      });

      it("answers a waiter's claim of a held record as any other: no expiresIn, which is for stores that notify", async () => {
        const { store } = await create();
        const rec = id();
        await claim(store, { id: rec, token: 'a', lockTtl: 5_000 });
        expect(await claim(store, { id: rec, token: 'w', waiting: true })).toEqual({
          state: 'in_progress',
          fingerprint: 'fp',
        });
      });
    }

    describe('record identity', () => {
      /** A unique operation name for this run, so that records of earlier runs (or other stores on one table) never meet. */
      const run = () => `identity.${randomUUID().slice(0, 8)}.`;

      it('scopes that differ only in lone surrogates, or hold NUL, are records of their own (never replayed to one another)', async () => {
        const { store } = await create();
        const name = `${run()}pay`;
        const scopes = [
          'team-\uD800',
          'team-\uDBFF',
          'team-\uFFFD',
          'team-\uDC00',
          'team-\u0000',
          'team-',
          '',
          undefined,
        ];
        const ids = scopes.map((scope) => recordId(scope, name, 'k1'));
        expect(new Set(ids).size).toBe(scopes.length);
        for (const [i, rec] of ids.entries()) {
          expect(await claim(store, { id: rec, token: `t${i}`, fingerprint: `fp${i}`, lockTtl: 10_000 })).toEqual({
            state: 'acquired',
          });
          const done = { id: rec, fingerprint: `fp${i}`, token: `t${i}`, state: 'completed' as const, ttl: 60_000 };
          expect(await complete(store, { body: `body of ${i}`, ...done })).toBe('stored');
        }
        for (const [i, rec] of ids.entries()) {
          expect(await claim(store, { id: rec, token: 'again', fingerprint: `fp${i}` })).toEqual({
            state: 'completed',
            fingerprint: `fp${i}`,
            body: `body of ${i}`,
          });
        }
        expect(new Set(ids.map((rec) => deriveStepKey(rec, 'charge'))).size).toBe(scopes.length);
      });

      it('property: distinct (scope, name, key) triples of any Unicode never share a record or a step key', async () => {
        const { store } = await create();
        const unit = fc.oneof(
          fc.constantFrom(
            '\uD800',
            '\uDBFF',
            '\uDC00',
            '\uDFFF',
            '\uFFFD',
            '\u0000',
            ':',
            '%',
            '{',
            '}',
            'u',
            '3A',
            '%u',
          ),
          fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
        );
        const part = fc.string({ unit, maxLength: 5 });
        const triple = fc.record({ scope: fc.option(part, { nil: undefined }), name: part, key: part });
        const same = (a: typeof triple extends fc.Arbitrary<infer T> ? T : never, b: typeof a) =>
          a.scope === b.scope && a.name === b.name && a.key === b.key;
        await fc.assert(
          fc.asyncProperty(
            fc.tuple(triple, triple).filter(([a, b]) => !same(a, b)),
            async ([a, b]) => {
              // Both names get the same prefix: the triples stay distinct, and this run's records are its own.
              const prefix = run();
              const first = recordId(a.scope, prefix + a.name, a.key);
              const second = recordId(b.scope, prefix + b.name, b.key);
              expect(second).not.toBe(first);
              expect(deriveStepKey(second, 'charge')).not.toBe(deriveStepKey(first, 'charge'));
              expect(await claim(store, { id: first, token: 'a', fingerprint: 'fa', lockTtl: 10_000 })).toEqual({
                state: 'acquired',
              });
              const done = { id: first, fingerprint: 'fa', token: 'a', state: 'completed' as const, ttl: 10_000 };
              expect(await complete(store, { body: 'first', ...done })).toBe('stored');
              // Another record: taken by its own claim, not replayed from the first nor refused as another payload.
              expect(await claim(store, { id: second, token: 'b', fingerprint: 'fb', lockTtl: 10_000 })).toEqual({
                state: 'acquired',
              });
              expect(await claim(store, { id: first, token: 'c', fingerprint: 'fa', lockTtl: 10_000 })).toEqual({
                state: 'completed',
                fingerprint: 'fa',
                body: 'first',
              });
              expect(await store.release({ id: second, token: 'b' })).toBe(true);
            },
          ),
          { numRuns: 40 },
        );
      });
    });

    describe('steps (recovery points)', () => {
      const save = (store: IdempotencyStore, input: Partial<SaveStepInput> & Pick<SaveStepInput, 'id'>) =>
        store.saveStep!({
          token: 'a',
          fingerprint: 'fp',
          index: 0,
          name: 'reserve',
          body: '{"r":1}',
          ttl: 60_000,
          lockTtl: 10_000,
          ...input,
        });

      it('records steps in order, fenced by the holder token, and gives them to the claim that takes the record next', async () => {
        const { store } = await create();
        const rec = id();
        expect(await claim(store, { id: rec, token: 'a' })).toEqual({
          state: 'acquired',
        });
        expect(await save(store, { id: rec, token: 'intruder' })).toBe('fenced');
        expect(await save(store, { id: rec, index: 1, name: 'charge' })).toBe('conflict');
        expect(await save(store, { id: rec })).toBe('stored');
        // the same save sent twice (a driver's re-send after a reconnect)
        expect(await save(store, { id: rec })).toBe('stored');
        // another name where a step is recorded
        expect(await save(store, { id: rec, name: 'other' })).toBe('conflict');
        expect(await save(store, { id: rec, index: 1, name: 'charge', body: '{"c":"ch_1"}' })).toBe('stored');
        // still in flight for everyone else; the steps are not shown to them
        expect(await claim(store, { id: rec, token: 'b' })).toEqual({
          state: 'in_progress',
          fingerprint: 'fp',
        });
        expect(await store.release({ id: rec, token: 'a' })).toBe(true);
        expect(await claim(store, { id: rec, token: 'b' })).toEqual({
          state: 'acquired',
          steps: {
            fingerprint: 'fp',
            steps: [
              { name: 'reserve', body: '{"r":1}' },
              { name: 'charge', body: '{"c":"ch_1"}' },
            ],
          },
        });
        // the new holder goes on after them; the old one is fenced
        expect(await save(store, { id: rec, token: 'a', index: 2, name: 'ledger' })).toBe('fenced');
        expect(await save(store, { id: rec, token: 'b', index: 2, name: 'ledger', body: 'null' })).toBe('stored');
      });

      it('keeps the steps of a claim that expired, for the claim that takes it over', async () => {
        const { store, advance } = await create();
        const rec = id();
        await claim(store, { id: rec, token: 'a' });
        expect(await save(store, { id: rec, body: 'é€😀\u0000\u0001 "quoted"' })).toBe('stored');
        await advance(LOCK + 150);
        expect(await save(store, { id: rec, index: 1, name: 'late' })).toBe('fenced');
        const takeover = await claim(store, { id: rec, token: 'b' });
        expect(takeover).toEqual({
          state: 'acquired',
          steps: { fingerprint: 'fp', steps: [{ name: 'reserve', body: 'é€😀\u0000\u0001 "quoted"' }] },
        });
      });

      it('gives the steps with the fingerprint that recorded them, to a claim with another one', async () => {
        const { store } = await create();
        const rec = id();
        await claim(store, { id: rec, token: 'a' });
        await save(store, { id: rec });
        await store.release({ id: rec, token: 'a' });
        expect(await claim(store, { id: rec, token: 'b', fingerprint: 'other' })).toEqual({
          state: 'acquired',
          steps: { fingerprint: 'fp', steps: [{ name: 'reserve', body: '{"r":1}' }] },
        });
      });

      it('gives the steps to exactly one of many concurrent claims', async () => {
        const { store } = await create();
        const rec = id();
        await claim(store, { id: rec, token: 'a' });
        await save(store, { id: rec });
        await store.release({ id: rec, token: 'a' });
        const results = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            store.claim({ id: rec, fingerprint: 'fp', token: `t${i}`, lockTtl: 10_000 }),
          ),
        );
        const won = results.filter((r) => r.state === 'acquired');
        expect(won).toHaveLength(1);
        expect(won[0]).toMatchObject({ steps: { steps: [{ name: 'reserve' }] } });
      });

      it('deletes the steps with a completion that asks to (clearSteps), and keeps them otherwise', async () => {
        const { store, advance } = await create();
        const cleared = id();
        const kept = id();
        for (const rec of [cleared, kept]) {
          await claim(store, { id: rec, token: 'a' });
          await save(store, { id: rec });
        }
        const done = { fingerprint: 'fp', token: 'a', state: 'completed', body: '1', ttl: LOCK } as const;
        expect(await complete(store, { id: cleared, ...done, clearSteps: true })).toBe('stored');
        expect(await complete(store, { id: kept, ...done })).toBe('stored');
        await advance(LOCK + 150);
        expect(await claim(store, { id: cleared, token: 'b' })).toEqual({
          state: 'acquired',
        });
        expect(await claim(store, { id: kept, token: 'b' })).toMatchObject({
          state: 'acquired',
          steps: { steps: [{ name: 'reserve' }] },
        });
      });

      it('keeps every step as long as the last one, then lets them expire', async () => {
        const { store, advance } = await create();
        const rec = id();
        await claim(store, { id: rec, token: 'a', lockTtl: 5_000 });
        await save(store, { id: rec, ttl: 600 });
        await advance(400);
        await save(store, { id: rec, index: 1, name: 'charge', ttl: 600 });
        const secondSaved = performance.now();
        await advance(400);
        await store.release({ id: rec, token: 'a' });
        // 800 ms after the first step, 400 after the second: both are kept
        within(secondSaved, 520, 'the steps, kept 600 ms from the second save, cannot have expired yet');
        expect(await claim(store, { id: rec, token: 'b', lockTtl: 5_000 })).toMatchObject({
          steps: { steps: [{ name: 'reserve' }, { name: 'charge' }] },
        });
        await store.release({ id: rec, token: 'b' });
        await advance(400);
        expect(await claim(store, { id: rec, token: 'c', lockTtl: 5_000 })).toEqual({
          state: 'acquired',
        });
      });
    });

    describeAdminContract(create);
  });
}
