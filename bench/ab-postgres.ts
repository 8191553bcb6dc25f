/**
 * Two builds of the PostgreSQL store over HTTP, as `npm run bench` measures them, in one run:
 * `BENCH_LIB_A=path/to/dist node --import tsx bench/ab-postgres.ts` (B is dist/).
 *
 * Three servers (the baseline without idempotency, and the postgres variant on build A
 * and on build B, each on a schema of its own); each round runs, in alternating order,
 * baseline, A, baseline, B, baseline for first executions, then for replays. A variant's
 * ratio is its throughput over the mean of the baseline runs around it. Prints medians and
 * min-max over the rounds: req/s, ratio, server CPU µs per request (the server process),
 * and PostgreSQL CPU µs per request (every postgres process on the machine: other
 * clients of the server count too).
 *
 * Environment: BENCH_LIB_A (required), BENCH_ROUNDS (5), BENCH_DURATION (3 s), DATABASE_URL.
 */
import { resolve as resolvePath } from 'node:path';
import {
  type Cleanups,
  type LoadGenerator,
  runCleanups,
  type Server,
  startServer as startBenchServer,
  startLoad,
} from './lib/processes.js';
import { cpuMicros, createSchema, postgresCpuCounter, startRedis } from './lib/services.js';
import type { LoadCommand, LoadResult } from './load.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const DURATION = Number(process.env.BENCH_DURATION ?? 3);
const LIB_A = process.env.BENCH_LIB_A;
const cleanups: Cleanups = [];
const startServer = (variant: string, env: Record<string, string>) => startBenchServer(variant, env, cleanups);
let loadGenerator: LoadGenerator;
const load = (command: Omit<LoadCommand, 'id' | 'connections'>): Promise<LoadResult> => loadGenerator.load(command);

interface Run {
  rps: number;
  serverUs: number;
  postgresUs: number;
}

async function measure(server: Server, keys: LoadCommand['keys']): Promise<Run> {
  if (keys.mode === 'replay') {
    const primed = await load({ type: 'prime', url: server.url, keys });
    if (primed.non2xx > 0) throw new Error(`priming the replay keys failed (${primed.non2xx} errors)`);
  }
  await load({ type: 'run', url: server.url, duration: 0.5, keys });
  const serverBefore = cpuMicros(server.pid);
  const postgresSince = postgresCpuCounter();
  const result = await load({ type: 'run', url: server.url, duration: DURATION, keys });
  if (result.non2xx + result.errors > 0) throw new Error(`${result.non2xx} non-2xx, ${result.errors} errors`);
  return {
    rps: result.rps,
    serverUs: (cpuMicros(server.pid) - serverBefore) / result.total,
    postgresUs: postgresSince() / result.total,
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const spread = (xs: number[], digits = 0) =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})`;

async function main() {
  if (LIB_A === undefined) throw new Error('BENCH_LIB_A: the directory of build A (a copy of dist/)');
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  const schemaA = await createSchema('ab_a');
  cleanups.push(() => schemaA.drop());
  const schemaB = await createSchema('ab_b');
  cleanups.push(() => schemaB.drop());
  const baseline = await startServer('baseline', { REDIS_URL: redis.url });
  const servers = {
    A: await startServer('postgres', { REDIS_URL: redis.url, PG_URL: schemaA.url, BENCH_LIB: resolvePath(LIB_A) }),
    B: await startServer('postgres', { REDIS_URL: redis.url, PG_URL: schemaB.url }),
  };
  loadGenerator = startLoad(32, cleanups);

  const results = new Map<string, { rps: number[]; ratio: number[]; serverUs: number[]; postgresUs: number[] }>();
  const baselineRuns: Run[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 === 1 ? (['A', 'B'] as const) : (['B', 'A'] as const);
    for (const mode of ['first', 'replay'] as const) {
      let before = await measure(baseline, { mode: 'fresh' });
      baselineRuns.push(before);
      for (const build of order) {
        const keys: LoadCommand['keys'] =
          mode === 'first' ? { mode: 'fresh' } : { mode: 'replay', prefix: `${build}-r${round}`, count: 1_000 };
        const run = await measure(servers[build], keys);
        const after = await measure(baseline, { mode: 'fresh' });
        baselineRuns.push(after);
        const name = `${build} ${mode}`;
        const entry = results.get(name) ?? { rps: [], ratio: [], serverUs: [], postgresUs: [] };
        entry.rps.push(run.rps);
        entry.ratio.push(run.rps / ((before.rps + after.rps) / 2));
        entry.serverUs.push(run.serverUs);
        entry.postgresUs.push(run.postgresUs);
        results.set(name, entry);
        process.stderr.write(
          `round ${round} ${name}: ${run.rps.toFixed(0)} req/s, ratio ${entry.ratio.at(-1)!.toFixed(2)}, server ${run.serverUs.toFixed(0)} µs/req\n`,
        );
        before = after;
      }
    }
  }
  console.log(`\nA = ${LIB_A}, B = dist/; ${ROUNDS} rounds of ${DURATION} s, 32 connections (medians, min-max)`);
  console.log(
    `baseline: ${spread(baselineRuns.map((r) => r.rps))} req/s, server ${spread(baselineRuns.map((r) => r.serverUs))} µs/req`,
  );
  for (const [name, r] of [...results].sort(([a], [b]) => a.localeCompare(b))) {
    console.log(
      `${name.padEnd(9)} ${spread(r.rps)} req/s, ratio ${spread(r.ratio, 2)}, server ${spread(r.serverUs)} µs/req, PostgreSQL ${spread(r.postgresUs)} µs/req`,
    );
  }
}

try {
  await main();
} finally {
  await runCleanups(cleanups);
}
