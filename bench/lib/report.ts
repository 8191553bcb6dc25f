/** bench/RESULTS.md and the table printed at the end of a run, from results.json's data. */

interface Row {
  name: string;
  baseline: string;
  baseline_rps: number;
  rps: number;
  ratio: number;
  ratios: number[];
  p50_ms: number;
  p99_ms: number;
  baseline_p50_ms: number;
  baseline_p99_ms: number;
  server_cpu_us_per_req: number;
  baseline_server_cpu_us_per_req: number;
  redis_calls_per_req: Record<string, number>;
  postgres_cpu_us_per_req: number;
  /** Every PostgreSQL process's CPU and the load generator's, per request, and the baselines' around it (absent in older records). */
  baseline_postgres_cpu_us_per_req?: number;
  load_cpu_us_per_req?: number;
  baseline_load_cpu_us_per_req?: number;
  /** Times the load generator was put on a CPU per request, and the baselines' (absent in older records). */
  load_runs_per_req?: number;
  baseline_load_runs_per_req?: number;
  /** The redis-server process's CPU (user + system) per request, and the baselines' around it. */
  redis_cpu_us_per_req: number;
  baseline_redis_cpu_us_per_req: number;
  non2xx: number;
}

interface Growth {
  records: number;
  empty_rps: number;
  full_rps: number;
  ratio: number;
  empty_p99_ms: number;
  full_p99_ms: number;
}

interface Latency {
  name: string;
  rate: number;
  p50_us: number;
  p99_us: number;
  baseline_p50_us: number;
  baseline_p99_us: number;
  added_p50_us: number;
  added_p99_us: number;
  /** Server CPU per request at this rate (absent in records made before it was measured). */
  server_cpu_us_per_req?: number;
  baseline_server_cpu_us_per_req?: number;
  /** The baselines' CPU per request over the variant's, median over the rounds. */
  cost_ratio?: number;
  non2xx: number;
}

interface Profile {
  requests: number;
  busy_us_per_req: number;
  owners: Record<string, number>;
  top: { frame: string; owner: string; us_per_req: number; share: number }[];
}

/** What a run records for the next one to compare with, in a comment of RESULTS.md. */
export interface Previous {
  date: string;
  commit: string;
  /** `<cpu>, <cores> cores`: ratios from another machine compare only loosely. */
  machine?: string;
  /** The tRPC baseline's req/s (median of its runs): how fast that machine served the bare procedure. */
  baseline_rps?: number;
  /** The lowest and highest req/s of the tRPC baseline's own runs: how steady the host was (absent in older records). */
  baseline_rps_range?: [number, number];
  ratios: Record<string, number>;
  overhead_us_per_call: number;
}

const SUMMARY = /<!-- bench-summary (\{.*\}) -->/;

/** The summary the committed RESULTS.md carries, or what its tables say (a record older than the summary). */
export function previousOf(markdown: string): Previous | undefined {
  const match = SUMMARY.exec(markdown);
  if (match) {
    const previous = JSON.parse(match[1]!) as Previous;
    return {
      ...previous,
      machine: machineOf(previous, markdown),
      baseline_rps: previous.baseline_rps ?? baselineRpsOf(markdown),
      baseline_rps_range: previous.baseline_rps_range ?? steadinessOf(markdown),
    };
  }
  const date = /\((\d{4}-\d\d-\d\dT[^)]+)\)/.exec(markdown)?.[1];
  const ratios = Object.fromEntries(
    [...markdown.matchAll(/^\| ([a-z0-9-]+) \|[^|]*\|[^|]*\| \*\*([0-9.]+)\*\* \|/gm)].map((m) => [
      m[1]!,
      Number(m[2]),
    ]),
  );
  const overhead = /\*\*([0-9.]+) µs per call\*\*/.exec(markdown)?.[1];
  if (date === undefined || Object.keys(ratios).length === 0) return undefined;
  return { date, commit: 'unknown', ratios, overhead_us_per_call: Number(overhead ?? Number.NaN) };
}

/** The summary's machine, or the one a record written before the summary named it says in its Machine line. */
function machineOf(previous: Previous, markdown: string): string | undefined {
  if (previous.machine !== undefined) return previous.machine;
  const line = /\*\*Machine:\*\* ([^;]+), (\d+) cores/.exec(markdown);
  return line === null ? undefined : `${line[1]}, ${line[2]} cores`;
}

/** A record written before the summary gave it: the median "Baseline req/s" of the rows run against the tRPC baseline. */
function baselineRpsOf(markdown: string): number | undefined {
  const own = [...markdown.matchAll(/^\| ([a-z0-9-]+) \| ([0-9,]+) \|[^|]*\| \*\*[0-9.]+\*\* \|/gm)]
    .filter((m) => !m[1]!.startsWith('express-'))
    .map((m) => Number(m[2]!.replaceAll(',', '')));
  return middle(own);
}

/** The middle value (the upper of the two for an even count), or undefined for none. */
function middle(values: number[]): number | undefined {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
}

/** The machine a record ran on, as the summary names it. */
export function machineName(results: Pick<Results, 'machine'>): string {
  return `${results.machine.cpu}, ${results.machine.cores} cores`;
}

/** The tRPC baseline's median req/s over the saturation runs. */
export function baselineRps(results: Pick<Results, 'rows'>): number | undefined {
  const rps = middle(results.rows.filter((r) => r.baseline === 'baseline').map((r) => r.baseline_rps));
  return rps === undefined ? undefined : Math.round(rps);
}

/** The range of the tRPC baseline's runs, from the Steadiness line of a record written before the summary gave it. */
function steadinessOf(markdown: string): [number, number] | undefined {
  const match = /saturation runs served ([0-9,]+)-([0-9,]+) req\/s/.exec(markdown);
  return match === null ? undefined : [Number(match[1]!.replaceAll(',', '')), Number(match[2]!.replaceAll(',', ''))];
}

/** The lowest and highest req/s of the tRPC baseline's own saturation runs, or undefined with fewer than 2. */
function baselineRange(results: Pick<Results, 'runs'>): [number, number] | undefined {
  const rps = (results.runs ?? []).filter((r) => r.name === 'baseline').map((r) => Math.round(r.rps));
  return rps.length < 2 ? undefined : [Math.min(...rps), Math.max(...rps)];
}

/**
 * How steady the host was during the run: the range of the tRPC baseline's own runs. Each ratio is
 * against the baseline runs beside it, so a wide range moves single rounds, not the method.
 */
function steadiness(results: Pick<Results, 'runs'>): string {
  const runs = (results.runs ?? []).filter((r) => r.name === 'baseline');
  if (runs.length < 2) return '';
  const rps = runs.map((r) => r.rps);
  const cpu = runs.map((r) => r.server_cpu_us_per_req);
  const range = (xs: number[]) => `${fmt(Math.round(Math.min(...xs)))}-${fmt(Math.round(Math.max(...xs)))}`;
  return `
**Steadiness.** The bare tRPC baseline's ${runs.length} saturation runs served ${range(rps)} req/s, at ${range(cpu)} µs of server CPU per
request: the same work, so the spread is the host's (a shared virtual machine's speed moves with its neighbours). Each ratio
is against the baseline runs on either side of it; the *ratio per round* columns show how far single rounds moved.
`;
}

function latencyTable(rows: Latency[]): string {
  const lines = [
    '| Variant | Rate req/s | p50 / p99 µs | Baseline p50 / p99 µs | Added p50 / p99 µs | Server CPU µs/req (baseline) | Cost ratio |',
    '| --- | ---: | --- | --- | --- | --- | ---: |',
  ];
  for (const r of rows) {
    const cpu =
      r.server_cpu_us_per_req === undefined
        ? '| |'
        : `| ${fmt(r.server_cpu_us_per_req)} (${fmt(r.baseline_server_cpu_us_per_req ?? Number.NaN)}) | **${(r.cost_ratio ?? Number.NaN).toFixed(2)}** |`;
    lines.push(
      `| ${r.name} | ${fmt(r.rate)} | ${fmt(r.p50_us)} / ${fmt(r.p99_us)} | ${fmt(r.baseline_p50_us)} / ${fmt(r.baseline_p99_us)} | **${fmt(r.added_p50_us)}** / ${fmt(r.added_p99_us)} ${cpu}${r.non2xx > 0 ? ` ⚠ ${r.non2xx} errors` : ''}`,
    );
  }
  return lines.join('\n');
}

function profileTables(profiles: Record<string, Profile>): string {
  const names = Object.keys(profiles);
  const owners = [...new Set(names.flatMap((n) => Object.keys(profiles[n]!.owners)))];
  const ownerRows = owners.map(
    (owner) => `| ${owner} | ${names.map((n) => String(profiles[n]!.owners[owner] ?? 0)).join(' | ')} |`,
  );
  const out = [
    `| µs of CPU per request | ${names.join(' | ')} |`,
    `| --- | ${names.map(() => '---:').join(' | ')} |`,
    `| **busy, all owners** | ${names.map((n) => `**${profiles[n]!.busy_us_per_req}**`).join(' | ')} |`,
    ...ownerRows,
  ];
  for (const name of names) {
    const p = profiles[name]!;
    out.push(
      '',
      `**${name}** (${fmt(p.requests)} requests profiled): top self-time frames`,
      '',
      '| Frame | Owner | µs/req | Share |',
      '| --- | --- | ---: | ---: |',
      ...p.top.map((f) => `| \`${f.frame}\` | ${f.owner} | ${f.us_per_req} | ${(f.share * 100).toFixed(1)}% |`),
    );
  }
  return out.join('\n');
}

export interface Results {
  machine: Record<string, string | number>;
  date: string;
  commit: string;
  previous: Previous | undefined;
  latency: Latency[];
  profiles: Record<string, Profile>;
  settings: {
    rounds: number;
    duration_s: number;
    warmup_s: number;
    /** Requests each server served, of each kind, before its first measured run (absent in older records). */
    warmup_requests?: number;
    /** What profiled the servers for "Where the CPU goes" (absent in older records: V8's). */
    profiler?: 'perf' | 'v8';
    connections: number;
    replay_keys: number;
    pinned?: string;
  };
  load_average: { before: number[]; after: number[]; waited_for_quiet_s?: number; reached_quiet?: boolean };
  rows: Row[];
  /** Every saturation run, baselines included. */
  runs?: { name: string; rps: number; server_cpu_us_per_req: number }[];
  store_ops: {
    redis_first: number;
    redis_replay: number;
    redis_reject: number;
    pg_first: number;
    pg_replay: number;
    pg_reject: number;
    /** Per duplicate waiting redis_wait_ms for a held key's outcome (inFlight: 'wait'; absent in older records). */
    redis_wait?: number;
    redis_wait_ms?: number;
    redis_in_scripts: Record<'first' | 'replay' | 'reject', Record<string, number>> & { wait?: Record<string, number> };
  };
  redis_bytes_per_record: number;
  redis_used_memory_per_record: number;
  record_body_bytes: number;
  peer_redis_bytes_per_record: Record<string, number>;
  overhead_us_per_call: number;
  overhead: {
    baseline_us: number;
    idempotent_us: number;
    fingerprint_us: number;
    replay_us?: number;
    replay_overhead_us_per_call?: number;
    /** The least an idempotency layer does in process (bench/lib/inprocess.ts, minimalLayer), over the baseline. */
    minimal_overhead_us_per_call?: number;
  };
  growth: { redis: Growth & { keys_in_redis: number }; postgres: Growth };
  /** bench/fingerprint.ts: the fingerprint's cost over the parse of its body, per shape (absent in older records). */
  fingerprint?: FingerprintCost;
  purge: { rows: number; deleted: number; seconds: number; batch_size: number; rows_per_second: number };
  duration_s: number;
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

/** The most the fingerprint may cost over the parse of its body, on every shape (issue 25). */
export const FINGERPRINT_TARGET = 5;

const OURS = ['floor', 'memory', 'redis', 'postgres'];

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

const fmt = (n: number) => n.toLocaleString('en-US');
const ms = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1));

function rowsTable(rows: Row[]): string {
  const lines = [
    '| Variant | Baseline req/s | req/s | Ratio | Ratio per round | p50 / p99 ms (baseline) | Server CPU µs/req (baseline) | Redis CPU µs/req (baseline) | Redis commands/req |',
    '| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- |',
  ];
  for (const r of rows) {
    const { sent, inScripts } = redisCommands(r.redis_calls_per_req);
    const cmds =
      r.name.startsWith('memory') || r.name.startsWith('postgres')
        ? '0'
        : `${sent}${inScripts > 0 ? ` (+${inScripts} in scripts)` : ''}`;
    lines.push(
      `| ${r.name} | ${fmt(r.baseline_rps)} | ${fmt(r.rps)} | **${r.ratio.toFixed(2)}** | ${r.ratios.map((x) => x.toFixed(2)).join(' ')} | ${ms(r.p50_ms)} / ${ms(r.p99_ms)} (${ms(r.baseline_p50_ms)} / ${ms(r.baseline_p99_ms)}) | ${r.server_cpu_us_per_req} (${r.baseline_server_cpu_us_per_req}) | ${r.redis_cpu_us_per_req} (${r.baseline_redis_cpu_us_per_req}) | ${cmds} |${r.non2xx > 0 ? ` ⚠ ${r.non2xx} errors` : ''}`,
    );
  }
  return lines.join('\n');
}

/** CPU per request of every process the request touches, at saturation; undefined for a record without the load generator's. */
function allCpu(r: Row): { variant: number; baseline: number } | undefined {
  if (r.load_cpu_us_per_req === undefined || r.baseline_load_cpu_us_per_req === undefined) return undefined;
  return {
    variant: r.server_cpu_us_per_req + r.load_cpu_us_per_req + r.redis_cpu_us_per_req + r.postgres_cpu_us_per_req,
    baseline:
      r.baseline_server_cpu_us_per_req +
      r.baseline_load_cpu_us_per_req +
      r.baseline_redis_cpu_us_per_req +
      (r.baseline_postgres_cpu_us_per_req ?? 0),
  };
}

function processTable(rows: Row[]): string {
  const lines = [
    "| Variant | Server | Load generator | Redis | PostgreSQL | All (baseline) | Cores busy | Baseline's over the variant's | Ratio measured | Load generator runs per request (baseline) |",
    '| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |',
  ];
  for (const r of rows) {
    const all = allCpu(r);
    if (all === undefined) continue;
    lines.push(
      `| ${r.name} | ${r.server_cpu_us_per_req} | ${r.load_cpu_us_per_req} | ${r.redis_cpu_us_per_req} | ${r.postgres_cpu_us_per_req} | ${fmt(all.variant)} (${fmt(all.baseline)}) | ${((all.variant * r.rps) / 1e6).toFixed(2)} | **${(all.baseline / all.variant).toFixed(2)}** | ${r.ratio.toFixed(2)} | ${r.load_runs_per_req ?? ''} (${r.baseline_load_runs_per_req ?? ''}) |`,
    );
  }
  return lines.join('\n');
}

export function renderTable(results: Results): string {
  return [
    `HTTP, ${results.settings.connections} connections, ${results.settings.rounds} rounds (ratio = median of per-round ratios to the baseline runs around it)`,
    rowsTable(results.rows),
    '',
    `Store: Redis commands sent per first execution / replay / rejection: ${results.store_ops.redis_first} / ${results.store_ops.redis_replay} / ${results.store_ops.redis_reject}; ` +
      `PostgreSQL statements: ${results.store_ops.pg_first} / ${results.store_ops.pg_replay} / ${results.store_ops.pg_reject}`,
    `Redis bytes per record (${results.record_body_bytes}-byte result): ${results.redis_bytes_per_record} (MEMORY USAGE), ${results.redis_used_memory_per_record} (used_memory growth)`,
    `In-process overhead per call (memory store): ${results.overhead_us_per_call} µs (${results.overhead.baseline_us.toFixed(1)} → ${results.overhead.idempotent_us.toFixed(1)} µs)`,
    `Fingerprint over the parse of its body: ${fingerprintWorst(results.fingerprint)}`,
    `Growth, ${fmt(results.growth.redis.records)} live records vs empty: Redis ${results.growth.redis.ratio.toFixed(2)}, PostgreSQL ${results.growth.postgres.ratio.toFixed(2)}`,
    `purgeExpired, ${fmt(results.purge.deleted)} expired rows in batches of ${fmt(results.purge.batch_size)}: ${results.purge.seconds} s`,
    `Load average before / after: ${results.load_average.before.join(' ')} / ${results.load_average.after.join(' ')}`,
  ].join('\n');
}

const met = (ok: boolean) => (ok ? 'met' : '**not met**');

/** µs with as many decimals as a figure from 1 µs to 100 ms needs. */
const us = (n: number) => (n < 10 ? n.toFixed(2) : n < 1000 ? n.toFixed(1) : fmt(Math.round(n)));

/** The worst shape's ratio, and the shapes above the target, or `not measured`. */
function fingerprintWorst(cost: FingerprintCost | undefined): string {
  if (cost === undefined || cost.rows.length === 0) return 'not measured';
  const worst = cost.rows.reduce((a, b) => (b.ratio > a.ratio ? b : a));
  const above = cost.rows.filter((r) => r.ratio > FINGERPRINT_TARGET);
  return (
    `worst ${worst.ratio.toFixed(2)}× (${worst.shape}; ${worst.transport}) over ${cost.rows.length} shapes; ` +
    (above.length === 0
      ? `all ≤ ${FINGERPRINT_TARGET}×`
      : `above ${FINGERPRINT_TARGET}×: ${above.map((r) => `${r.shape} (${r.transport}) ${r.ratio.toFixed(2)}×`).join('; ')}`)
  );
}

/** The section of RESULTS.md on the fingerprint's cost over the parse, or a line saying the record has none. */
export function fingerprintSection(cost: FingerprintCost | undefined): string {
  const title = `## Fingerprint cost over the parse of its body (target ≤ ${FINGERPRINT_TARGET}× on every shape)`;
  if (cost === undefined || cost.rows.length === 0) return `${title}\n\nNot measured in this run.`;
  const lines = [
    title,
    '',
    `What the fingerprint (\`fingerprint('pay', input)\`: the canonical form and its SHA-256) costs beside the parse that made`,
    `its input, in process (\`bench/fingerprint.ts\`). For each shape, the body as a client sends it: JSON text, or superjson's`,
    `(which writes a shared object out in full at every reference; with \`dedupe: true\`, once). Each of ${cost.rounds} rounds parses`,
    `N fresh copies of it (\`JSON.parse\` or \`superjson.parse\`, timed) and then fingerprints each copy once (timed): µs per`,
    `copy are medians over the rounds, the ratio the median of the rounds' ratios (their range in brackets). A refused row is`,
    `an input the fingerprint must refuse (\`input_unsupported\`): its time is the refusal's.`,
    '',
    `| Shape | Body | Body bytes | Parse µs | Fingerprint µs | Fingerprint / parse | ≤ ${FINGERPRINT_TARGET}× |`,
    '| --- | --- | ---: | ---: | ---: | ---: | --- |',
  ];
  for (const r of cost.rows) {
    const range =
      r.ratios.length < 2 ? '' : ` (${Math.min(...r.ratios).toFixed(2)}-${Math.max(...r.ratios).toFixed(2)})`;
    lines.push(
      `| ${r.shape} | ${r.transport} | ${fmt(r.body_bytes)} | ${us(r.parse_us)} | ${us(r.fingerprint_us)}${r.refused ? ' (refusal)' : ''} | **${r.ratio.toFixed(2)}**${range} | ${r.ratio <= FINGERPRINT_TARGET ? 'yes' : '**no**'} |`,
    );
  }
  return lines.join('\n');
}

/** A variant's row at saturation, and at a fixed rate. */
const rowOf = (results: Results, name: string) => results.rows.find((r) => r.name === name);
const fixedOf = (results: Results, name: string) => results.latency.find((r) => r.name === name);

/** What the in-process reference layer is, where the record names it. */
const MINIMAL_LAYER =
  'the least an idempotency layer does in process (`minimalLayer` in `bench/lib/inprocess.ts`: a bounded Map, the same ' +
  'fingerprint, the result stored as JSON; no claim token, store timeouts, lease, fence or events)';

/** The least an idempotency layer does in process, beside the library, when the run measured it. */
function minimalNote(overhead: Results['overhead']): string {
  const minimal = overhead.minimal_overhead_us_per_call;
  if (minimal === undefined) return '';
  return `Measured beside it, ${MINIMAL_LAYER} took ${minimal.toFixed(1)} µs over the baseline. `;
}

/** The no-I/O floor's CPU per request at saturation and at a fixed rate, each beside its baseline's. */
function noIoNote(results: Results): string {
  const sat = rowOf(results, 'floor-no-io-handler');
  const fixed = fixedOf(results, 'floor-no-io-handler');
  if (sat === undefined || fixed?.server_cpu_us_per_req === undefined) return 'not measured in this run';
  return (
    `its handler does less than the baseline's, yet at saturation it took ${fmt(sat.server_cpu_us_per_req)} µs of server CPU per request ` +
    `against the baseline's ${fmt(sat.baseline_server_cpu_us_per_req)}, and at ${fmt(fixed.rate)} req/s ${fmt(fixed.server_cpu_us_per_req)} ` +
    `against ${fmt(fixed.baseline_server_cpu_us_per_req ?? Number.NaN)}`
  );
}

/**
 * What PostgreSQL's own processes allow a path at most: the baseline's CPU per request
 * over the same plus theirs, as if the layer cost nothing in the application server.
 */
function postgresBound(row: Row, what: string): string {
  const all = allCpu(row);
  if (all === undefined) return 'not measured';
  const pg = row.postgres_cpu_us_per_req - (row.baseline_postgres_cpu_us_per_req ?? 0);
  return `PostgreSQL's processes alone take ${fmt(pg)} µs of CPU per ${what}, which with a layer costing nothing in the server would allow ${(all.baseline / (all.baseline + pg)).toFixed(2)}`;
}

function targetsTable(results: Results): string {
  const row = (name: string) => rowOf(results, name);
  const ratio = (name: string) => row(name)?.ratio ?? Number.NaN;
  const peersFirst = Math.max(ratio('node-idempotency-first'), ratio('powertools-first'));
  const peersReplay = Math.max(
    ratio('node-idempotency-replay'),
    ratio('powertools-replay'),
    ratio('express-idempotency-replay'),
  );
  const floor = ratio('floor-2-redis-round-trips');
  const redisReplay = row('redis-replay')!;
  const pgFirst = row('postgres-first')!;
  const fixedRow = (name: string) => fixedOf(results, name);
  const cost = (name: string) => fixedRow(name)?.cost_ratio ?? Number.NaN;
  const fixedCpu = (name: string) =>
    `${fmt(fixedRow(name)?.server_cpu_us_per_req ?? Number.NaN)} vs ${fmt(fixedRow(name)?.baseline_server_cpu_us_per_req ?? Number.NaN)} µs`;
  const bounds = boundsOf(results);
  const t = (what: string, measured: string, ok: boolean, bound: string) =>
    `| ${what} | ${measured} | ${met(ok)} | ${ok ? '' : bound} |`;
  return [
    '| Target | Measured | | What bounds it, measured in this run |',
    '| --- | --- | --- | --- |',
    t(
      'Redis, first execution: ≥ every atomic peer (node-idempotency, Powertools) and within 0.03 of the two-round-trip floor',
      `${ratio('redis-first').toFixed(2)}; peers ≤ ${peersFirst.toFixed(2)}; floor ${floor.toFixed(2)}`,
      ratio('redis-first') >= peersFirst && ratio('redis-first') >= floor - 0.03,
      bounds.redisFirst,
    ),
    t(
      'Redis, replay: ≥ every peer, and less server CPU per request than the bare procedure',
      `${redisReplay.ratio.toFixed(2)}; peers ≤ ${peersReplay.toFixed(2)}; ${redisReplay.server_cpu_us_per_req} vs ${redisReplay.baseline_server_cpu_us_per_req} µs`,
      redisReplay.ratio >= peersReplay &&
        redisReplay.server_cpu_us_per_req < redisReplay.baseline_server_cpu_us_per_req,
      bounds.redisReplay,
    ),
    t('Memory, replay: ≥ 0.95', ratio('memory-replay').toFixed(2), ratio('memory-replay') >= 0.95, bounds.memoryReplay),
    t(
      'Memory, replay, at a fixed rate: cost ratio ≥ 0.95 (see the latency section)',
      `${cost('memory-replay').toFixed(2)}; ${fixedCpu('memory-replay')}`,
      cost('memory-replay') >= 0.95,
      bounds.memoryReplayFixed,
    ),
    t(
      'Redis, replay, at a fixed rate: less server CPU per request than the bare procedure',
      `${fixedCpu('redis-replay')}; cost ratio ${cost('redis-replay').toFixed(2)}`,
      cost('redis-replay') > 1,
      bounds.redisReplayFixed,
    ),
    t(
      'PostgreSQL: first ≥ 0.5, replay ≥ 0.8',
      `${ratio('postgres-first').toFixed(2)} / ${ratio('postgres-replay').toFixed(2)}`,
      ratio('postgres-first') >= 0.5 && ratio('postgres-replay') >= 0.8,
      bounds.postgres,
    ),
    t(
      'PostgreSQL server CPU per first execution ≤ 271 µs (half of the 542 µs recorded on 2026-11-30)',
      `${pgFirst.postgres_cpu_us_per_req} µs`,
      pgFirst.postgres_cpu_us_per_req <= 271,
      bounds.postgresCpu,
    ),
    t(
      'In process, memory store: overhead ≤ 4 µs per call',
      `${results.overhead_us_per_call} µs`,
      results.overhead_us_per_call <= 4,
      bounds.inProcess,
    ),
    results.fingerprint === undefined
      ? `| Fingerprint ≤ ${FINGERPRINT_TARGET}× its parse (\`JSON.parse\` / \`superjson.parse\` of the body) on every shape | not measured | | |`
      : t(
          `Fingerprint ≤ ${FINGERPRINT_TARGET}× its parse (\`JSON.parse\` / \`superjson.parse\` of the body) on every shape`,
          fingerprintWorst(results.fingerprint),
          results.fingerprint.rows.every((r) => r.ratio <= FINGERPRINT_TARGET),
          'The rows above it in "Fingerprint cost over the parse of its body": a body smaller than the value superjson rebuilds ' +
            "from it (its shared references) costs the fingerprint the value's size, which the canonical form writes out and hashes",
        ),
  ].join('\n');
}

/**
 * For each target, what this run measured about where the time goes: every process's CPU, the
 * profiles of "Where the CPU goes", the load generator's wake-ups, and the documents that profile a
 * path further (bench/profile-*.md).
 */
function boundsOf(results: Results) {
  const row = (name: string) => rowOf(results, name);
  // All processes' CPU per request, and the ratio the cores would allow if CPU were the only limit.
  const cores = (name: string) => {
    const r = row(name);
    const all = r === undefined ? undefined : allCpu(r);
    return all === undefined
      ? 'not measured'
      : `${fmt(all.variant)} µs (allows ${(all.baseline / all.variant).toFixed(2)})`;
  };
  const rounds = (name: string) => {
    const r = row(name);
    return r === undefined ? 'not measured' : `${Math.min(...r.ratios).toFixed(2)}-${Math.max(...r.ratios).toFixed(2)}`;
  };
  const ratioOf = (name: string) => {
    const r = row(name);
    return r === undefined ? 'not measured' : r.ratio.toFixed(2);
  };
  const signed = (us: number) => `${us >= 0 ? '+' : ''}${fmt(us)}`;
  const added = (name: string) => {
    const r = row(name);
    return r === undefined ? 'not measured' : signed(r.server_cpu_us_per_req - r.baseline_server_cpu_us_per_req);
  };
  const redisAdded = (name: string) => {
    const r = row(name);
    return r === undefined ? 'not measured' : signed(r.redis_cpu_us_per_req - r.baseline_redis_cpu_us_per_req);
  };
  const layer = (name: string) => {
    const us = results.profiles[name]?.owners['trpc-idempotency'];
    return us === undefined ? 'not profiled' : `${us} µs`;
  };
  const runs = (name: string) => {
    const r = row(name);
    return r?.load_runs_per_req === undefined
      ? 'not measured'
      : `${r.load_runs_per_req} time${r.load_runs_per_req === 1 ? '' : 's'} per request (baseline ${r.baseline_load_runs_per_req})`;
  };
  const pgFirst = row('postgres-first');
  const pgReplay = row('postgres-replay');
  const overhead = results.overhead;
  return {
    redisFirst:
      `All processes' CPU per request: ours ${cores('redis-first')}, the floor ${cores('floor-2-redis-round-trips')}, ` +
      `ours on plain SET commands ${cores('floor-redis-plain-commands')}, ` +
      `node-idempotency ${cores('node-idempotency-first')}, Powertools ${cores('powertools-first')}. ` +
      `Server CPU added: ours ${added('redis-first')} µs, node-idempotency ${added('node-idempotency-first')}, Powertools ${added('powertools-first')}; ` +
      `Redis CPU added: ours ${redisAdded('redis-first')} µs, on plain SET commands ${redisAdded('floor-redis-plain-commands')}, node-idempotency ${redisAdded('node-idempotency-first')}, Powertools ${redisAdded('powertools-first')} ` +
      `(the store runs a Lua script per transition, fenced by the claim's token; the peers send plain SETs). ` +
      `The same engine and adapter on plain SET commands (floor-redis-plain-commands, no fence) reached ${ratioOf('floor-redis-plain-commands')}: ` +
      `what is left between it and the peers is the engine's and the adapter's, what lies between it and ours the fenced scripts' (bench/profile-guarantees.md); ` +
      `the layer's own code ${layer('redis-first')} per request ("Where the CPU goes"). Ratios per round: ours ${rounds('redis-first')}, ` +
      `node-idempotency ${rounds('node-idempotency-first')}, Powertools ${rounds('powertools-first')}, the floor ${rounds('floor-2-redis-round-trips')}, ` +
      `on plain SET commands ${rounds('floor-redis-plain-commands')}`,
    redisReplay:
      `All processes' CPU per request: ours ${cores('redis-replay')}, node-idempotency ${cores('node-idempotency-replay')}, ` +
      `Powertools ${cores('powertools-replay')}. Ours checks the payload's fingerprint, parses the stored result and lets tRPC ` +
      `parse the input and serialize the result; node-idempotency's replay answers before tRPC's input parser and checks no payload ` +
      `(instructions per replay: bench/profile-http.md). The layer's own code ${layer('redis-replay')} per request. ` +
      `Ratios per round: ours ${rounds('redis-replay')}, node-idempotency ${rounds('node-idempotency-replay')}`,
    memoryReplay:
      `The load generator was put on a CPU ${runs('memory-replay')}: answers made without I/O reach it one at a ` +
      `time, and its wake-ups take CPU the server lacks on the shared cores. The no-I/O floor, which has no layer at all, ` +
      `reached ${ratioOf('floor-no-io-handler')} (its load generator ${runs('floor-no-io-handler')}). ` +
      `The layer's own code ${layer('memory-replay')} per request. At a fixed rate, the next row`,
    memoryReplayFixed: `The no-I/O floor's cost ratio at a fixed rate: ${(fixedOf(results, 'floor-no-io-handler')?.cost_ratio ?? Number.NaN).toFixed(2)}; the layer's own code ${layer('memory-replay')} per request`,
    redisReplayFixed:
      `A replay is one Redis round trip, as the bare procedure's single INCR is, plus the layer's checks (its own code ` +
      `${layer('redis-replay')} per request, ioredis ${results.profiles['redis-replay']?.owners.ioredis ?? 'not profiled'} µs against the baseline's ` +
      `${results.profiles.baseline?.owners.ioredis ?? 'not profiled'}): against a procedure that does no more than one store round trip, ` +
      `it costs less only where replays arriving together share the store's write of one turn of the event loop`,
    postgres:
      pgFirst === undefined || pgReplay === undefined
        ? 'not measured'
        : `${postgresBound(pgFirst, 'first execution')}; ${postgresBound(pgReplay, 'replay')} (see "Every process")`,
    postgresCpu:
      `A first execution commits twice (the claim, durable before the procedure runs; the outcome, before it is answered), ` +
      `each waiting for a WAL flush; a replay, one statement that writes nothing, took ${pgReplay?.postgres_cpu_us_per_req ?? 'not measured'} µs ` +
      `(bench/profile-postgres.md)`,
    inProcess:
      `The fingerprint (canonical form and SHA-256 of the input) ${overhead.fingerprint_us.toFixed(2)} µs; a replay ` +
      `${overhead.replay_overhead_us_per_call?.toFixed(1) ?? 'not measured'} µs over the baseline. ` +
      `${minimalNote(overhead)}The rest of a first ` +
      `execution is spread over its steps (storing the result with JSON.stringify, the largest, the memory store, the ` +
      `engine, the resolver's signal): bench/profile-inprocess.md`,
  };
}

/** Ratios against the previous committed record's. */
function sinceLast(results: Results): string {
  const prev = results.previous;
  if (prev === undefined) return '';
  const lines = [
    `## Since the last record`,
    '',
    `The previous record: ${prev.date.slice(0, 16).replace('T', ' ')} UTC, commit ${prev.commit}; this one: commit ${results.commit}.`,
    '',
    ...machineChange(results, prev),
    '| Variant | Ratio then | Ratio now |',
    '| --- | ---: | ---: |',
  ];
  for (const r of results.rows) {
    const then = prev.ratios[r.name];
    lines.push(`| ${r.name} | ${then === undefined ? '' : then.toFixed(2)} | ${r.ratio.toFixed(2)} |`);
  }
  lines.push(
    `| in-process overhead, µs per call | ${Number.isNaN(prev.overhead_us_per_call) ? '' : prev.overhead_us_per_call} | ${results.overhead_us_per_call} |`,
  );
  return lines.join('\n');
}

/** The spread of the baseline's own runs in both records, when both give it. */
function steadinessChange(results: Results, prev: Previous): string {
  const now = baselineRange(results);
  const then = prev.baseline_rps_range;
  if (now === undefined || then === undefined) return '';
  const span = ([low, high]: [number, number]) => `${fmt(low)}-${fmt(high)}`;
  return ` Its own runs served ${span(then)} req/s then and ${span(now)} now (the *Steadiness* line): the wider the range, the more the host's speed moved under the ratios.`;
}

/** What a reader must know before comparing the two records' ratios: whether the machine changed. */
function machineChange(results: Results, prev: Previous): string[] {
  const now = machineName(results);
  const rps = baselineRps(results);
  const speed =
    prev.baseline_rps === undefined || rps === undefined
      ? ''
      : ` The bare tRPC baseline served ${fmt(prev.baseline_rps)} req/s then and ${fmt(rps)} now.`;
  if (prev.machine === undefined) return speed === '' ? [] : [speed.trim(), ''];
  if (prev.machine === now) {
    // A shared virtual machine's speed moves with its neighbours: say so when the baseline moved a lot.
    const moved =
      prev.baseline_rps !== undefined && rps !== undefined && Math.abs(rps / prev.baseline_rps - 1) > 0.25
        ? " The host ran at another speed: read the change between these two records as the machine's as much as the code's."
        : '';
    return [`Same machine type (${now}).${speed}${moved}${steadinessChange(results, prev)}`, ''];
  }
  return [
    `**Another machine:** ${prev.machine} then, ${now} now.${speed} A ratio is each variant against its baseline on the`,
    'same machine, but how the server, the load generator and the stores share the cores, and so each ratio, depends on',
    "the machine's speed: read the change between these two records as the machine's as much as the code's.",
    '',
  ];
}

export function renderMarkdown(results: Results): string {
  const ours = results.rows.filter((r) => OURS.some((o) => r.name.startsWith(`${o}-`)));
  const peers = results.rows.filter((r) => !OURS.some((o) => r.name.startsWith(`${o}-`)));
  const m = results.machine;
  const so = results.store_ops;
  const scripts = (calls: Record<string, number>) =>
    Object.entries(calls)
      .map(([cmd, n]) => `${cmd} ${Math.round(n * 100) / 100}`)
      .join(', ');
  const quiet = results.load_average.reached_quiet;
  return `# Benchmark results

Generated by \`npm run bench\` on ${results.date.slice(0, 10)} (${results.date}) at commit ${results.commit}; it took ${results.duration_s} s.

**Machine:** ${m.cpu}, ${m.cores} cores, ${m.memory_gib} GiB; ${m.os}; Node ${m.node}; Redis ${m.redis}; PostgreSQL ${m.postgresql}.
Load average (1, 5, 15 min) before the run: ${results.load_average.before.join(', ')}; after: ${results.load_average.after.join(', ')}${
    quiet === undefined
      ? ''
      : quiet
        ? ` (waited ${results.load_average.waited_for_quiet_s} s for a 1-minute load below 0.8 first)`
        : ' (the 1-minute load never fell below 0.8 within 20 minutes: measured anyway)'
  }.
${steadiness(results)}
**Method.** Each server is its own Node process (the library from the built \`dist/\`); the load comes from
autocannon in another process over loopback, ${results.settings.connections} connections, ${results.settings.duration_s} s per run after a
${results.settings.warmup_s} s warm-up, ${results.settings.rounds} rounds${
    results.settings.warmup_requests === undefined
      ? ''
      : `; before its first run, each server served ${fmt(results.settings.warmup_requests)} requests of each kind it is measured on
(V8 is still optimising a server that has served fewer)`
  }. Every variant runs between two runs of its baseline (A B A B):
its ratio is its throughput over the mean of those two, and the table gives the median over the rounds.
The operation is one tRPC mutation (\`POST /pay\`) whose handler does one Redis INCR and returns ~${results.record_body_bytes} bytes of JSON.
*first*: a fresh \`Idempotency-Key\` per request (every request runs the procedure); *replay*: ${results.settings.replay_keys} keys completed
beforehand, reused in turn (no request runs it). The machine also runs the load generator, Redis and PostgreSQL on
its ${results.machine.cores} cores (pinned: ${results.settings.pinned ?? 'no'}), so absolute numbers are for context: compare ratios. Server CPU is the server process's user + system
time over the run, per request; Redis CPU is the same for the redis-server process (the store, the handler's INCR, and the
peers' commands: it runs on the same cores as the server); Redis commands are \`INFO commandstats\` deltas over the run, per
request, the handler's INCR left out.

## trpc-idempotency

${rowsTable(ours)}

The *floor* rows bound what a layer can reach here. Two have no idempotency at all:
- **floor-2-redis-round-trips**: the baseline handler with two more Redis round trips (EXISTS before and after the
  INCR), as many as a first execution needs at least (claim, completion).
- **floor-no-io-handler**: the baseline's result made without the INCR, so the response is produced with no I/O at all,
  as a replay from the memory store is.

One is this library without its guarantees, to price them:
- **floor-redis-plain-commands**: the same engine and tRPC adapter on a bench-only store (\`bench/lib/plain-redis-store.ts\`)
  that sends the peers' kind of commands instead of the Redis store's Lua scripts: a claim is one \`SET NX PX GET\` with no
  deadline, a completion one \`SET PX\` fenced by nothing (a holder whose claim expired overwrites the outcome of the
  request that took the key over), no steps; batched per turn of the event loop as the Redis store's scripts are.
  Against **redis-first**, the difference is what the fenced scripts cost.

**redis-autopipelining** is the Redis store on an application client created with ioredis's \`enableAutoPipelining: true\`
(the commands issued in one tick of the event loop reach Redis in one write), against a baseline whose client has it too
(its INCR is pipelined as well). Every other row uses a client as ioredis makes it by default.

## Peers

Each peer against its own baseline (the same server and handler without it).

${rowsTable(peers)}

- **@node-idempotency/core** + **storage-adapter-redis**: \`onRequest\` / \`onResponse\` (awaited) in a tRPC middleware, as its
  NestJS interceptor drives them; fingerprint of the raw body. First: SET NX + SET; replay: SET NX + GET.
- **Powertools idempotency** (\`makeIdempotent\`, \`CachePersistenceLayer\` on \`@redis/client\`) around the mutation's handler,
  keyed by the \`Idempotency-Key\` header. Run without payload validation: with \`payloadValidationJmesPath\`, its cache layer
  writes the completed record without the payload hash, so every replay fails (\`IdempotencyValidationError\`, 500);
  so it does not detect a key reused with another payload here. First: SET NX + SET; replay: SET NX + GET.
- **express-idempotency** + **express-idempotency-redis-adapter** on Express 5 (its baseline: the same Express app without it).
  First: GET + SET, then a SET after the response is sent (not awaited); replay: GET. The GET-then-SET claim is not atomic.

## Every process

At saturation the ${results.machine.cores} cores are shared by the server, the load generator, Redis and PostgreSQL, so what limits
a variant's throughput is the CPU all of them spend per request, not the server's alone. CPU per request (µs, user + system,
median over the rounds) of each process, their sum beside the baselines', how many cores that sum keeps busy at the
variant's throughput, and the baselines' sum over the variant's: the ratio the cores would allow if CPU were the only limit,
beside the ratio measured. PostgreSQL counts every PostgreSQL process on the machine (a process that ends during a run, such
as an autovacuum worker, is left out of it). The last column counts how many times the load generator was put on a CPU
per request (\`/proc/<pid>/task/<tid>/schedstat\`): once per request when the answers reach it one at a time, less often
when each wake-up finds several.

${processTable(results.rows)}

## Targets

${targetsTable(results)}

## Latency at a fixed rate

Each variant and its baseline at one rate, half the lower of their two peak throughputs (so that both sustain it), open loop
(requests leave on schedule whether or not earlier ones have answered), timed to the microsecond by the load process, A B A B
over ${results.settings.rounds} rounds; *added* is the variant's percentile minus its baselines', median over the rounds: what
an application that is not saturated feels per request. The server's CPU per request is measured over the same window;
the *cost ratio* is the baselines' CPU per request over the variant's (median over the rounds): the counterpart of a
throughput ratio at equal load. At saturation the server, the load generator, Redis and PostgreSQL compete for the same
${results.machine.cores} cores, and what a request costs then depends on how the cores are shared as well as on its own work (the
no-I/O floor shows it: ${noIoNote(results)}); at a fixed rate both sides see the same arrivals, so the cost ratio compares
their work.

${latencyTable(results.latency)}

## Where the CPU goes

${
  results.settings.profiler === 'perf'
    ? `Each server again, fresh and warmed up, under the same saturating load, with Linux \`perf\` (\`perf record -e cpu-clock -g\`,
one sample per 250 µs of CPU time of any of the server's threads; JavaScript named through \`node --perf-basic-prof\`)
recording only the ${results.settings.duration_s} s measured window. CPU time per request, by owner of the code, then the top frames:
V8's builtins count for the JavaScript function that called them, and a function V8 inlined for the one it was inlined
into (even from another package: owners are approximate at those boundaries); *Linux kernel* is time in system calls and
interrupts, named by the JavaScript function that made the call; *GC* and *JIT compiler* count on any thread. Only time
on a CPU counts (a thread waiting in a system call does not), so these figures add up to about the server's CPU column above.`
    : `Each server again, fresh, under the same saturating load, with V8's CPU profiler (250 µs sampling) recording only the
${results.settings.duration_s} s measured window (after the warm-up). Self time per request, by owner of the code, then the top frames.
The profiler slows the server it samples, so compare these figures with each other, not with the CPU column above.`
}

${profileTables(results.profiles)}

${sinceLast(results)}

## Store cost

| | First execution | Replay | In-flight rejection | Waiting duplicate${so.redis_wait_ms === undefined ? '' : ` (${so.redis_wait_ms} ms)`} |
| --- | ---: | ---: | ---: | ---: |
| Redis commands sent (EVALSHA) | ${so.redis_first} | ${so.redis_replay} | ${so.redis_reject} | ${so.redis_wait ?? 'not measured'} |
| Run inside the scripts | ${scripts(so.redis_in_scripts.first)} | ${scripts(so.redis_in_scripts.replay)} | ${scripts(so.redis_in_scripts.reject)} | ${so.redis_in_scripts.wait === undefined ? 'not measured' : scripts(so.redis_in_scripts.wait)} |
| PostgreSQL statements (round trips) | ${so.pg_first} | ${so.pg_replay} | ${so.pg_reject} | not measured |

Redis memory per completed record with a ${results.record_body_bytes}-byte result: **${results.redis_bytes_per_record} bytes** (\`MEMORY USAGE\`),
${results.redis_used_memory_per_record} bytes of \`used_memory\` growth per record over 10,000 records.
Records left by the HTTP runs (\`MEMORY USAGE\`, sampled): ${Object.entries(results.peer_redis_bytes_per_record)
    .map(([name, n]) => `${name} ${n}`)
    .join(', ')} bytes.

In-process cost of the middleware (mitata, server-side caller, memory store, \`getKey\`, a fresh key per call):
**${results.overhead_us_per_call} µs per call** (${results.overhead.baseline_us.toFixed(1)} µs without, ${results.overhead.idempotent_us.toFixed(1)} µs with; medians)${
    results.overhead.replay_overhead_us_per_call === undefined
      ? ''
      : `; a replay (the same key every call) ${results.overhead.replay_overhead_us_per_call.toFixed(1)} µs over the baseline`
  }${
    results.overhead.minimal_overhead_us_per_call === undefined
      ? ''
      : `; ${MINIMAL_LAYER} ${results.overhead.minimal_overhead_us_per_call.toFixed(1)} µs over the baseline`
  }.

${fingerprintSection(results.fingerprint)}

## Growth

| Store | Empty req/s | With ${fmt(results.growth.redis.records)} live records | Ratio | p99 ms empty / full |
| --- | ---: | ---: | ---: | --- |
| Redis | ${fmt(results.growth.redis.empty_rps)} | ${fmt(results.growth.redis.full_rps)} | ${results.growth.redis.ratio.toFixed(2)} | ${ms(results.growth.redis.empty_p99_ms)} / ${ms(results.growth.redis.full_p99_ms)} |
| PostgreSQL | ${fmt(results.growth.postgres.empty_rps)} | ${fmt(results.growth.postgres.full_rps)} | ${results.growth.postgres.ratio.toFixed(2)} | ${ms(results.growth.postgres.empty_p99_ms)} / ${ms(results.growth.postgres.full_p99_ms)} |

\`purgeExpired()\` over ${fmt(results.purge.deleted)} expired rows, batches of ${fmt(results.purge.batch_size)}: **${results.purge.seconds} s**
(${fmt(results.purge.rows_per_second)} rows/s).

Raw runs: \`bench/results.json\` (not committed). Run it: \`npm run bench\` (needs \`redis-server\` on the PATH and PostgreSQL at
\`DATABASE_URL\`, default \`postgres://postgres@127.0.0.1:5432/test\`; \`BENCH_ROUNDS\`, \`BENCH_DURATION\`, \`BENCH_RECORDS\`,
\`BENCH_WARMUP_REQUESTS\`, \`BENCH_WAIT_QUIET=1\`).

<!-- bench-summary ${JSON.stringify({
    date: results.date,
    commit: results.commit,
    machine: machineName(results),
    baseline_rps: baselineRps(results),
    baseline_rps_range: baselineRange(results),
    ratios: Object.fromEntries(results.rows.map((r) => [r.name, r.ratio])),
    overhead_us_per_call: results.overhead_us_per_call,
  } satisfies Previous)} -->
`;
}
