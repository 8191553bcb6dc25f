/**
 * The bench's own parts that a run's figures depend on, where a mistake would not show as a failure:
 * the reading of perf's samples, the ratios and medians of a run's rows, what the report carries from
 * one record to the next, and what Ctrl-C leaves behind.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { checkBars } from '../../bench/bars.js';
import {
  allCpu,
  fixedRateRow,
  growthRow,
  type PacedRun,
  type Pair,
  type Row,
  type Run,
  redisCommands,
  type Step,
  saturationRow,
} from '../../bench/lib/aggregate.js';
import { type CountedRow, parseCounted, renderCounted } from '../../bench/lib/counted.js';
import { summarisePerfScript } from '../../bench/lib/perf.js';
import { renderMarkdown } from '../../bench/lib/report.js';
import { fingerprintTable } from '../../bench/lib/report-costs.js';
import { type FingerprintCost, previousOf, type Results } from '../../bench/lib/results.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));

describe('summarisePerfScript (perf script -F tid,ip,sym)', () => {
  // Five samples of 250 µs of CPU each; the server's main thread is 100, 101 another of its threads.
  const script = [
    '  100 ',
    '\tffffffff816bb998 ksys_write',
    '\t          9dd4a6 node::StreamBase::Writev',
    '\t    7f52e73b8646 JS:*writevGeneric node:internal/stream_base_commons:123:23',
    '\t    7f52e73bb46d JS:^sendCommand /app/node_modules/ioredis/built/Redis.js:354:16',
    '',
    '  100 ',
    '\t         1508083 Builtins_LoadIC',
    '\t    7f52e7469bd9 JS:*runClaimed file:///app/dist/core/run-claimed.js:14:33',
    '\t    7f52e741ac2e JS:*execute file:///app/dist/core/engine.js:59:27',
    '',
    '  100 ',
    '\t          c4993d v8::internal::Scavenger::ScavengeObject<v8::internal::FullHeapObjectSlot>',
    '\t    7f52e7469bd9 JS:*runClaimed file:///app/dist/core/run-claimed.js:14:33',
    '',
    '  101 ',
    '\t          c7e636 v8::internal::compiler::GraphReducer::ReduceTop',
    '\t          c7e9cd v8::platform::DefaultJobWorker::Run',
    '',
    '  100 ',
    '\t    7f52e73f7fb4 JS:*get signal node:internal/abort_controller:152:7',
    '',
  ].join('\n');

  it('counts builtins for their JavaScript caller, the kernel and V8 apart, per request', () => {
    const summary = summarisePerfScript(script, 100, 5);
    expect(summary.busy_us_per_req).toBe(250);
    expect(summary.owners).toEqual({
      'Linux kernel': 50,
      'trpc-idempotency': 50,
      GC: 50,
      'JIT compiler': 50,
      Node: 50,
    });
    expect(summary.top.map((f) => [f.frame, f.owner])).toEqual(
      expect.arrayContaining([
        ['kernel, from writevGeneric (node:internal/stream_base_commons)', 'Linux kernel'],
        ['runClaimed (dist/core/run-claimed.js)', 'trpc-idempotency'],
        ['(garbage collector)', 'GC'],
        ['(optimising compiler)', 'JIT compiler'],
        ['get signal (node:internal/abort_controller)', 'Node'],
      ]),
    );
    expect(summary.top.every((f) => f.share === 0.2)).toBe(true);
  });
});

/** One saturation run of `name` at `rps`, `cpu` µs of server CPU per request. */
const run = (name: string, round: number, rps: number, cpu: number, fields: Partial<Run> = {}): Run => ({
  name,
  round,
  rps,
  p50_ms: 6,
  p99_ms: 18,
  non2xx: 0,
  errors: 0,
  server_cpu_us_per_req: cpu,
  redis_cpu_us_per_req: 16,
  postgres_cpu_us_per_req: 0,
  load_cpu_us_per_req: 30,
  load_runs_per_req: 0.1,
  redis_calls_per_req: { incr: 1 },
  ...fields,
});

describe('saturationRow (a variant against the baseline runs either side of it)', () => {
  const step: Step = { name: 'redis-first', server: 'redis', baseline: 'baseline', keys: 'fresh' };
  // Round 1: 3,600 between 4,000 and 4,200 (0.878); round 2: 3,000 between 3,000 and 3,400 (0.9375);
  // round 3: 4,000 between 4,000 and 4,000 (1).
  const pairs: Pair<Run>[] = [
    [1, 4000, 3600, 4200],
    [2, 3000, 3000, 3400],
    [3, 4000, 4000, 4000],
  ].map(([round, before, variant, after]) => ({
    name: 'redis-first',
    round: round!,
    before: run('baseline', round!, before!, 260),
    variant: run('redis-first', round!, variant!, 300 + round!, { non2xx: round === 2 ? 3 : 0, errors: 1 }),
    after: run('baseline', round!, after!, 270),
  }));
  // Another variant's pair in the same rounds must not count.
  const other = { ...pairs[0]!, name: 'memory-first', variant: run('memory-first', 1, 100, 900) };

  it("gives each round's ratio over the mean of its two baseline runs, and their median", () => {
    const row = saturationRow(step, [other, ...pairs]);
    expect(row.ratios).toEqual([0.878, 0.938, 1]);
    expect(row.ratio).toBe(0.938);
    expect(row.rps).toBe(3600);
    expect(row.baseline_rps).toBe(4000);
  });

  it('takes the medians of the variant and of both baselines around it, and counts every failed request', () => {
    const row = saturationRow(step, pairs);
    expect(row.server_cpu_us_per_req).toBe(302);
    expect(row.baseline_server_cpu_us_per_req).toBe(265);
    expect(row.non2xx).toBe(6);
    expect(allCpu(row)).toEqual({ variant: 302 + 30 + 16, baseline: 265 + 30 + 16 });
  });
});

describe('redisCommands (Redis commands per request, from INFO commandstats)', () => {
  it("leaves the handler's INCR out and counts what ran inside the scripts apart from the scripts sent", () => {
    expect(redisCommands({ evalsha: 2.01, hset: 2, hmget: 2, time: 1, incr: 1 })).toEqual({ sent: 2.01, inScripts: 5 });
    expect(redisCommands({ set: 2, incr: 1 })).toEqual({ sent: 2, inScripts: 0 });
  });
});

describe('fixedRateRow and growthRow', () => {
  const paced = (p50_ms: number, cpu: number) =>
    ({ p50_ms, p99_ms: p50_ms * 10, server_cpu_us_per_req: cpu, non2xx: 0, errors: 0 }) as PacedRun;
  const step: Step = { name: 'memory-replay', server: 'memory', baseline: 'baseline', keys: 'replay' };

  it('adds the variant minus the mean of its baselines, and gives their CPU over its own', () => {
    const row = fixedRateRow(
      step,
      [
        { name: 'memory-replay', round: 1, before: paced(1, 360), variant: paced(0.7, 340), after: paced(0.9, 362) },
        { name: 'memory-replay', round: 2, before: paced(1, 350), variant: paced(0.8, 350), after: paced(1, 350) },
      ],
      1_800,
    );
    expect(row).toMatchObject({ rate: 1_800, p50_us: 750, baseline_p50_us: 975, added_p50_us: -225 });
    expect(row.server_cpu_us_per_req).toBe(345);
    expect(row.cost_ratio).toBe(1.031);
  });

  it("gives the ratio of each round's full store over its empty one", () => {
    const r = (rps: number) => ({ rps, p99_ms: 20 }) as Run;
    expect(growthRow([r(4000), r(3000), r(2000)], [r(4000), r(3300), r(1000)], 1_000_000)).toMatchObject({
      empty_rps: 3000,
      full_rps: 3300,
      ratio: 1,
    });
  });
});

describe('previousOf and summaryOf (what one record carries to the next)', () => {
  // The summary line of the record committed on 2026-12-01, as the report wrote it then.
  const committed =
    '<!-- bench-summary {"date":"2026-12-01T10:59:34.973Z","commit":"cbf7f51","machine":"AMD EPYC, 2 cores","baseline_rps":3994,"baseline_rps_range":[3298,4325],"ratios":{"redis-first":0.889,"postgres-replay":0.71},"overhead_us_per_call":6.09} -->';

  it('reads the summary of a committed record', () => {
    const previous = previousOf(`# Benchmark results\n\n...\n\n${committed}\n`);
    expect(previous).toMatchObject({
      commit: 'cbf7f51',
      machine: 'AMD EPYC, 2 cores',
      baseline_rps: 3994,
      baseline_rps_range: [3298, 4325],
      ratios: { 'redis-first': 0.889, 'postgres-replay': 0.71 },
      overhead_us_per_call: 6.09,
    });
    expect(previousOf('# Benchmark results\n')).toBeUndefined();
  });

  it('writes a summary the next run reads back: ratios, the baseline median and the range of its runs', () => {
    const results = resultsOf();
    const markdown = renderMarkdown(results);
    expect(previousOf(markdown)).toEqual({
      date: results.date,
      commit: 'abc1234',
      machine: 'AMD EPYC, 2 cores',
      baseline_rps: 4100,
      baseline_rps_range: [3900, 4300],
      ratios: { 'redis-first': 0.9, 'postgres-first': 0.4, 'express-idempotency-first': 0.8 },
      overhead_us_per_call: 6.1,
    });
    // The previous record's ratio beside this one's.
    expect(markdown).toContain('| ratio, redis-first | 0.89 | 0.90 |');
    expect(markdown).toContain('| ratio, postgres-first |  | 0.40 |');
  });

  it('gives a column of store calls per waiting duplicate for each duration the holder ran', () => {
    const markdown = renderMarkdown(resultsOf());
    expect(markdown).toContain('| In-flight rejection | Waiting duplicate (50 ms) |');
    expect(markdown).toContain('| Redis commands sent (EVALSHA) | 2 | 1 | 1 | 3 |');
    expect(markdown).toContain('| PostgreSQL statements (round trips) | 2 | 1 | 1 | 4 |');
  });

  it('states no target in the report', () => {
    expect(renderMarkdown(resultsOf())).not.toMatch(/target|not met|≤|≥/i);
  });
});

describe('fingerprintTable (the fingerprint against its parse, in RESULTS.md)', () => {
  const row = { transport: 'superjson' as const, body_bytes: 1_011_439, copies: 5, ratios: [1.8, 2.1, 2.0] };
  const cost: FingerprintCost = {
    rounds: 3,
    batch_ms: 25,
    rows: [
      { ...row, shape: '500 nested Sets, 1 MB', parse_us: 2727.9, fingerprint_us: 5454.1, ratio: 2.0 },
      { ...row, shape: 'DAG', parse_us: 11.26, fingerprint_us: 268.4, ratio: 22.37, ratios: [22.37] },
      { ...row, shape: 'attack', parse_us: 31.1, fingerprint_us: 30.8, ratio: 0.99, refused: true },
    ],
  };

  it('gives each shape its ratio and the range of its rounds, and marks a refusal', () => {
    const lines = fingerprintTable(cost).split('\n');
    expect(lines).toContain('| 500 nested Sets, 1 MB | superjson | 1,011,439 | 2,728 | 5,454 | **2.00** (1.80-2.10) |');
    expect(lines).toContain('| DAG | superjson | 1,011,439 | 11.3 | 268.4 | **22.37** |');
    expect(lines.find((l) => l.startsWith('| attack |'))).toContain('30.8 (refusal)');
  });
});

describe('exitOnInterrupt (Ctrl-C in npm run bench)', () => {
  it('runs every cleanup, last registered first, before exiting with 130, whatever fails meanwhile', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-interrupt-'));
    const marker = join(dir, 'marker');
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/bench-interrupt.ts', marker], {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => {
          if (chunk.toString().includes('ready')) resolve();
        });
        child.once('exit', (code) => reject(new Error(`the fixture exited with ${code} before it was ready`)));
      });
      const exited = new Promise<number | string | null>((resolve) => {
        child.once('exit', (code) => resolve(code));
        setTimeout(() => resolve('still running 10 s after SIGINT'), 10_000).unref();
      });
      child.kill('SIGINT');
      expect(await exited).toBe(130);
      expect(readFileSync(marker, 'utf8')).toBe('last registered\nfirst registered\n');
    } finally {
      // A handler that does not exit must not leave the fixture running after the test.
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** A run's results with three rows, the tRPC baseline's runs at 3,900 to 4,300 req/s. */
function resultsOf(): Results {
  const row = (name: string, baseline: string, baseline_rps: number, ratio: number): Row => ({
    name,
    baseline,
    baseline_rps,
    rps: Math.round(baseline_rps * ratio),
    ratio,
    ratios: [ratio],
    p50_ms: 7,
    p99_ms: 20,
    baseline_p50_ms: 6,
    baseline_p99_ms: 18,
    server_cpu_us_per_req: 300,
    baseline_server_cpu_us_per_req: 260,
    redis_cpu_us_per_req: 29,
    baseline_redis_cpu_us_per_req: 16,
    postgres_cpu_us_per_req: 0,
    baseline_postgres_cpu_us_per_req: 0,
    load_cpu_us_per_req: 34,
    baseline_load_cpu_us_per_req: 31,
    load_runs_per_req: 0.14,
    baseline_load_runs_per_req: 0.1,
    redis_calls_per_req: { evalsha: 2, hset: 2, incr: 1 },
    non2xx: 0,
  });
  const growth = { records: 1_000, empty_rps: 3_900, full_rps: 4_000, ratio: 1.03, empty_p99_ms: 21, full_p99_ms: 21 };
  return {
    machine: { cpu: 'AMD EPYC', cores: 2, memory_gib: 24, os: 'Linux', node: 'v20', redis: '7', postgresql: '15' },
    date: '2026-12-02T03:00:00.000Z',
    commit: 'abc1234',
    previous: {
      date: '2026-12-01T10:59:34.973Z',
      commit: 'cbf7f51',
      machine: 'AMD EPYC, 2 cores',
      baseline_rps: 3994,
      baseline_rps_range: [3298, 4325],
      ratios: { 'redis-first': 0.889 },
      overhead_us_per_call: 6.09,
    },
    settings: {
      rounds: 1,
      duration_s: 3,
      warmup_s: 0.5,
      warmup_requests: 10_000,
      profiler: 'perf',
      connections: 32,
      replay_keys: 1_000,
      pinned: 'no',
    },
    load_average: { before: [0.5, 0.4, 0.3], after: [2, 1.5, 1] },
    rows: [
      row('redis-first', 'baseline', 4_100, 0.9),
      row('postgres-first', 'baseline', 4_000, 0.4),
      row('express-idempotency-first', 'express-baseline', 7_500, 0.8),
    ],
    store_cost: {
      redis: {
        first: 2,
        replay: 1,
        reject: 1,
        first_in_scripts: { hset: 2 },
        replay_in_scripts: { hmget: 1 },
        reject_in_scripts: { hmget: 1 },
        waits: [{ ms: 50, sent: 3, in_scripts: { hmget: 3, pttl: 2 } }],
        memory_usage_bytes: 632,
        used_memory_bytes_per_record: 737,
        body_bytes: 210,
      },
      postgres: { first: 2, replay: 1, reject: 1, waits: [{ ms: 50, statements: 4 }] },
    },
    peer_redis_bytes_per_record: { 'trpc-idempotency': 631 },
    latency: [],
    profiles: {
      baseline: { requests: 10_000, busy_us_per_req: 297.7, owners: { Node: 128.5 }, top: [] },
    },
    overhead_us_per_call: 6.1,
    overhead: {
      baseline_us: 8,
      idempotent_us: 14.1,
      fingerprint_us: 0.76,
      replay_overhead_us_per_call: 3,
      minimal_overhead_us_per_call: 2,
    },
    fingerprint: { rounds: 1, batch_ms: 25, rows: [] },
    growth: { redis: { ...growth, keys_in_redis: 1_000 }, postgres: growth },
    purge: { rows: 1_000, deleted: 1_000, seconds: 0.1, batch_size: 1_000, rows_per_second: 10_000 },
    runs: [4_300, 3_900, 4_000].map((rps, i) => run('baseline', i + 1, rps, 260)),
    duration_s: 60,
  };
}

describe('the counted table (bench/INSTRUCTIONS.md) and the bars read from its cells', () => {
  const counted = (row: string, baseline: string, node_no_jit_added: number, redis_added = 0): CountedRow => ({
    row,
    baseline,
    node: 1_200_000 + node_no_jit_added,
    node_added: node_no_jit_added + 10_000,
    node_no_gc: 1_100_000 + node_no_jit_added,
    node_no_gc_added: node_no_jit_added + 5_000,
    node_no_jit: 1_000_000 + node_no_jit_added,
    node_no_jit_added,
    redis: 5_000 + redis_added,
    redis_added,
    postgres_cpu_us: 0,
  });
  // The figures issue 37 quotes (ioredis), and the same on node-redis.
  const rows = ['', '-node-redis'].flatMap((s) => [
    counted(`redis${s}-first`, 'baseline', 252_000, 70_000),
    counted(`redis${s}-replay`, 'baseline', 97_000, 20_000),
    counted(`node-idempotency${s}-first`, 'baseline', 200_000, 6_000),
    counted(`node-idempotency${s}-replay`, 'baseline', 28_000, 1_000),
    counted(`powertools${s}-first`, 'baseline', 274_000, 7_000),
    counted(`powertools${s}-replay`, 'baseline', 339_000, 1_000),
  ]);
  rows.push(counted('memory-first', 'baseline', 101_000), {
    ...counted('memory-replay', 'baseline', 58_000),
    postgres_cpu_us: 12.25,
  });

  it('reads back what it writes, whatever prose is around it', () => {
    const markdown = `# Counted\n\nSome prose | with a bar.\n\n${renderCounted(rows)}\n\nMore prose.\n`;
    const read = parseCounted(markdown);
    expect(read.get('redis-first')).toEqual(rows[0]);
    expect(read.get('memory-replay')?.postgres_cpu_us).toBe(12.3);
    expect(renderCounted(rows)).toContain(
      '| redis-first | baseline | 1,452,000 | 262,000 | 1,352,000 | 257,000 | 1,252,000 | 252,000 | 75,000 | 70,000 | 0.0 |',
    );
    expect(() => parseCounted('| row | baseline |\n| --- | --- |\n')).toThrow(/no counted table/);
  });

  it('has a MariaDB column once a row has MariaDB: read back, and a table without it still read', () => {
    const withMysql = [...rows, { ...counted('mysql-first', 'baseline', 400_000), mariadb_cpu_us: 501.44 }];
    const table = renderCounted(withMysql.map((r) => ({ ...r, mariadb_cpu_us: r.mariadb_cpu_us ?? 0 })));
    expect(table.split('\n')[0]).toMatch(/\| PostgreSQL CPU µs added \| MariaDB CPU µs added \|$/);
    expect(parseCounted(table).get('mysql-first')?.mariadb_cpu_us).toBe(501.4);
    expect(parseCounted(table).get('redis-first')?.mariadb_cpu_us).toBe(0);
    expect(renderCounted(rows)).not.toContain('MariaDB');
    expect(parseCounted(renderCounted(rows)).get('redis-first')?.mariadb_cpu_us).toBeUndefined();
  });

  it('checks each bar against the cells, and says by how much one is not met', () => {
    const bars = checkBars(parseCounted(renderCounted(rows)));
    const first = bars.find((b) => b.bar.startsWith('Redis first execution (ioredis): Node'))!;
    expect(first).toMatchObject({
      met: false,
      measured: '252,000; @node-idempotency 200,000, Powertools 274,000: 52,000 over',
    });
    expect(bars.find((b) => b.bar.startsWith('Redis replay (ioredis)'))).toMatchObject({ met: false });
    expect(bars.find((b) => b.bar.startsWith('Memory replay'))).toMatchObject({
      met: false,
      measured: expect.stringContaining('18,000 over'),
    });
    // A row the table lacks fails its bar, named.
    const partial = parseCounted(renderCounted(rows.filter((r) => r.row !== 'powertools-first')));
    expect(checkBars(partial)[0]).toMatchObject({
      met: false,
      measured: 'the counted table has no row powertools-first',
    });
  });
});
