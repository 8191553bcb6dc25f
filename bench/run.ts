/**
 * npm run bench: throughput and latency of one tRPC mutation without
 * idempotency and with it (memory, Redis, PostgreSQL), beside its peers, in
 * one run and alternating A B A B; then store cost, in-process overhead,
 * growth with 1,000,000 records and purge time. Writes bench/results.json
 * and bench/RESULTS.md and prints the table.
 *
 * Environment: BENCH_ROUNDS (3), BENCH_DURATION (seconds per run, 3),
 * BENCH_RECORDS (1000000), BENCH_WAIT_QUIET=1 (wait for a 1-minute load
 * average below 0.8 first, up to 20 minutes), DATABASE_URL.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { perfNodeFlags, perfWorks, recordPerf, removePerfMap, summarisePerf } from './lib/perf.js';
import {
  type Cleanups,
  exitOnInterrupt,
  type LoadGenerator,
  primeKeys as primeKeysOf,
  runCleanups,
  type Server,
  startServer as startBenchServer,
  startLoad,
  warmUp as warmUpOf,
} from './lib/processes.js';
import { type ProfileSummary, summariseProfile } from './lib/profile.js';
import { type FingerprintCost, type Previous, previousOf, renderMarkdown, renderTable } from './lib/report.js';
import {
  type BenchRedis,
  type BenchSchema,
  commandCalls,
  cpuMicros,
  createSchema,
  DATABASE_URL,
  delta,
  loadAverage,
  postgresCpuCounter,
  startRedis,
  timeslices,
} from './lib/services.js';
import { postgresCost, redisCost } from './lib/store-cost.js';
import type { LoadCommand, LoadResult } from './load.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DURATION = Number(process.env.BENCH_DURATION ?? 3);
/** Seconds of load before each measured run (the server is already warm: see WARMUP_REQUESTS). */
const WARMUP = 0.5;
/**
 * Requests each server serves, of each kind it is measured on, before its first measured run. V8 is
 * still optimising a server that has served fewer: with 0.5 s only, the PostgreSQL server's optimising
 * compiler took 133 µs of CPU per request in the measured window (the baseline's: 7), and each server
 * took about 5,000 requests to settle.
 */
const WARMUP_REQUESTS = Number(process.env.BENCH_WARMUP_REQUESTS ?? 10_000);
/** Seconds per run at a fixed rate: at half the peak, about 2 × 2,000 latencies per run. */
const PACED_DURATION = Math.min(DURATION, 2);
const CONNECTIONS = 32;
const RECORDS = Number(process.env.BENCH_RECORDS ?? 1_000_000);
const REPLAY_KEYS = 1_000;
const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));
/**
 * BENCH_PIN=1 (with taskset and 2 cores or more): the server under test alone on CPU 0, the load
 * generator and the bench's Redis servers on the others. Off by default: on the 2-core machine of the
 * record, a server confined to one core spent 466 to 2,748 µs of CPU per request with the no-I/O
 * handler from one round to the next (about 250 unpinned), far more than its work: the process's
 * other threads (V8's garbage-collection helpers among them) then compete for that one core.
 */
const PIN = process.env.BENCH_PIN === '1' && cpus().length >= 2 && existsSync('/usr/bin/taskset');
const OTHER_CPUS = `1-${cpus().length - 1}`;
function pin(pid: number, cpuList: string) {
  if (PIN) execFileSync('taskset', ['-a', '-p', '-c', cpuList, String(pid)], { stdio: 'ignore' });
}
const started = Date.now();
const log = (message: string) =>
  process.stderr.write(`[bench ${((Date.now() - started) / 1000).toFixed(0).padStart(3)} s] ${message}\n`);

// ---------------------------------------------------------------- processes
const cleanups: Cleanups = [];
const cleanup = () => runCleanups(cleanups);
exitOnInterrupt(cleanups);

// BENCH_PIN: the server under test alone on CPU 0.
const startServer = (variant: string, env: Record<string, string>, nodeFlags: string[] = []): Promise<Server> =>
  startBenchServer(variant, env, cleanups, { prefix: PIN ? ['taskset', '-c', '0'] : [], nodeFlags });

let loadGenerator: LoadGenerator;
const load = (command: Omit<LoadCommand, 'id' | 'connections'>): Promise<LoadResult> => loadGenerator.load(command);

// ---------------------------------------------------------------- one measured run
interface Run {
  name: string;
  round: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
  non2xx: number;
  errors: number;
  server_cpu_us_per_req: number;
  redis_cpu_us_per_req: number;
  /** All PostgreSQL server processes (the server is shared: other clients count too). */
  postgres_cpu_us_per_req: number;
  /** The load generator's process (autocannon). */
  load_cpu_us_per_req: number;
  /** Times the load generator's threads were put on a CPU, per request (see timeslices). */
  load_runs_per_req: number;
  /** Redis commands per request, by name, during the measured window (the handler's INCR included). */
  redis_calls_per_req: Record<string, number>;
}

const primeKeys = (name: string, server: Server, keys: LoadCommand['keys']) =>
  primeKeysOf(loadGenerator, name, server, keys);
const warmUp = (name: string, server: Server, modes: Iterable<'fresh' | 'replay'>) =>
  warmUpOf(loadGenerator, name, server, modes, { requests: WARMUP_REQUESTS, replayKeys: REPLAY_KEYS });

async function measureRun(
  name: string,
  round: number,
  server: Server,
  keys: LoadCommand['keys'],
  redis: { admin: Redis; pid: number },
): Promise<Run> {
  await primeKeys(name, server, keys);
  await load({ type: 'run', url: server.url, duration: WARMUP, keys });
  const callsBefore = await commandCalls(redis.admin);
  const serverBefore = cpuMicros(server.pid);
  const redisBefore = cpuMicros(redis.pid);
  const postgresSince = postgresCpuCounter();
  const generatorBefore = cpuMicros(loadGenerator.pid);
  const generatorRunsBefore = timeslices(loadGenerator.pid);
  const result = await load({ type: 'run', url: server.url, duration: DURATION, keys });
  const loadCpu = cpuMicros(loadGenerator.pid) - generatorBefore;
  const loadRuns = timeslices(loadGenerator.pid) - generatorRunsBefore;
  const serverCpu = cpuMicros(server.pid) - serverBefore;
  const redisCpu = cpuMicros(redis.pid) - redisBefore;
  const postgresCpu = postgresSince();
  const calls = delta(callsBefore, await commandCalls(redis.admin));
  delete calls.info;
  const perReq = Object.fromEntries(Object.entries(calls).map(([cmd, n]) => [cmd, round2(n / result.total)]));
  const run: Run = {
    name,
    round,
    rps: result.rps,
    p50_ms: result.p50_ms,
    p99_ms: result.p99_ms,
    non2xx: result.non2xx,
    errors: result.errors,
    server_cpu_us_per_req: serverCpu / result.total,
    redis_cpu_us_per_req: redisCpu / result.total,
    postgres_cpu_us_per_req: postgresCpu / result.total,
    load_cpu_us_per_req: loadCpu / result.total,
    load_runs_per_req: loadRuns / result.total,
    redis_calls_per_req: perReq,
  };
  log(
    `${name.padEnd(28)} ${run.rps.toFixed(0).padStart(6)} req/s  p50 ${run.p50_ms} ms  p99 ${run.p99_ms} ms  cpu ${run.server_cpu_us_per_req.toFixed(0)} µs/req${run.non2xx + run.errors > 0 ? `  NON-2XX ${run.non2xx} ERRORS ${run.errors}` : ''}`,
  );
  return run;
}

const round2 = (n: number) => Math.round(n * 100) / 100;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

// ---------------------------------------------------------------- quiet machine
async function waitQuiet(): Promise<{ waited_s: number; quiet: boolean }> {
  const start = Date.now();
  for (;;) {
    const [one] = loadAverage();
    if (one < 0.8) return { waited_s: (Date.now() - start) / 1000, quiet: true };
    if (Date.now() - start > 20 * 60_000) return { waited_s: (Date.now() - start) / 1000, quiet: false };
    log(`waiting for a quiet machine: 1-minute load ${one}`);
    await new Promise((resolve) => setTimeout(resolve, 15_000));
  }
}

// ---------------------------------------------------------------- growth helpers
/** Stores `count` completed records (the Redis store's layout, ~200-byte bodies) with a server-side script. */
async function fillRedis(redis: Redis, count: number) {
  const body = JSON.stringify({ result: 'x'.repeat(190) });
  const script = `
for i = ARGV[1], ARGV[2] do
  local key = 'idem:{:pay:seed-' .. i .. '}'
  redis.call('HSET', key, 's', 'c', 'f', 'cGF5bG9hZC1maW5nZXJwcmludC1zZWVkLXNoYTI1Ni1iYXNlNjR1cmw', 'b', ARGV[3])
  redis.call('PEXPIRE', key, 86400000)
end
return 1`;
  for (let from = 0; from < count; from += 50_000) {
    await redis.eval(script, 0, String(from), String(Math.min(from + 50_000, count) - 1), body);
  }
}

/** Inserts `count` rows in one statement: live (expiring tomorrow) or already expired. */
async function fillPostgres(url: string, count: number, expired: boolean) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(
    `
    insert into idempotency_keys (id, state, fingerprint, token, body, expires_at, created_at)
    select ':pay:seed-' || g, 'completed', 'cGF5bG9hZC1maW5nZXJwcmludC1zZWVkLXNoYTI1Ni1iYXNlNjR1cmw', null, repeat('x', 200),
           now() ${expired ? "- interval '1 hour' + g * interval '1 microsecond'" : "+ interval '1 day'"}, now()
      from generate_series(1, $1::int) g`,
    [count],
  );
  await client.query('vacuum analyze idempotency_keys');
  await client.end();
}

// ---------------------------------------------------------------- main
async function main() {
  // What the committed record says, to tell what changed since it.
  const previous: Previous | undefined = existsSync(here('./RESULTS.md'))
    ? previousOf(readFileSync(here('./RESULTS.md'), 'utf8'))
    : undefined;
  const quiet = process.env.BENCH_WAIT_QUIET === '1' ? await waitQuiet() : undefined;
  const loadBefore = loadAverage();
  log(
    `load average before: ${loadBefore.join(' ')}; ${ROUNDS} rounds of ${DURATION} s runs, ${CONNECTIONS} connections`,
  );

  const redisMain = await startRedis();
  const redisEmpty = await startRedis();
  const redisFull = await startRedis();
  for (const r of [redisMain, redisEmpty, redisFull]) cleanups.push(() => r.stop());
  const schemas: Record<string, BenchSchema> = {};
  for (const label of ['main', 'empty', 'full', 'purge', 'cost']) {
    schemas[label] = await createSchema(label);
    cleanups.push(() => schemas[label]!.drop());
  }
  const admins = new Map<BenchRedis, Redis>();
  for (const r of [redisMain, redisEmpty, redisFull]) {
    const admin = new Redis(r.url);
    admins.set(r, admin);
    cleanups.push(() => admin.disconnect());
  }

  // Store cost first, on a quiet Redis.
  log('store cost: Redis commands, PostgreSQL statements, bytes per record');
  const redisOps = await redisCost(redisEmpty.url);
  const pgOps = await postgresCost(schemas.cost!.url);
  await admins.get(redisEmpty)!.flushall();
  await admins.get(redisEmpty)!.config('RESETSTAT');

  log('starting the servers');
  // The application's ioredis client as ioredis makes it (no auto-pipelining), except in the two servers below.
  const env = { REDIS_URL: redisMain.url, PG_URL: schemas.main!.url, BENCH_AUTO_PIPELINING: '0' };
  const variants = [
    'baseline',
    'round-trips',
    'redis-plain',
    'no-io',
    'memory',
    'redis',
    'postgres',
    'node-idempotency',
    'powertools',
    'express-baseline',
    'express-idempotency',
  ];
  const servers: Record<string, Server> = {};
  for (const variant of variants) servers[variant] = await startServer(variant, env);
  // The same baseline and Redis store with the application's client in enableAutoPipelining mode: the
  // commands issued in one tick of the event loop reach Redis in one write (see the report).
  const pipelined = { ...env, BENCH_AUTO_PIPELINING: '1' };
  servers['baseline-autopipelining'] = await startServer('baseline', pipelined);
  servers['redis-autopipelining'] = await startServer('redis', pipelined);
  const growth = {
    'redis-empty': await startServer('redis', { REDIS_URL: redisEmpty.url }),
    'redis-full': await startServer('redis', { REDIS_URL: redisFull.url }),
    'postgres-empty': await startServer('postgres', { REDIS_URL: redisEmpty.url, PG_URL: schemas.empty!.url }),
    'postgres-full': await startServer('postgres', { REDIS_URL: redisFull.url, PG_URL: schemas.full!.url }),
  };
  loadGenerator = startLoad(CONNECTIONS, cleanups);
  pin(loadGenerator.pid, OTHER_CPUS);
  for (const r of [redisMain, redisEmpty, redisFull]) pin(r.pid, OTHER_CPUS);

  // A B A B: every variant runs right after its baseline, and the baseline runs again after it.
  const main = { admin: admins.get(redisMain)!, pid: redisMain.pid };
  // Three references: round-trips, the baseline handler plus two more Redis round trips, the
  // floor of any Redis store that needs two (claim, completion); redis-plain, this library on
  // the plain SET commands the peers send instead of the store's fenced scripts (what the
  // guarantees cost); no-io, the same result made without any I/O, as a replay from the memory store is.
  const plan: { name: string; server: string; baseline: string; keys: 'fresh' | 'replay' }[] = [
    { name: 'floor-2-redis-round-trips', server: 'round-trips', baseline: 'baseline', keys: 'fresh' },
    { name: 'floor-redis-plain-commands', server: 'redis-plain', baseline: 'baseline', keys: 'fresh' },
    { name: 'floor-no-io-handler', server: 'no-io', baseline: 'baseline', keys: 'fresh' },
  ];
  for (const [name, server, baseline] of [
    ['memory', 'memory', 'baseline'],
    ['redis', 'redis', 'baseline'],
    ['redis-autopipelining', 'redis-autopipelining', 'baseline-autopipelining'],
    ['postgres', 'postgres', 'baseline'],
    ['node-idempotency', 'node-idempotency', 'baseline'],
    ['powertools', 'powertools', 'baseline'],
    ['express-idempotency', 'express-idempotency', 'express-baseline'],
  ] as const) {
    plan.push({ name: `${name}-first`, server, baseline, keys: 'fresh' });
    plan.push({ name: `${name}-replay`, server, baseline, keys: 'replay' });
  }

  log(`warm-up: ${WARMUP_REQUESTS} requests per server and kind of request`);
  const modesOf = new Map<string, Set<'fresh' | 'replay'>>();
  const addMode = (server: string, mode: 'fresh' | 'replay') =>
    modesOf.set(server, (modesOf.get(server) ?? new Set()).add(mode));
  for (const step of plan) {
    addMode(step.baseline, 'fresh');
    addMode(step.server, step.keys);
  }
  for (const [server, modes] of modesOf) await warmUp(server, servers[server]!, modes);
  for (const [name, server] of Object.entries(growth)) await warmUp(name, server, ['fresh']);

  const runs: Run[] = [];
  const pairs: { name: string; round: number; variant: Run; before: Run; after: Run }[] = [];
  const baselineRun = async (baseline: string, round: number) => {
    const run = await measureRun(baseline, round, servers[baseline]!, { mode: 'fresh' }, main);
    runs.push(run);
    return run;
  };
  for (let round = 1; round <= ROUNDS; round++) {
    log(`round ${round} of ${ROUNDS}`);
    let before: Run | undefined;
    for (const step of plan) {
      if (before?.name !== step.baseline) before = await baselineRun(step.baseline, round);
      const keys: LoadCommand['keys'] =
        step.keys === 'fresh'
          ? { mode: 'fresh' }
          : { mode: 'replay', prefix: `${step.name}-r${round}`, count: REPLAY_KEYS };
      const variant = await measureRun(step.name, round, servers[step.server]!, keys, main);
      runs.push(variant);
      const after = await baselineRun(step.baseline, round);
      pairs.push({ name: step.name, round, variant, before, after });
      before = after;
    }
  }

  // Latency at a fixed rate: half of the lower peak of each variant and its baseline, open loop, A B A B as above.
  const peakOf = (baseline: string) => median(runs.filter((r) => r.name === baseline).map((r) => r.rps));
  const rateOf = {
    baseline: Math.round(peakOf('baseline') / 2),
    'baseline-autopipelining': Math.round(peakOf('baseline-autopipelining') / 2),
    'express-baseline': Math.round(peakOf('express-baseline') / 2),
  };
  log(`latency at a fixed rate: ${rateOf.baseline} req/s (tRPC), ${rateOf['express-baseline']} req/s (Express)`);
  type PacedResult = LoadResult & { server_cpu_us_per_req: number };
  const paced: { name: string; round: number; variant: PacedResult; before: PacedResult; after: PacedResult }[] = [];
  // The server's CPU per request too: at a rate both sides sustain, it is what a request costs, free of
  // what saturating two shared cores does to each side (see the report's method note).
  const pacedRun = async (name: string, server: Server, keys: LoadCommand['keys'], rate: number) => {
    await load({ type: 'paced', url: server.url, duration: WARMUP, rate, keys });
    const cpuBefore = cpuMicros(server.pid);
    const result = await load({ type: 'paced', url: server.url, duration: PACED_DURATION, rate, keys });
    const server_cpu_us_per_req = (cpuMicros(server.pid) - cpuBefore) / result.total;
    log(
      `${`${name} @${rate}/s`.padEnd(34)} p50 ${(result.p50_ms * 1000).toFixed(0)} µs  p99 ${(result.p99_ms * 1000).toFixed(0)} µs  cpu ${server_cpu_us_per_req.toFixed(0)} µs/req`,
    );
    return { ...result, server_cpu_us_per_req };
  };
  for (let round = 1; round <= ROUNDS; round++) {
    let before: { name: string; rate: number; result: PacedResult } | undefined;
    for (const step of plan) {
      // Half the peak of the slower of the pair: a rate both sustain, so neither measures its queue.
      const rate = Math.min(rateOf[step.baseline as keyof typeof rateOf], Math.round(peakOf(step.name) / 2));
      // The previous pair's last baseline run serves as this pair's first only at the same rate.
      if (before?.name !== step.baseline || before.rate !== rate) {
        before = {
          name: step.baseline,
          rate,
          result: await pacedRun(step.baseline, servers[step.baseline]!, { mode: 'fresh' }, rate),
        };
      }
      const keys: LoadCommand['keys'] =
        step.keys === 'fresh'
          ? { mode: 'fresh' }
          : { mode: 'replay', prefix: `${step.name}-paced-r${round}`, count: REPLAY_KEYS };
      await primeKeys(step.name, servers[step.server]!, keys);
      const variant = await pacedRun(step.name, servers[step.server]!, keys, rate);
      const after = await pacedRun(step.baseline, servers[step.baseline]!, { mode: 'fresh' }, rate);
      paced.push({ name: step.name, round, variant, before: before.result, after });
      before = { name: step.baseline, rate, result: after };
    }
  }

  // Where the CPU goes: the baseline and our variants again, each in a fresh server, warmed up, under
  // perf where it can record (on-CPU time of every thread), else V8's CPU profiler.
  const profiler: 'perf' | 'v8' = perfWorks() ? 'perf' : 'v8';
  log(`profiles: ${profiler} on the baseline and on each store path under the same load`);
  const profileDir = mkdtempSync(join(tmpdir(), 'bench-profiles-'));
  cleanups.push(() => rmSync(profileDir, { recursive: true, force: true }));
  const profiles: Record<string, ProfileSummary & { requests: number }> = {};
  for (const [name, variant, mode] of [
    ['baseline', 'baseline', 'fresh'],
    ['memory-first', 'memory', 'fresh'],
    ['memory-replay', 'memory', 'replay'],
    ['redis-first', 'redis', 'fresh'],
    ['redis-replay', 'redis', 'replay'],
    ['postgres-first', 'postgres', 'fresh'],
    ['postgres-replay', 'postgres', 'replay'],
  ] as const) {
    const file = join(profileDir, `${name}.${profiler === 'perf' ? 'perf.data' : 'cpuprofile'}`);
    const server =
      profiler === 'perf'
        ? await startServer(variant, env, perfNodeFlags(join(profileDir, `${name}.v8.log`)))
        : await startServer(variant, { ...env, BENCH_PROFILE: file });
    if (profiler === 'perf') cleanups.push(() => removePerfMap(server.pid));
    await warmUp(name, server, [mode]);
    const keys: LoadCommand['keys'] =
      mode === 'fresh' ? { mode: 'fresh' } : { mode: 'replay', prefix: `${name}-profile`, count: REPLAY_KEYS };
    await primeKeys(name, server, keys);
    await load({ type: 'run', url: server.url, duration: WARMUP, keys });
    // The profile covers the measured window only: perf records from here until stopped; V8's
    // profiler starts on SIGUSR2 and its profile is written on SIGTERM.
    const recording = profiler === 'perf' ? recordPerf(server.pid, file) : undefined;
    if (recording === undefined) server.child.kill('SIGUSR2');
    // perf needs a moment to start and attach to every thread before it samples.
    await new Promise((resolve) => setTimeout(resolve, recording === undefined ? 50 : 1_000));
    const measured = await load({ type: 'run', url: server.url, duration: DURATION, keys });
    await recording?.stop();
    const exited = new Promise<number | null>((resolve) => server.child.once('exit', resolve));
    server.child.kill('SIGTERM');
    const code = await exited;
    if (code !== 0) throw new Error(`${name}: the profiled server exited with ${code} (its stderr says why)`);
    // perf names JIT code from the server's map file, which outlives the server (removed at cleanup).
    const requests = measured.total;
    const summary =
      recording === undefined ? summariseProfile(file, requests) : summarisePerf(file, server.pid, requests);
    profiles[name] = { ...summary, requests };
  }

  // Growth: 1,000,000 live records against an empty store, alternating.
  log(`growth: storing ${RECORDS} live records in Redis and in PostgreSQL`);
  await fillRedis(admins.get(redisFull)!, RECORDS);
  const redisFullKeys = await admins.get(redisFull)!.dbsize();
  await fillPostgres(schemas.full!.url, RECORDS, false);
  const growthRuns: Record<string, Run[]> = {
    'redis-empty': [],
    'redis-full': [],
    'postgres-empty': [],
    'postgres-full': [],
  };
  for (let round = 1; round <= ROUNDS; round++) {
    for (const store of ['redis', 'postgres'] as const) {
      for (const state of ['empty', 'full'] as const) {
        const name = `${store}-${state}` as const;
        const redis = state === 'empty' ? redisEmpty : redisFull; // the server's INCR (and Redis store) goes there
        growthRuns[name]!.push(
          await measureRun(
            `${name} (growth)`,
            round,
            growth[name],
            { mode: 'fresh' },
            { admin: admins.get(redis)!, pid: redis.pid },
          ),
        );
      }
    }
  }

  log(`purge: ${RECORDS} expired rows, purgeExpired() in batches of 1,000`);
  await fillPostgres(schemas.purge!.url, RECORDS, true);
  const purge = execJson(['--import', 'tsx', here('./purge.ts'), schemas.purge!.url]) as {
    deleted: number;
    seconds: number;
    batch_size: number;
  };

  log('in-process overhead per call (mitata, memory store)');
  const overhead = execJson(['--import', 'tsx', here('./overhead.ts'), '4']) as {
    baseline_us: number;
    idempotent_us: number;
    overhead_us_per_call: number;
    fingerprint_us: number;
    minimal_overhead_us_per_call: number;
  };

  log('fingerprint cost over the parse of its body, per shape (in process)');
  const fingerprintCost = execJson(['--import', 'tsx', here('./fingerprint.ts'), '7']) as FingerprintCost;

  const peerBytes = await peerRecordBytes(admins.get(redisMain)!);
  const loadAfter = loadAverage();
  await cleanup();

  // ------------------------------------------------------------ results
  const rows = plan.map((step) => {
    const mine = pairs.filter((p) => p.name === step.name);
    const ratios = mine.map((p) => p.variant.rps / ((p.before.rps + p.after.rps) / 2));
    const baselines = mine.map((p) => (p.before.rps + p.after.rps) / 2);
    const base = mine.flatMap((p) => [p.before, p.after]);
    return {
      name: step.name,
      baseline: step.baseline,
      baseline_rps: Math.round(median(baselines)),
      rps: Math.round(median(mine.map((p) => p.variant.rps))),
      ratio: round3(median(ratios)),
      p50_ms: median(mine.map((p) => p.variant.p50_ms)),
      p99_ms: median(mine.map((p) => p.variant.p99_ms)),
      baseline_p50_ms: median(base.map((r) => r.p50_ms)),
      baseline_p99_ms: median(base.map((r) => r.p99_ms)),
      ratios: ratios.map(round3),
      server_cpu_us_per_req: Math.round(median(mine.map((p) => p.variant.server_cpu_us_per_req))),
      baseline_server_cpu_us_per_req: Math.round(median(base.map((r) => r.server_cpu_us_per_req))),
      redis_cpu_us_per_req: Math.round(median(mine.map((p) => p.variant.redis_cpu_us_per_req))),
      baseline_redis_cpu_us_per_req: Math.round(median(base.map((r) => r.redis_cpu_us_per_req))),
      postgres_cpu_us_per_req: Math.round(median(mine.map((p) => p.variant.postgres_cpu_us_per_req))),
      baseline_postgres_cpu_us_per_req: Math.round(median(base.map((r) => r.postgres_cpu_us_per_req))),
      load_cpu_us_per_req: Math.round(median(mine.map((p) => p.variant.load_cpu_us_per_req))),
      baseline_load_cpu_us_per_req: Math.round(median(base.map((r) => r.load_cpu_us_per_req))),
      load_runs_per_req: round2(median(mine.map((p) => p.variant.load_runs_per_req))),
      baseline_load_runs_per_req: round2(median(base.map((r) => r.load_runs_per_req))),
      redis_calls_per_req: mine.at(-1)!.variant.redis_calls_per_req,
      non2xx: mine.reduce((n, p) => n + p.variant.non2xx + p.variant.errors, 0),
    };
  });
  const latency = plan.map((step) => {
    const mine = paced.filter((p) => p.name === step.name);
    const us = (ms: number) => Math.round(ms * 1000);
    const base50 = median(mine.map((p) => (p.before.p50_ms + p.after.p50_ms) / 2));
    const base99 = median(mine.map((p) => (p.before.p99_ms + p.after.p99_ms) / 2));
    return {
      name: step.name,
      rate: Math.min(rateOf[step.baseline as keyof typeof rateOf], Math.round(peakOf(step.name) / 2)),
      p50_us: us(median(mine.map((p) => p.variant.p50_ms))),
      p99_us: us(median(mine.map((p) => p.variant.p99_ms))),
      baseline_p50_us: us(base50),
      baseline_p99_us: us(base99),
      added_p50_us: us(median(mine.map((p) => p.variant.p50_ms - (p.before.p50_ms + p.after.p50_ms) / 2))),
      added_p99_us: us(median(mine.map((p) => p.variant.p99_ms - (p.before.p99_ms + p.after.p99_ms) / 2))),
      server_cpu_us_per_req: Math.round(median(mine.map((p) => p.variant.server_cpu_us_per_req))),
      baseline_server_cpu_us_per_req: Math.round(
        median(mine.map((p) => (p.before.server_cpu_us_per_req + p.after.server_cpu_us_per_req) / 2)),
      ),
      // The baselines' CPU per request over the variant's, per round: a throughput ratio's counterpart at equal load.
      cost_ratio: round3(
        median(
          mine.map(
            (p) =>
              (p.before.server_cpu_us_per_req + p.after.server_cpu_us_per_req) / 2 / p.variant.server_cpu_us_per_req,
          ),
        ),
      ),
      non2xx: mine.reduce((n, p) => n + p.variant.non2xx + p.variant.errors, 0),
    };
  });
  const growthOf = (store: 'redis' | 'postgres') => {
    const empty = growthRuns[`${store}-empty`]!;
    const full = growthRuns[`${store}-full`]!;
    return {
      records: RECORDS,
      empty_rps: Math.round(median(empty.map((r) => r.rps))),
      full_rps: Math.round(median(full.map((r) => r.rps))),
      ratio: round3(median(full.map((r, i) => r.rps / empty[i]!.rps))),
      empty_p99_ms: median(empty.map((r) => r.p99_ms)),
      full_p99_ms: median(full.map((r) => r.p99_ms)),
    };
  };
  const results = {
    machine: machine(),
    date: new Date().toISOString(),
    commit: commitOf(),
    previous,
    settings: {
      rounds: ROUNDS,
      duration_s: DURATION,
      warmup_s: WARMUP,
      warmup_requests: WARMUP_REQUESTS,
      profiler,
      connections: CONNECTIONS,
      replay_keys: REPLAY_KEYS,
      servers: 'built dist/ (npm run build), node --import tsx bench/server.ts',
      load: 'autocannon 9 in a separate process, loopback',
      pinned: PIN
        ? `the server under test on CPU 0; the load generator and the bench's Redis servers on CPUs ${OTHER_CPUS}; PostgreSQL unpinned`
        : 'no (BENCH_PIN=1 pins them)',
    },
    load_average: {
      before: loadBefore,
      after: loadAfter,
      ...(quiet === undefined ? {} : { waited_for_quiet_s: Math.round(quiet.waited_s), reached_quiet: quiet.quiet }),
    },
    rows,
    store_ops: {
      redis_first: redisOps.first,
      redis_replay: redisOps.replay,
      redis_reject: redisOps.reject,
      redis_wait: redisOps.wait,
      redis_wait_ms: redisOps.wait_ms,
      pg_first: pgOps.first,
      pg_replay: pgOps.replay,
      pg_reject: pgOps.reject,
      redis_in_scripts: {
        first: redisOps.first_in_scripts,
        replay: redisOps.replay_in_scripts,
        reject: redisOps.reject_in_scripts,
        wait: redisOps.wait_in_scripts,
      },
    },
    redis_bytes_per_record: redisOps.memory_usage_bytes,
    redis_used_memory_per_record: redisOps.used_memory_bytes_per_record,
    record_body_bytes: redisOps.body_bytes,
    peer_redis_bytes_per_record: peerBytes,
    latency,
    profiles,
    overhead_us_per_call: round2(overhead.overhead_us_per_call),
    overhead: overhead,
    fingerprint: fingerprintCost,
    growth: { redis: { ...growthOf('redis'), keys_in_redis: redisFullKeys }, postgres: growthOf('postgres') },
    purge: {
      rows: RECORDS,
      deleted: purge.deleted,
      seconds: round2(purge.seconds),
      batch_size: purge.batch_size,
      rows_per_second: Math.round(purge.deleted / purge.seconds),
    },
    runs,
    duration_s: Math.round((Date.now() - started) / 1000),
  };
  writeFileSync(here('./results.json'), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(here('./RESULTS.md'), renderMarkdown(results));
  process.stdout.write(`\n${renderTable(results)}\n`);
  log(`done in ${results.duration_s} s: bench/results.json, bench/RESULTS.md`);
}

const round3 = (n: number) => Math.round(n * 1000) / 1000;

/** The commit measured, with `+changes` when the working tree differs from it. */
function commitOf(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src', 'bench'], { encoding: 'utf8' }).trim();
    return dirty === '' ? head : `${head}+changes`;
  } catch {
    return 'unknown';
  }
}

function execJson(args: string[]): unknown {
  const out = execFileSync(process.execPath, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  return JSON.parse(out.trim().split('\n').at(-1)!);
}

/** MEMORY USAGE of the records each layer left in Redis, averaged over a sample (~200-byte results). */
async function peerRecordBytes(redis: Redis): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const [name, pattern] of [
    ['trpc-idempotency', 'idem:*'],
    ['node-idempotency', 'node-idempotency:*'],
    ['powertools', 'pay#*'],
    ['express-idempotency', '????????-????-????-????-????????????'],
  ] as const) {
    const [, keys] = await redis.scan('0', 'MATCH', pattern, 'COUNT', 5_000);
    const sample = keys.slice(0, 200);
    let total = 0;
    let n = 0;
    for (const key of sample) {
      const type = await redis.type(key);
      if (name === 'trpc-idempotency' && (await redis.hget(key, 's')) !== 'c') continue;
      if (type === 'none') continue;
      total += Number(await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0'));
      n++;
    }
    if (n > 0) out[name] = Math.round(total / n);
  }
  return out;
}

function machine() {
  const version = (cmd: string, args: string[]) => {
    try {
      return execFileSync(cmd, args, { encoding: 'utf8' }).trim();
    } catch {
      return 'unknown';
    }
  };
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memory_gib: Math.round(totalmem() / 2 ** 30),
    os: version('uname', ['-sr']),
    node: process.version,
    redis: version('redis-server', ['--version']).replace(/^.*v=(\S+).*$/, '$1'),
    postgresql: version('psql', [DATABASE_URL, '-Atc', 'show server_version']),
  };
}

main().catch(async (error: unknown) => {
  console.error(error);
  await cleanup();
  process.exit(1);
});
