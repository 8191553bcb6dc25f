/**
 * What `waitForReplicas` adds to a request's latency at a fixed rate, over HTTP:
 *
 *   node --import tsx bench/wait-latency.ts
 *
 * A primary with one replica of the bench's own (bench/lib/replicas.ts), and two servers on it
 * (bench/server.ts, the library from dist/): the Redis store without the option (redis) and with
 * `waitForReplicas: { replicas: 1, timeout: 1000 }` (redis-wait). Each round runs, open loop at RATE
 * requests per second for DURATION seconds each (after 0.5 s at that rate), redis, redis-wait, redis
 * (then the same order reversed next round), first executions and then replays. A low rate, well under
 * either's peak, so that what is measured is the request's own time rather than queueing behind others:
 * on a shared 2-core machine the peak moves with the neighbours. Prints medians (min-max) over the rounds
 * of p50 and p99 in µs, and what redis-wait adds over the mean of the redis runs around it.
 *
 * Environment: BENCH_ROUNDS (5), BENCH_DURATION (3), RATE (300), BENCH_WARMUP_REQUESTS (10,000).
 */
import { median } from './lib/aggregate.js';
import {
  type Cleanups,
  exitOnInterrupt,
  primeKeys,
  runCleanups,
  type Server,
  startLoad,
  startServer,
  warmUp,
} from './lib/processes.js';
import { startReplicaPair } from './lib/replicas.js';
import { cpuMicros } from './lib/services.js';
import type { LoadCommand, LoadResult } from './load.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const DURATION = Number(process.env.BENCH_DURATION ?? 3);
const RATE = Number(process.env.RATE ?? 300);
const WARMUP_REQUESTS = Number(process.env.BENCH_WARMUP_REQUESTS ?? 10_000);
const cleanups: Cleanups = [];
exitOnInterrupt(cleanups);

interface Paced {
  p50: number;
  p99: number;
  cpu: number;
  failed: number;
}

async function main() {
  const pair = await startReplicaPair();
  cleanups.push(() => pair.stop());
  const env = { REDIS_URL: pair.primary.url };
  const servers: Record<'redis' | 'redis-wait', Server> = {
    redis: await startServer('redis', env, cleanups),
    'redis-wait': await startServer('redis-wait', env, cleanups),
  };
  const generator = startLoad(32, cleanups);
  const load = (command: Omit<LoadCommand, 'id' | 'connections'>): Promise<LoadResult> => generator.load(command);
  for (const [name, server] of Object.entries(servers)) {
    await warmUp(generator, name, server, ['fresh', 'replay'], { requests: WARMUP_REQUESTS, replayKeys: 1_000 });
  }

  const paced = async (name: string, server: Server, keys: LoadCommand['keys']): Promise<Paced> => {
    await primeKeys(generator, name, server, keys);
    await load({ type: 'paced', url: server.url, duration: 0.5, rate: RATE, keys });
    const before = cpuMicros(server.pid);
    const r = await load({ type: 'paced', url: server.url, duration: DURATION, rate: RATE, keys });
    return {
      p50: r.p50_ms * 1000,
      p99: r.p99_ms * 1000,
      cpu: (cpuMicros(server.pid) - before) / r.total,
      failed: r.non2xx + r.errors,
    };
  };

  const rows = new Map<string, { wait: Paced[]; plain: Paced[]; addedP50: number[]; addedP99: number[] }>();
  for (let round = 1; round <= ROUNDS; round++) {
    for (const mode of ['first', 'replay'] as const) {
      const keys = (name: string, i: number): LoadCommand['keys'] =>
        mode === 'first' ? { mode: 'fresh' } : { mode: 'replay', prefix: `${name}-r${round}-${i}`, count: 1_000 };
      const [outer, inner] = round % 2 === 1 ? (['redis', 'redis-wait'] as const) : (['redis-wait', 'redis'] as const);
      const a = await paced(outer, servers[outer], keys(outer, 0));
      const b = await paced(inner, servers[inner], keys(inner, 1));
      const c = await paced(outer, servers[outer], keys(outer, 2));
      const around = { p50: (a.p50 + c.p50) / 2, p99: (a.p99 + c.p99) / 2, cpu: (a.cpu + c.cpu) / 2, failed: 0 };
      const wait = outer === 'redis-wait' ? around : b;
      const plain = outer === 'redis-wait' ? b : around;
      const row = rows.get(mode) ?? { wait: [], plain: [], addedP50: [], addedP99: [] };
      row.wait.push({ ...wait, failed: outer === 'redis-wait' ? a.failed + c.failed : b.failed });
      row.plain.push(plain);
      row.addedP50.push(wait.p50 - plain.p50);
      row.addedP99.push(wait.p99 - plain.p99);
      rows.set(mode, row);
      process.stderr.write(
        `round ${round} ${mode}: redis p50 ${plain.p50.toFixed(0)} p99 ${plain.p99.toFixed(0)} µs; redis-wait p50 ${wait.p50.toFixed(0)} p99 ${wait.p99.toFixed(0)} µs\n`,
      );
    }
  }
  const spread = (xs: number[]) =>
    `${Math.round(median(xs)).toLocaleString('en-US')} (${Math.round(Math.min(...xs)).toLocaleString('en-US')} to ${Math.round(Math.max(...xs)).toLocaleString('en-US')})`;
  console.log(
    `\n${ROUNDS} rounds at ${RATE} req/s, ${DURATION} s per run, on a primary with one replica; µs, medians (min to max) over the rounds`,
  );
  console.log(
    '| requests | redis p50 / p99 | redis-wait p50 / p99 | added p50 | added p99 | server CPU µs/req, redis / redis-wait | failed |',
  );
  console.log('| --- | --- | --- | ---: | ---: | --- | ---: |');
  for (const [mode, r] of rows) {
    console.log(
      `| ${mode} | ${Math.round(median(r.plain.map((x) => x.p50)))} / ${Math.round(median(r.plain.map((x) => x.p99)))} | ${Math.round(median(r.wait.map((x) => x.p50)))} / ${Math.round(median(r.wait.map((x) => x.p99)))} | ${spread(r.addedP50)} | ${spread(r.addedP99)} | ${Math.round(median(r.plain.map((x) => x.cpu)))} / ${Math.round(median(r.wait.map((x) => x.cpu)))} | ${r.wait.reduce((n, x) => n + x.failed, 0)} |`,
    );
  }
}

try {
  await main();
} finally {
  await runCleanups(cleanups);
}
