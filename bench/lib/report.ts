/**
 * bench/RESULTS.md and the table printed at the end of a run, from results.json's data: tables of
 * numbers with the method stated once. Why the numbers are what they are is written by hand in
 * docs/performance.md and bench/profile-*.md; targets belong to the issues.
 */
import type { Growth, Latency, Row, Run } from './aggregate.js';
import type { ProfileSummary } from './profile.js';
import type { PostgresCost, RedisCost } from './store-cost.js';

/** What a record carries for the next one to compare with, in a comment of RESULTS.md. */
export interface Previous {
  date: string;
  commit: string;
  /** `<cpu>, <cores> cores`: ratios from another machine compare only loosely. */
  machine: string;
  /** The tRPC baseline's req/s (median of its runs): how fast that machine served the bare procedure. */
  baseline_rps: number | undefined;
  /** The lowest and highest req/s of the tRPC baseline's own runs: how steady the host was. */
  baseline_rps_range: [number, number] | undefined;
  ratios: Record<string, number>;
  overhead_us_per_call: number;
}

/** One shape of bench/fingerprint.ts: µs per copy, medians over the rounds. */
export interface FingerprintRow {
  shape: string;
  /** How the body was written: JSON, or superjson (with `dedupe: true`, a shared object written once). */
  transport: 'JSON' | 'superjson' | 'superjson, dedupe';
  body_bytes: number;
  copies: number;
  parse_us: number;
  /** For a refused shape, the time to refuse it. */
  fingerprint_us: number;
  /** Median of the rounds' fingerprint / parse. */
  ratio: number;
  ratios: number[];
  /** The fingerprint refused it (input_unsupported), as it must. */
  refused?: boolean;
}

export interface FingerprintCost {
  rounds: number;
  batch_ms: number;
  rows: FingerprintRow[];
}

export interface Results {
  machine: Record<string, string | number>;
  date: string;
  commit: string;
  previous: Previous | undefined;
  settings: {
    rounds: number;
    duration_s: number;
    warmup_s: number;
    /** Requests each server served, of each kind, before its first measured run. */
    warmup_requests: number;
    profiler: 'perf' | 'v8';
    connections: number;
    replay_keys: number;
    pinned: string;
  };
  load_average: { before: number[]; after: number[]; waited_for_quiet_s?: number; reached_quiet?: boolean };
  rows: Row[];
  /** Store operations and bytes per record (bench/lib/store-cost.ts), on a Redis and a schema nothing else used. */
  store_cost: { redis: RedisCost; postgres: PostgresCost };
  peer_redis_bytes_per_record: Record<string, number>;
  latency: Latency[];
  profiles: Record<string, ProfileSummary & { requests: number }>;
  overhead_us_per_call: number;
  overhead: {
    baseline_us: number;
    idempotent_us: number;
    fingerprint_us: number;
    replay_overhead_us_per_call: number;
    /** The least an idempotency layer does in process (bench/lib/inprocess.ts, minimalLayer), over the baseline. */
    minimal_overhead_us_per_call: number;
  };
  fingerprint: FingerprintCost;
  growth: { redis: Growth & { keys_in_redis: number }; postgres: Growth };
  purge: { rows: number; deleted: number; seconds: number; batch_size: number; rows_per_second: number };
  /** Every saturation run, baselines included. */
  runs: Run[];
  duration_s: number;
}

const SUMMARY = /<!-- bench-summary (\{.*\}) -->/;

/** The summary a committed RESULTS.md carries, if it has one. */
export function previousOf(markdown: string): Previous | undefined {
  const match = SUMMARY.exec(markdown);
  return match === null ? undefined : (JSON.parse(match[1]!) as Previous);
}

/** What this record carries for the next one. */
export function summaryOf(results: Results): Previous {
  const baseline = results.rows.filter((r) => r.baseline === 'baseline').map((r) => r.baseline_rps);
  const runs = results.runs.filter((r) => r.name === 'baseline').map((r) => Math.round(r.rps));
  return {
    date: results.date,
    commit: results.commit,
    machine: `${results.machine.cpu}, ${results.machine.cores} cores`,
    // The upper middle for an even count, as in every record so far.
    baseline_rps: [...baseline].sort((a, b) => a - b)[Math.floor(baseline.length / 2)],
    baseline_rps_range: runs.length < 2 ? undefined : [Math.min(...runs), Math.max(...runs)],
    ratios: Object.fromEntries(results.rows.map((r) => [r.name, r.ratio])),
    overhead_us_per_call: results.overhead_us_per_call,
  };
}

/** Commands the client sent per request (the handler's INCR left out), and those run inside scripts. */
export function redisCommands(calls: Record<string, number>): { sent: number; inScripts: number } {
  const scripted = (calls.evalsha ?? 0) + (calls.eval ?? 0) > 0;
  let sent = 0;
  let inScripts = 0;
  for (const [cmd, n] of Object.entries(calls)) {
    if (cmd === 'incr') continue;
    if (!scripted || cmd === 'evalsha' || cmd === 'eval') sent += n;
    else inScripts += n;
  }
  return { sent: Math.round(sent * 100) / 100, inScripts: Math.round(inScripts * 100) / 100 };
}

/** CPU per request of every process a request touches, at saturation: the variant's and its baselines'. */
export function allCpu(r: Row): { variant: number; baseline: number } {
  return {
    variant: r.server_cpu_us_per_req + r.load_cpu_us_per_req + r.redis_cpu_us_per_req + r.postgres_cpu_us_per_req,
    baseline:
      r.baseline_server_cpu_us_per_req +
      r.baseline_load_cpu_us_per_req +
      r.baseline_redis_cpu_us_per_req +
      r.baseline_postgres_cpu_us_per_req,
  };
}

const fmt = (n: number) => n.toLocaleString('en-US');
const ms = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1));
/** µs with as many decimals as a figure from 1 µs to 100 ms needs. */
const us = (n: number) => (n < 10 ? n.toFixed(2) : n < 1000 ? n.toFixed(1) : fmt(Math.round(n)));
/** The lowest and highest of `xs`: rounded, with thousands separators, or with `digits` decimals. */
const range = (xs: number[], digits = 0) => {
  const show = (n: number) => (digits === 0 ? fmt(Math.round(n)) : n.toFixed(digits));
  return `${show(Math.min(...xs))}-${show(Math.max(...xs))}`;
};
const errors = (n: number) => (n > 0 ? ` ⚠ ${n} errors` : '');

/** A Markdown table; `align` has one letter per column, `l` or `r`. */
function table(head: string[], align: string, rows: (string | number)[][]): string {
  const rule = [...align].map((a) => (a === 'r' ? '---:' : '---'));
  return [head, rule, ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

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
      // The memory and PostgreSQL stores send Redis nothing.
      const commands = /^(memory|postgres)-/.test(r.name)
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
      'All (baseline)',
      'Cores busy',
      "Baseline's all over the variant's",
      'Ratio measured',
      'Load generator runs per request (baseline)',
    ],
    'lrrrrlrrrl',
    rows.map((r) => {
      const all = allCpu(r);
      return [
        r.name,
        fmt(r.server_cpu_us_per_req),
        fmt(r.load_cpu_us_per_req),
        fmt(r.redis_cpu_us_per_req),
        fmt(r.postgres_cpu_us_per_req),
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

/** The fingerprint against the parse of its body, per shape (bench/fingerprint.ts). */
export function fingerprintTable(cost: FingerprintCost): string {
  return table(
    ['Shape', 'Body', 'Body bytes', 'Parse µs', 'Fingerprint µs', 'Fingerprint / parse (rounds)'],
    'llrrrr',
    cost.rows.map((r) => [
      r.shape,
      r.transport,
      fmt(r.body_bytes),
      us(r.parse_us),
      `${us(r.fingerprint_us)}${r.refused ? ' (refusal)' : ''}`,
      `**${r.ratio.toFixed(2)}**${r.ratios.length < 2 ? '' : ` (${range(r.ratios, 2)})`}`,
    ]),
  );
}

function storeTables(results: Results): string {
  const { redis, postgres } = results.store_cost;
  const scripts = (calls: Record<string, number>) =>
    Object.entries(calls)
      .map(([cmd, n]) => `${cmd} ${Math.round(n * 100) / 100}`)
      .join(', ');
  const pgWait = (ms: number) => postgres.waits.find((wait) => wait.ms === ms)?.statements ?? 'not measured';
  return [
    table(
      [
        '',
        'First execution',
        'Replay',
        'In-flight rejection',
        ...redis.waits.map((wait) => `Waiting duplicate (${fmt(wait.ms)} ms)`),
      ],
      `lrrr${'r'.repeat(redis.waits.length)}`,
      [
        ['Redis commands sent (EVALSHA)', redis.first, redis.replay, redis.reject, ...redis.waits.map((w) => w.sent)],
        [
          'Run inside the scripts',
          ...[redis.first_in_scripts, redis.replay_in_scripts, redis.reject_in_scripts].map(scripts),
          ...redis.waits.map((wait) => scripts(wait.in_scripts)),
        ],
        [
          'PostgreSQL statements (round trips)',
          postgres.first,
          postgres.replay,
          postgres.reject,
          ...redis.waits.map((wait) => pgWait(wait.ms)),
        ],
      ],
    ),
    '',
    table(['Redis bytes per completed record', 'Bytes'], 'lr', [
      [`\`MEMORY USAGE\`, ${redis.body_bytes}-byte result`, redis.memory_usage_bytes],
      ['`used_memory` growth per record over 10,000', redis.used_memory_bytes_per_record],
      ...Object.entries(results.peer_redis_bytes_per_record).map(([name, n]) => [
        `left by the HTTP runs: ${name} (\`MEMORY USAGE\`, sampled)`,
        n,
      ]),
    ]),
  ].join('\n');
}

function inProcessTable(results: Results): string {
  const o = results.overhead;
  return table(['In process (mitata, server-side caller, memory store, medians)', 'µs per call'], 'lr', [
    ['without the layer', o.baseline_us.toFixed(1)],
    ['with it, a fresh key per call', o.idempotent_us.toFixed(1)],
    ['**added by a first execution**', `**${results.overhead_us_per_call}**`],
    ['added by a replay (the same key every call)', o.replay_overhead_us_per_call.toFixed(1)],
    [
      'added by the least a layer does (`minimalLayer`, bench/lib/inprocess.ts)',
      o.minimal_overhead_us_per_call.toFixed(1),
    ],
    ["the input's fingerprint (canonical form and SHA-256)", o.fingerprint_us.toFixed(2)],
  ]);
}

function growthTable(results: Results): string {
  const { redis, postgres } = results.growth;
  const p = results.purge;
  const row = (store: string, g: Growth) => [
    store,
    fmt(g.empty_rps),
    fmt(g.full_rps),
    g.ratio.toFixed(2),
    `${ms(g.empty_p99_ms)} / ${ms(g.full_p99_ms)}`,
  ];
  return [
    table(
      [
        'First executions',
        'Empty store req/s',
        `With ${fmt(redis.records)} live records`,
        'Ratio',
        'p99 ms empty / full',
      ],
      'lrrrl',
      [row('Redis', redis), row('PostgreSQL', postgres)],
    ),
    '',
    table(['`purgeExpired()`', 'Rows', 'Batch', 'Seconds', 'Rows/s'], 'lrrrr', [
      ['expired rows', fmt(p.deleted), fmt(p.batch_size), p.seconds, fmt(p.rows_per_second)],
    ]),
  ].join('\n');
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
      `${m.cpu}, ${m.cores} cores, ${m.memory_gib} GiB; ${m.os}; Node ${m.node}; Redis ${m.redis}; PostgreSQL ${m.postgresql}`,
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
  PostgreSQL counts every \`postgres\` process on the machine. *Load generator runs*: times its threads were put on a
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

export function renderTable(results: Results): string {
  return saturationTable(results.rows);
}

export function renderMarkdown(results: Results): string {
  return `# Benchmark results

Written by \`npm run bench\` at commit ${results.commit} on ${results.date}; the run took ${results.duration_s} s.

${conditions(results)}

${METHOD(results)}

## Saturation

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
