/**
 * Two builds of one store over HTTP, as `npm run bench` measures them, in one run:
 * `BENCH_LIB_A=path/to/dist node --import tsx bench/ab.ts` (B is dist/).
 *
 * Three servers (the baseline without idempotency, and the variant BENCH_VARIANT on build A
 * and on build B: dist/, or BENCH_LIB as bench/server.ts reads it; the postgres variant each on a
 * schema of its own); each round runs, in alternating order,
 * baseline, A, baseline, B, baseline for first executions, then for replays. A variant's
 * ratio is its throughput over the mean of the baseline runs around it. Prints medians and
 * min-max over the rounds: req/s, ratio, server CPU µs per request (the server process),
 * Redis CPU µs per request (the bench's own redis-server), and PostgreSQL CPU µs per request
 * (every postgres process on the machine: other clients of the server count too).
 *
 * Environment: BENCH_LIB_A (required), BENCH_VARIANT (postgres; or redis, memory, redis-fence), BENCH_VARIANT_A
 * (A's variant, if another: `BENCH_LIB_A=dist BENCH_VARIANT=redis BENCH_VARIANT_A=redis-fence` sets the restart
 * fence against the store without it on one build),
 * BENCH_ROUNDS (5), BENCH_DURATION (3 s), BENCH_WARMUP_REQUESTS (10,000 of each kind per server
 * before the first round), DATABASE_URL.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median } from './lib/aggregate.js';
import {
  type Cleanups,
  exitOnInterrupt,
  type LoadGenerator,
  primeKeys,
  runCleanups,
  type Server,
  startServer as startBenchServer,
  startLoad,
  warmUp,
} from './lib/processes.js';
import { cpuMicros, createSchema, postgresCpuCounter, startRedis } from './lib/services.js';
import type { LoadCommand, LoadResult } from './load.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const DURATION = Number(process.env.BENCH_DURATION ?? 3);
const LIB_A = process.env.BENCH_LIB_A;
const VARIANT = process.env.BENCH_VARIANT ?? 'postgres';
/** A's server variant, when it differs from B's: redis-fence against redis, on one build (BENCH_LIB_A=dist). */
const VARIANT_A = process.env.BENCH_VARIANT_A ?? VARIANT;
const VARIANTS = ['postgres', 'redis', 'memory', 'redis-fence'];
/** Requests of each kind every server serves before the first round (V8 settles after ~5,000). */
const WARMUP_REQUESTS = Number(process.env.BENCH_WARMUP_REQUESTS ?? 10_000);
const cleanups: Cleanups = [];
// Ctrl-C stops the servers and redis-server and drops the schemas, as at the end of a run.
exitOnInterrupt(cleanups);
const startServer = (variant: string, env: Record<string, string>) => startBenchServer(variant, env, cleanups);

/**
 * A copy of the build in `dir` as `<temporary>/dist`, beside a package.json with this package's "imports" and a link
 * to its node_modules: dist/ resolves `#platform` through them (Node's primitives under the `node` condition) and
 * its peers from there, and a copy of dist/ elsewhere has no package.json, or another one.
 */
function packaged(dir: string): string {
  const root = mkdtempSync(join(tmpdir(), 'bench-ab-'));
  cleanups.push(() => rmSync(root, { recursive: true, force: true }));
  cpSync(resolvePath(dir), join(root, 'dist'), { recursive: true });
  const { imports } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    imports: unknown;
  };
  writeFileSync(join(root, 'package.json'), `${JSON.stringify({ type: 'module', imports }, null, 2)}\n`);
  symlinkSync(fileURLToPath(new URL('../node_modules', import.meta.url)), join(root, 'node_modules'));
  return join(root, 'dist');
}
let loadGenerator: LoadGenerator;
const load = (command: Omit<LoadCommand, 'id' | 'connections'>): Promise<LoadResult> => loadGenerator.load(command);

interface Run {
  rps: number;
  serverUs: number;
  redisUs: number;
  postgresUs: number;
}
let redisPid = 0;

async function measure(name: string, server: Server, keys: LoadCommand['keys']): Promise<Run> {
  await primeKeys(loadGenerator, name, server, keys);
  await load({ type: 'run', url: server.url, duration: 0.5, keys });
  const serverBefore = cpuMicros(server.pid);
  const redisBefore = cpuMicros(redisPid);
  const postgresSince = postgresCpuCounter();
  const result = await load({ type: 'run', url: server.url, duration: DURATION, keys });
  if (result.non2xx + result.errors > 0) throw new Error(`${result.non2xx} non-2xx, ${result.errors} errors`);
  return {
    rps: result.rps,
    serverUs: (cpuMicros(server.pid) - serverBefore) / result.total,
    redisUs: (cpuMicros(redisPid) - redisBefore) / result.total,
    postgresUs: postgresSince() / result.total,
  };
}

const spread = (xs: number[], digits = 0) =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})`;

async function main() {
  if (LIB_A === undefined) throw new Error('BENCH_LIB_A: the directory of build A (a copy of dist/)');
  for (const v of [VARIANT, VARIANT_A]) {
    if (!VARIANTS.includes(v)) throw new Error(`BENCH_VARIANT(_A): one of ${VARIANTS.join(', ')}, not ${v}`);
  }
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  redisPid = redis.pid;
  const env = async (label: string): Promise<Record<string, string>> => {
    if (VARIANT !== 'postgres') return { REDIS_URL: redis.url };
    const schema = await createSchema(label);
    cleanups.push(() => schema.drop());
    return { REDIS_URL: redis.url, PG_URL: schema.url };
  };
  const baseline = await startServer('baseline', { REDIS_URL: redis.url });
  const servers = {
    A: await startServer(VARIANT_A, { ...(await env('ab_a')), BENCH_LIB: packaged(LIB_A) }),
    B: await startServer(VARIANT, {
      ...(await env('ab_b')),
      ...(process.env.BENCH_LIB === undefined ? {} : { BENCH_LIB: packaged(process.env.BENCH_LIB) }),
    }),
  };
  loadGenerator = startLoad(32, cleanups);
  const warmUpSettings = { requests: WARMUP_REQUESTS, replayKeys: 1_000 };
  await warmUp(loadGenerator, 'baseline', baseline, ['fresh'], warmUpSettings);
  for (const build of ['A', 'B'] as const) {
    await warmUp(loadGenerator, build, servers[build], ['fresh', 'replay'], warmUpSettings);
  }

  const results = new Map<
    string,
    { rps: number[]; ratio: number[]; serverUs: number[]; redisUs: number[]; postgresUs: number[] }
  >();
  const baselineRuns: Run[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 === 1 ? (['A', 'B'] as const) : (['B', 'A'] as const);
    for (const mode of ['first', 'replay'] as const) {
      let before = await measure('baseline', baseline, { mode: 'fresh' });
      baselineRuns.push(before);
      for (const build of order) {
        const keys: LoadCommand['keys'] =
          mode === 'first' ? { mode: 'fresh' } : { mode: 'replay', prefix: `${build}-r${round}`, count: 1_000 };
        const run = await measure(build, servers[build], keys);
        const after = await measure('baseline', baseline, { mode: 'fresh' });
        baselineRuns.push(after);
        const name = `${build} ${mode}`;
        const entry = results.get(name) ?? { rps: [], ratio: [], serverUs: [], redisUs: [], postgresUs: [] };
        entry.rps.push(run.rps);
        entry.ratio.push(run.rps / ((before.rps + after.rps) / 2));
        entry.serverUs.push(run.serverUs);
        entry.redisUs.push(run.redisUs);
        entry.postgresUs.push(run.postgresUs);
        results.set(name, entry);
        process.stderr.write(
          `round ${round} ${name}: ${run.rps.toFixed(0)} req/s, ratio ${entry.ratio.at(-1)!.toFixed(2)}, server ${run.serverUs.toFixed(0)} µs/req\n`,
        );
        before = after;
      }
    }
  }
  console.log(
    `\n${VARIANT_A === VARIANT ? VARIANT : `A ${VARIANT_A}, B ${VARIANT}`}: A = ${LIB_A}, B = ${process.env.BENCH_LIB ?? 'dist/'}; ${ROUNDS} rounds of ${DURATION} s, 32 connections (medians, min-max)`,
  );
  console.log(
    `baseline: ${spread(baselineRuns.map((r) => r.rps))} req/s, server ${spread(baselineRuns.map((r) => r.serverUs))} µs/req, Redis ${spread(baselineRuns.map((r) => r.redisUs))} µs/req`,
  );
  for (const [name, r] of [...results].sort(([a], [b]) => a.localeCompare(b))) {
    console.log(
      `${name.padEnd(9)} ${spread(r.rps)} req/s, ratio ${spread(r.ratio, 2)}, server ${spread(r.serverUs)} µs/req, Redis ${spread(r.redisUs)} µs/req, PostgreSQL ${spread(r.postgresUs)} µs/req`,
    );
  }
  // A over B within each round (each against the baseline runs around it), then the median over the rounds.
  for (const mode of ['first', 'replay'] as const) {
    const a = results.get(`A ${mode}`)!;
    const b = results.get(`B ${mode}`)!;
    const over = (figure: 'ratio' | 'serverUs' | 'redisUs') =>
      spread(
        a[figure].map((x, i) => x / b[figure][i]!),
        3,
      );
    console.log(
      `A / B ${mode}: throughput ratio ${over('ratio')}, server CPU ${over('serverUs')}, Redis CPU ${over('redisUs')}`,
    );
  }
}

try {
  await main();
} finally {
  await runCleanups(cleanups);
}
