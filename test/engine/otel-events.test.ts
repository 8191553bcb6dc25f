/**
 * What the engine's events carry for telemetry: the store's name, the size of
 * a replay, and successful lease renewals.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createIdempotencyEngine, type IdempotencyEvent, type IdempotencyStore, memoryStore } from '../../src/index.js';
import { liveStores } from '../helpers/stores.js';
import { gate } from '../helpers/trpc.js';

const live = liveStores('otel-events', ['memory', 'redis', 'PGlite']);

function recorder(
  store: IdempotencyStore,
  { onEvent, ...options }: { lockTtl?: number; onEvent?: (events: IdempotencyEvent[]) => void } = {},
) {
  const events: IdempotencyEvent[] = [];
  const engine = createIdempotencyEngine({
    store,
    ...options,
    onEvent: (e) => {
      events.push(e);
      onEvent?.(events);
    },
  });
  return { engine, events };
}

describe('events name their store', () => {
  it('memory, redis, postgresql, and custom for a store without a name', async () => {
    const memory = memoryStore();
    const bare: IdempotencyStore = {
      claim: (input) => memory.claim(input),
      complete: (input) => memory.complete(input),
      release: (input) => memory.release(input),
      extend: (input) => memory.extend(input),
    };
    const stores: [IdempotencyStore, string][] = [
      [live.store('memory'), 'memory'],
      [live.store('redis'), 'redis'],
      [live.store('PGlite'), 'postgresql'],
      [bare, 'custom'],
    ];
    for (const [store, name] of stores) {
      const { engine, events } = recorder(store);
      const input = { key: randomUUID(), name: 'pay', payload: { amount: 1 } };
      await engine.run(input, async () => 'ok');
      await engine.run(input, async () => 'ok');
      expect(events.map((e) => [e.result, e.store])).toEqual([
        ['acquired', name],
        ['completed', name],
        ['replayed', name],
      ]);
    }
    expect(memory.name).toBe('memory');
    expect(bare.name).toBeUndefined();
  });

  it("fills in the store on an adapter's event without changing the caller's object", () => {
    const { engine, events } = recorder(live.store('redis'));
    const event: IdempotencyEvent = { result: 'rejected', name: 'pay', durationMs: 0, reason: 'key_missing' };
    engine.emit(event);
    expect(events).toEqual([{ result: 'rejected', name: 'pay', durationMs: 0, reason: 'key_missing', store: 'redis' }]);
    expect(event.store).toBeUndefined();
    engine.emit({ ...event, store: 'sharded-redis' });
    expect(events[1]!.store).toBe('sharded-redis');
  });
});

describe('replayed events carry the size of the replay', () => {
  it('in UTF-8 bytes, not characters', async () => {
    const { engine, events } = recorder(memoryStore());
    const value = { note: 'reçu € 🧾', lines: ['é', 'x'] };
    const input = { key: randomUUID(), name: 'receipt', payload: {} };
    await engine.run(input, async () => value);
    await expect(engine.run(input, async () => value)).resolves.toEqual({ value, replayed: true });
    const replayed = events.filter((e) => e.result === 'replayed');
    expect(replayed).toHaveLength(1);
    const json = JSON.stringify(value); // the default codec outside tRPC
    expect(replayed[0]!.bytes).toBe(Buffer.byteLength(json));
    expect(replayed[0]!.bytes).toBeGreaterThan(json.length);
    expect(replayed[0]!.state).toBe('completed');
    expect(events.filter((e) => e.result !== 'replayed').every((e) => e.bytes === undefined)).toBe(true);
  });

  it('0 bytes and reason unreplayable for an outcome that ran but could not be stored', async () => {
    const { engine, events } = recorder(memoryStore());
    const input = { key: randomUUID(), name: 'big', payload: {} };
    await engine.run(input, async () => ({ id: 1n })); // JSON cannot store a BigInt
    await expect(engine.run(input, async () => ({ id: 2n }))).rejects.toMatchObject({ reason: 'outcome_unreplayable' });
    expect(events.find((e) => e.result === 'replayed')).toMatchObject({
      bytes: 0,
      reason: 'unreplayable',
      state: 'failed',
    });
  });
});

describe('renewed events', () => {
  it('one per successful renewal while the operation runs, none for a quick one', async () => {
    const redis = live.store('redis');
    let extended = 0;
    const fourRenewed = gate();
    const { engine, events } = recorder(
      {
        ...redis,
        extend: async (input) => {
          const renewed = await redis.extend(input);
          if (renewed) extended++;
          return renewed;
        },
      },
      {
        lockTtl: 120,
        onEvent: (all) => {
          if (all.filter((e) => e.result === 'renewed').length === 4) fourRenewed.open();
        },
      },
    );
    await engine.run({ key: randomUUID(), name: 'quick', payload: {} }, async () => 'ok');
    expect(events.map((e) => e.result)).toEqual(['acquired', 'completed']);

    events.length = 0;
    // Renewed every lockTtl / 3 = 40 ms, in real time (Redis measures the 120 ms claim), until the fourth event;
    // the operation then ends at once, before another renewal is sent: each one sent was answered.
    await engine.run({ key: randomUUID(), name: 'slow', payload: {} }, () => fourRenewed.opened.then(() => 'ok'));
    const renewed = events.filter((e) => e.result === 'renewed');
    expect(renewed).toHaveLength(4);
    expect(extended, 'renewals that succeeded').toBe(4);
    const keyHash = events[0]!.keyHash;
    for (const e of renewed) {
      expect(e).toMatchObject({ name: 'slow', store: 'redis', keyHash });
      expect(e.durationMs).toBeGreaterThan(0);
      expect(e.durationMs).toBeLessThan(1_000); // storeTimeout
    }
    expect(events[0]!.result).toBe('acquired');
    expect(events.filter((e) => e.result === 'completed')).toHaveLength(1);
  });
});
