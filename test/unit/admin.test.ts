import { describe, expect, it } from 'vitest';
import { TOO_LARGE_BODY, UNREPLAYABLE_BODY } from '../../src/core/outcome.js';
import {
  IdempotencyConfigError,
  type IdempotencyEvent,
  type IdempotencyStore,
  idempotencyAdmin,
  memoryStore,
  recordId,
} from '../../src/core.js';
import { claimWithSteps } from '../helpers/records.js';

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

  it('tells a live claim (renewed less than half a lease ago) from one whose holder stopped renewing', async () => {
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

    it('forgets a stored outcome only with outcome and confirm, as a forgotten event with its state', async () => {
      const { admin, store, events } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      await store.complete({ id, fingerprint: 'fp', token: 't', state: 'failed', body: '{"e":1}', ttl: 60_000 });
      const refused = await admin.release(ref, { confirm: true });
      expect(refused).toMatchObject({ done: false, reason: 'outcome' });
      if (refused.done) throw new Error('forgotten without outcome');
      expect(refused.message).toMatch(/holds a stored error\. Forgetting this outcome makes the next retry/);
      expect(refused.message).toMatch(/run the operation again instead of replaying it\. Pass outcome/);
      expect(await admin.release(ref, { outcome: true })).toMatchObject({ done: false, reason: 'unconfirmed' });
      expect(events).toEqual([]);
      expect(await admin.release(ref, { confirm: true, outcome: true })).toMatchObject({
        done: true,
        record: { state: 'failed' },
      });
      expect(events).toEqual([
        expect.objectContaining({ result: 'forgotten', reason: 'operator', state: 'failed', store: 'memory' }),
      ]);
      expect((await store.claim({ id, fingerprint: 'fp', token: 't2', lockTtl: 3_000 })).state).toBe('acquired');
    });

    it('a claim that completed after the dry run is not forgotten by the confirm meant for the claim', async () => {
      const { admin, store, events, advance } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      advance(2_000);
      expect(await admin.release(ref)).toMatchObject({
        done: false,
        reason: 'unconfirmed',
        record: { state: 'in_progress' },
      });
      await store.complete({ id, fingerprint: 'fp', token: 't', state: 'completed', body: '"charged"', ttl: 60_000 });
      expect(await admin.release(ref, { confirm: true })).toMatchObject({ done: false, reason: 'outcome' });
      expect(await admin.inspect(ref)).toMatchObject({ state: 'completed' });
      expect(events).toEqual([]);
    });

    it('with token: only the attempt the operator inspected', async () => {
      const { admin, store, advance } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 'first', lockTtl: 3_000 });
      advance(2_000);
      const refused = await admin.release(ref, { confirm: true, token: 'other' });
      expect(refused).toMatchObject({ done: false, reason: 'changed' });
      if (refused.done) throw new Error('released another attempt');
      expect(refused.message).toMatch(/carries the token first, not other/);
      expect(await admin.release(ref, { confirm: true, token: 'first' })).toMatchObject({ done: true });
    });

    it('keeps a claim whose holder renewed it between the read and the delete, unless forced', async () => {
      const { store, advance } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      advance(2_000);
      // the paused holder comes back right after the operator's read, and renews
      const renewing: IdempotencyStore = {
        ...store,
        admin: {
          ...store.admin,
          async inspect(input) {
            const info = await store.admin.inspect(input);
            await store.extend({ id, token: 't', lockTtl: 3_000, fingerprint: 'fp' });
            return info;
          },
        },
      };
      const admin = idempotencyAdmin({ store: renewing });
      expect(await admin.release(ref, { confirm: true })).toMatchObject({ done: false, reason: 'changed' });
      expect((await store.admin.inspect({ id })).state).toBe('in_progress');
      expect(await admin.release(ref, { force: true })).toMatchObject({ done: true });
    });

    it('tells a marker (the operation ran, its outcome could not be kept) from a stored error', async () => {
      const { admin, store } = setup();
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      await store.complete({
        id,
        fingerprint: 'fp',
        token: 't',
        state: 'failed',
        body: UNREPLAYABLE_BODY,
        ttl: 60_000,
      });
      const record = await admin.inspect(ref);
      expect(record).toMatchObject({ state: 'failed', marker: 'unreplayable', bytes: UNREPLAYABLE_BODY.length });
      expect(record.body).toBeUndefined();
      expect((await admin.inspect(ref, { body: true })).body).toBe(UNREPLAYABLE_BODY);
      const refused = await admin.release(ref, { confirm: true });
      if (refused.done) throw new Error('forgotten without outcome');
      expect(refused.message).toMatch(/The operation ran: its outcome could not be kept/);

      const other = { ...ref, key: 'k2' };
      const otherId = recordId(other.scope, other.procedure, other.key);
      await store.claim({ id: otherId, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      await store.complete({
        id: otherId,
        fingerprint: 'fp',
        token: 't',
        state: 'failed',
        body: TOO_LARGE_BODY,
        ttl: 60_000,
      });
      expect(await admin.inspect(other)).toMatchObject({ marker: 'response_too_large' });
      // an error of a marker's size that is not one
      const plain = { ...ref, key: 'k3' };
      const plainId = recordId(plain.scope, plain.procedure, plain.key);
      await store.claim({ id: plainId, fingerprint: 'fp', token: 't', lockTtl: 3_000 });
      await store.complete({
        id: plainId,
        fingerprint: 'fp',
        token: 't',
        state: 'failed',
        body: 'x'.repeat(UNREPLAYABLE_BODY.length),
        ttl: 60_000,
      });
      const notMarker = await admin.inspect(plain);
      expect(notMarker.marker).toBeUndefined();
      expect(notMarker.body).toBeUndefined();
    });

    it('deletes the steps left by a released claim only with steps', async () => {
      const { admin, store, events } = setup();
      await claimWithSteps(store, id, { token: 't', lockTtl: 3_000, steps: [{ name: 'reserve', body: '1' }] });
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
    // lockTtl 600 s, claimed 121 s ago: less than half a lease ago, as a renewing holder keeps it
    expect(stuck.records[0]).toMatchObject({ procedure: 'pay', live: true, state: 'in_progress' });
    // examined: the three claims in progress, the young one too; not the completed record
    expect(stuck).toMatchObject({ complete: true, examined: 3 });
    expect((await admin.stuck({ olderThan: 30_000, procedure: 'pay' })).records.map((r) => r.token)).toEqual(['old']);
    // max bounds the records read: u:pay:done and u:pay:new (the ids' order), one claim among them
    const bounded = await admin.stuck({ olderThan: 0, max: 2 });
    expect(bounded).toMatchObject({ complete: false, examined: 1 });
    expect(bounded.records.map((r) => r.token)).toEqual(['new']);
  });

  it('max bounds the records read, also when the pages examine none (a Redis shared with other keys)', async () => {
    const { admin, store } = setup();
    for (let i = 0; i < 10; i++) {
      const id = recordId('u', 'pay', `k${i}`);
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 60_000 });
      await store.complete({ id, fingerprint: 'fp', token: 't', state: 'completed', body: '', ttl: 60_000 });
    }
    // pages of 2: stopped after 5 records read, none of them a claim
    expect(await admin.stuck({ olderThan: 0, max: 5 })).toMatchObject({ records: [], examined: 0, complete: false });
    expect(await admin.stuck({ olderThan: 0 })).toMatchObject({ records: [], examined: 0, complete: true });
  });

  it('refuses a max or pageSize that is not a whole number from 1, saying which', async () => {
    const { admin, store } = setup();
    for (const max of [0, -1, 1.5])
      await expect(admin.stats({ max })).rejects.toThrow(
        /idempotencyAdmin\.stats: max must be a whole number >= 1, got the number/,
      );
    await expect(admin.stuck({ olderThan: 0, max: 0 })).rejects.toThrow(/idempotencyAdmin\.stuck: max must be/);
    expect(() => idempotencyAdmin({ store, pageSize: 0 })).toThrow(
      /idempotencyAdmin: pageSize must be a whole number >= 1/,
    );
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
