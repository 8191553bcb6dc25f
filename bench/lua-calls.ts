/**
 * What redis-server spends per call, counted (callgrind): the Redis store's first execution (its CLAIM
 * and COMPLETE scripts) beside the peers' two SETs, the same record written with plain commands, and the
 * parts a script is made of (a script call with nothing in it, by EVALSHA and by FCALL; one redis.call).
 * The server is the bench's own, under callgrind with instrumentation off until each window; each window
 * counts ITERATIONS sequential iterations (one client, no pipelining, as a request makes them).
 *
 *   npm run bench:lua            ITERATIONS (1,000), WARMUP (300)
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { CLAIM, COMPLETE } from '../dist/stores/redis/scripts.js';
import { startRedisNode } from './lib/replicas.js';

const ITERATIONS = Number(process.env.ITERATIONS ?? 1_000);
const WARMUP = Number(process.env.WARMUP ?? 300);
const run = promisify(execFile);

const out = mkdtempSync(join(tmpdir(), 'bench-lua-'));
const node = await startRedisNode(
  ['--hz', '1', '--activerehashing', 'no'],
  ['valgrind', '--tool=callgrind', '--instr-atstart=no', `--callgrind-out-file=${join(out, 'redis.%p')}`],
);
const redis = new Redis(node.url);
try {
  const BODY = JSON.stringify({ chargeId: 'ch_0123456789abcdef', amount: 1000, createdAt: '2026-12-04T00:00:00.000Z' });
  const FINGERPRINT = 'f'.repeat(43);
  const TOKEN = '7c0b1c8e-55c3-4f5e-9d3e-2a4f5b6c7d8e';
  await redis.script('LOAD', CLAIM.source);
  await redis.script('LOAD', COMPLETE.source);
  // The record a replay finds: completed, with this fingerprint.
  const DONE = 'idem:{:pay:replayed}';
  await redis.hset(DONE, 's', 'c', 'f', FINGERPRINT, 't', TOKEN, 'b', BODY);
  const empty = (await redis.script('LOAD', 'return 1')) as string;
  const hmget = (await redis.script('LOAD', "return redis.call('HMGET', KEYS[1], 's', 'f', 'b', 't', 'w')")) as string;
  await redis.call(
    'FUNCTION',
    'LOAD',
    'REPLACE',
    "#!lua name=bench\nredis.register_function('one', function() return 1 end)",
  );

  let window = 0;
  /** Each measure writes keys of its own: a first execution always finds its key absent. */
  const rows: Array<[string, (key: string) => Promise<unknown>]> = [
    [
      "the Redis store's first execution: EVALSHA CLAIM, EVALSHA COMPLETE",
      async (key) => {
        // As the store sends them (stores/redis/store.ts): no deadline yet, not waiting; no keyPrefix.
        const claimed = (await redis.evalsha(CLAIM.sha, 2, key, `${key}:steps`, TOKEN, FINGERPRINT, '30000', '')) as [
          string,
        ];
        const stored = await redis.evalsha(
          COMPLETE.sha,
          1,
          key,
          TOKEN,
          'c',
          BODY,
          '86400000',
          'idem:settled',
          FINGERPRINT,
        );
        // A layout the scripts no longer read would count something else: refused, rather than counted.
        if (claimed[0] !== 'a' || stored !== 1) throw new Error(`the scripts answered ${claimed[0]} and ${stored}`);
      },
    ],
    [
      "the Redis store's replay: EVALSHA CLAIM of a completed record",
      async () => {
        const replayed = (await redis.evalsha(
          CLAIM.sha,
          2,
          DONE,
          `${DONE}:steps`,
          TOKEN,
          FINGERPRINT,
          '30000',
          '',
        )) as [string];
        if (replayed[0] !== 'c') throw new Error(`the claim answered ${replayed[0]}, not a completed record`);
      },
    ],
    [
      'the same record with plain commands: HMGET, HSET, PEXPIRE, HGETALL; HSET, PEXPIRE (not atomic)',
      async (key) => {
        await redis.hmget(key, 's', 'f', 'b', 't', 'w');
        await redis.hset(key, 's', 'p', 'f', FINGERPRINT, 't', TOKEN, 'c', Date.now(), 'l', '30000');
        await redis.pexpire(key, 30_000);
        await redis.hgetall(`${key}:steps`);
        await redis.hset(key, 's', 'c', 'b', BODY, 'f', FINGERPRINT, 't', TOKEN);
        await redis.pexpire(key, 86_400_000);
      },
    ],
    [
      "the peers' first execution: SET NX PX, SET PX (the second unfenced)",
      async (key) => {
        await redis.set(key, JSON.stringify({ status: 'INPROGRESS', FINGERPRINT }), 'PX', 30_000, 'NX');
        await redis.set(key, JSON.stringify({ status: 'COMPLETED', FINGERPRINT, BODY }), 'PX', 86_400_000);
      },
    ],
    ['PING', () => redis.ping()],
    ["EVALSHA of 'return 1'", () => redis.evalsha(empty, 0)],
    ['FCALL of a function that returns 1', () => redis.call('FCALL', 'one', '0')],
    ["EVALSHA of one redis.call('HMGET', absent key, 5 fields)", (key) => redis.evalsha(hmget, 1, key)],
  ];
  const counted: Array<[string, number]> = [];
  for (const [name, measure] of rows) {
    window++;
    for (let i = 0; i < WARMUP; i++) await measure(`idem:{w${window}-warm-${i}}`);
    await run('callgrind_control', ['-z', String(node.pid)]);
    await run('callgrind_control', ['-i', 'on', String(node.pid)]);
    for (let i = 0; i < ITERATIONS; i++) await measure(`idem:{w${window}-${i}}`);
    const before = new Set(readdirSync(out));
    await run('callgrind_control', ['-d', String(node.pid)]);
    await run('callgrind_control', ['-i', 'off', String(node.pid)]);
    const dump = readdirSync(out).find((file) => !before.has(file) && file.startsWith('redis.'));
    if (dump === undefined) throw new Error(`${name}: callgrind wrote no dump`);
    const total = Number(/^(?:summary|totals): (\d+)/m.exec(readFileSync(join(out, dump), 'utf8'))?.[1]);
    if (!(total > 0)) throw new Error(`${name}: no total in ${dump}`);
    counted.push([name, Math.round(total / ITERATIONS)]);
  }
  const width = Math.max(...counted.map(([name]) => name.length));
  console.log(`redis-server instructions per iteration (${ITERATIONS} counted after ${WARMUP}, callgrind):`);
  for (const [name, n] of counted) console.log(`  ${name.padEnd(width)}  ${n.toLocaleString('en-US').padStart(8)}`);
} finally {
  redis.disconnect();
  await node.stop();
  rmSync(out, { recursive: true, force: true });
}
