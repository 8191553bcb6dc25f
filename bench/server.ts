/**
 * One HTTP server under load: `node --import tsx bench/server.ts <variant>`.
 * Environment: PORT, REDIS_URL (the handler's INCR, and the Redis stores),
 * PG_URL (the PostgreSQL store), MYSQL_URL (the MySQL store: a mysql2 pool of 10), SQLITE_PATH (the SQLite
 * store: a file in WAL mode, opened with better-sqlite3 as docs/sqlite.md's setup does). Prints one JSON line
 * `{"ready":port}`.
 * Variants redis-fence (`restartFence: true`, initialized) and redis-wait
 * (`waitForReplicas: { replicas: 1, timeout: 1000 }`, REDIS_URL a primary with a replica)
 * are the Redis store with its durability options.
 * BENCH_REDIS_CLIENT=node-redis: the application's Redis client is node-redis (`createClient` from
 * `redis`, connected) instead of ioredis, for the handler's INCR and the Redis store alike
 * (`npm run bench`'s baseline-node-redis and redis-node-redis servers).
 *
 * tRPC variants share one router shape and the same `pay` mutation; the
 * library is loaded from the built `dist/` (run `npm run build` first), or
 * from the build directory named by BENCH_LIB, to compare two builds.
 * BENCH_STORE_TIMEOUT: the stores' storeTimeout in ms (default the library's).
 * BENCH_PROFILE: where to write a CPU profile of the window between SIGUSR2 and SIGTERM.
 * Express variants answer the same request with the same JSON envelope.
 */

import { writeFileSync } from 'node:fs';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { initTRPC, TRPCError } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { middlewareMarker } from '@trpc/server/unstable-core-do-not-import';
import { Redis } from 'ioredis';
import { type Incr, type PayInput, parsePayInput, pay } from './lib/app.js';

const require = createRequire(import.meta.url);
const variant = process.argv[2] ?? 'baseline';
const port = Number(process.env.PORT ?? 0);
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
// BENCH_AUTO_PIPELINING=1: the application's ioredis client batches the commands issued in one tick
// into one write (ioredis's enableAutoPipelining; node-redis, which @node-idempotency uses, always does).
const redis = new Redis(redisUrl, { enableAutoPipelining: process.env.BENCH_AUTO_PIPELINING === '1' });
// BENCH_REDIS_CLIENT=node-redis: node-redis instead, for the handler and the Redis store (redis above stays idle).
const nodeRedis =
  process.env.BENCH_REDIS_CLIENT === 'node-redis'
    ? await (await import('redis')).createClient({ url: redisUrl }).connect()
    : undefined;
/** The client the handler's INCR and the Redis store use. */
const appRedis: Incr = nodeRedis ?? redis;
// Another build of the library (a directory holding index.js, redis.js, drizzle.js), to compare two builds.
const lib =
  process.env.BENCH_LIB === undefined
    ? new URL('../dist/', import.meta.url)
    : pathToFileURL(`${resolvePath(process.env.BENCH_LIB)}/`);
const libModule = (name: string) => import(new URL(name, lib).href);

interface Ctx {
  req: IncomingMessage;
  res: ServerResponse;
}

async function trpcServer(): Promise<Server> {
  const t = initTRPC.context<Ctx>().create();
  let procedure = t.procedure;

  if (['memory', 'redis', 'redis-fence', 'redis-wait', 'postgres', 'mysql', 'sqlite'].includes(variant)) {
    const { withIdempotency, memoryStore } = (await libModule('index.js')) as typeof import('../dist/index.js');
    let store: import('../dist/index.js').IdempotencyStore;
    if (variant === 'memory') {
      store = memoryStore(process.env.BENCH_MAX_ENTRIES ? { maxEntries: Number(process.env.BENCH_MAX_ENTRIES) } : {});
    } else if (variant.startsWith('redis')) {
      const { redisStore } = (await libModule('redis.js')) as typeof import('../dist/redis.js');
      if (variant === 'redis-fence') {
        // The restart fence, its marker written once as docs/durability.md says (a Redis that lost it refuses claims).
        const fenced = redisStore({ client: nodeRedis ?? redis, restartFence: true });
        await fenced.initialize();
        store = fenced;
      } else if (variant === 'redis-wait') {
        // WAIT for one replica after each batch of writes (REDIS_URL: a primary with a replica, bench/lib/replicas.ts).
        store = redisStore({ client: nodeRedis ?? redis, waitForReplicas: { replicas: 1, timeout: 1_000 } });
      } else {
        store = redisStore({ client: nodeRedis ?? redis });
      }
    } else {
      const { drizzleStore } = (await libModule('drizzle.js')) as typeof import('../dist/drizzle.js');
      if (variant === 'mysql') {
        const { drizzle } = await import('drizzle-orm/mysql2');
        const { default: mysql } = await import('mysql2/promise');
        store = drizzleStore({ db: drizzle(mysql.createPool({ uri: process.env.MYSQL_URL, connectionLimit: 10 })) });
      } else if (variant === 'sqlite') {
        // As docs/sqlite.md's setup: WAL (set in the file by bench/lib/services.ts), a 5 s busy timeout, and
        // SQLite's default synchronous (FULL): a commit is on disk when the statement returns.
        const { drizzle } = await import('drizzle-orm/better-sqlite3');
        const { default: Database } = await import('better-sqlite3');
        const sqlite = new Database(process.env.SQLITE_PATH, { timeout: 5_000, fileMustExist: true });
        sqlite.pragma('journal_mode = WAL');
        store = drizzleStore({ db: drizzle(sqlite) });
      } else {
        const { drizzle } = await import('drizzle-orm/node-postgres');
        const { default: pg } = await import('pg');
        const pool = new pg.Pool({ connectionString: process.env.PG_URL, max: 10 });
        store = drizzleStore({ db: drizzle(pool) });
      }
    }
    // BENCH_STORE_TIMEOUT: a longer storeTimeout (ms, at most 10,000) for a server under valgrind, where a
    // garbage collection on a loaded machine can outlast the default 1 s (npm run bench:instructions).
    const storeTimeout = Number(process.env.BENCH_STORE_TIMEOUT ?? 0);
    procedure = withIdempotency(t.procedure, { scope: 'global', store, ...(storeTimeout > 0 ? { storeTimeout } : {}) });
  }

  if (variant === 'redis-plain') {
    // The same engine and adapter on plain SET commands instead of the Redis store's fenced scripts:
    // what the Redis store would cost without its guarantees (bench/lib/plain-redis-store.ts).
    const { withIdempotency } = (await libModule('index.js')) as typeof import('../dist/index.js');
    const { plainRedisStore } = await import('./lib/plain-redis-store.js');
    procedure = withIdempotency(t.procedure, { scope: 'global', store: plainRedisStore(redis) });
  }

  if (variant === 'node-idempotency') {
    // @node-idempotency/core driven from a tRPC middleware, as its NestJS
    // interceptor drives it: onRequest before the handler, onResponse (awaited) after.
    const { Idempotency, IdempotencyError, IdempotencyErrorCodes } = require('@node-idempotency/core');
    const { RedisStorageAdapter } = require('@node-idempotency/storage-adapter-redis');
    const storage = new RedisStorageAdapter({ url: redisUrl });
    await storage.connect();
    const idempotency = new Idempotency(storage, { enforceIdempotency: true });
    procedure = t.procedure.use(async (opts) => {
      const { ctx, path } = opts;
      // The raw body, as its HTTP integrations fingerprint it (this middleware runs before the input parser).
      const request = {
        headers: ctx.req.headers,
        body: (await opts.getRawInput()) as Record<string, unknown>,
        path,
        method: 'POST',
      };
      let cached: { body?: unknown } | undefined;
      try {
        cached = await idempotency.onRequest(request);
      } catch (error) {
        if (error instanceof IdempotencyError) {
          const code = (error as { code?: string }).code;
          throw new TRPCError({
            code:
              code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS
                ? 'CONFLICT'
                : code === IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH
                  ? 'UNPROCESSABLE_CONTENT'
                  : 'BAD_REQUEST',
            message: (error as Error).message,
          });
        }
        throw error;
      }
      if (cached !== undefined) {
        ctx.res.setHeader('Idempotent-Replayed', 'true');
        return { marker: middlewareMarker, ok: true as const, data: cached.body };
      }
      const result = await opts.next();
      if (result.ok) await idempotency.onResponse(request, { body: result.data, additional: { statusCode: 200 } });
      return result;
    }) as unknown as typeof procedure;
  }

  let resolve = (redisClient: Incr, input: PayInput, _ctx: Ctx): Promise<unknown> => pay(redisClient, input);
  if (variant === 'no-io') {
    // The same result without the INCR: a response made without any I/O, as a replay from
    // the memory store is. Node then writes it in one writev (see bench/RESULTS.md).
    let n = 0;
    resolve = async (_client, input) => ({
      id: `pay_${++n}`,
      amount: input.amount,
      currency: input.currency,
      status: 'succeeded',
      created: 1_700_000_000_000 + n,
      description: 'Benchmark payment: one Redis INCR per call; this text pads the result to about two hundred bytes.',
    });
  }
  if (variant === 'round-trips') {
    // The floor of a Redis store: the baseline plus two more round trips (as many as
    // a first execution's claim and completion), with no idempotency logic at all.
    // On the application's client (BENCH_REDIS_CLIENT=node-redis: node-redis's round trips).
    const exists = (key: string) => (appRedis as unknown as { exists(key: string): Promise<number> }).exists(key);
    resolve = async (client, input) => {
      await exists('bench:claim');
      const result = await pay(client, input);
      await exists('bench:complete');
      return result;
    };
  }
  if (variant === 'powertools') {
    // Powertools idempotency with its Redis cache layer (@redis/client), the
    // key taken from the Idempotency-Key header. Without payload validation:
    // with `payloadValidationJmesPath` set, 2.35.0's cache layer stores the
    // completed record without the payload hash, so every replay fails with
    // IdempotencyValidationError (see bench/RESULTS.md).
    const { makeIdempotent, IdempotencyConfig } = await import('@aws-lambda-powertools/idempotency');
    const { CachePersistenceLayer } = await import('@aws-lambda-powertools/idempotency/cache');
    const { createClient } = await import('@redis/client');
    const client = await createClient({ url: redisUrl }).connect();
    const persistenceStore = new CachePersistenceLayer({ client: client as never });
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'key', throwOnNoIdempotencyKey: true });
    // Outside Lambda there is no remaining time: a context that always has 30 s gives in-progress
    // records an expiry (as lockTtl does for ours) and spares a console.warn per request.
    config.registerLambdaContext({ getRemainingTimeInMillis: () => 30_000 } as never);
    // The handler's INCR on the application's client (BENCH_REDIS_CLIENT=node-redis: node-redis, as its baseline's).
    const idempotentPay = makeIdempotent(
      async (event: { key: string; input: PayInput }) => pay(appRedis, event.input),
      {
        persistenceStore,
        config,
        keyPrefix: 'pay',
      },
    );
    resolve = (_client, input, ctx) => idempotentPay({ key: String(ctx.req.headers['idempotency-key']), input });
  }

  const router = t.router({
    pay: procedure.input(parsePayInput).mutation(({ input, ctx }) => resolve(appRedis, input, ctx)),
  });
  return createHTTPServer({ router, createContext: ({ req, res }) => ({ req, res }) });
}

async function expressServer(): Promise<Server> {
  const express = require('express');
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  const handlers: unknown[] = [express.json()];
  let isHit = (_req: unknown) => false;
  if (variant === 'express-idempotency') {
    // express-idempotency with express-idempotency-redis-adapter, as their READMEs wire them.
    const { idempotency, getSharedIdempotencyService } = require('express-idempotency');
    const RedisAdapter = require('express-idempotency-redis-adapter').default;
    const adapter = new RedisAdapter({ connectionConfig: { url: redisUrl } });
    await adapter.connect();
    handlers.push(idempotency({ dataAdapter: adapter }));
    isHit = (req) => getSharedIdempotencyService().isHit(req);
  }
  app.post(
    '/pay',
    ...handlers,
    async (
      req: { body: unknown },
      res: { json(body: unknown): void; status(code: number): { json(body: unknown): void } },
    ) => {
      if (isHit(req)) return; // the middleware already sent the stored response
      let input: PayInput;
      try {
        input = parsePayInput(req.body);
      } catch (error) {
        return res.status(400).json({ error: { message: (error as Error).message } });
      }
      res.json({ result: { data: await pay(redis, input) } });
    },
  );
  const { createServer } = await import('node:http');
  return createServer(app);
}

const server = variant.startsWith('express') ? await expressServer() : await trpcServer();
server.keepAliveTimeout = 60_000;
server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ ready: (server.address() as AddressInfo).port })}\n`);
});
// BENCH_PROFILE=<file>: SIGUSR2 starts V8's CPU profiler (after the warm-up), SIGTERM writes the profile there.
let stopProfile = async () => {};
if (process.env.BENCH_PROFILE) {
  const file = process.env.BENCH_PROFILE;
  const { Session } = await import('node:inspector/promises');
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 250 });
  process.on('SIGUSR2', () => void session.post('Profiler.start'));
  stopProfile = async () => {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(file, JSON.stringify(profile));
  };
}
process.on('SIGTERM', () => {
  server.closeAllConnections();
  server.close();
  redis.disconnect();
  nodeRedis?.destroy();
  // Exit 1 when the profile could not be written: the bench then stops and says which server failed.
  stopProfile().then(
    () => process.exit(0),
    (error: unknown) => {
      console.error('bench server: the CPU profile could not be written:', error);
      process.exit(1);
    },
  );
});
