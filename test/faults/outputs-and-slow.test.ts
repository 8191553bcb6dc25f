/**
 * Oversized outputs, at and around `maxResponseBytes` (a property over
 * unicode outputs, and the 1 MiB default byte for byte over HTTP), and slow
 * procedures near `lockTtl` on a Redis whose answers are delayed, with
 * duplicates arriving at another instance all along.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC } from '@trpc/server';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { DEFAULT_POLICY } from '../../src/core.js';
import {
  createIdempotencyEngine,
  type IdempotencyEvent,
  type IdempotencyMeta,
  idempotencyErrorFormatter,
  withIdempotency,
} from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { type PayApp, pay, startPayApp } from '../fixtures/pay-app.js';
import { startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import { sleep } from '../helpers/redis.js';
import { type PrivateRedis, startPrivateRedis } from '../helpers/redis-server.js';
import { startServer, type TestServer } from '../helpers/trpc.js';

let redisServer: PrivateRedis;
let redis: Redis;
const closers: (() => unknown)[] = [];
let cases = 0;
const outcomes = { stored: 0, refused: 0 };

beforeAll(async () => {
  redisServer = await startPrivateRedis();
  redis = new Redis({ port: redisServer.port });
});
afterAll(async () => {
  console.info(
    `[outputs] ${cases} property cases: ${outcomes.stored} stored and replayed, ${outcomes.refused} too large (answered once, then refused)`,
  );
  for (const close of closers.reverse()) await close();
  redis?.disconnect();
  await redisServer?.stop();
});

describe('oversized outputs', () => {
  it('property: an output is stored and replayed exactly when its UTF-8 size fits maxResponseBytes; else its caller gets it and retries are refused, never run again', async () => {
    const MAX = 2_000;
    const engine = createIdempotencyEngine({
      store: redisStore({ client: redis, prefix: 'out:' }),
      maxResponseBytes: MAX,
    });
    const threeByte = fc.integer({ min: 0x800, max: 0xd7ff }).map((c) => String.fromCharCode(c));
    const outputs = fc.oneof(
      fc.string({ unit: 'grapheme-ascii', minLength: 1_990, maxLength: 2_010 }),
      fc.string({ unit: threeByte, minLength: 660, maxLength: 670 }),
      fc.string({ unit: 'binary', minLength: 300, maxLength: 1_100 }),
      fc.string({ unit: 'grapheme', minLength: 100, maxLength: 700 }),
    );
    await fc.assert(
      fc.asyncProperty(outputs, async (output) => {
        cases++;
        const key = randomUUID();
        let runs = 0;
        const call = () =>
          engine.run({ key, name: 'out', payload: {} }, async () => {
            runs++;
            return { output };
          });
        const fits = Buffer.byteLength(JSON.stringify({ output })) <= MAX;
        outcomes[fits ? 'stored' : 'refused']++;
        if (fits) {
          expect(await call()).toEqual({ value: { output }, replayed: false });
          expect(await call()).toEqual({ value: { output }, replayed: true });
          expect(runs).toBe(1);
        } else {
          // it ran: its caller gets the result; it was not stored, so a retry is refused rather than run again
          expect(await call()).toEqual({ value: { output }, replayed: false });
          await expect(call()).rejects.toMatchObject({ reason: 'response_too_large' });
          await expect(call()).rejects.toMatchObject({ reason: 'response_too_large' });
          expect(runs).toBe(1);
        }
      }),
      { numRuns: 200 },
    );
    // both sides of the limit were tried
    expect(outcomes.stored).toBeGreaterThan(20);
    expect(outcomes.refused).toBeGreaterThan(20);
  });

  describe('over HTTP, with the default 1 MiB', () => {
    let server: TestServer;
    const events: IdempotencyEvent[] = [];
    let executions = 0;
    beforeAll(async () => {
      const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
      const idempotent = withIdempotency(t.procedure, {
        scope: 'global',
        store: redisStore({ client: redis, prefix: 'big:' }),
        onEvent: (e) => events.push(e),
      });
      const router = t.router({
        report: idempotent.input(z.object({ size: z.number().int() })).mutation(({ input }) => {
          executions++;
          return 'x'.repeat(input.size);
        }),
        health: t.procedure.query(() => 'ok'),
      });
      server = await startServer(router);
      closers.push(() => server.close());
    });
    const report = async (key: string, size: number) => {
      const response = await fetch(`${server.url}/report`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ size }),
      });
      return {
        status: response.status,
        replayed: response.headers.get('idempotent-replayed'),
        text: await response.text(),
      };
    };

    it('an output of exactly 1 MiB is stored and replayed byte for byte; one byte more reaches its caller, and its retry is refused', async () => {
      const exact = DEFAULT_POLICY.maxResponseBytes - 2; // the stored form is the JSON string, quotes included
      const key = randomUUID();
      const first = await report(key, exact);
      expect(first.status).toBe(200);
      const replay = await report(key, exact);
      expect(replay).toMatchObject({ status: 200, replayed: 'true' });
      expect(replay.text).toBe(first.text);

      const over = randomUUID();
      const before = executions;
      const answered = await report(over, exact + 1);
      expect(answered).toMatchObject({ status: 200, replayed: null });
      expect(JSON.parse(answered.text).result.data).toHaveLength(exact + 1);
      expect(events).toContainEqual(expect.objectContaining({ result: 'completed', reason: 'response_too_large' }));
      const refused = await report(over, exact + 1);
      expect(refused.status).toBe(500);
      expect(JSON.parse(refused.text).error.data.idempotency.reason).toBe('response_too_large');
      expect(executions - before).toBe(1);
    });

    it('a 20 MB output: it reaches its caller, its retry gets 500 response_too_large, the server stays healthy', async () => {
      const key = randomUUID();
      const answered = await report(key, 20_000_000);
      expect(answered.status).toBe(200);
      expect(JSON.parse(answered.text).result.data).toHaveLength(20_000_000);
      const refused = await report(key, 20_000_000);
      expect(refused.status).toBe(500);
      expect(JSON.parse(refused.text).error.data.idempotency.reason).toBe('response_too_large');
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
    });
  });
});

describe('slow procedures near lockTtl, on a Redis answering 50 ms late', () => {
  const LOCK_TTL = 900;
  let proxy: TcpProxy;
  const apps: PayApp[] = [];
  beforeAll(async () => {
    proxy = await startTcpProxy({ targetPort: redisServer.port, delayMs: 50 });
    closers.push(() => proxy.close());
    for (let i = 0; i < 2; i++) {
      const client = new Redis({ port: proxy.port });
      closers.push(() => client.disconnect());
      const app = await startPayApp({ store: redisStore({ client, prefix: 'slow:' }), lockTtl: LOCK_TTL });
      closers.push(() => app.close());
      apps.push(app);
    }
  });

  it('procedures of 0.5 to 3 times lockTtl run once while duplicates hit both instances; the claim is never lost', async () => {
    const durations = [0.5, 0.9, 1, 1.1, 2, 3].map((f) => Math.round(f * LOCK_TTL));
    await Promise.all(
      durations.map(async (holdMs) => {
        const key = randomUUID();
        let settled = false;
        const first = pay(apps[0]!.url, key, { amount: holdMs, holdMs }).finally(() => {
          settled = true;
        });
        await expect.poll(() => apps[0]!.runs(key)).toBe(1);
        const duplicates: { status: number; replayed: boolean }[] = [];
        while (!settled) {
          duplicates.push(await pay(apps[duplicates.length % 2]!.url, key, { amount: holdMs }));
          await sleep(60);
        }
        const answer = await first;
        expect(answer).toMatchObject({ status: 200, replayed: false });
        // before the first finished: 409; after: a replay. Never a second run.
        for (const d of duplicates) expect(d.status === 409 || (d.status === 200 && d.replayed)).toBe(true);
        expect(duplicates.filter((d) => d.status === 409).length).toBeGreaterThan(0);
        expect(await pay(apps[1]!.url, key, { amount: holdMs })).toMatchObject({
          status: 200,
          replayed: true,
          chargeId: answer.chargeId,
        });
        expect(apps[0]!.runs(key) + apps[1]!.runs(key)).toBe(1);
      }),
    );
    expect(
      apps.flatMap((a) => a.events).filter((e) => e.result === 'lease_lost' || e.result === 'store_error'),
    ).toEqual([]);
  });
});
