/**
 * From a run's measurements to the record's rows: each variant ran between two runs of its baseline
 * (A B A B), so its ratio in a round is its figure over the mean of those two baseline runs, and a
 * row gives the median over the rounds.
 */
import type { LoadResult } from '../load.js';

/** One measured saturation run of one server. */
export interface Run {
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
  /** The MariaDB connection threads serving the server (the MySQL store's servers only). */
  mariadb_cpu_us_per_req?: number;
  /** The load generator's process (autocannon). */
  load_cpu_us_per_req: number;
  /** Times the load generator's threads were put on a CPU, per request. */
  load_runs_per_req: number;
  /** Redis commands per request, by name, during the measured window (the handler's INCR included). */
  redis_calls_per_req: Record<string, number>;
}

/** One run at a fixed rate, with the server's CPU per request over it. */
export type PacedRun = LoadResult & { server_cpu_us_per_req: number };

/** A variant's run in one round, between the baseline runs before and after it. */
export interface Pair<R> {
  name: string;
  round: number;
  variant: R;
  before: R;
  after: R;
}

/** A variant of the plan: which server it runs on, against which baseline, with fresh or replayed keys. */
export interface Step {
  name: string;
  server: string;
  /** The baseline's server. */
  baseline: string;
  keys: 'fresh' | 'replay';
  /**
   * The baseline's keys: fresh (the default: a baseline without idempotency), or replayed, for a
   * store variant measured against the same store without an option, replays against replays.
   */
  baselineKeys?: 'fresh' | 'replay';
}

/** The name of a step's baseline runs: its server's, and ` replays` after it when it replays. */
export const baselineName = (step: Step): string =>
  step.baselineKeys === 'replay' ? `${step.baseline} replays` : step.baseline;

/** A variant at saturation: medians over the rounds, its baselines' beside them. */
export interface Row {
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
  redis_cpu_us_per_req: number;
  baseline_redis_cpu_us_per_req: number;
  postgres_cpu_us_per_req: number;
  baseline_postgres_cpu_us_per_req: number;
  /** The MySQL store's rows: its MariaDB connection threads (the baselines send MariaDB nothing). */
  mariadb_cpu_us_per_req?: number;
  load_cpu_us_per_req: number;
  baseline_load_cpu_us_per_req: number;
  load_runs_per_req: number;
  baseline_load_runs_per_req: number;
  redis_calls_per_req: Record<string, number>;
  non2xx: number;
}

/** A variant at a fixed rate: percentiles in µs, *added* = the variant's minus its baselines' mean. */
export interface Latency {
  name: string;
  /** The name of its baseline runs (see {@link baselineName}). */
  baseline: string;
  rate: number;
  p50_us: number;
  p99_us: number;
  baseline_p50_us: number;
  baseline_p99_us: number;
  added_p50_us: number;
  added_p99_us: number;
  server_cpu_us_per_req: number;
  baseline_server_cpu_us_per_req: number;
  /** The baselines' server CPU per request over the variant's: a throughput ratio's counterpart at equal load. */
  cost_ratio: number;
  non2xx: number;
}

/** First executions against a store holding `records` live records, against an empty one. */
export interface Growth {
  records: number;
  empty_rps: number;
  full_rps: number;
  ratio: number;
  empty_p99_ms: number;
  full_p99_ms: number;
}

export const round2 = (n: number) => Math.round(n * 100) / 100;
export const round3 = (n: number) => Math.round(n * 1000) / 1000;

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The mean of a pair's two baseline runs, for one figure. */
const around = <R>(p: Pair<R>, figure: (r: R) => number) => (figure(p.before) + figure(p.after)) / 2;

/** A step's row from its pairs at saturation (each round's pair: the variant and the baseline runs either side). */
export function saturationRow(step: Step, pairs: Pair<Run>[]): Row {
  const mine = pairs.filter((p) => p.name === step.name);
  const ratios = mine.map((p) => p.variant.rps / around(p, (r) => r.rps));
  const base = mine.flatMap((p) => [p.before, p.after]);
  const variant = (figure: (r: Run) => number) => median(mine.map((p) => figure(p.variant)));
  const baseline = (figure: (r: Run) => number) => median(base.map(figure));
  return {
    name: step.name,
    baseline: baselineName(step),
    baseline_rps: Math.round(median(mine.map((p) => around(p, (r) => r.rps)))),
    rps: Math.round(variant((r) => r.rps)),
    ratio: round3(median(ratios)),
    p50_ms: variant((r) => r.p50_ms),
    p99_ms: variant((r) => r.p99_ms),
    baseline_p50_ms: baseline((r) => r.p50_ms),
    baseline_p99_ms: baseline((r) => r.p99_ms),
    ratios: ratios.map(round3),
    server_cpu_us_per_req: Math.round(variant((r) => r.server_cpu_us_per_req)),
    baseline_server_cpu_us_per_req: Math.round(baseline((r) => r.server_cpu_us_per_req)),
    redis_cpu_us_per_req: Math.round(variant((r) => r.redis_cpu_us_per_req)),
    baseline_redis_cpu_us_per_req: Math.round(baseline((r) => r.redis_cpu_us_per_req)),
    postgres_cpu_us_per_req: Math.round(variant((r) => r.postgres_cpu_us_per_req)),
    baseline_postgres_cpu_us_per_req: Math.round(baseline((r) => r.postgres_cpu_us_per_req)),
    ...(mine.some((p) => p.variant.mariadb_cpu_us_per_req !== undefined)
      ? { mariadb_cpu_us_per_req: Math.round(variant((r) => r.mariadb_cpu_us_per_req ?? 0)) }
      : {}),
    load_cpu_us_per_req: Math.round(variant((r) => r.load_cpu_us_per_req)),
    baseline_load_cpu_us_per_req: Math.round(baseline((r) => r.load_cpu_us_per_req)),
    load_runs_per_req: round2(variant((r) => r.load_runs_per_req)),
    baseline_load_runs_per_req: round2(baseline((r) => r.load_runs_per_req)),
    redis_calls_per_req: mine.at(-1)!.variant.redis_calls_per_req,
    non2xx: mine.reduce((n, p) => n + p.variant.non2xx + p.variant.errors, 0),
  };
}

/** A step's row from its pairs at a fixed `rate`. */
export function fixedRateRow(step: Step, paced: Pair<PacedRun>[], rate: number): Latency {
  const mine = paced.filter((p) => p.name === step.name);
  const us = (ms: number) => Math.round(ms * 1000);
  const cpu = (r: PacedRun) => r.server_cpu_us_per_req;
  return {
    name: step.name,
    baseline: baselineName(step),
    rate,
    p50_us: us(median(mine.map((p) => p.variant.p50_ms))),
    p99_us: us(median(mine.map((p) => p.variant.p99_ms))),
    baseline_p50_us: us(median(mine.map((p) => around(p, (r) => r.p50_ms)))),
    baseline_p99_us: us(median(mine.map((p) => around(p, (r) => r.p99_ms)))),
    added_p50_us: us(median(mine.map((p) => p.variant.p50_ms - around(p, (r) => r.p50_ms)))),
    added_p99_us: us(median(mine.map((p) => p.variant.p99_ms - around(p, (r) => r.p99_ms)))),
    server_cpu_us_per_req: Math.round(median(mine.map((p) => cpu(p.variant)))),
    baseline_server_cpu_us_per_req: Math.round(median(mine.map((p) => around(p, cpu)))),
    cost_ratio: round3(median(mine.map((p) => around(p, cpu) / cpu(p.variant)))),
    non2xx: mine.reduce((n, p) => n + p.variant.non2xx + p.variant.errors, 0),
  };
}

/** Growth from the runs against an empty store and a full one, round by round. */
export function growthRow(empty: Run[], full: Run[], records: number): Growth {
  return {
    records,
    empty_rps: Math.round(median(empty.map((r) => r.rps))),
    full_rps: Math.round(median(full.map((r) => r.rps))),
    ratio: round3(median(full.map((r, i) => r.rps / empty[i]!.rps))),
    empty_p99_ms: median(empty.map((r) => r.p99_ms)),
    full_p99_ms: median(full.map((r) => r.p99_ms)),
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
    variant:
      r.server_cpu_us_per_req +
      r.load_cpu_us_per_req +
      r.redis_cpu_us_per_req +
      r.postgres_cpu_us_per_req +
      (r.mariadb_cpu_us_per_req ?? 0),
    baseline:
      r.baseline_server_cpu_us_per_req +
      r.baseline_load_cpu_us_per_req +
      r.baseline_redis_cpu_us_per_req +
      r.baseline_postgres_cpu_us_per_req,
  };
}
