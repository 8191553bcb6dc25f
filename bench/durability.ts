/**
 * What the Redis store's durability options cost per operation, in process, through the engine, beside
 * the build before them (bench/profile-durability.md):
 *
 *   BENCH_LIB_A=<a build before 76c53bc> node --import tsx bench/durability.ts
 *
 * Five stores, each with an ioredis client of its own, measured in turn (the order rotating from round to
 * round), on redis-servers of the bench's own:
 *   before-off      build A (BENCH_LIB_A), on redis-server S
 *   off             build B (BENCH_LIB_B, default dist/), options off, on S
 *   fence           build B, `restartFence: true` (initialized), on S
 *   replicated-off  build B, options off, on a primary P that has one replica
 *   wait            build B, `waitForReplicas: { replicas: 1, timeout: 1000 }`, on P
 * Each round, each store: OPS first executions (a fresh key each, CONCURRENCY at a time), the same keys
 * again (replays), then SEQUENTIAL first executions one at a time (their latency). Per operation:
 * the scripts' time on Redis (`INFO commandstats` usec of EVALSHA, after `CONFIG RESETSTAT`), the CPU of
 * the redis-server processes (P's replica included: its share of the writes), the CPU of this process
 * (the client side: engine, store, ioredis), and wall time. Medians over the rounds, min-max beside.
 *
 * DURABILITY_CALLGRIND=1: S and P run under `valgrind --tool=callgrind` instead, and the figure per
 * operation is the instructions the redis-server executed (repeatable, unlike the timings): the Lua
 * work each script adds, the options on or off. Slow: OPS defaults to 1,000 then, and CONCURRENCY to 1
 * (scripts sent together share the server's reads and writes, by how the timing falls: a spread of ~5 %).
 *
 * Then the claim script alone, A's and B's, straight to Redis (see scriptsAlone).
 *
 * Environment: BENCH_LIB_A (required), BENCH_LIB_B, BENCH_ROUNDS (5), OPS (10,000), CONCURRENCY (16),
 * SEQUENTIAL (2,000), ONLY (comma-separated variants), SCRIPT_CALLS (20,000; 2,000 under callgrind),
 * SCRIPTS_ONLY=1 (the claim script alone, nothing else).
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve as resolvePath } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import type { IdempotencyEngine } from '../dist/index.js';
import type { RedisStoreOptions } from '../dist/redis.js';
import { median } from './lib/aggregate.js';
import { type Cleanups, exitOnInterrupt, runCleanups } from './lib/processes.js';
import { type BenchRedisNode, startRedisNode, startReplicaPair } from './lib/replicas.js';
import { cpuMicros } from './lib/services.js';
import { RESULT } from './lib/store-cost.js';

const repo = fileURLToPath(new URL('..', import.meta.url));
const CALLGRIND = process.env.DURABILITY_CALLGRIND === '1';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const OPS = Number(process.env.OPS ?? (CALLGRIND ? 1_000 : 10_000));
/** Under callgrind, one at a time by default: each script then reaches Redis alone, a read and a write of its own. */
const CONCURRENCY = Number(process.env.CONCURRENCY ?? (CALLGRIND ? 1 : 16));
const SEQUENTIAL = Number(process.env.SEQUENTIAL ?? (CALLGRIND ? 0 : 2_000));
const PAYLOAD = { amount: 4200, currency: 'eur' };
const LIB_A = process.env.BENCH_LIB_A;
const LIB_B = process.env.BENCH_LIB_B ?? join(repo, 'dist');

type VariantName = 'before-off' | 'off' | 'fence' | 'replicated-off' | 'wait';
const ALL: VariantName[] = ['before-off', 'off', 'fence', 'replicated-off', 'wait'];
const chosen = (process.env.ONLY?.split(',') ?? ALL) as VariantName[];
for (const name of chosen) if (!ALL.includes(name)) throw new Error(`ONLY: one of ${ALL.join(', ')}, not ${name}`);

/** Figures per operation of one batch. */
interface Batch {
  /** EVALSHA time inside Redis (commandstats), µs; or, under callgrind, the redis-server's instructions. */
  server: number;
  /** CPU of the redis-server processes (the primary and its replica for P), µs. */
  redisCpu: number;
  /** CPU of this process: the engine, the store and ioredis, µs. */
  clientCpu: number;
  /** Wall time per operation, µs (at CONCURRENCY; one at a time for the sequential batch). */
  wall: number;
  /** Sequential batch only: latency percentiles, µs. */
  p50?: number;
  p99?: number;
}

interface Variant {
  name: VariantName;
  engine: IdempotencyEngine;
  admin: Redis;
  /** The redis-server whose commands and instructions are counted, and every process whose CPU is. */
  node: BenchRedisNode;
  pids: number[];
  client: Redis;
}

const cleanups: Cleanups = [];
exitOnInterrupt(cleanups);

/** A copy of a build beside the repository's node_modules (it resolves ioredis and @trpc/server from there). */
function copyBuild(dir: string, label: string, into: string): string {
  const target = join(into, label, 'dist');
  mkdirSync(join(into, label));
  cpSync(resolvePath(dir), target, { recursive: true });
  symlinkSync(join(repo, 'node_modules'), join(into, label, 'node_modules'));
  // the build resolves #platform through its package's "imports" (package.json)
  const { imports } = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { imports: unknown };
  writeFileSync(join(into, label, 'package.json'), `${JSON.stringify({ type: 'module', imports }, null, 2)}\n`);
  return target;
}

async function load(dir: string) {
  const url = (name: string) => pathToFileURL(join(dir, name)).href;
  const core = (await import(url('index.js'))) as typeof import('../dist/index.js');
  const redis = (await import(url('redis.js'))) as typeof import('../dist/redis.js');
  return { createIdempotencyEngine: core.createIdempotencyEngine, redisStore: redis.redisStore };
}

const callgrindPrefix = (out: string, label: string) => [
  'valgrind',
  '--tool=callgrind',
  `--callgrind-out-file=${join(out, `${label}.callgrind`)}`,
  `--log-file=${join(out, `${label}.valgrind.log`)}`,
];

/** Instructions of the valgrind'ed redis-server since the last zero, from a dump written now. */
function instructionsSinceZero(out: string, node: BenchRedisNode, label: string): number {
  const before = new Set(readdirSync(out));
  execFileSync('callgrind_control', ['--dump', String(node.pid)], { stdio: 'ignore' });
  const dump = readdirSync(out)
    .filter((f) => f.startsWith(`${label}.callgrind.`) && !before.has(f))
    .sort()
    .at(-1);
  if (dump === undefined) throw new Error(`${label}: callgrind wrote no dump`);
  const total = Number(/^(?:summary|totals): (\d+)/m.exec(readFileSync(join(out, dump), 'utf8'))?.[1]);
  rmSync(join(out, dump));
  return total;
}

async function main() {
  if (LIB_A === undefined) throw new Error('BENCH_LIB_A: a build before 76c53bc (a copy of its dist/)');
  const out = mkdtempSync(join(tmpdir(), 'bench-durability-'));
  cleanups.push(() => rmSync(out, { recursive: true, force: true }));
  const builds = { A: await load(copyBuild(LIB_A, 'a', out)), B: await load(copyBuild(LIB_B, 'b', out)) };

  const single = await startRedisNode([], CALLGRIND ? callgrindPrefix(out, 'single') : []);
  cleanups.push(() => single.stop());
  if (process.env.SCRIPTS_ONLY === '1') return scriptsAlone(out, single, 'single');
  const pair = await startReplicaPair(CALLGRIND ? callgrindPrefix(out, 'primary') : []);
  cleanups.push(() => pair.stop());
  const labelOf = (node: BenchRedisNode) => (node === single ? 'single' : 'primary');

  const make = async (name: VariantName): Promise<Variant> => {
    const onPair = name === 'replicated-off' || name === 'wait';
    const node = onPair ? pair.primary : single;
    const client = new Redis(node.url);
    const admin = new Redis(node.url);
    cleanups.push(() => client.disconnect());
    cleanups.push(() => admin.disconnect());
    const build = name === 'before-off' ? builds.A : builds.B;
    // Each store on a prefix of its own (the fenced one's marker too), so no variant replays another's keys.
    const options: RedisStoreOptions = { client, prefix: `${name}:` };
    if (name === 'fence') options.restartFence = true;
    if (name === 'wait') options.waitForReplicas = { replicas: 1, timeout: 1_000 };
    const store = build.redisStore(options);
    if (name === 'fence') await store.initialize();
    const engine = build.createIdempotencyEngine({ store }) as IdempotencyEngine;
    return {
      name,
      engine,
      admin,
      node,
      pids: onPair ? [pair.primary.pid, pair.replica.pid] : [single.pid],
      client,
    };
  };
  const variants: Variant[] = [];
  for (const name of chosen) variants.push(await make(name));

  const runOnce = (v: Variant, key: string) => v.engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT);

  /** Runs `keys` through a variant `concurrency` at a time and measures the batch. */
  async function batch(v: Variant, keys: string[], concurrency: number): Promise<Batch> {
    await v.admin.config('RESETSTAT');
    const label = labelOf(v.node);
    if (CALLGRIND) execFileSync('callgrind_control', ['--zero', String(v.node.pid)], { stdio: 'ignore' });
    const redisBefore = v.pids.reduce((n, pid) => n + cpuMicros(pid), 0);
    const cpuBefore = process.cpuUsage();
    const latencies: number[] = [];
    const started = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < keys.length) {
          const key = keys[next++]!;
          const t = performance.now();
          await runOnce(v, key);
          latencies.push(performance.now() - t);
        }
      }),
    );
    const wall = performance.now() - started;
    const cpu = process.cpuUsage(cpuBefore);
    const redisCpu = v.pids.reduce((n, pid) => n + cpuMicros(pid), 0) - redisBefore;
    const server = CALLGRIND
      ? instructionsSinceZero(out, v.node, label)
      : Number(/^cmdstat_evalsha:calls=\d+,usec=(\d+)/m.exec(await v.admin.info('commandstats'))?.[1] ?? Number.NaN);
    latencies.sort((a, b) => a - b);
    const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]! * 1000;
    const n = keys.length;
    return {
      server: server / n,
      redisCpu: redisCpu / n,
      clientCpu: (cpu.user + cpu.system) / n,
      wall: (wall * 1000) / n,
      ...(concurrency === 1 ? { p50: at(0.5), p99: at(0.99) } : {}),
    };
  }

  const fresh = (n: number) => Array.from({ length: n }, () => randomUUID());
  // Warm-up: the JIT settles, every script is loaded on both servers.
  for (const v of variants) {
    const keys = fresh(CALLGRIND ? 500 : 5_000);
    await batch(v, keys, CONCURRENCY);
    await batch(v, keys, CONCURRENCY);
  }

  type Kind = 'first' | 'replay' | 'sequential';
  const results = new Map<string, Batch[]>();
  const push = (name: string, kind: Kind, b: Batch) => {
    const key = `${name} ${kind}`;
    results.set(key, [...(results.get(key) ?? []), b]);
  };
  for (let round = 0; round < ROUNDS; round++) {
    const order = variants.map((_, i) => variants[(i + round) % variants.length]!);
    for (const v of order) {
      const keys = fresh(OPS);
      const first = await batch(v, keys, CONCURRENCY);
      const replay = await batch(v, keys, CONCURRENCY);
      push(v.name, 'first', first);
      push(v.name, 'replay', replay);
      if (SEQUENTIAL > 0) push(v.name, 'sequential', await batch(v, fresh(SEQUENTIAL), 1));
      process.stderr.write(
        `round ${round + 1} ${v.name}: first ${first.server.toFixed(CALLGRIND ? 0 : 2)} server, ${first.clientCpu.toFixed(1)} µs client; replay ${replay.server.toFixed(CALLGRIND ? 0 : 2)} server\n`,
      );
    }
  }

  const spread = (xs: number[], digits: number) => {
    const f = (x: number) => x.toLocaleString('en-US', { maximumFractionDigits: digits });
    return `${f(median(xs))} (${f(Math.min(...xs))}-${f(Math.max(...xs))})`;
  };
  const serverHead = CALLGRIND ? 'redis-server instructions/op' : 'EVALSHA µs/op in Redis';
  console.log(
    `\n${ROUNDS} rounds; ${OPS} first executions then their replays, ${CONCURRENCY} at a time${SEQUENTIAL > 0 ? `; ${SEQUENTIAL} first executions one at a time` : ''}; A = ${LIB_A}, B = ${LIB_B}. Medians (min-max) over the rounds.\n`,
  );
  console.log(`| variant | ${serverHead} | Redis CPU µs/op | client CPU µs/op | wall µs/op | p50 / p99 µs |`);
  console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
  const digits = CALLGRIND ? 0 : 2;
  for (const [key, bs] of results) {
    const lat =
      bs[0]!.p50 === undefined
        ? ''
        : `${spread(
            bs.map((b) => b.p50!),
            0,
          )} / ${median(bs.map((b) => b.p99!)).toFixed(0)}`;
    console.log(
      `| ${key} | ${spread(
        bs.map((b) => b.server),
        digits,
      )} | ${spread(
        bs.map((b) => b.redisCpu),
        1,
      )} | ${spread(
        bs.map((b) => b.clientCpu),
        1,
      )} | ${spread(
        bs.map((b) => b.wall),
        1,
      )} | ${lat} |`,
    );
  }
  // Ratios within each round (the two measured minutes apart at most), medians over the rounds.
  const ratio = (a: string, b: string, figure: (x: Batch) => number) => {
    const xs = results.get(a);
    const ys = results.get(b);
    if (xs === undefined || ys === undefined) return undefined;
    return median(xs.map((x, i) => figure(x) / figure(ys[i]!)));
  };
  console.log('\n| ratio (median over rounds) | server | Redis CPU | client CPU | wall |');
  console.log('| --- | ---: | ---: | ---: | ---: |');
  for (const [a, b] of [
    ['off', 'before-off'],
    ['fence', 'off'],
    ['wait', 'replicated-off'],
    ['replicated-off', 'off'],
  ] as const) {
    for (const kind of ['first', 'replay', 'sequential'] as const) {
      const figures = [
        (x: Batch) => x.server,
        (x: Batch) => x.redisCpu,
        (x: Batch) => x.clientCpu,
        (x: Batch) => x.wall,
      ].map((f) => ratio(`${a} ${kind}`, `${b} ${kind}`, f));
      if (figures.some((f) => f === undefined)) continue;
      console.log(`| ${a} ${kind} / ${b} | ${figures.map((f) => f!.toFixed(3)).join(' | ')} |`);
    }
  }
  console.log(JSON.stringify(Object.fromEntries(results)));
  await scriptsAlone(out, single, labelOf(single));
}

/**
 * The claim script alone, build A's and build B's, sent straight to Redis in pipelines of SCRIPT_CALLS:
 * the work inside Redis of one claim with nothing else around it (no engine, one read and one write per
 * pipeline). Cases, each with the same arguments for both builds: a claim that finds a completed record
 * (a replay), one that takes an absent record (a first execution), B's with the fence marker as KEYS[3]
 * (the fence on: one GET more) taking an absent record, and B's replay with the lines before its body cut.
 */
async function scriptsAlone(out: string, node: BenchRedisNode, label: string) {
  const calls = Number(process.env.SCRIPT_CALLS ?? (CALLGRIND ? 2_000 : 20_000));
  type Script = { sha: string; source: string };
  type Scripts = { CLAIM: Script; FENCED?: { CLAIM: Script } };
  const scriptsOf = async (dir: string) =>
    (await import(pathToFileURL(join(dir, 'stores/redis/scripts.js')).href)) as Scripts;
  const claimOf = async (dir: string) => (await scriptsOf(dir)).CLAIM;
  const B = await claimOf(join(out, 'b', 'dist'));
  // Since 2d280d6 a store without the fence runs CLAIM without the fence's functions (FENCED holds the
  // other variant): the fence-on case takes that one; before it, one script served both.
  const bFenced = (await scriptsOf(join(out, 'b', 'dist'))).FENCED?.CLAIM ?? B;
  // B's claim without what precedes its body (the fence's two local functions, defined on every call): a
  // replay never calls them, so this tells what defining them costs a call that does not use them.
  const cut = B.source.slice(B.source.indexOf('local rec = '));
  const claims = {
    A: await claimOf(join(out, 'a', 'dist')),
    B,
    cut: { source: cut, sha: createHash('sha1').update(cut).digest('hex') },
    fenced: bFenced,
  };
  const redis = new Redis(node.url);
  try {
    for (const c of Object.values(claims)) await redis.script('LOAD', c.source);
    await redis.hset('alone:{done}', 's', 'c', 'f', 'fp', 'b', JSON.stringify(RESULT));
    await redis.set('alone:fence', '0');
    const cases = {
      'A replay': (i: number) => [
        claims.A.sha,
        2,
        'alone:{done}',
        'alone:{done}:steps',
        `t${i}`,
        'fp',
        30_000,
        '0',
        '',
      ],
      'B replay': (i: number) => [
        claims.B.sha,
        2,
        'alone:{done}',
        'alone:{done}:steps',
        `t${i}`,
        'fp',
        30_000,
        '0',
        '',
      ],
      'B replay, prelude cut': (i: number) => [
        claims.cut.sha,
        2,
        'alone:{done}',
        'alone:{done}:steps',
        `t${i}`,
        'fp',
        30_000,
        '0',
        '',
      ],
      'A take': (i: number) => [claims.A.sha, 2, `alone:{a${i}}`, `alone:{a${i}}:steps`, 't', 'fp', 30_000, '0', ''],
      'B take': (i: number) => [claims.B.sha, 2, `alone:{b${i}}`, `alone:{b${i}}:steps`, 't', 'fp', 30_000, '0', ''],
      'B take, fence on': (i: number) => [
        claims.fenced.sha,
        3,
        `alone:{f${i}}`,
        `alone:{f${i}}:steps`,
        'alone:fence',
        't',
        'fp',
        30_000,
        '0',
        '',
      ],
    };
    const figures = new Map<string, number[]>();
    let serial = 0;
    for (let round = -1; round < ROUNDS; round++) {
      const names = Object.keys(cases) as (keyof typeof cases)[];
      for (const name of names.map((_, i) => names[(i + Math.max(round, 0)) % names.length]!)) {
        const args = cases[name];
        const base = serial;
        serial += calls;
        await redis.config('RESETSTAT');
        if (CALLGRIND) execFileSync('callgrind_control', ['--zero', String(node.pid)], { stdio: 'ignore' });
        for (let from = 0; from < calls; from += 500) {
          const pipeline = redis.pipeline();
          for (let i = from; i < Math.min(calls, from + 500); i++) {
            pipeline.evalsha(...(args(base + i) as [string, number, ...(string | number)[]]));
          }
          const replies = (await pipeline.exec()) ?? [];
          const failed = replies.find(([error]) => error !== null);
          if (failed) throw failed[0];
        }
        const figure = CALLGRIND
          ? instructionsSinceZero(out, node, label)
          : Number(/^cmdstat_evalsha:calls=\d+,usec=(\d+)/m.exec(await redis.info('commandstats'))?.[1]);
        // Round -1 warms up (every key shape once through Redis's allocator).
        if (round >= 0) figures.set(name, [...(figures.get(name) ?? []), figure / calls]);
      }
    }
    const digits = CALLGRIND ? 0 : 3;
    const f = (x: number) => x.toLocaleString('en-US', { maximumFractionDigits: digits });
    console.log(
      `\nThe claim script alone, ${calls} calls in pipelines of 500, ${ROUNDS} rounds: ${CALLGRIND ? 'redis-server instructions per call' : 'EVALSHA µs per call in Redis'}, median (min-max), and over A's or the same case's`,
    );
    console.log('| case | per call | ratio |\n| --- | ---: | ---: |');
    const med = (name: string) => median(figures.get(name)!);
    for (const name of figures.keys()) {
      const xs = figures.get(name)!;
      const over =
        name === 'B replay' || name === 'B replay, prelude cut'
          ? med('A replay')
          : name === 'B take'
            ? med('A take')
            : name === 'B take, fence on'
              ? med('B take')
              : undefined;
      console.log(
        `| ${name} | ${f(median(xs))} (${f(Math.min(...xs))}-${f(Math.max(...xs))}) | ${over === undefined ? '' : (median(xs) / over).toFixed(3)} |`,
      );
    }
  } finally {
    redis.disconnect();
  }
}

try {
  await main();
} finally {
  await runCleanups(cleanups);
}
