/**
 * The Redis store from the packed package on each client and major version
 * it supports (ioredis 5 and 6, node-redis 5 and 6), each installed alone
 * into a fresh project (the other library absent: both are optional peers),
 * against the machine's Redis: a first run, a replay, a 422, a concurrent
 * duplicate refused (409) and one that waits and is woken by the store's
 * notification (`inFlight: 'wait'`), and, with `waitForReplicas`, a claim
 * refused without replicas (the local Redis has none). A TypeScript consumer
 * type-checks the store's options against the library's own client types.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { NPM_FLAGS, REPO, run } from './pack.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const CLIENTS = [
  ['ioredis', '5'],
  ['ioredis', '6'],
  ['redis', '5'],
  ['redis', '6'],
] as const;

/** How the consumer makes its client, per library. */
const MAKE = {
  ioredis: `import { Redis } from 'ioredis';
const client = new Redis(process.env.REDIS_URL);
const close = () => client.quit();`,
  redis: `import { createClient } from 'redis';
const client = createClient({ url: process.env.REDIS_URL });
client.on('error', () => {});
await client.connect();
const close = () => client.close?.() ?? client.quit();`,
};

const consumer = (library: keyof typeof MAKE) => `${MAKE[library]}
import { createIdempotencyEngine, IdempotencyError } from 'trpc-idempotency/core';
import { redisStore } from 'trpc-idempotency/redis';

const prefix = 'stacks-' + Math.random().toString(36).slice(2) + ':';
const store = redisStore({ client, prefix });
const engine = createIdempotencyEngine({ store, lockTtl: 5000, storeTimeout: 1000 });
const waits = engine.policy({ inFlight: 'wait' });
const reason = (promise) => promise.then(() => 'ran', (e) => (e instanceof IdempotencyError ? e.reason : String(e)));
let charged = 0;
const pay = (amount, ms = 0, inFlight = false) =>
  engine.run({ key: 'k1', name: 'pay', payload: { amount }, ...(inFlight ? { policy: waits } : {}) }, async () => {
    await new Promise((r) => setTimeout(r, ms));
    return { charge: ++charged, amount };
  });

const slow = pay(5, 300);
await new Promise((r) => setTimeout(r, 50));
const duplicate = await reason(pay(5));
const waiting = pay(5, 0, true);
const first = await slow;
const woken = await waiting;
const replay = await pay(5);
const mismatch = await reason(pay(6));
const durable = redisStore({ client, prefix, waitForReplicas: { replicas: 1, timeout: 100 } });
const withoutReplicas = await reason(
  createIdempotencyEngine({ store: durable, storeTimeout: 1000 }).run({ key: 'k2', name: 'pay', payload: {} }, async () => 1),
);
await store.close();
await close();
console.log(JSON.stringify({ first, duplicate, woken, replay, mismatch, charged, withoutReplicas }));
`;

const typed = (library: keyof typeof MAKE) =>
  library === 'ioredis'
    ? `import { Cluster, Redis } from 'ioredis';
import { redisStore } from 'trpc-idempotency/redis';
redisStore({ client: new Redis(), restartFence: true });
redisStore({ client: new Cluster([{ host: '127.0.0.1', port: 7000 }]), waitForReplicas: { replicas: 1, timeout: 500 } });
// @ts-expect-error not a client
redisStore({ client: { get() {} } });
`
    : `import { createClient, createCluster, createSentinel } from 'redis';
import { redisStore } from 'trpc-idempotency/redis';
redisStore({ client: createClient(), restartFence: true });
redisStore({ client: createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] }) });
redisStore({ client: createSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: 26379 }] }) });
// @ts-expect-error not a client
redisStore({ client: { get() {} } });
`;

describe.each(CLIENTS)('the Redis store on %s %s, installed alone', (library, major) => {
  it('runs once, replays, refuses a reused key with 422 and a duplicate in flight with 409, wakes a waiter, and fails closed without replicas; its options type-check', async () => {
    const dir = mkdtempSync(join(tmpdir(), `trpc-idempotency-${library}${major}-`));
    dirs.push(dir);
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    const typescript = join(REPO, 'node_modules/typescript');
    // ioredis's own declarations import redis-errors, which ships none: a project that checks them
    // (skipLibCheck: false, as here) needs @types/redis-errors, with or without this package.
    const types = library === 'ioredis' ? ['@types/redis-errors'] : [];
    await run('npm', ['install', inject('tgz'), `${library}@${major}`, '@types/node@20', ...types, ...NPM_FLAGS], dir);
    const other = library === 'ioredis' ? 'redis' : 'ioredis';
    await expect(run(process.execPath, ['-e', `require.resolve('${other}')`], dir)).rejects.toThrow();

    writeFileSync(join(dir, 'consumer.mjs'), consumer(library));
    const { output } = await run(process.execPath, [join(dir, 'consumer.mjs')], dir, {
      ...process.env,
      REDIS_URL,
    });
    const result = JSON.parse(output.trim().split('\n').at(-1)!);
    expect(result).toEqual({
      first: { value: { charge: 1, amount: 5 }, replayed: false },
      duplicate: 'in_progress',
      woken: { value: { charge: 1, amount: 5 }, replayed: true },
      replay: { value: { charge: 1, amount: 5 }, replayed: true },
      mismatch: 'payload_mismatch',
      charged: 1,
      withoutReplicas: 'store_unavailable',
    });

    writeFileSync(join(dir, 'typed.ts'), typed(library));
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { module: 'nodenext', target: 'es2022', strict: true, noEmit: true, skipLibCheck: false },
        files: ['typed.ts'],
      }),
    );
    await run(process.execPath, [join(typescript, 'bin/tsc'), '-p', dir], dir);
  });
});
