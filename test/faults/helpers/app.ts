import { randomUUID } from 'node:crypto';
import { initTRPC } from '@trpc/server';
import { Redis } from 'ioredis';
import { z } from 'zod';
import {
  idempotencyErrorFormatter,
  type IdempotencyEvent,
  type IdempotencyMeta,
  type IdempotencyStore,
  withIdempotency,
  type WithIdempotencyOptions,
} from '../../../src/index.js';
import { redisStore } from '../../../src/redis.js';
import { startServer } from '../../helpers/trpc.js';

export type FaultAppOptions = Omit<WithIdempotencyOptions<object>, 'store' | 'onEvent'>;

export interface Execution {
  key: string;
  chargeId: string;
  at: number;
}

/**
 * An application instance in this process: a real tRPC HTTP server whose
 * `pay` mutation is idempotent on `store`. It records every execution (with
 * the key it ran for) and every event. `holdMs` is test plumbing, left out
 * of the fingerprint; `hold()` makes the next executions wait for a gate.
 */
export async function startFaultApp(store: IdempotencyStore, options: FaultAppOptions = {}) {
  const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
  const events: IdempotencyEvent[] = [];
  const executions: Execution[] = [];
  let gate: Promise<void> | undefined;
  const idempotent = withIdempotency(t.procedure, { ...options, store, onEvent: (event) => events.push(event) });

  const router = t.router({
    pay: idempotent
      .meta({ idempotency: { excludeFields: ['holdMs'] } })
      .input(z.object({ amount: z.number().int().positive(), holdMs: z.number().default(0) }))
      .mutation(async ({ ctx, input }) => {
        const key = String((ctx as { req: { headers: Record<string, unknown> } }).req.headers['idempotency-key']);
        const chargeId = randomUUID();
        executions.push({ key, chargeId, at: Date.now() });
        if (gate !== undefined) await gate;
        if (input.holdMs > 0) await new Promise((resolve) => setTimeout(resolve, input.holdMs));
        return { chargeId, amount: input.amount };
      }),
    health: t.procedure.query(() => 'ok'),
  });
  const server = await startServer(router);
  return {
    url: server.url,
    router,
    events,
    executions,
    close: () => server.close(),
    /** Executions of one key. */
    runs: (key: string) => executions.filter((e) => e.key === key).length,
    /** Executions started from now on wait until `until` settles (undefined: no wait). */
    hold(until: Promise<void> | undefined) {
      gate = until;
    },
  };
}

export type FaultApp = Awaited<ReturnType<typeof startFaultApp>>;

export interface CallResult {
  /** The HTTP status, or 0 when the request failed at the network level. */
  status: number;
  chargeId?: string;
  replayed: boolean;
  reason?: string;
  message?: string;
  /** Milliseconds from sending to the answer. */
  tookMs: number;
}

/** One `pay` mutation over HTTP, as a client without a library would send it. */
export async function pay(
  url: string,
  key: string | undefined,
  input: { amount: number; holdMs?: number },
  opts: { headers?: Record<string, string>; timeoutMs?: number; path?: string } = {},
): Promise<CallResult> {
  const started = performance.now();
  try {
    const response = await fetch(`${url}/${opts.path ?? 'pay'}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }), ...opts.headers },
      body: JSON.stringify(input),
      signal: AbortSignal.timeout(opts.timeoutMs ?? 20_000),
    });
    const body = (await response.json()) as {
      result?: { data: { chargeId: string } };
      error?: { message: string; data?: { idempotency?: { reason: string } } };
    };
    return {
      status: response.status,
      ...(body.result === undefined ? {} : { chargeId: body.result.data.chargeId }),
      replayed: response.headers.get('idempotent-replayed') === 'true',
      ...(body.error?.data?.idempotency === undefined ? {} : { reason: body.error.data.idempotency.reason }),
      ...(body.error === undefined ? {} : { message: body.error.message }),
      tookMs: performance.now() - started,
    };
  } catch {
    return { status: 0, replayed: false, tookMs: performance.now() - started };
  }
}

/** A stable amount per key, so that every duplicate of a key carries the same payload. */
export function amountOf(key: string): number {
  let h = 0;
  for (let i = 0; i < key.length; i++) h = (h * 31 + key.charCodeAt(i)) | 0;
  return 1 + (Math.abs(h) % 100_000);
}

/**
 * Calls until the answer is neither 409, 503 nor a network failure (what a
 * client with a retry policy does), and says how long that took. Fails if
 * the key is still refused after `withinMs`.
 */
export async function retryUntilAnswered(call: () => Promise<CallResult>, withinMs: number): Promise<CallResult & { waitedMs: number; refusals: number[] }> {
  const started = Date.now();
  const refusals: number[] = [];
  for (;;) {
    const result = await call();
    if (result.status !== 409 && result.status !== 503 && result.status !== 0) {
      return { ...result, waitedMs: Date.now() - started, refusals };
    }
    refusals.push(result.status);
    if (Date.now() - started > withinMs) {
      throw new Error(`still refused after ${withinMs} ms: ${refusals.join(', ')}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * An app on the Redis at `port`, through an ioredis client with the defaults
 * an application has (offline queue, reconnection, re-sent commands), after
 * one call: the scripts are loaded and the engine knows Redis's clock.
 * `close` stops the app and disconnects the client.
 */
export async function startRedisFaultApp(port: number, prefix: string, options: FaultAppOptions = {}) {
  const client = new Redis({ port, host: '127.0.0.1' });
  client.on('error', () => {}); // connection errors while Redis is down are expected in these tests
  const app = await startFaultApp(redisStore({ client, prefix }), options);
  const warmUp = await pay(app.url, randomUUID(), { amount: 1 });
  if (warmUp.status !== 200) throw new Error(`the app's first call answered ${warmUp.status}`);
  return {
    ...app,
    client,
    close: async () => {
      await app.close();
      client.disconnect();
    },
  };
}
