/**
 * The counted table: per HTTP request, the instructions of the Node server (callgrind, with and
 * without V8's garbage collector) and of the bench's redis-server (callgrind), and the CPU time of the
 * PostgreSQL backends and of the MariaDB connection threads that serve it (SQLite runs in the Node server:
 * its work is in the Node count), for every row beside its own baseline. Writes bench/INSTRUCTIONS.md
 * (the method is stated there); bench/bars.ts reads its cells.
 *
 *   npm run bench:instructions [-- row ...]     (named rows, beside their baselines: printed, not written)
 *   DIST=<a build> ...     (another build than dist/, e.g. an older commit's, built in a worktree and copied out)
 *   JOBS=<n> ...           (rows n at a time, default 2, each lane with a redis-server of its own: the counts do not
 *                           depend on it; the wall time does)
 *   OUT=<file> ...         (write the table there rather than to bench/INSTRUCTIONS.md)
 *   CALLGRIND_KEEP=<dir>   (keep each Node server's dump there, for callgrind_annotate)
 *   WARMUP (5,000), REQUESTS (1,000), CONCURRENCY (4), IDLE_MS (15,000)
 */
import { execFile, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import pg from 'pg';
import { checkBars, renderBars } from './bars.js';
import { PAY_BODY } from './lib/app.js';
import { type CountedRow, parseCounted, renderCounted } from './lib/counted.js';
import { type Cleanups, exitOnInterrupt, runCleanups, startServer } from './lib/processes.js';
import { type BenchRedisNode, startRedisNode } from './lib/replicas.js';
import {
  type BenchDatabase,
  cpuMicros,
  createMysqlDatabase,
  createSchema,
  createSqliteFile,
  DATABASE_URL,
  mariadbConnectionCpu,
  mariadbCpuSince,
} from './lib/services.js';

const repo = fileURLToPath(new URL('..', import.meta.url));
const WARMUP = Number(process.env.WARMUP ?? 5_000);
const REQUESTS = Number(process.env.REQUESTS ?? 1_000);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 4);
const IDLE_MS = Number(process.env.IDLE_MS ?? 15_000);
const JOBS = Math.max(1, Number(process.env.JOBS ?? 2));
const REPLAY_KEYS = 500;
const run = promisify(execFile);
/** Requests served instrumented before the count starts. */
const INSTRUMENTED_WARMUP = 100;
/** V8's garbage collector, by function name (see v8Work). */
const GC_FUNCTION =
  /v8::internal::(Scaveng|Mark|Sweep|Evacuat|Heap::|MinorMark|ConcurrentMarking|IncrementalMarking|BodyDescriptor|RememberedSet|SlotSet|PagedSpace|MemoryAllocator|GCTracer|ObjectStats)|heap::base::/;
/** V8's compilers (bytecode, Sparkplug, Maglev, TurboFan), its parser and its deoptimizer, by function name. */
const JIT_FUNCTION =
  /v8::internal::(compiler|maglev|baseline|interpreter)::|v8::internal::(Parser|PreParser|ParserBase|Scanner|Deoptimizer|Translated|Compiler::|OptimizingCompileDispatcher|Zone)/;

interface RowSpec {
  server: string;
  /** A fresh key per request, or REPLAY_KEYS completed keys reused in turn. */
  keys: 'fresh' | 'replay';
  baseline: 'baseline' | 'baseline-node-redis';
  env?: Record<string, string>;
  /** Run only when named. */
  optional?: boolean;
}

/** The application's Redis client is node-redis (BENCH_REDIS_CLIENT), for the handler's INCR and the Redis store. */
const NODE_REDIS = { BENCH_REDIS_CLIENT: 'node-redis' };
const row = (server: string, keys: RowSpec['keys'], nodeRedis = false, optional = false): RowSpec => ({
  server,
  keys,
  baseline: nodeRedis ? 'baseline-node-redis' : 'baseline',
  ...(nodeRedis ? { env: NODE_REDIS } : {}),
  ...(optional ? { optional } : {}),
});
const pair = (name: string, server: string, nodeRedis = false, optional = false): [string, RowSpec][] => [
  [`${name}-first`, row(server, 'fresh', nodeRedis, optional)],
  [`${name}-replay`, row(server, 'replay', nodeRedis, optional)],
];
/** Every row, in the table's order; the peers on ioredis have the handler's INCR on ioredis, their own layers on node-redis. */
const ROWS: Record<string, RowSpec> = Object.fromEntries([
  ['baseline', row('baseline', 'fresh')],
  ['baseline-node-redis', row('baseline', 'fresh', true)],
  ['floor-no-io-handler', row('no-io', 'fresh')],
  ['floor-2-redis-round-trips', row('round-trips', 'fresh')],
  ['floor-2-redis-round-trips-node-redis', row('round-trips', 'fresh', true)],
  ...pair('memory', 'memory'),
  ...pair('redis', 'redis'),
  ...pair('redis-node-redis', 'redis', true),
  ...pair('postgres', 'postgres'),
  ...pair('mysql', 'mysql'),
  ...pair('sqlite', 'sqlite'),
  ...pair('node-idempotency', 'node-idempotency'),
  ...pair('node-idempotency-node-redis', 'node-idempotency', true),
  ...pair('powertools', 'powertools'),
  ...pair('powertools-node-redis', 'powertools', true),
  ...pair('redis-fence', 'redis-fence', false, true),
]);

const chosen = process.argv.slice(2);
const unknown = chosen.filter((name) => !(name in ROWS));
if (unknown.length > 0) {
  console.error(`unknown row ${unknown.join(', ')}: the rows are\n  ${Object.keys(ROWS).join('\n  ')}`);
  process.exit(2);
}
const names =
  chosen.length === 0
    ? Object.keys(ROWS).filter((name) => !ROWS[name]!.optional)
    : Object.keys(ROWS).filter((name) => chosen.includes(name) || chosen.some((c) => ROWS[c]!.baseline === name));

const started = Date.now();
/** The commit measured (taken at the start: the run is long), with +changes if what it measures differs from it. */
const commit = version('git', ['rev-parse', '--short', 'HEAD']);
const dirty = version('git', ['status', '--porcelain', '--', 'src', 'bench/server.ts', 'bench/lib']) !== '';
const log = (message: string) =>
  process.stderr.write(`[instructions ${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${message}\n`);

// The server as plain JavaScript (no loader thread under valgrind), beside a copy of dist/ and the
// same node_modules it resolves from in bench/.
const out = mkdtempSync(join(tmpdir(), 'bench-callgrind-http-'));
const cleanups: Cleanups = [() => rmSync(out, { recursive: true, force: true })];
exitOnInterrupt(cleanups);

interface Lane {
  redis: BenchRedisNode;
  label: string;
  /** Its redis-server's instructions per ms with nothing to serve (its timers). */
  idlePerMs: number;
}
interface Measured {
  node: number;
  gc: number;
  jit: number;
  redis: number;
  postgres_us: number;
  /** The MySQL rows only. */
  mariadb_us?: number;
}

try {
  mkdirSync(join(out, 'bench'));
  cpSync(process.env.DIST ?? join(repo, 'dist'), join(out, 'dist'), { recursive: true });
  // dist/ resolves #platform through its package's "imports" (Node's primitives under the `node` condition)
  const { imports } = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { imports: unknown };
  writeFileSync(join(out, 'package.json'), `${JSON.stringify({ type: 'module', imports }, null, 2)}\n`);
  symlinkSync(join(repo, 'node_modules'), join(out, 'node_modules'));
  symlinkSync(join(repo, 'bench/node_modules'), join(out, 'bench/node_modules'));
  execFileSync(
    join(repo, 'node_modules/.bin/esbuild'),
    [
      join(repo, 'bench/server.ts'),
      '--bundle',
      '--platform=node',
      '--format=esm',
      '--packages=external',
      '--external:../dist/*',
      `--outfile=${join(out, 'bench/server.mjs')}`,
      '--log-level=warning',
    ],
    { stdio: 'inherit' },
  );
  const schema = await createSchema('callgrind');
  cleanups.push(() => schema.drop());
  const lanes = await Promise.all(
    Array.from({ length: Math.min(JOBS, names.length) }, async (_, i): Promise<Lane> => {
      const label = `redis-${i}`;
      // hz 1: the server's timers (serverCron) run once a second rather than 10 times, and activerehashing
      // no: they do no rehashing, which runs for a set time; what they do is taken out (idleRate), but the
      // less there is to take out, the less it moves.
      const redis = await startRedisNode(
        ['--hz', '1', '--activerehashing', 'no'],
        [...callgrind(label), '--instr-atstart=no'],
      );
      cleanups.push(() => redis.stop());
      const idlePerMs = await idleRate(redis, label);
      log(`${label}: ${n(idlePerMs * 1000)} instructions per second idle`);
      return { redis, label, idlePerMs };
    }),
  );
  log(`${names.length} rows, ${lanes.length} at a time`);
  const measured: Record<string, Measured> = {};
  const queue = [...names];
  await Promise.all(
    lanes.map(async (lane) => {
      for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
        measured[name] = await count(name, ROWS[name]!, lane, schema.url);
        const m = measured[name]!;
        log(
          `${name}: node ${n(m.node)} (${n(m.node - m.gc)} without GC, ${n(m.node - m.gc - m.jit)} nor compiler), redis-server ${n(m.redis)}, PostgreSQL ${m.postgres_us.toFixed(1)} µs${m.mariadb_us === undefined ? '' : `, MariaDB ${m.mariadb_us.toFixed(1)} µs`}`,
        );
      }
    }),
  );
  const rows = names.map((name): CountedRow => {
    const m = measured[name]!;
    const baseline = ROWS[name]!.baseline;
    const b = measured[baseline]!;
    return {
      row: name,
      baseline,
      node: m.node,
      node_added: m.node - b.node,
      node_no_gc: m.node - m.gc,
      node_no_gc_added: m.node - m.gc - (b.node - b.gc),
      node_no_jit: m.node - m.gc - m.jit,
      node_no_jit_added: m.node - m.gc - m.jit - (b.node - b.gc - b.jit),
      redis: m.redis,
      redis_added: m.redis - b.redis,
      postgres_cpu_us: m.postgres_us,
      // The MariaDB column, for every row, once a row of the run has MariaDB (the baselines send it nothing).
      ...(names.some((other) => ROWS[other]!.server === 'mysql') ? { mariadb_cpu_us: m.mariadb_us ?? 0 } : {}),
    };
  });
  const table = renderCounted(rows);
  console.log(`\n${table}\n`);
  if (chosen.length === 0) {
    console.log(`${renderBars(checkBars(parseCounted(table)))}\n`);
    const file = process.env.OUT ?? join(repo, 'bench/INSTRUCTIONS.md');
    writeFileSync(file, record(table, (Date.now() - started) / 1000, lanes.length));
    log(`written: ${file}`);
  } else {
    log('named rows: printed only (bench/INSTRUCTIONS.md is written by a run of every row)');
  }
} finally {
  await runCleanups(cleanups);
}

function callgrind(label: string): string[] {
  return [
    'valgrind',
    '--tool=callgrind',
    `--callgrind-out-file=${join(out, `${label}.callgrind`)}`,
    `--log-file=${join(out, `${label}.valgrind.log`)}`,
  ];
}

/** callgrind_control, without blocking the other lanes' requests meanwhile. */
async function control(pid: number, command: string): Promise<void> {
  await run('callgrind_control', [command, String(pid)]);
}

/** Dumps `pid`'s counts since its last dump or zero: their total, and the dump (removed if `remove`). */
async function dump(pid: number, label: string, remove = false): Promise<{ total: number; file: string }> {
  const before = new Set(readdirSync(out));
  await control(pid, '--dump');
  const file = readdirSync(out)
    .filter((f) => f.startsWith(`${label}.callgrind.`) && !before.has(f))
    .sort()
    .at(-1);
  if (file === undefined) {
    throw new Error(
      `${label}: callgrind wrote no dump\n${readFileSync(join(out, `${label}.valgrind.log`), 'utf8').slice(-2000)}`,
    );
  }
  const path = join(out, file);
  const total = Number(/^(?:summary|totals): (\d+)/m.exec(readFileSync(path, 'utf8'))?.[1] ?? 0);
  if (remove) rmSync(path);
  return { total, file: path };
}

/** One row: its server warmed up uninstrumented, then REQUESTS counted in it, its redis-server and its PostgreSQL backends. */
async function count(name: string, spec: RowSpec, lane: Lane, pgUrl: string): Promise<Measured> {
  const url = new URL(pgUrl);
  // The backends of this server, found by their application_name.
  url.searchParams.set('application_name', `bench-instructions-${name}`);
  // The MySQL store's database, and the SQLite store's file, are the row's own: its MariaDB connection
  // threads are those whose session uses its database.
  let database: BenchDatabase | undefined;
  if (spec.server === 'mysql' || spec.server === 'sqlite') {
    const made = await (spec.server === 'mysql' ? createMysqlDatabase : createSqliteFile)(name.replaceAll('-', '_'));
    cleanups.push(() => made.drop());
    database = made;
  }
  const server = await startServer(
    spec.server,
    {
      REDIS_URL: lane.redis.url,
      PG_URL: url.toString(),
      ...(spec.server === 'mysql' ? { MYSQL_URL: database!.url } : {}),
      ...(spec.server === 'sqlite' ? { SQLITE_PATH: database!.url } : {}),
      BENCH_STORE_TIMEOUT: '10000',
      ...spec.env,
    },
    cleanups,
    {
      prefix: [...callgrind(name), '--instr-atstart=no'],
      script: ['--single-threaded', join(out, 'bench/server.mjs')],
    },
  );
  const exited = new Promise<void>((resolve) => server.child.once('exit', () => resolve()));
  // The replay keys, each completed once (a key the slow start answered 503 for is replaced by another).
  const pool: string[] = [];
  if (spec.keys === 'replay') {
    for (let i = 0; pool.length < REPLAY_KEYS && i < 2 * REPLAY_KEYS; i++) {
      const key = `${name}-${i}`;
      if (await pay(server.url, key)) pool.push(key);
    }
    if (pool.length < REPLAY_KEYS) throw new Error(`${name}: could not complete ${REPLAY_KEYS} replay keys`);
  }
  let next = 0;
  const nextKey = spec.keys === 'fresh' ? () => randomUUID() : () => pool[next++ % pool.length]!;
  const unanswered = await send(server.url, WARMUP, nextKey, true);
  if (unanswered > 0) log(`${name}: ${unanswered} warm-up requests answered 503 (slow start under valgrind)`);

  // Instrumented from here: callgrind translates the code again, so the first requests are slow
  // enough for the store's 1 s timeout. They are left out of the count.
  await control(server.pid, '--instr=on');
  await send(server.url, INSTRUMENTED_WARMUP, nextKey, true);
  const redisPid = lane.redis.pid;
  const backendsBefore = await backendCpu(name);
  const mariadb = spec.server === 'mysql' ? database!.name : undefined;
  const threadsBefore = mariadb === undefined ? undefined : await mariadbConnectionCpu(mariadb);
  await control(redisPid, '--zero');
  await control(server.pid, '--zero');
  const since = performance.now();
  await send(server.url, REQUESTS, nextKey);
  const node = await dump(server.pid, name);
  const redis = (await dump(redisPid, lane.label, true)).total - lane.idlePerMs * (performance.now() - since);
  const backendsAfter = await backendCpu(name);
  const threadsAfter = mariadb === undefined ? undefined : await mariadbConnectionCpu(mariadb);
  server.child.kill('SIGKILL');
  await exited;

  if (!(node.total > 0)) throw new Error(`${name}: no totals in the callgrind dump`);
  if (process.env.CALLGRIND_KEEP) cpSync(node.file, join(process.env.CALLGRIND_KEEP, `${name}.callgrind`));
  const { gc, jit } = await v8Work(node.file);
  rmSync(node.file);
  // A backend that started in the window counts from its start; one that ended in it is lost (logged).
  let postgres = 0;
  for (const [pid, us] of backendsAfter) postgres += Math.max(0, us - (backendsBefore.get(pid) ?? 0));
  const opened = [...backendsAfter.keys()].filter((pid) => !backendsBefore.has(pid)).length;
  const closed = [...backendsBefore.keys()].filter((pid) => !backendsAfter.has(pid)).length;
  if (opened + closed > 0) log(`${name}: PostgreSQL backends ${opened} opened, ${closed} closed in the window`);
  if (threadsBefore !== undefined && threadsAfter !== undefined) {
    if (threadsBefore.size === 0) throw new Error(`${name}: no MariaDB connection uses ${mariadb}`);
    const threadsOpened = [...threadsAfter.keys()].filter((tid) => !threadsBefore.has(tid)).length;
    const threadsClosed = [...threadsBefore.keys()].filter((tid) => !threadsAfter.has(tid)).length;
    if (threadsOpened + threadsClosed > 0)
      log(`${name}: MariaDB connections ${threadsOpened} opened, ${threadsClosed} closed in the window`);
  }
  return {
    node: node.total / REQUESTS,
    gc: gc / REQUESTS,
    jit: jit / REQUESTS,
    redis: redis / REQUESTS,
    postgres_us: postgres / REQUESTS,
    ...(threadsBefore === undefined || threadsAfter === undefined
      ? {}
      : { mariadb_us: mariadbCpuSince(threadsBefore, threadsAfter) / REQUESTS }),
  };
}

/**
 * What a lane's redis-server does per ms with nothing to serve (its timers, about once a second), over
 * IDLE_MS: taken out of each row's count. First the commands the rows send, so that valgrind has
 * translated their code before a row's server (whose store calls time out after 1 s) meets it.
 */
async function idleRate(node: BenchRedisNode, label: string): Promise<number> {
  const client = new Redis(node.url);
  const script =
    "redis.call('HSET', KEYS[1], 's', 'c', 'b', ARGV[1]); redis.call('PEXPIRE', KEYS[1], 60000); return redis.call('HGET', KEYS[1], 'b')";
  for (let i = 0; i < 300; i++) {
    await Promise.all([
      client.eval(script, 1, `warm-${i}`, 'x'.repeat(200)),
      client.set(`warm-set-${i}`, 'x', 'PX', 60_000, 'NX'),
      client.get(`warm-set-${i}`),
      client.incr('warm-counter'),
    ]);
  }
  await client.flushall();
  await client.script('FLUSH');
  client.disconnect();
  await control(node.pid, '--zero');
  await control(node.pid, '--instr=on');
  const since = performance.now();
  await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
  // Instrumented from here on (the rows' windows zero it first): a row's first requests do not wait
  // for valgrind to translate the redis-server's code again.
  return (await dump(node.pid, label, true)).total / (performance.now() - since);
}

/** CPU time so far (µs) of each PostgreSQL backend whose application_name is the row's. */
async function backendCpu(name: string): Promise<Map<number, number>> {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>(
      'select pid from pg_stat_activity where application_name = $1',
      [`bench-instructions-${name}`],
    );
    return new Map(rows.map(({ pid }) => [pid, cpuMicros(pid)]));
  } finally {
    await client.end();
  }
}

/**
 * The instructions of V8's garbage collector and of its compilers in a dump (their functions by name, from
 * callgrind_annotate). Under valgrind a request takes some 50 times longer, so more objects are alive at
 * each collection than in a server at full speed: the GC's share is the least representative part of the
 * count. The compilers' is one-off work (a function optimised, deoptimised, optimised again) that V8's
 * tiering still does after the warm-up: it moves from run to run by up to ~150,000 instructions per request.
 */
async function v8Work(dump: string): Promise<{ gc: number; jit: number }> {
  const { stdout: listing } = await run('callgrind_annotate', ['--threshold=100', dump], {
    maxBuffer: 256 * 1024 * 1024,
  });
  let gc = 0;
  let jit = 0;
  for (const line of listing.split('\n')) {
    const match = /^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$/.exec(line);
    if (match === null || match[2] === 'PROGRAM TOTALS') continue;
    const instructions = Number(match[1]!.replaceAll(',', ''));
    if (GC_FUNCTION.test(match[2]!)) gc += instructions;
    else if (JIT_FUNCTION.test(match[2]!)) jit += instructions;
  }
  return { gc, jit };
}

/**
 * `count` requests, CONCURRENCY at a time; every one must answer 200, except with `tolerate` (the
 * warm-up: a request that the server, slow under valgrind, answers 503 is only not counted).
 */
async function send(url: string, count: number, key: () => string, tolerate = false): Promise<number> {
  let left = count;
  let failed = 0;
  const worker = async () => {
    while (left > 0) {
      left--;
      if (!(await pay(url, key()))) failed++;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  if (failed > 0 && !tolerate) throw new Error(`${url}: ${failed} of ${count} requests did not answer 200`);
  return failed;
}

/** One request; true if it answered 200, false on a 503 (logged), throws on any other answer. */
async function pay(url: string, key: string): Promise<boolean> {
  const response = await fetch(`${url}/pay`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: PAY_BODY,
  });
  const body = await response.text();
  if (response.status === 200) return true;
  if (response.status === 503) return false;
  throw new Error(`${url}: ${response.status} ${body.slice(0, 300)}`);
}

function n(x: number): string {
  return Math.round(x).toLocaleString('en-US');
}

function version(command: string, args: string[]): string {
  try {
    return execFileSync(command, args, { encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

/** bench/INSTRUCTIONS.md: the run's conditions, the method once, the table. */
function record(table: string, seconds: number, jobs: number): string {
  return `# Instructions per request, counted

Written by \`npm run bench:instructions\` at commit ${commit}${dirty ? '+changes' : ''}${process.env.DIST ? ` (the build in ${process.env.DIST})` : ''} on ${new Date().toISOString()};
the run took ${Math.round(seconds)} s (${jobs} row${jobs > 1 ? 's' : ''} at a time). ${cpus()[0]?.model ?? 'unknown'}, ${cpus().length} cores;
Node ${process.version}; ${version('valgrind', ['--version'])}; Redis ${version('redis-server', ['--version']).replace(/^.*v=(\S+).*$/, '$1')};
PostgreSQL ${version('psql', [DATABASE_URL, '-Atc', 'show server_version'])}; ${version('mariadbd', ['--version'])}. The saturation throughput of bench/RESULTS.md is context: it moves with the host.

## Method

- Each row is one server of \`bench/server.ts\` (the library from the built \`dist/\`), the same \`POST /pay\` as in
  bench/RESULTS.md: a tRPC mutation whose handler does one Redis \`INCR\`. *first*: a fresh \`Idempotency-Key\` per
  request; *replay*: ${REPLAY_KEYS} keys completed beforehand, reused in turn. Rows ending in *-node-redis* have node-redis as
  the application's client (the handler's \`INCR\`, the Redis store); the peers' own layers use node-redis in every row.
- The server runs under \`valgrind --tool=callgrind\`, \`node --single-threaded\` (no compiler or GC thread beside it):
  ${n(WARMUP)} requests uninstrumented (V8 settles), then callgrind counts the next ${n(REQUESTS)}, ${CONCURRENCY} at a time.
  *node*: its instructions per request, in user space (the kernel's socket work is left out). *node without GC*: less
  V8's garbage collector (its functions by name): under valgrind a request takes ~50 times longer, so the GC's share is
  the least representative part. *node without GC or compiler*: less V8's compilers, parser and deoptimizer too
  (by function name): one-off work that tiering still does in the window, which moves from run to run.
- *redis-server*: the bench's own redis-server (\`--hz 1\`, nothing on disk), under callgrind too, counted over the same
  ${n(REQUESTS)} requests, less its idle work: its timers, which run once a second (\`--hz 1 --activerehashing no\`),
  as counted over ${n(IDLE_MS / 1000)} s with nothing to serve at the start of the run, times the window's length.
- *PostgreSQL CPU µs*: its instructions cannot be counted here (the server is shared and not ours to run under
  valgrind; the machine has no hardware counters), so the CPU time (user + system, \`/proc/<pid>/task/*/schedstat\`) of
  the backends serving the row's server (found by \`application_name\`) over the same window, per request. Requests
  reach them slowly (the server is under valgrind), so each commit waits for its own WAL flush. The WAL writer and
  the checkpointer are left out. A time: it moves with the host by ~10 %.
- *MariaDB CPU µs* (the MySQL store's rows, on a database of their own): likewise, the CPU time of the MariaDB
  connection threads serving the row's server (MariaDB runs a thread per connection in one process:
  \`information_schema.PROCESSLIST.TID\` of the sessions on the row's database, \`/proc/<pid>/task/<tid>/schedstat\`).
  InnoDB's background threads (purge, page cleaner) are left out. The SQLite store runs in the Node server
  (better-sqlite3, a WAL file, \`synchronous\` FULL): its work is in the Node count, and its fsyncs in no column.
- *added*: the row's figure less its baseline's (*baseline* column: the same server without idempotency, on the same
  client; it sends PostgreSQL and MariaDB nothing).
- Repeatability, two runs on a quiet host (load average below 3): redis-server's counts within 1 % (±300
  instructions per request); the Node server's without GC or compiler within 1.5 % for 17 rows of 21, the others
  within 7 % (powertools-node-redis-first; redis-first 4 %); without GC within 7.5 %; with GC up to 26 %.
  PostgreSQL's CPU time within 6 %. On a loaded host (load average 8 to 13) the Node counts rose by up to 50 %
  (without GC 26 %): V8 work that follows time rather than requests (a request under valgrind takes ~50 times as
  long). Make the table on a quiet host, and count again the rows a bar turns on.
- \`npm run bench:instructions -- <row> ...\` counts named rows beside their baselines and prints them;
  \`npm run bench:bars\` checks issue 37's bars against this table's cells.

## Counted

${table}
`;
}
