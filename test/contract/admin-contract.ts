import { randomUUID } from 'node:crypto';
import { describe, expect, it as vitestIt } from 'vitest';
import {
  type IdempotencyStore,
  idempotencyAdmin,
  type ListInput,
  type RecordSummary,
  recordId,
  type StoreAdmin,
} from '../../src/core.js';
import { claimWithSteps } from '../helpers/records.js';
import { onSteadyWallClock } from '../helpers/steady-clock.js';
import type { StoreHarness } from './store-contract.js';

/** `it`, run again when the wall clock stepped while it failed (the stores time expiries by it). */
const it = (name: string, test: () => Promise<void>, timeout?: number) =>
  vitestIt(name, () => onSteadyWallClock(test), timeout);

/**
 * The operator's side of the contract (`store.admin`): inspect, list, forget.
 * Run by describeStoreContract on every store. Times are the store's clock,
 * so they are compared with the `time` each answer carries, with a margin for
 * a real server's round trips.
 */
export function describeAdminContract(create: () => Promise<StoreHarness> | StoreHarness) {
  describe('admin (operator reads and deletes)', () => {
    // A procedure of its own per test, so a listing filtered by it sees only that test's records.
    const procedure = () => `admin.op${randomUUID().slice(0, 8)}`;
    const adminOf = (store: IdempotencyStore): StoreAdmin => {
      expect(store.admin, 'the store offers the operator API').toBeDefined();
      return store.admin!;
    };
    const completed = async (store: IdempotencyStore, id: string, body: string, state: 'completed' | 'failed') => {
      await store.claim({ id, fingerprint: 'fp', token: `t-${id}`, lockTtl: 10_000 });
      expect(await store.complete({ id, fingerprint: 'fp', token: `t-${id}`, state, body, ttl: 60_000 })).toBe(
        'stored',
      );
    };
    /** Every page of a listing, with the number of calls it took. */
    const listAll = async (admin: StoreAdmin, input: ListInput) => {
      const records: RecordSummary[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const page = await admin.list({ ...input, cursor });
        expect(page.time).toBeTypeOf('number');
        expect(page.examined).toBeGreaterThanOrEqual(page.records.length);
        records.push(...page.records);
        cursor = page.cursor;
        pages++;
        expect(pages, 'a listing ends').toBeLessThan(10_000);
      } while (cursor !== undefined);
      return { records, pages };
    };

    it('inspects an absent record', async () => {
      const { store } = await create();
      const info = await adminOf(store).inspect({ id: recordId('u1', procedure(), 'k') });
      expect(info).toMatchObject({ state: 'absent', steps: [] });
      expect(info.time).toBeTypeOf('number');
      expect(info.fingerprint).toBeUndefined();
      expect(info.token).toBeUndefined();
    });

    it('inspects a claim: its attempt, claim time, lease and waiters; a renewal shows in its lease', async () => {
      const { store } = await create();
      const admin = adminOf(store);
      const id = recordId('u1', procedure(), randomUUID());
      const claim = await store.claim({ id, fingerprint: 'fp-1', token: 'attempt-1', lockTtl: 5_000 });
      expect(claim.state).toBe('acquired');
      const info = await admin.inspect({ id });
      expect(info).toMatchObject({ id, state: 'in_progress', fingerprint: 'fp-1', token: 'attempt-1', lockTtl: 5_000 });
      expect(info.claimedAt).toBeGreaterThanOrEqual(claim.time! - 50);
      expect(info.claimedAt).toBeLessThanOrEqual(info.time + 50);
      expect(info.expiresAt).toBeGreaterThan(info.time + 4_000);
      expect(info.expiresAt).toBeLessThanOrEqual(info.time + 5_050);
      expect(info.bytes).toBeUndefined();
      expect(info.body).toBeUndefined();

      // a duplicate waits for it
      await store.onSettled?.(id, () => {});
      await store.claim({ id, fingerprint: 'fp-1', token: 'attempt-2', lockTtl: 5_000, waiting: true });
      const waited = await admin.inspect({ id });
      // The SQL stores' tables do not track waiters.
      if (!['postgresql', 'mysql', 'sqlite'].includes(store.name ?? '')) expect(waited.waiting).toBe(true);
      else expect(waited.waiting).toBeUndefined();

      expect(await store.extend({ id, token: 'attempt-1', lockTtl: 9_000, fingerprint: 'fp-1' })).toBe(true);
      const renewed = await admin.inspect({ id });
      expect(renewed).toMatchObject({ state: 'in_progress', token: 'attempt-1', lockTtl: 9_000 });
      expect(renewed.claimedAt).toBe(info.claimedAt);
      expect(renewed.expiresAt).toBeGreaterThan(renewed.time + 8_000);
    });

    it('inspects a stored outcome: its size in UTF-8 bytes, the body only when asked', async () => {
      const { store } = await create();
      const admin = adminOf(store);
      const id = recordId(undefined, procedure(), randomUUID());
      const body = '{"charge":"ch_é€😀"}';
      await completed(store, id, body, 'completed');
      const info = await admin.inspect({ id });
      expect(info).toMatchObject({
        state: 'completed',
        fingerprint: 'fp',
        token: `t-${id}`,
        bytes: Buffer.byteLength(body),
      });
      expect(info.body).toBeUndefined();
      expect(info.claimedAt).toBeLessThanOrEqual(info.time + 50);
      expect(info.expiresAt).toBeGreaterThan(info.time + 59_000);
      expect(info.expiresAt).toBeLessThanOrEqual(info.time + 60_050);
      expect(info.lockTtl).toBeUndefined();
      expect((await admin.inspect({ id, body: true })).body).toBe(body);

      const failedId = recordId(undefined, procedure(), randomUUID());
      await completed(store, failedId, '', 'failed');
      expect(await admin.inspect({ id: failedId, body: true })).toMatchObject({ state: 'failed', bytes: 0, body: '' });
    });

    it('inspects the recorded steps, in order, with their sizes; a completion that clears them shows none', async () => {
      const { store } = await create();
      if (store.saveStep === undefined) return;
      const admin = adminOf(store);
      const id = recordId('u2', procedure(), randomUUID());
      await claimWithSteps(store, id, {
        lockTtl: 5_000,
        steps: [
          { name: 'reserve', body: '{"r":1}' },
          { name: 'charge', body: '"é"' },
        ],
      });
      const info = await admin.inspect({ id });
      expect(info.steps).toEqual([
        { name: 'reserve', bytes: 7 },
        { name: 'charge', bytes: 4 },
      ]);
      expect(info.stepsExpireAt).toBeGreaterThan(info.time + 59_000);

      // released: the record is gone, its steps stay for the next attempt
      expect(await store.release({ id, token: 'a' })).toBe(true);
      expect(await admin.inspect({ id })).toMatchObject({
        state: 'absent',
        steps: [{ name: 'reserve' }, { name: 'charge' }],
      });

      await store.claim({ id, fingerprint: 'fp', token: 'b', lockTtl: 5_000 });
      await store.complete({
        id,
        fingerprint: 'fp',
        token: 'b',
        state: 'completed',
        body: '1',
        ttl: 60_000,
        clearSteps: true,
      });
      const done = await admin.inspect({ id });
      expect(done).toMatchObject({ state: 'completed', steps: [] });
      expect(done.stepsExpireAt).toBeUndefined();
    });

    it('lists records a page at a time, filtered by procedure, state and age, until the cursor ends', async () => {
      const { store, advance } = await create();
      const admin = adminOf(store);
      // glob and LIKE characters in the name must be matched literally
      const name = `${procedure()}[*]?%_\\`;
      const other = procedure();
      const held = recordId('u1', name, 'held');
      const done = recordId('u1', name, 'done');
      const failed = recordId('u2', name, 'failed');
      const elsewhere = recordId('u1', other, 'held');
      await store.claim({ id: held, fingerprint: 'fp', token: 'h', lockTtl: 10_000 });
      await store.claim({ id: elsewhere, fingerprint: 'fp', token: 'e', lockTtl: 10_000 });
      await completed(store, done, '{"ok":true}', 'completed');
      await completed(store, failed, '{"error":1}', 'failed');

      const all = await listAll(admin, { name, limit: 2 });
      expect(all.records.map((r) => r.id).sort()).toEqual([done, failed, held].sort());
      expect(all.records.find((r) => r.id === held)).toMatchObject({
        state: 'in_progress',
        token: 'h',
        lockTtl: 10_000,
      });
      expect(all.records.find((r) => r.id === done)).toMatchObject({ state: 'completed', bytes: 11 });
      expect(all.records.find((r) => r.id === failed)).toMatchObject({ state: 'failed', fingerprint: 'fp' });

      const inProgress = await listAll(admin, { name, state: 'in_progress' });
      expect(inProgress.records.map((r) => r.id)).toEqual([held]);
      const finished = await listAll(admin, { name, state: 'completed' });
      expect(finished.records.map((r) => r.id)).toEqual([done]);

      await advance(300);
      expect((await listAll(admin, { name, state: 'in_progress', olderThan: 200 })).records.map((r) => r.id)).toEqual([
        held,
      ]);
      expect((await listAll(admin, { name, state: 'in_progress', olderThan: 600_000 })).records).toEqual([]);

      // without a name, the listing reaches every record; our two claims are among them
      const everything = await listAll(admin, { state: 'in_progress', limit: 500 });
      const ids = new Set(everything.records.map((r) => r.id));
      expect(ids.has(held) && ids.has(elsewhere)).toBe(true);
      expect(ids.has(done)).toBe(false);
    });

    it('examined: the live records of the listed state and procedure, whatever their age; the same count on every store', async () => {
      const { store, advance } = await create();
      const admin = adminOf(store);
      const name = procedure();
      await store.claim({ id: recordId('u1', name, 'held'), fingerprint: 'fp', token: 'h', lockTtl: 60_000 });
      await completed(store, recordId('u1', name, 'done'), '1', 'completed');
      await completed(store, recordId('u2', name, 'failed'), '2', 'failed');
      // not examined: an expired claim, and another procedure's claim
      await store.claim({ id: recordId('u1', name, 'expired'), fingerprint: 'fp', token: 'x', lockTtl: 5 });
      await store.claim({ id: recordId('u1', procedure(), 'other'), fingerprint: 'fp', token: 'o', lockTtl: 60_000 });
      await advance(30);
      // Pages of 100: several on a shared table or keyspace (a Redis listing walks every key of it)
      const examined = async (input: ListInput) => {
        let sum = 0;
        let cursor: string | undefined;
        do {
          const page = await admin.list({ ...input, cursor, limit: 100 });
          sum += page.examined;
          cursor = page.cursor;
        } while (cursor !== undefined);
        return sum;
      };
      expect(await examined({ name })).toBe(3);
      expect(await examined({ name, state: 'in_progress' })).toBe(1);
      expect(await examined({ name, state: 'completed' })).toBe(1);
      // the claim is examined, and too young to be listed
      expect(await examined({ name, state: 'in_progress', olderThan: 600_000 })).toBe(1);

      // what the CLI's stuck and stats print
      const operator = idempotencyAdmin({ store, pageSize: 100 });
      expect(await operator.stuck({ procedure: name, olderThan: 600_000 })).toMatchObject({
        records: [],
        examined: 1,
        complete: true,
      });
      expect(await operator.stats({ procedure: name })).toMatchObject({ examined: 3, complete: true });
    });

    it('gives every time in whole milliseconds', async () => {
      const { store } = await create();
      const admin = adminOf(store);
      const name = procedure();
      const held = recordId('u1', name, 'held');
      await claimWithSteps(store, held, store.saveStep === undefined ? { steps: [] } : {});
      await completed(store, recordId('u1', name, 'done'), '1', 'completed');
      const times = (r: object) =>
        Object.entries(r).filter(([field]) => ['time', 'claimedAt', 'expiresAt', 'stepsExpireAt'].includes(field));
      const read = [await admin.inspect({ id: held }), ...(await listAll(admin, { name })).records];
      expect(read).toHaveLength(3);
      for (const record of read) {
        for (const [field, value] of times(record)) expect(Number.isInteger(value), `${field} ${value}`).toBe(true);
      }
      expect(Number.isInteger((await admin.list({ name })).time)).toBe(true);
    });

    it('forgets a record only as the operator saw it: same state, same token', async () => {
      const { store } = await create();
      const admin = adminOf(store);
      const id = recordId('u1', procedure(), randomUUID());
      await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 10_000 });
      expect(await admin.forget({ id, state: 'in_progress', token: 'other' })).toBe(false);
      expect(await admin.forget({ id, state: 'completed', token: 'a' })).toBe(false);
      expect(await admin.forget({ id, state: 'absent' })).toBe(false);
      expect((await admin.inspect({ id })).state).toBe('in_progress');

      let settled = 0;
      const unsubscribe = await store.onSettled?.(id, () => settled++);
      expect(await admin.forget({ id, state: 'in_progress', token: 'a' })).toBe(true);
      expect((await admin.inspect({ id })).state).toBe('absent');
      // the holder is fenced out; a retry takes the key
      expect(await store.extend({ id, token: 'a', lockTtl: 10_000, fingerprint: 'fp' })).toBe(false);
      expect((await store.claim({ id, fingerprint: 'fp', token: 'b', lockTtl: 10_000 })).state).toBe('acquired');
      if (store.onSettled !== undefined && store.name !== 'postgresql') {
        await expect.poll(() => settled, { timeout: 2_000 }).toBeGreaterThan(0);
      }
      unsubscribe?.();

      // a stored outcome, forgotten: the next claim runs again
      const done = recordId('u1', procedure(), randomUUID());
      await completed(store, done, '"r"', 'completed');
      expect(await admin.forget({ id: done, state: 'completed', token: `t-${done}` })).toBe(true);
      expect((await store.claim({ id: done, fingerprint: 'fp', token: 'c', lockTtl: 10_000 })).state).toBe('acquired');
    });

    it('keeps a claim renewed since the operator read it (it expires later than the expiry given)', async () => {
      const { store } = await create();
      const admin = adminOf(store);
      const id = recordId('u1', procedure(), randomUUID());
      await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 10_000 });
      const seen = await admin.inspect({ id });
      expect(await store.extend({ id, token: 'a', lockTtl: 20_000, fingerprint: 'fp' })).toBe(true);
      expect(await admin.forget({ id, state: 'in_progress', token: 'a', expiresAt: seen.expiresAt! })).toBe(false);
      expect((await admin.inspect({ id })).state).toBe('in_progress');
      const renewed = await admin.inspect({ id });
      expect(await admin.forget({ id, state: 'in_progress', token: 'a', expiresAt: renewed.expiresAt! })).toBe(true);
      expect((await admin.inspect({ id })).state).toBe('absent');
    });

    it('forgets steps only when asked: with the record, or alone', async () => {
      const { store } = await create();
      if (store.saveStep === undefined) return;
      const admin = adminOf(store);
      const steps = [{ name: 'reserve', body: '1' }];

      const kept = recordId('u1', procedure(), randomUUID());
      await claimWithSteps(store, kept, { steps });
      expect(await admin.forget({ id: kept, state: 'in_progress', token: 'a' })).toBe(true);
      expect(await store.claim({ id: kept, fingerprint: 'fp', token: 'b', lockTtl: 10_000 })).toMatchObject({
        state: 'acquired',
        steps: { steps: [{ name: 'reserve', body: '1' }] },
      });

      const cleared = recordId('u1', procedure(), randomUUID());
      await claimWithSteps(store, cleared, { steps });
      expect(await admin.forget({ id: cleared, state: 'in_progress', token: 'a', steps: true })).toBe(true);
      expect(await admin.inspect({ id: cleared })).toMatchObject({ state: 'absent', steps: [] });

      const alone = recordId('u1', procedure(), randomUUID());
      await claimWithSteps(store, alone, { steps });
      await store.release({ id: alone, token: 'a' });
      expect(await admin.forget({ id: alone, state: 'absent' })).toBe(false);
      expect(await admin.forget({ id: alone, state: 'absent', steps: true })).toBe(true);
      expect(await admin.inspect({ id: alone })).toMatchObject({ state: 'absent', steps: [] });
      expect(await admin.forget({ id: alone, state: 'absent', steps: true })).toBe(false);
    });
  });
}
