/**
 * The in-process cost of the middleware per call: the same mutation through a
 * server-side caller, without idempotency and with it (memory store, getKey),
 * measured with mitata, alternating A B C D A B C D: B a fresh key per call (a first
 * execution), C one key completed beforehand (a replay), D a fresh key per call
 * through the least an idempotency layer does (bench/lib/inprocess.ts, minimalLayer).
 * Prints one JSON line. Run by run.ts in a process of its own.
 */
import { measure } from 'mitata';
import { fingerprint } from '../dist/core.js';
import { type InProcessCtx as Ctx, callerFor, INPUT as input } from './lib/inprocess.js';

// One context per caller, its key changed before every call: both callers pay for the key.
const baseCtx: Ctx = { key: '' };
const idemCtx: Ctx = { key: '' };
const replayCtx: Ctx = { key: 'replayed' };
const minimalCtx: Ctx = { key: '' };
const base = callerFor(baseCtx);
const idem = callerFor(idemCtx);
const replay = callerFor(replayCtx);
const minimal = callerFor(minimalCtx);
let n = 0;
await replay.idempotent(input); // completes the key every replay below reuses

const rounds = Number(process.argv[2] ?? 4);
const baseline: number[] = [];
const withIdem: number[] = [];
const replayed: number[] = [];
const minimalRuns: number[] = [];
for (let round = 0; round < rounds; round++) {
  const a = await measure(
    async () => {
      baseCtx.key = `k${++n}`;
      await base.plain(input);
    },
    { min_cpu_time: 300_000_000 },
  );
  const b = await measure(
    async () => {
      idemCtx.key = `k${++n}`;
      await idem.idempotent(input);
    },
    { min_cpu_time: 300_000_000 },
  );
  const c = await measure(
    async () => {
      replayCtx.key = 'replayed';
      await replay.idempotent(input);
    },
    { min_cpu_time: 300_000_000 },
  );
  const d = await measure(
    async () => {
      minimalCtx.key = `k${++n}`;
      await minimal.minimal(input);
    },
    { min_cpu_time: 300_000_000 },
  );
  baseline.push(a.p50 / 1000);
  withIdem.push(b.p50 / 1000);
  replayed.push(c.p50 / 1000);
  minimalRuns.push(d.p50 / 1000);
}

// The part every first execution and replay pays for whatever the store: the canonical form and SHA-256 of the input.
const fingerprintNs = (await measure(() => fingerprint('pay', input), { min_cpu_time: 300_000_000 })).p50;

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
process.stdout.write(
  `${JSON.stringify({
    baseline_us: median(baseline),
    idempotent_us: median(withIdem),
    overhead_us_per_call: median(withIdem) - median(baseline),
    replay_us: median(replayed),
    replay_overhead_us_per_call: median(replayed) - median(baseline),
    fingerprint_us: fingerprintNs / 1000,
    minimal_us: median(minimalRuns),
    minimal_overhead_us_per_call: median(minimalRuns) - median(baseline),
    rounds: baseline.map((b, i) => ({
      baseline_us: b,
      idempotent_us: withIdem[i],
      replay_us: replayed[i],
      minimal_us: minimalRuns[i],
    })),
  })}\n`,
);
