/**
 * What one run of `npm run bench` records (bench/results.json), and what a record carries for the next
 * one to compare with (a JSON comment at the end of bench/RESULTS.md).
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
