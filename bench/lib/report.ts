/**
 * bench/RESULTS.md and the table printed at the end of a run, from results.json's data: tables of
 * numbers with the method stated once. Why the numbers are what they are is written by hand in
 * docs/performance.md and bench/profile-*.md; targets belong to the issues.
 */
import { allCpu, type Latency, type Row, redisCommands } from './aggregate.js';
import { errors, fmt, ms, range, table } from './markdown.js';
import { fingerprintTable, growthTable, inProcessTable, storeTables } from './report-costs.js';
import { type Results, summaryOf } from './results.js';

/** A row's name, and its baseline's when that is not the bare tRPC procedure (a peer's own, the store without an option). */
const variantName = (r: { name: string; baseline: string }) =>
  r.baseline === 'baseline' ? r.name : `${r.name} (vs ${r.baseline})`;

function saturationTable(rows: Row[]): string {
  return table(
    [
      'Variant',
      'Ratio',
      'Ratio per round',
      'req/s (baseline)',
      'p50 / p99 ms (baseline)',
      'Server CPU µs/req (baseline)',
      'Redis CPU µs/req (baseline)',
      'Redis commands/req',
    ],
    'lrlrllll',
    rows.map((r) => {
      const { sent, inScripts } = redisCommands(r.redis_calls_per_req);
      // The memory and SQL stores send Redis nothing.
      const commands = /^(memory|postgres|mysql|sqlite)-/.test(r.name)
        ? '0'
        : `${sent}${inScripts > 0 ? ` (+${inScripts} in scripts)` : ''}`;
      return [
        variantName(r),
        `**${r.ratio.toFixed(2)}**`,
        r.ratios.map((x) => x.toFixed(2)).join(' '),
        `${fmt(r.rps)} (${fmt(r.baseline_rps)})`,
        `${ms(r.p50_ms)} / ${ms(r.p99_ms)} (${ms(r.baseline_p50_ms)} / ${ms(r.baseline_p99_ms)})`,
        `${fmt(r.server_cpu_us_per_req)} (${fmt(r.baseline_server_cpu_us_per_req)})`,
        `${fmt(r.redis_cpu_us_per_req)} (${fmt(r.baseline_redis_cpu_us_per_req)})`,
        `${commands}${errors(r.non2xx)}`,
      ];
    }),
  );
}

function processTable(rows: Row[]): string {
  return table(
    [
      'Variant',
      'Server',
      'Load generator',
      'Redis',
      'PostgreSQL',
      'MariaDB',
      'All (baseline)',
      'Cores busy',
      "Baseline's all over the variant's",
      'Ratio measured',
      'Load generator runs per request (baseline)',
    ],
    'lrrrrrlrrrl',
    rows.map((r) => {
      const all = allCpu(r);
      return [
        r.name,
        fmt(r.server_cpu_us_per_req),
        fmt(r.load_cpu_us_per_req),
        fmt(r.redis_cpu_us_per_req),
        fmt(r.postgres_cpu_us_per_req),
        r.mariadb_cpu_us_per_req === undefined ? '' : fmt(r.mariadb_cpu_us_per_req),
        `${fmt(all.variant)} (${fmt(all.baseline)})`,
        ((all.variant * r.rps) / 1e6).toFixed(2),
        (all.baseline / all.variant).toFixed(2),
        r.ratio.toFixed(2),
        `${r.load_runs_per_req} (${r.baseline_load_runs_per_req})`,
      ];
    }),
  );
}

function latencyTable(rows: Latency[]): string {
  return table(
    [
      'Variant',
      'Rate req/s',
      'p50 / p99 µs',
      'Baseline p50 / p99 µs',
      'Added p50 / p99 µs',
      'Server CPU µs/req (baseline)',
      'Cost ratio',
    ],
    'lrlllll',
    rows.map((r) => [
      variantName(r),
      fmt(r.rate),
      `${fmt(r.p50_us)} / ${fmt(r.p99_us)}`,
      `${fmt(r.baseline_p50_us)} / ${fmt(r.baseline_p99_us)}`,
      `**${fmt(r.added_p50_us)}** / ${fmt(r.added_p99_us)}`,
      `${fmt(r.server_cpu_us_per_req)} (${fmt(r.baseline_server_cpu_us_per_req)})`,
      `**${r.cost_ratio.toFixed(2)}**${errors(r.non2xx)}`,
    ]),
  );
}

function profileTables(profiles: Results['profiles']): string {
  const names = Object.keys(profiles);
  const owners = [...new Set(names.flatMap((n) => Object.keys(profiles[n]!.owners)))];
  const out = [
    table(['µs of CPU per request', ...names], `l${'r'.repeat(names.length)}`, [
      ['**busy, all owners**', ...names.map((n) => `**${profiles[n]!.busy_us_per_req}**`)],
      ['requests profiled', ...names.map((n) => fmt(profiles[n]!.requests))],
      ...owners.map((owner) => [owner, ...names.map((n) => profiles[n]!.owners[owner] ?? 0)]),
    ]),
  ];
  for (const name of names) {
    out.push(
      '',
      `**${name}**: top self-time frames`,
      '',
      table(
        ['Frame', 'Owner', 'µs/req', 'Share'],
        'llrr',
        profiles[name]!.top.map((f) => [`\`${f.frame}\``, f.owner, f.us_per_req, `${(f.share * 100).toFixed(1)}%`]),
      ),
    );
  }
  return out.join('\n');
}

/** This record beside the previous one: the machine, the baseline's speed and every ratio. */
function sinceLast(results: Results): string {
  const prev = results.previous;
  if (prev === undefined) return 'No previous record.';
  const now = summaryOf(results);
  const span = (r: [number, number] | undefined) => (r === undefined ? '' : `${fmt(r[0])}-${fmt(r[1])}`);
  const ratio = (n: number | undefined) => (n === undefined ? '' : n.toFixed(2));
  return table(['', 'Then', 'Now'], 'lrr', [
    [
      'record',
      `${prev.date.slice(0, 16).replace('T', ' ')}, ${prev.commit}`,
      `${now.date.slice(0, 16).replace('T', ' ')}, ${now.commit}`,
    ],
    ['machine', prev.machine, now.machine],
    [
      'tRPC baseline req/s, median',
      prev.baseline_rps === undefined ? '' : fmt(prev.baseline_rps),
      now.baseline_rps === undefined ? '' : fmt(now.baseline_rps),
    ],
    ["tRPC baseline's runs, req/s", span(prev.baseline_rps_range), span(now.baseline_rps_range)],
    ...results.rows.map((r) => [`ratio, ${r.name}`, ratio(prev.ratios[r.name]), ratio(r.ratio)]),
    ['in-process overhead, µs per call', prev.overhead_us_per_call, now.overhead_us_per_call],
  ]);
}

/** The run's conditions: machine, load, settings, and how steady the host was. */
function conditions(results: Results): string {
  const m = results.machine;
  const s = results.settings;
  const load = results.load_average;
  const baseline = results.runs.filter((r) => r.name === 'baseline');
  return table(['Run', ''], 'll', [
    [
      'machine',
      `${m.cpu}, ${m.cores} cores, ${m.memory_gib} GiB; ${m.os}; Node ${m.node}; Redis ${m.redis}; PostgreSQL ${m.postgresql}${m.mariadb === undefined ? '' : `; ${m.mariadb}`}`,
    ],
    [
      'load average (1, 5, 15 min)',
      `before ${load.before.join(', ')}; after ${load.after.join(', ')}${load.waited_for_quiet_s === undefined ? '' : `; waited ${load.waited_for_quiet_s} s for a 1-minute load below 0.8 (${load.reached_quiet ? 'reached' : 'not reached'})`}`,
    ],
    [
      'settings',
      `rounds ${s.rounds}; ${s.duration_s} s per run after ${s.warmup_s} s of load; ${fmt(s.warmup_requests)} warm-up requests per server and kind; ${s.connections} connections; ${fmt(s.replay_keys)} replay keys; profiler ${s.profiler}; pinned: ${s.pinned}`,
    ],
    [
      'steadiness',
      baseline.length < 2
        ? ''
        : `the tRPC baseline's ${baseline.length} saturation runs: ${range(baseline.map((r) => r.rps))} req/s, ${range(baseline.map((r) => r.server_cpu_us_per_req))} µs of server CPU per request`,
    ],
  ]);
}

const METHOD = (results: Results) => `## Method

- Each server is a Node process of its own (\`bench/server.ts\`, the library from the built \`dist/\`), loaded by
  autocannon from another process over loopback (\`bench/load.ts\`). The servers, the load generator, Redis and
  PostgreSQL share the machine's ${results.machine.cores} cores.
- One tRPC mutation, \`POST /pay\`, whose handler does one Redis \`INCR\` and returns ~${results.store_cost.redis.body_bytes} bytes of JSON.
  *first*: a fresh \`Idempotency-Key\` per request; *replay*: ${fmt(results.settings.replay_keys)} keys completed beforehand, reused in turn.
- Every variant runs between two runs of its baseline (A B A B). Its *ratio* is its figure over the mean of those two;
  each table gives the median over the rounds, the baselines' in brackets.
- CPU: user + system time per request over the measured window, per process (\`/proc/<pid>/task/*/schedstat\`);
  PostgreSQL counts every \`postgres\` process on the machine; MariaDB (the MySQL store's rows) the connection
  threads of the row's server (\`information_schema.PROCESSLIST.TID\`), not InnoDB's background threads. SQLite runs
  in the server's process: its cost is in the server's CPU. *Load generator runs*: times its threads were put on a
  CPU, per request. *Redis commands*: \`INFO commandstats\` deltas per request, the handler's \`INCR\` left out.
- *Fixed rate*: each variant and its baseline at half the lower of their peaks, open loop; *added* is the variant's
  percentile minus its baselines', the *cost ratio* its baselines' server CPU per request over its own.
- A row's baseline is the tRPC procedure without idempotency unless named (*vs ...*): a peer's own server, or, for the
  Redis store's durability options, the Redis store without the option: *redis-fence* (\`restartFence: true\`,
  initialized) against *redis-unfenced*, the store without it on the same redis-server; *redis-wait* (\`waitForReplicas: { replicas: 1, timeout: 1000 }\`)
  against *redis-replicated*, the store without it on the same primary, which has one replica (their Redis CPU: both
  servers'); replays against the store's replays (*... replays*).
- *...-node-redis*: the application's Redis client is node-redis (\`createClient\` from \`redis\`) for the handler's
  \`INCR\` and, in *redis-node-redis*, the store; each against *baseline-node-redis*, the baseline handler on
  node-redis. The peers' idempotency layers use node-redis clients of their own in every row; their rows without
  the suffix have the handler's \`INCR\` on ioredis, against the ioredis *baseline*.
- *Where the CPU goes*: a fresh, warmed-up server of each path, ${
  results.settings.profiler === 'perf'
    ? '`perf record -e cpu-clock -g` of all its threads (250 µs per sample), V8 builtins counted for their JavaScript caller'
    : "V8's CPU profiler (250 µs sampling; it slows the server it samples)"
} over one measured window.
- What each variant is (the *floor* rows, the peers) and why the figures are what they are: docs/performance.md and
  bench/profile-*.md.`;

export const renderTable = saturationTable;
export const renderProcesses = processTable;
export const renderLatency = latencyTable;

/** How far the saturation figures move with the host: context for the counted figures, not a measure of the layer. */
function saturationNoise(results: Results): string {
  const baseline = results.runs.filter((r) => r.name === 'baseline').map((r) => r.rps);
  const spread = (r: Row) => Math.max(...r.ratios) - Math.min(...r.ratios);
  const widest = results.rows.reduce<Row | undefined>(
    (w, r) => (w === undefined || spread(r) > spread(w) ? r : w),
    undefined,
  );
  return `Context: throughput on ${results.machine.cores} shared cores moves with the host. The work each layer adds is counted in
[INSTRUCTIONS.md](INSTRUCTIONS.md) (\`npm run bench:instructions\`), which repeats from run to run. Noise in this run:${
    baseline.length < 2 ? '' : ` the tRPC baseline's runs served ${range(baseline)} req/s;`
  }${widest === undefined ? '' : ` a row's ratio moved by up to ${spread(widest).toFixed(2)} from one round to the next (${widest.name}).`}`;
}

export function renderMarkdown(results: Results): string {
  return `# Benchmark results

Written by \`npm run bench\` at commit ${results.commit} on ${results.date}; the run took ${results.duration_s} s.

${conditions(results)}

${METHOD(results)}

## Saturation

${saturationNoise(results)}

${saturationTable(results.rows)}

## Every process (CPU µs per request)

${processTable(results.rows)}

## Fixed rate

${latencyTable(results.latency)}

## Where the CPU goes

${profileTables(results.profiles)}

## Store cost

${storeTables(results)}

## In process

${inProcessTable(results)}

## The fingerprint against the parse of its body

${fingerprintTable(results.fingerprint)}

## Growth and purge

${growthTable(results)}

## Since the last record

${sinceLast(results)}

<!-- bench-summary ${JSON.stringify(summaryOf(results))} -->
`;
}
