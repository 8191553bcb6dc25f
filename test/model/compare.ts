/**
 * How a store's answer is compared with the oracle's, and how both are
 * printed in a trace. The differences the stores document are encoded here,
 * each with the place that documents it; anything else must be equal.
 */
import type { ClaimResult } from '../../src/core/store.js';
import type { RecordInfo, RecordSummary } from '../../src/core/store-admin.js';
import type { Op } from './oracle.js';

/** What a comparison knows besides the two answers. */
export interface Context {
  op: Op;
  /** The store notifies waiters (it has `onSettled`). */
  notifies: boolean;
  /** How far apart two times of the same event may be, ms: the store's clock is known within each call's round trip. */
  tolerance: number;
  /** The record's outcome was stored by a completion that found no claim of its token (expired, or never made). */
  claimless: boolean;
  /** What the oracle added to every ttl (see ModelHarness.inclusiveExpiry): taken off its times and leases. */
  extra: number;
}

const TIMES = ['claimedAt', 'expiresAt', 'stepsExpireAt'] as const;

const near = (a: number | undefined, b: number | undefined, tolerance: number) =>
  a === undefined || b === undefined ? a === b : Math.abs(a - b) <= tolerance;

/** The store's `answer` agrees with the oracle's `model` for `ctx.op`. */
export function agrees(answer: unknown, model: unknown, ctx: Context): boolean {
  switch (ctx.op.kind) {
    case 'claim': {
      type Answer = ClaimResult & { expiresIn?: number; reopen?: number };
      const { time: _t, expiresIn: realIn, reopen: realReopen, ...real } = answer as Answer;
      const { time: _m, expiresIn: widened, reopen: modelReopen, ...oracle } = model as Answer;
      const modelIn = widened === undefined ? undefined : widened - ctx.extra;
      if (JSON.stringify(real) !== JSON.stringify(oracle)) return false;
      // Refused by the restart fence (restart-fence.ts): until when, by the clock of the op that raised it.
      if (real.state === ('fenced' as string)) return near(realReopen, modelReopen, ctx.tolerance + 1);
      // src/core/store.ts (ClaimResult, in_progress): `expiresIn` is given to a waiting claim by a store that
      // notifies; PostgreSQL does not. src/stores/redis/scripts.ts (CLAIM): a waiting claim with another
      // fingerprint "is refused, it never waits", so Redis gives it no expiresIn; the memory store does.
      if (!ctx.notifies) return realIn === undefined;
      const fingerprint = (oracle as { fingerprint?: string }).fingerprint;
      if (fingerprint !== ctx.op.input.fingerprint && realIn === undefined) return true;
      return near(realIn, modelIn, ctx.tolerance);
    }
    case 'inspect': {
      const real = answer as RecordInfo;
      const oracle = narrowed(model as RecordInfo, ctx.extra);
      const rest = (info: RecordInfo) => {
        // `time` is the store's clock (compared through the window); `waiting` means a waiting claim's flag
        // on Redis, a live onSettled listener on the memory store, and is absent on PostgreSQL
        // (src/core/store-admin.ts: "Absent for stores that do not track it"): not compared.
        const { time: _time, waiting: _waiting, claimedAt: _c, expiresAt: _e, stepsExpireAt: _s, ...others } = info;
        return JSON.stringify(others, Object.keys(others).sort());
      };
      if (rest(real) !== rest(oracle)) return false;
      // An outcome stored by a completion that found no live claim of its token: Redis gives no claim time
      // (src/stores/redis/scripts.ts, COMPLETE sets no `c` on a record it creates), the memory store the
      // completion's, PostgreSQL the expired claim's if its row was still there (src/stores/drizzle/statements.ts, COMPLETE
      // keeps created_at for the same token). src/core/store-admin.ts (claimedAt) allows each: "Absent when the
      // store does not know"; none knows more than that no claim was live.
      const unknown = ctx.claimless && oracle.state !== 'in_progress';
      return TIMES.every(
        (field) => (unknown && field === 'claimedAt') || near(real[field], oracle[field], ctx.tolerance),
      );
    }
    default:
      return answer === model;
  }
}

/** A listing's summary of a record agrees with the oracle's record (as for inspect: times near, `waiting` not compared). */
export function summaryAgrees(real: RecordSummary, model: RecordInfo, ctx: Omit<Context, 'op'>): boolean {
  const oracle = narrowed(model, ctx.extra);
  const { waiting: _w, claimedAt: _c, expiresAt: _e, ...others } = real;
  const {
    waiting: _v,
    claimedAt: _d,
    expiresAt: _f,
    time: _t,
    steps: _s,
    stepsExpireAt: _x,
    body: _b,
    ...expected
  } = oracle;
  const sorted = (o: object) => JSON.stringify(o, Object.keys(o).sort());
  if (sorted(others) !== sorted(expected)) return false;
  const unknown = ctx.claimless && oracle.state !== 'in_progress'; // see agrees(), inspect
  return (
    (unknown || near(real.claimedAt, oracle.claimedAt, ctx.tolerance)) &&
    near(real.expiresAt, oracle.expiresAt, ctx.tolerance)
  );
}

/** The oracle's record without the `extra` ms it was given. */
function narrowed(info: RecordInfo, extra: number): RecordInfo {
  if (extra === 0) return info;
  const out = { ...info };
  for (const field of ['expiresAt', 'stepsExpireAt', 'lockTtl'] as const) {
    if (out[field] !== undefined) out[field] -= extra;
  }
  return out;
}

/** An answer for a trace: times relative to the run's start, long bodies cut. */
export function show(answer: unknown, start: number): string {
  if (answer === undefined) return '-';
  return JSON.stringify(answer, (key, value) => {
    if (typeof value === 'number' && ['time', ...TIMES].includes(key)) return `+${Math.round(value - start)}`;
    if (typeof value === 'string' && value.length > 40) return `${value.slice(0, 37)}...`;
    return value;
  });
}
