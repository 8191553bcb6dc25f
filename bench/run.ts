/**
 * npm run bench: throughput and latency of one tRPC mutation without
 * idempotency and with it (memory, Redis, PostgreSQL, MySQL/MariaDB, SQLite), beside its peers, in
 * one run and alternating A B A B; then store cost, in-process overhead,
 * growth with 1,000,000 records and purge time. Writes bench/results.json
 * and bench/RESULTS.md and prints the saturation table.
 *
 * Environment: BENCH_ROUNDS (3), BENCH_DURATION (seconds per run, 3),
 * BENCH_RECORDS (1000000), BENCH_WARMUP_REQUESTS (10000), BENCH_WAIT_QUIET=1
 * (wait for a 1-minute load average below 0.8 first, up to 20 minutes),
 * BENCH_PIN=1, DATABASE_URL, MYSQL_URL.
 *
 * npm run bench -- <row> ...: only those rows (and their baselines), at saturation and at a fixed
 * rate; printed, not recorded.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import {
  baselineName,
  fixedRateRow,
  growthRow,
  median,
  type PacedRun,
  type Pair,
  type Run,
  round2,
  type Step,
  saturationRow,
} from './lib/aggregate.js';
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
import { summariseProfile } from './lib/profile.js';
import { type BenchReplicaPair, startReplicaPair } from './lib/replicas.js';
import { renderLatency, renderMarkdown, renderProcesses, renderTable } from './lib/report.js';
import { type FingerprintCost, previousOf, type Results } from './lib/results.js';
import {
  type BenchDatabase,
  type BenchRedis,
  type BenchSchema,
  commandCalls,
  cpuMicros,
  createMysqlDatabase,
  createSchema,
  createSqliteFile,
  DATABASE_URL,
  delta,
  loadAverage,
  mariadbConnectionCpu,
  mariadbCpuSince,
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
/** Requests each server serves, of each kind it is measured on, before its first measured run: V8 settles after ~5,000. */
const WARMUP_REQUESTS = Number(process.env.BENCH_WARMUP_REQUESTS ?? 10_000);
/** Seconds per run at a fixed rate: at half the peak, about 2 × 2,000 latencies per run. */
const PACED_DURATION = Math.min(DURATION, 2);
const CONNECTIONS = 32;
const RECORDS = Number(process.env.BENCH_RECORDS ?? 1_000_000);
const REPLAY_KEYS = 1_000;
const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));
/**
 * BENCH_PIN=1 (with taskset and 2 cores or more): the server under test alone on CPU 0, the load
 * generator and the bench's Redis servers on the others. Off by default: on 2 cores, a server confined
 * to one competes with its own GC and compiler threads (docs/performance.md).
 */
const PIN = process.env.BENCH_PIN === '1' && cpus().length >= 2 && existsSync('/usr/bin/taskset');
const OTHER_CPUS = `1-${cpus().length - 1}`;
function pin(pid: number, cpuList: string) {
  if (PIN) execFileSync('taskset', ['-a', '-p', '-c', cpuList, String(pid)], { stdio: 'ignore' });
}
const started = Date.now();
const log = (message: string) =>
  process.stderr.write(`[bench ${((Date.now() - started) / 1000).toFixed(0).padStart(3)} s] ${message}\n`);

/**
 * What runs, in order. Three references first: round-trips, the baseline handler plus two more Redis
 * round trips (the floor of a store that needs two: claim, completion); redis-plain, this library on
 * the plain SET commands the peers send instead of the store's fenced scripts; no-io, the baseline's
 * result made without I/O, as a replay from the memory store is. Then every store and peer, first
 * executions and replays, each against its own baseline.
 */
const PLAN: Step[] = [
  { name: 'floor-2-redis-round-trips', server: 'round-trips', baseline: 'baseline', keys: 'fresh' },
  { name: 'floor-redis-plain-commands', server: 'redis-plain', baseline: 'baseline', keys: 'fresh' },
  { name: 'floor-no-io-handler', server: 'no-io', baseline: 'baseline', keys: 'fresh' },
  ...(
    [
      ['memory', 'memory', 'baseline'],
      ['redis', 'redis', 'baseline'],
      ['redis-autopipelining', 'redis-autopipelining', 'baseline-autopipelining'],
      ['redis-node-redis', 'redis-node-redis', 'baseline-node-redis'],
      // The peers on node-redis, as their idempotency layers are, against the same node-redis baseline as the
      // store on node-redis: their handler's INCR goes through node-redis too (BENCH_REDIS_CLIENT).
      ['node-idempotency-node-redis', 'node-idempotency-node-redis', 'baseline-node-redis'],
      ['powertools-node-redis', 'powertools-node-redis', 'baseline-node-redis'],
      ['postgres', 'postgres', 'baseline'],
      // MariaDB through mysql2 (a pool of 10), and SQLite through better-sqlite3 on a WAL file, in the server's process.
      ['mysql', 'mysql', 'baseline'],
      ['sqlite', 'sqlite', 'baseline'],
      ['node-idempotency', 'node-idempotency', 'baseline'],
      ['powertools', 'powertools', 'baseline'],
      ['express-idempotency', 'express-idempotency', 'express-baseline'],
    ] as const
  ).flatMap(([name, server, baseline]) => [
    { name: `${name}-first`, server, baseline, keys: 'fresh' as const },
    { name: `${name}-replay`, server, baseline, keys: 'replay' as const },
  ]),
  // The Redis store's durability options, each against the same store without it in a server of its own, with
  // the same history (first executions against first executions, replays against replays): restartFence
  // (initialized) on the servers' Redis; waitForReplicas { replicas: 1, timeout: 1000 } on a primary with one
  // replica, against the store on that same primary.
  ...(
    [
      ['redis-fence', 'redis-fence', 'redis-unfenced'],
      ['redis-wait', 'redis-wait', 'redis-replicated'],
    ] as const
  ).flatMap(([name, server, baseline]) => [
    { name: `${name}-first`, server, baseline, keys: 'fresh' as const },
    { name: `${name}-replay`, server, baseline, keys: 'replay' as const, baselineKeys: 'replay' as const },
  ]),
];
/**
 * `npm run bench -- <row> ...`: only the rows named, at saturation and at the fixed rate, each against its
 * baseline; printed, not recorded (bench/RESULTS.md is the record of a run of every row).
 */
const NAMED = process.argv.slice(2);
const plan = NAMED.length === 0 ? PLAN : PLAN.filter((step) => NAMED.includes(step.name));
/** The servers whose Redis is the primary with a replica (the others use the bench's main redis-server). */
const REPLICATED = new Set(['redis-replicated', 'redis-wait']);
/** The servers profiled in "Where the CPU goes": [name, server variant, keys, environment]. */
const NODE_REDIS_ENV = { BENCH_REDIS_CLIENT: 'node-redis' };
const PROFILED: (readonly [name: string, server: string, keys: 'fresh' | 'replay', env?: Record<string, string>])[] = [
  ['baseline', 'baseline', 'fresh'],
  ...['memory', 'redis', 'postgres', 'mysql', 'sqlite'].flatMap((store) => [
    [`${store}-first`, store, 'fresh'] as const,
    [`${store}-replay`, store, 'replay'] as const,
  ]),
  // On node-redis (the application's client, and the peers' own): what the client costs, against what the layers cost.
  ['baseline-node-redis', 'baseline', 'fresh', NODE_REDIS_ENV],
  ['redis-node-redis-first', 'redis', 'fresh', NODE_REDIS_ENV],
  ['redis-node-redis-replay', 'redis', 'replay', NODE_REDIS_ENV],
  ['node-idempotency-node-redis-first', 'node-idempotency', 'fresh', NODE_REDIS_ENV],
  ['powertools-node-redis-first', 'powertools', 'fresh', NODE_REDIS_ENV],
];

// ---------------------------------------------------------------- processes
const cleanups: Cleanups = [];
const cleanup = () => runCleanups(cleanups);
exitOnInterrupt(cleanups);

const startServer = (variant: string, env: Record<string, string>, nodeFlags: string[] = []): Promise<Server> =>
  startBenchServer(variant, env, cleanups, { prefix: PIN ? ['taskset', '-c', '0'] : [], nodeFlags });

let loadGenerator: LoadGenerator;
const load = (command: Omit<LoadCommand, 'id' | 'connections'>): Promise<LoadResult> => loadGenerator.load(command);
const primeKeys = (name: string, server: Server, keys: LoadCommand['keys']) =>
  primeKeysOf(loadGenerator, name, server, keys);
const warmUp = (name: string, server: Server, modes: Iterable<'fresh' | 'replay'>) =>
  warmUpOf(loadGenerator, name, server, modes, { requests: WARMUP_REQUESTS, replayKeys: REPLAY_KEYS });
const replayKeys = (prefix: string): LoadCommand['keys'] => ({ mode: 'replay', prefix, count: REPLAY_KEYS });

/** One measured saturation run: the load's figures and every process's CPU over the same window. */
async function measureRun(
  name: string,
  round: number,
  server: Server,
  keys: LoadCommand['keys'],
  redis: RedisOfRun,
): Promise<Run> {
  await primeKeys(name, server, keys);
  await load({ type: 'run', url: server.url, duration: WARMUP, keys });
  const callsBefore = await commandCalls(redis.admin);
  const serverBefore = cpuMicros(server.pid);
  const redisCpuNow = () => redis.pids.reduce((sum, pid) => sum + cpuMicros(pid), 0);
  const redisBefore = redisCpuNow();
  const postgresSince = postgresCpuCounter();
  // The MySQL store's server: the CPU of the MariaDB connection threads serving it (its own database).
  const mariadb = server.variant === 'mysql' ? mysqlDatabase : undefined;
  const mariadbBefore = mariadb === undefined ? undefined : await mariadbConnectionCpu(mariadb);
  const generatorBefore = cpuMicros(loadGenerator.pid);
  const generatorRunsBefore = timeslices(loadGenerator.pid);
  const result = await load({ type: 'run', url: server.url, duration: DURATION, keys });
  const loadCpu = cpuMicros(loadGenerator.pid) - generatorBefore;
  const loadRuns = timeslices(loadGenerator.pid) - generatorRunsBefore;
  const serverCpu = cpuMicros(server.pid) - serverBefore;
  const redisCpu = redisCpuNow() - redisBefore;
  const postgresCpu = postgresSince();
  const mariadbCpu =
    mariadbBefore === undefined ? undefined : mariadbCpuSince(mariadbBefore, await mariadbConnectionCpu(mariadb!));
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
    ...(mariadbCpu === undefined ? {} : { mariadb_cpu_us_per_req: mariadbCpu / result.total }),
    load_cpu_us_per_req: loadCpu / result.total,
    load_runs_per_req: loadRuns / result.total,
    redis_calls_per_req: perReq,
  };
  log(
    `${name.padEnd(28)} ${run.rps.toFixed(0).padStart(6)} req/s  p50 ${run.p50_ms} ms  p99 ${run.p99_ms} ms  cpu ${run.server_cpu_us_per_req.toFixed(0)} µs/req${run.non2xx + run.errors > 0 ? `  NON-2XX ${run.non2xx} ERRORS ${run.errors}` : ''}`,
  );
  return run;
}

/** One run at a fixed rate after WARMUP seconds at it, with the server's CPU per request over it. */
async function pacedRun(name: string, server: Server, keys: LoadCommand['keys'], rate: number): Promise<PacedRun> {
  await load({ type: 'paced', url: server.url, duration: WARMUP, rate, keys });
  const cpuBefore = cpuMicros(server.pid);
  const result = await load({ type: 'paced', url: server.url, duration: PACED_DURATION, rate, keys });
  const server_cpu_us_per_req = (cpuMicros(server.pid) - cpuBefore) / result.total;
  log(
    `${`${name} @${rate}/s`.padEnd(34)} p50 ${(result.p50_ms * 1000).toFixed(0)} µs  p99 ${(result.p99_ms * 1000).toFixed(0)} µs  cpu ${server_cpu_us_per_req.toFixed(0)} µs/req`,
  );
  return { ...result, server_cpu_us_per_req };
}

/**
 * The Redis a run counts commands on and the redis-server processes whose CPU it counts: the primary and
 * its replica for the servers on the replicated pair.
 */
interface RedisOfRun {
  admin: Redis;
  pids: number[];
}

// ---------------------------------------------------------------- phases
interface Services {
  redis: Record<'main' | 'empty' | 'full', BenchRedis>;
  admins: Map<BenchRedis, Redis>;
  /** A primary with one replica (waitForReplicas), and a client of its primary. */
  replicated: BenchReplicaPair & { admin: Redis };
  schemas: Record<'main' | 'empty' | 'full' | 'purge' | 'cost', BenchSchema>;
  /** The MySQL store's database on the local MariaDB, and the SQLite store's file. */
  mysql: BenchDatabase;
  sqlite: BenchDatabase;
}

/** The MySQL store's database (its connection threads are the ones counted). */
let mysqlDatabase: string | undefined;

/**
 * Three redis-servers of the bench's own (the servers', an empty and a full one for growth), a primary
 * with a replica, five schemas, a MariaDB database and a SQLite file.
 */
async function startServices(): Promise<Services> {
  const redis = { main: await startRedis(), empty: await startRedis(), full: await startRedis() };
  for (const r of Object.values(redis)) cleanups.push(() => r.stop());
  const pair = await startReplicaPair();
  cleanups.push(() => pair.stop());
  const replicated = { ...pair, admin: new Redis(pair.primary.url) };
  cleanups.push(() => replicated.admin.disconnect());
  const schemas = {} as Services['schemas'];
  for (const label of ['main', 'empty', 'full', 'purge', 'cost'] as const) {
    schemas[label] = await createSchema(label);
    cleanups.push(() => schemas[label].drop());
  }
  const mysql = await createMysqlDatabase('main');
  cleanups.push(() => mysql.drop());
  mysqlDatabase = mysql.name;
  const sqlite = await createSqliteFile('main');
  cleanups.push(() => sqlite.drop());
  const admins = new Map<BenchRedis, Redis>();
  for (const r of Object.values(redis)) {
    const admin = new Redis(r.url);
    admins.set(r, admin);
    cleanups.push(() => admin.disconnect());
  }
  return { redis, admins, replicated, schemas, mysql, sqlite };
}

/** Where a server's Redis commands and Redis CPU are counted. */
const redisOfServer =
  ({ redis, admins, replicated }: Services) =>
  (server: string): RedisOfRun =>
    REPLICATED.has(server)
      ? { admin: replicated.admin, pids: [replicated.primary.pid, replicated.replica.pid] }
      : { admin: admins.get(redis.main)!, pids: [redis.main.pid] };

/** Commands, statements and bytes per operation, on a Redis nothing else uses yet (reset afterwards). */
async function measureStoreCost({ redis, admins, schemas }: Services) {
  log('store cost: Redis commands, PostgreSQL statements, bytes per record');
  const redisOps = await redisCost(redis.empty.url);
  const pgOps = await postgresCost(schemas.cost.url);
  await admins.get(redis.empty)!.flushall();
  await admins.get(redis.empty)!.config('RESETSTAT');
  return { redisOps, pgOps };
}

/** The application's ioredis client as ioredis makes it (no auto-pipelining), except where a server asks for it. */
const serverEnv = ({ redis, schemas, mysql, sqlite }: Services) => ({
  REDIS_URL: redis.main.url,
  PG_URL: schemas.main.url,
  MYSQL_URL: mysql.url,
  SQLITE_PATH: sqlite.url,
  BENCH_AUTO_PIPELINING: '0',
});

/** Every server the plan needs, the four growth servers (for a run of every row), and the load generator. */
async function startServers(services: Services) {
  log('starting the servers');
  const env = serverEnv(services);
  const pipelined = { ...env, BENCH_AUTO_PIPELINING: '1' };
  // The application's client is node-redis (createClient from redis), for the handler's INCR and the store alike.
  const nodeRedis = { ...env, BENCH_REDIS_CLIENT: 'node-redis' };
  // The Redis store with and without waitForReplicas, on the primary with a replica (the handler's INCR too).
  const replicatedEnv = { ...env, REDIS_URL: services.replicated.primary.url };
  /** name → [variant, environment]; a name that is a variant runs with `env`. */
  const defined: Record<string, [string, Record<string, string>]> = {
    'baseline-autopipelining': ['baseline', pipelined],
    'redis-autopipelining': ['redis', pipelined],
    'baseline-node-redis': ['baseline', nodeRedis],
    'redis-node-redis': ['redis', nodeRedis],
    'node-idempotency-node-redis': ['node-idempotency', nodeRedis],
    'powertools-node-redis': ['powertools', nodeRedis],
    // The Redis store without the fence, beside redis-fence: the same history (the redis server serves other rows too).
    'redis-unfenced': ['redis', env],
    'redis-replicated': ['redis', replicatedEnv],
    'redis-wait': ['redis-wait', replicatedEnv],
  };
  const servers: Record<string, Server> = {};
  for (const name of new Set(plan.flatMap((step) => [step.baseline, step.server]))) {
    const [variant, serverEnvOf] = defined[name] ?? [name, env];
    servers[name] = await startServer(variant, serverEnvOf);
  }
  const { redis, schemas } = services;
  const growth: Record<string, Server> =
    plan !== PLAN
      ? {}
      : {
          'redis-empty': await startServer('redis', { REDIS_URL: redis.empty.url }),
          'redis-full': await startServer('redis', { REDIS_URL: redis.full.url }),
          'postgres-empty': await startServer('postgres', { REDIS_URL: redis.empty.url, PG_URL: schemas.empty.url }),
          'postgres-full': await startServer('postgres', { REDIS_URL: redis.full.url, PG_URL: schemas.full.url }),
        };
  loadGenerator = startLoad(CONNECTIONS, cleanups);
  pin(loadGenerator.pid, OTHER_CPUS);
  for (const r of Object.values(redis)) pin(r.pid, OTHER_CPUS);
  for (const r of [services.replicated.primary, services.replicated.replica]) pin(r.pid, OTHER_CPUS);
  return { servers, growth };
}

/** Each server, on each kind of request it is measured on, before anything is measured. */
async function warmUpServers(servers: Record<string, Server>, growth: Record<string, Server>) {
  log(`warm-up: ${WARMUP_REQUESTS} requests per server and kind of request`);
  const modesOf = new Map<string, Set<'fresh' | 'replay'>>();
  const addMode = (server: string, mode: 'fresh' | 'replay') =>
    modesOf.set(server, (modesOf.get(server) ?? new Set()).add(mode));
  for (const step of plan) {
    addMode(step.baseline, step.baselineKeys ?? 'fresh');
    addMode(step.server, step.keys);
  }
  for (const [server, modes] of modesOf) await warmUp(server, servers[server]!, modes);
  for (const [name, server] of Object.entries(growth)) await warmUp(name, server, ['fresh']);
}

/** A step's baseline keys: fresh, or replay keys of its own (`tag`: the round, the phase). */
const baselineKeysOf = (step: Step, tag: string): LoadCommand['keys'] =>
  step.baselineKeys === 'replay' ? replayKeys(`${step.baseline}-baseline-${tag}`) : { mode: 'fresh' };

/** A B A B at saturation: every variant right after a run of its baseline, and the baseline again after it. */
async function runRounds(servers: Record<string, Server>, redisOf: (server: string) => RedisOfRun) {
  const runs: Run[] = [];
  const pairs: Pair<Run>[] = [];
  const baselineRun = async (step: Step, round: number) => {
    const server = step.baseline;
    const keys = baselineKeysOf(step, `r${round}`);
    const run = await measureRun(baselineName(step), round, servers[server]!, keys, redisOf(server));
    runs.push(run);
    return run;
  };
  for (let round = 1; round <= ROUNDS; round++) {
    log(`round ${round} of ${ROUNDS}`);
    let before: Run | undefined;
    for (const step of plan) {
      if (before?.name !== baselineName(step)) before = await baselineRun(step, round);
      const keys = step.keys === 'fresh' ? { mode: 'fresh' as const } : replayKeys(`${step.name}-r${round}`);
      const variant = await measureRun(step.name, round, servers[step.server]!, keys, redisOf(step.server));
      runs.push(variant);
      const after = await baselineRun(step, round);
      pairs.push({ name: step.name, round, variant, before, after });
      before = after;
    }
  }
  return { runs, pairs };
}

/** A variant's fixed rate: half the peak of the slower of it and its baseline, a rate both sustain. */
const rateOf = (step: Step, runs: Run[]) => {
  const half = (name: string) => Math.round(median(runs.filter((r) => r.name === name).map((r) => r.rps)) / 2);
  return Math.min(half(baselineName(step)), half(step.name));
};

/** Latency and server CPU at a fixed rate, open loop, A B A B as at saturation. */
async function runFixedRate(servers: Record<string, Server>, runs: Run[]) {
  log('latency at a fixed rate: half the lower peak of each variant and its baseline');
  const paced: Pair<PacedRun>[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    let before: { name: string; rate: number; result: PacedRun } | undefined;
    for (const step of plan) {
      const rate = rateOf(step, runs);
      const name = baselineName(step);
      const baseline = servers[step.baseline]!;
      const baselineKeys = baselineKeysOf(step, `paced-r${round}`);
      await primeKeys(name, baseline, baselineKeys);
      // The previous pair's last baseline run serves as this pair's first only at the same rate.
      if (before?.name !== name || before.rate !== rate) {
        before = { name, rate, result: await pacedRun(name, baseline, baselineKeys, rate) };
      }
      const keys = step.keys === 'fresh' ? { mode: 'fresh' as const } : replayKeys(`${step.name}-paced-r${round}`);
      await primeKeys(step.name, servers[step.server]!, keys);
      const variant = await pacedRun(step.name, servers[step.server]!, keys, rate);
      const after = await pacedRun(name, baseline, baselineKeys, rate);
      paced.push({ name: step.name, round, variant, before: before.result, after });
      before = { name, rate, result: after };
    }
  }
  return paced;
}

/**
 * Where the CPU goes: the baseline and each store path again, each in a fresh server, warmed up, under
 * perf where it can record (on-CPU time of every thread), else V8's CPU profiler; measured window only.
 */
async function runProfiles(services: Services) {
  const profiler: 'perf' | 'v8' = perfWorks() ? 'perf' : 'v8';
  log(`profiles: ${profiler} on the baseline and on each store path under the same load`);
  const env = serverEnv(services);
  const profileDir = mkdtempSync(join(tmpdir(), 'bench-profiles-'));
  cleanups.push(() => rmSync(profileDir, { recursive: true, force: true }));
  const profiles: Results['profiles'] = {};
  for (const [name, variant, mode, extra] of PROFILED) {
    const file = join(profileDir, `${name}.${profiler === 'perf' ? 'perf.data' : 'cpuprofile'}`);
    const server =
      profiler === 'perf'
        ? await startServer(variant, { ...env, ...extra }, perfNodeFlags(join(profileDir, `${name}.v8.log`)))
        : await startServer(variant, { ...env, ...extra, BENCH_PROFILE: file });
    if (profiler === 'perf') cleanups.push(() => removePerfMap(server.pid));
    await warmUp(name, server, [mode]);
    const keys = mode === 'fresh' ? { mode: 'fresh' as const } : replayKeys(`${name}-profile`);
    await primeKeys(name, server, keys);
    await load({ type: 'run', url: server.url, duration: WARMUP, keys });
    // perf records from here until stopped; V8's profiler starts on SIGUSR2 and writes on SIGTERM.
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
  return { profiler, profiles };
}

/** RECORDS live records in the full Redis and schema, then first executions against them and the empty ones. */
async function runGrowth({ redis, admins, schemas }: Services, growth: Record<string, Server>) {
  log(`growth: storing ${RECORDS} live records in Redis and in PostgreSQL`);
  await fillRedis(admins.get(redis.full)!, RECORDS);
  const keysInRedis = await admins.get(redis.full)!.dbsize();
  await fillPostgres(schemas.full.url, RECORDS, false);
  const runs: Record<string, Run[]> = {};
  for (let round = 1; round <= ROUNDS; round++) {
    for (const store of ['redis', 'postgres'] as const) {
      for (const state of ['empty', 'full'] as const) {
        const name = `${store}-${state}`;
        const r = redis[state]; // the server's INCR (and Redis store) goes there
        const run = await measureRun(
          `${name} (growth)`,
          round,
          growth[name]!,
          { mode: 'fresh' },
          {
            admin: admins.get(r)!,
            pids: [r.pid],
          },
        );
        (runs[name] ??= []).push(run);
      }
    }
  }
  return {
    redis: { ...growthRow(runs['redis-empty']!, runs['redis-full']!, RECORDS), keys_in_redis: keysInRedis },
    postgres: growthRow(runs['postgres-empty']!, runs['postgres-full']!, RECORDS),
  };
}

/** purgeExpired() over RECORDS expired rows, then the in-process tools, each in a process of its own. */
async function runInProcess(schemas: Services['schemas']) {
  log(`purge: ${RECORDS} expired rows, purgeExpired() in batches of 1,000`);
  await fillPostgres(schemas.purge.url, RECORDS, true);
  const purge = execJson(['--import', 'tsx', here('./purge.ts'), schemas.purge.url]) as {
    deleted: number;
    seconds: number;
    batch_size: number;
  };
  log('in-process overhead per call (mitata, memory store)');
  const overhead = execJson(['--import', 'tsx', here('./overhead.ts'), '4']) as Results['overhead'] & {
    overhead_us_per_call: number;
  };
  log('fingerprint cost over the parse of its body, per shape (in process)');
  const fingerprint = execJson(['--import', 'tsx', here('./fingerprint.ts'), '7']) as FingerprintCost;
  return {
    purge: {
      rows: RECORDS,
      deleted: purge.deleted,
      seconds: round2(purge.seconds),
      batch_size: purge.batch_size,
      rows_per_second: Math.round(purge.deleted / purge.seconds),
    },
    overhead,
    fingerprint,
  };
}

// ---------------------------------------------------------------- main
async function main() {
  const unknown = NAMED.filter((name) => !PLAN.some((step) => step.name === name));
  if (unknown.length > 0) {
    console.error(`unknown row ${unknown.join(', ')}: the rows are\n  ${PLAN.map((step) => step.name).join('\n  ')}`);
    process.exit(2);
  }
  if (plan !== PLAN) return namedRows();
  const record = here('./RESULTS.md');
  const previous = existsSync(record) ? previousOf(readFileSync(record, 'utf8')) : undefined;
  const quiet = process.env.BENCH_WAIT_QUIET === '1' ? await waitQuiet() : undefined;
  const loadBefore = loadAverage();
  log(
    `load average before: ${loadBefore.join(' ')}; ${ROUNDS} rounds of ${DURATION} s runs, ${CONNECTIONS} connections`,
  );

  const services = await startServices();
  const { redisOps, pgOps } = await measureStoreCost(services);
  const { servers, growth } = await startServers(services);
  await warmUpServers(servers, growth);
  const main = services.admins.get(services.redis.main)!;
  const { runs, pairs } = await runRounds(servers, redisOfServer(services));
  const paced = await runFixedRate(servers, runs);
  const { profiler, profiles } = await runProfiles(services);
  const growthRows = await runGrowth(services, growth);
  const { purge, overhead, fingerprint } = await runInProcess(services.schemas);
  const peerBytes = await peerRecordBytes(main);
  const loadAfter = loadAverage();
  await cleanup();

  // ------------------------------------------------------------ collect
  const results: Results = {
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
      pinned: PIN
        ? `the server under test on CPU 0; the load generator and the bench's Redis servers on CPUs ${OTHER_CPUS}; PostgreSQL unpinned`
        : 'no (BENCH_PIN=1 pins them)',
    },
    load_average: {
      before: loadBefore,
      after: loadAfter,
      ...(quiet === undefined ? {} : { waited_for_quiet_s: Math.round(quiet.waited_s), reached_quiet: quiet.quiet }),
    },
    rows: plan.map((step) => saturationRow(step, pairs)),
    store_cost: { redis: redisOps, postgres: pgOps },
    peer_redis_bytes_per_record: peerBytes,
    latency: plan.map((step) => fixedRateRow(step, paced, rateOf(step, runs))),
    profiles,
    overhead_us_per_call: round2(overhead.overhead_us_per_call),
    overhead,
    fingerprint,
    growth: growthRows,
    purge,
    runs,
    duration_s: Math.round((Date.now() - started) / 1000),
  };
  writeReport(results);
}

/** The rows named on the command line, at saturation and at a fixed rate: printed, not recorded. */
async function namedRows() {
  log(`${plan.map((step) => step.name).join(', ')}: ${ROUNDS} rounds of ${DURATION} s runs, printed, not recorded`);
  const services = await startServices();
  const { servers, growth } = await startServers(services);
  await warmUpServers(servers, growth);
  const { runs, pairs } = await runRounds(servers, redisOfServer(services));
  const paced = await runFixedRate(servers, runs);
  await cleanup();
  const rows = plan.map((step) => saturationRow(step, pairs));
  process.stdout.write(`\n${renderTable(rows)}\n`);
  process.stdout.write(`\n${renderProcesses(rows)}\n`);
  process.stdout.write(`\n${renderLatency(plan.map((step) => fixedRateRow(step, paced, rateOf(step, runs))))}\n`);
}

/** bench/results.json (every run), bench/RESULTS.md, and the saturation table on stdout. */
function writeReport(results: Results) {
  writeFileSync(here('./results.json'), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(here('./RESULTS.md'), renderMarkdown(results));
  process.stdout.write(`\n${renderTable(results.rows)}\n`);
  log(`done in ${results.duration_s} s: bench/results.json, bench/RESULTS.md`);
}

// ---------------------------------------------------------------- helpers
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
    mariadb: version('mariadbd', ['--version']),
  };
}

main().catch(async (error: unknown) => {
  console.error(error);
  await cleanup();
  process.exit(1);
});
