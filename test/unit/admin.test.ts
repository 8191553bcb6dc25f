import { describe, expect, it } from 'vitest';
import {
  IdempotencyConfigError,
  type IdempotencyEvent,
  type IdempotencyStore,
  idempotencyAdmin,
  memoryStore,
  recordId,
} from '../../src/core.js';

// idempotencyAdmin's guards, events and scans, on the memory store with a fake clock (every store's
// own side, StoreAdmin, is in the shared contract: test/contract/admin-contract.ts).
function setup() {
  let time = 1_700_000_000_000;
  const store = memoryStore({ now: () => time });
  const events: IdempotencyEvent[] = [];
  const admin = idempotencyAdmin({ store, onEvent: (e) => events.push(e), pageSize: 2 });
  return {
    store,
    admin,
    events,
    advance: (ms: number) => {
      time += ms;
    },
  };
}
const ref = { scope: 'u1', procedure: 'payments.charge', key: 'k1' };
const id = recordId(ref.scope, ref.procedure, ref.key);

describe('idempotencyAdmin', () => {
  it('refuses a store without the operator API, saying what to pass', () => {
    const store = { ...memoryStore(), admin: undefined } as IdempotencyStore;
    expect(() => idempotencyAdmin({ store })).toThrow(IdempotencyConfigError);
    expect(() => idempotencyAdmin({ store })).toThrow(/has no `admin`.*memoryStore, redisStore or drizzleStore/);
  });

  it('names a record as the layer does, or by its id', async () => {
    const { admin, store } = setup();
    expect(admin.recordId(ref)).toBe(id);
    expect(admin.recordId({ id })).toBe(id);
    expect(admin.recordId({ procedure: 'p', key: 'a:b' })).toBe(recordId(undefined, 'p', 'a:b'));
    await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
    expect(await admin.inspect(ref)).toMatchObject({ id, procedure: 'payments.charge', state: 'in_progress' });
  });

  it('tells a live claim (renewed within the last third of its lease) from one whose holder stopped renewing', async () => {
    const { admin, store, advance } = setup();
    await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
    const fresh = await admin.inspect(ref);
    expect(fresh).toMatchObject({ live: true, renewedAt: fresh.time, lockTtl: 3_000 });
    // renewed every third of the lease, read as live for half of it: room for a renewal on its way
    advance(1_499);
    expect((await admin.inspect(ref)).live).toBe(true);
    advance(1);
    expect((await admin.inspect(ref)).live).toBe(false);
    await store.extend({ id, token: 't', lockTtl: 3_000, fingerprint: 'fp' });
    const renewed = await admin.inspect(ref);
    expect(renewed).toMatchObject({ live: true, renewedAt: renewed.time });
    expect(renewed.claimedAt).toBe(fresh.claimedAt);
  });

  describe('release', () => {
    it('refuses an absent record', async () => {
      const { admin, events } = setup();
      const result = await admin.release(ref, { force: true });
      expect(result).toMatchObject({ done: false, reason: 'absent', record: { state: 'absent' } });
      expect(events).toEqual([]);
    });

    it('refuses a live claim without force, naming the risk; releases it with force, as an operator_forced release', async () => {
      const { admin, store, events } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      const refused = await admin.release(ref, { confirm: true });
      expect(refused).toMatchObject({ done: false, reason: 'live' });
      if (refused.done) throw new Error('unreachable');
      expect(refused.message).toMatch(/renewed it 0 ms ago \(lease 3000 ms\)/);
      expect(refused.message).toMatch(/the operation runs twice/);
      expect(refused.message).toMatch(/Pass force/);
      expect((await admin.inspect(ref)).state).toBe('in_progress');
      expect(events).toEqual([]);

      const released = await admin.release(ref, { force: true });
      expect(released).toMatchObject({ done: true, record: { state: 'in_progress', token: 't' } });
      expect((await admin.inspect(ref)).state).toBe('absent');
      expect(events).toEqual([
        expect.objectContaining({
          result: 'released',
          reason: 'operator_forced',
          name: 'payments.charge',
          store: 'memory',
          keyHash: expect.stringMatching(/^[0-9a-f]{16}$/),
        }),
      ]);
      // the holder is fenced out: its completion cannot overwrite a new attempt's record
      expect((await store.claim({ id, fingerprint: 'fp', token: 't2', lockTtl: 3_000 })).state).toBe('acquired');
      expect(await store.complete({ id, fingerprint: 'fp', token: 't', state: 'completed', body: 'x', ttl: 1 })).toBe(
        'held',
      );
    });

    it('releases a claim whose holder stopped renewing only when confirmed: a dry run first', async () => {
      const { admin, store, events, advance } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      advance(2_000);
      const dry = await admin.release(ref);
      expect(dry).toMatchObject({ done: false, reason: 'unconfirmed', record: { live: false } });
      if (dry.done) throw new Error('unreachable');
      expect(dry.message).toMatch(/Nothing was deleted: Releasing this claim lets the next retry run the operation/);
      expect((await admin.inspect(ref)).state).toBe('in_progress');
      expect(await admin.release(ref, { confirm: true })).toMatchObject({ done: true });
      expect(events).toEqual([expect.objectContaining({ result: 'released', reason: 'operator' })]);
    });

    it('forgets a stored outcome when confirmed, as a forgotten event with its state', async () => {
      const { admin, store, events } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      await store.complete({ id, fingerprint: 'fp', token: 't', state: 'failed', body: '{"e":1}', ttl: 60_000 });
      const dry = await admin.release(ref);
      if (dry.done) throw new Error('a dry run deleted');
      expect(dry.message).toMatch(/run the operation again instead of replaying it/);
      expect(await admin.release(ref, { confirm: true })).toMatchObject({ done: true, record: { state: 'failed' } });
      expect(events).toEqual([
        expect.objectContaining({ result: 'forgotten', reason: 'operator', state: 'failed', store: 'memory' }),
      ]);
      expect((await store.claim({ id, fingerprint: 'fp', token: 't2', lockTtl: 3_000 })).state).toBe('acquired');
    });

    it('deletes the steps left by a released claim only with steps', async () => {
      const { admin, store, events } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      await store.saveStep!({
        id,
        token: 't',
        fingerprint: 'fp',
        index: 0,
        name: 'reserve',
        body: '1',
        ttl: 60_000,
        lockTtl: 3_000,
      });
      await store.release({ id, token: 't' });
      expect(await admin.release(ref, { confirm: true })).toMatchObject({ done: false, reason: 'absent' });
      expect(await admin.release(ref, { confirm: true, steps: true })).toMatchObject({ done: true });
      expect((await admin.inspect(ref)).steps).toEqual([]);
      expect(events).toEqual([expect.objectContaining({ result: 'forgotten', reason: 'operator' })]);
    });

    it('deletes nothing when the record changed between the read and the delete', async () => {
      const { store, advance } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      advance(2_000);
      // the holder completes right after the operator's read
      const racing: IdempotencyStore = {
        ...store,
        admin: {
          ...store.admin,
          async inspect(input) {
            const info = await store.admin.inspect(input);
            await store.complete({ id, fingerprint: 'fp', token: 't', state: 'completed', body: '1', ttl: 60_000 });
            return info;
          },
        },
      };
      const events: IdempotencyEvent[] = [];
      const result = await idempotencyAdmin({ store: racing, onEvent: (e) => events.push(e) }).release(ref, {
        confirm: true,
      });
      expect(result).toMatchObject({ done: false, reason: 'changed' });
      expect(await store.admin.inspect({ id })).toMatchObject({ state: 'completed', bytes: 1 });
      expect(events).toEqual([]);
    });
  });

  it('stuck: claims older than the given age, oldest first, page by page', async () => {
    const { admin, store, advance } = setup();
    const make = (procedure: string, key: string, lockTtl = 600_000) =>
      store.claim({ id: recordId('u', procedure, key), fingerprint: 'fp', token: key, lockTtl });
    await make('pay', 'old');
    advance(60_000);
    await make('refund', 'middle');
    advance(60_000);
    await make('pay', 'new');
    await store.claim({ id: recordId('u', 'pay', 'done'), fingerprint: 'fp', token: 'd', lockTtl: 1_000 });
    await store.complete({
      id: recordId('u', 'pay', 'done'),
      fingerprint: 'fp',
      token: 'd',
      state: 'completed',
      body: '',
      ttl: 60_000,
    });
    advance(1_000);

    const stuck = await admin.stuck({ olderThan: 30_000 });
    expect(stuck.records.map((r) => r.token)).toEqual(['old', 'middle']);
    // lockTtl 600 s, claimed 121 s ago: within the first third of its lease, as a renewing holder keeps it
    expect(stuck.records[0]).toMatchObject({ procedure: 'pay', live: true, state: 'in_progress' });
    expect(stuck).toMatchObject({ complete: true, examined: 4 });
    expect((await admin.stuck({ olderThan: 30_000, procedure: 'pay' })).records.map((r) => r.token)).toEqual(['old']);
    const bounded = await admin.stuck({ olderThan: 0, max: 2 });
    expect(bounded).toMatchObject({ complete: false, examined: 2 });
  });

  it('stats: live records by state and procedure', async () => {
    const { admin, store } = setup();
    const claim = (procedure: string, key: string) =>
      store.claim({ id: recordId('u', procedure, key), fingerprint: 'fp', token: key, lockTtl: 60_000 });
    const finish = (procedure: string, key: string, state: 'completed' | 'failed') =>
      store.complete({
        id: recordId('u', procedure, key),
        fingerprint: 'fp',
        token: key,
        state,
        body: '',
        ttl: 60_000,
      });
    await claim('pay', 'a');
    await claim('pay', 'b');
    await finish('pay', 'b', 'completed');
    await claim('refund', 'c');
    await finish('refund', 'c', 'failed');
    await claim('refund', 'd');
    expect(await admin.stats()).toEqual({
      byState: { in_progress: 2, completed: 1, failed: 1 },
      byProcedure: {
        pay: { in_progress: 1, completed: 1, failed: 0 },
        refund: { in_progress: 1, completed: 0, failed: 1 },
      },
      examined: 4,
      complete: true,
    });
    expect(await admin.stats({ procedure: 'refund' })).toMatchObject({
      byState: { in_progress: 1, completed: 0, failed: 1 },
    });
    expect(await admin.stats({ max: 3 })).toMatchObject({ examined: 3, complete: false });
  });
});
