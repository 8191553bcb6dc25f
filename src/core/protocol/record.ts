/**
 * The record's rules, once: what each store operation does to the record and
 * the steps kept under one id, and what it answers, as pure functions of what
 * is kept, the operation's input and the store's clock (no Map, no timer, no
 * I/O). The memory store is a Map over them (stores/memory/store.ts); the Redis scripts
 * (stores/redis/scripts.ts) and the PostgreSQL statements (stores/drizzle/statements.ts)
 * carry the same rules in Lua and SQL, and reply in the vocabulary of codes.ts.
 * The operator's reads are in reads.ts.
 *
 * Each operation comes in two forms. The transition (`claim`, `complete`...)
 * takes what is kept under the id and answers `[kept', answer]`: the form a
 * model or a simulation runs. It is made of the pieces above it (a verdict
 * that picks the branch, the record written, the answer), which the memory
 * store calls on its own records, so that a call allocates no more than the
 * record it keeps and the answer it gives.
 */
import type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  CompleteResult,
  ExtendInput,
  FencedInput,
  RecordedStep,
  SaveStepInput,
  SaveStepResult,
} from '../store.js';
import type { RecordState } from '../store-admin.js';

/**
 * A record: a claim in progress or a finished outcome. `meta` is what a store
 * keeps beside it (the memory store: its scope's usage), carried over by every
 * transition and never read here. Records are never changed: a transition
 * writes a new one.
 */
export interface StoredRecord<M = undefined> {
  readonly state: RecordState;
  readonly fingerprint: string;
  /** The claim's token: it fences every later transition, and stays once finished (a completion sent twice). */
  readonly token: string;
  /** The serialized outcome, once finished. */
  readonly body: string | undefined;
  /** Expired from then on (`expiresAt <= now`): gone, as if absent. */
  readonly expiresAt: number;
  /** When the claim that holds the record (or stored its outcome) took it. */
  readonly claimedAt: number;
  /** While in progress: the lease of the claim or of its last renewal. */
  readonly lockTtl: number | undefined;
  readonly meta: M;
}

/** The steps recorded under an id, apart from its record: they outlive a released or expired claim. */
export interface StoredSteps {
  readonly fingerprint: string;
  readonly steps: readonly RecordedStep[];
  /** Every step lives as long as the last one saved. */
  readonly expiresAt: number;
}

/** Everything kept under one id. */
export interface Kept {
  readonly record?: StoredRecord | undefined;
  readonly steps?: StoredSteps | undefined;
}

/** A transition's result: what is kept under the id afterwards (undefined: nothing), and the answer. */
export type Transition<A> = [Kept | undefined, A];

// --- Time -------------------------------------------------------------------------------------

/** The end of a lifetime of `ms` starting now: a claim's lease, an outcome's ttl, the steps' ttl. */
export const until = (now: number, ms: number): number => now + ms;

/** Whether `rec` has expired at `now`: expired records and steps are absent to every operation. */
export const expired = (rec: { readonly expiresAt: number }, now: number): boolean => rec.expiresAt <= now;

/** The record if it is live at `now`. */
export const live = <R extends { readonly expiresAt: number }>(rec: R | undefined, now: number): R | undefined =>
  rec !== undefined && !expired(rec, now) ? rec : undefined;

/** Whether `token` holds the live claim `rec`: what fences release, extend and saveStep. */
export const holds = (rec: StoredRecord<unknown> | undefined, token: string, now: number): boolean =>
  rec !== undefined && rec.state === 'in_progress' && rec.token === token && !expired(rec, now);

// --- claim ------------------------------------------------------------------------------------

/**
 * What a claim does: `take` an absent (or expired) record, `retake` this
 * token's own live claim (sent again after a reconnect), or write nothing:
 * another claim is `held`, an outcome is `finished`, or the record was free
 * but the claim arrived after its deadline (`late`).
 */
export type ClaimVerdict = 'take' | 'retake' | 'held' | 'finished' | 'late';

export function claimVerdict(
  rec: StoredRecord<unknown> | undefined,
  input: Pick<ClaimInput, 'token' | 'deadline'>,
  now: number,
): ClaimVerdict {
  const found = live(rec, now);
  if (found !== undefined && !(found.state === 'in_progress' && found.token === input.token)) {
    return found.state === 'in_progress' ? 'held' : 'finished';
  }
  if (input.deadline !== undefined && now > input.deadline) return 'late';
  return found === undefined ? 'take' : 'retake';
}

/**
 * The claim a `take` or `retake` writes, with `meta` for a taken one: a retake
 * keeps the claim's time and its fields (its own token, so its fingerprint),
 * and renews its lease.
 */
export function claimed<M>(
  rec: StoredRecord<M> | undefined,
  input: Pick<ClaimInput, 'fingerprint' | 'token' | 'lockTtl'>,
  now: number,
  meta: M,
): StoredRecord<M> {
  const expiresAt = until(now, input.lockTtl);
  return rec === undefined
    ? {
        state: 'in_progress',
        fingerprint: input.fingerprint,
        token: input.token,
        body: undefined,
        expiresAt,
        claimedAt: now,
        lockTtl: input.lockTtl,
        meta,
      }
    : { ...rec, expiresAt, lockTtl: input.lockTtl };
}

// A claim's answer, one function per verdict (a store calls the one its verdict names, which keeps
// each small enough to cost nothing once inlined).

/** `held`: the holder's fingerprint and, to a caller that waits, how long its claim lives. */
export function heldAnswer(rec: StoredRecord<unknown>, input: Pick<ClaimInput, 'waiting'>, now: number): ClaimResult {
  return input.waiting === true
    ? { state: 'in_progress', fingerprint: rec.fingerprint, expiresIn: rec.expiresAt - now }
    : { state: 'in_progress', fingerprint: rec.fingerprint };
}

/** `finished`: the outcome, its body only for the same fingerprint (the engine refuses another payload). */
export function finishedAnswer(rec: StoredRecord<unknown>, input: Pick<ClaimInput, 'fingerprint'>): ClaimResult {
  const { state, fingerprint, body } = rec as StoredRecord<unknown> & { state: 'completed' | 'failed' };
  return fingerprint === input.fingerprint ? { state, fingerprint, body } : { state, fingerprint };
}

/** `late`: the store's clock, which the engine learns from. */
export const lateAnswer = (now: number): ClaimResult => ({ state: 'late', time: now });

/** `take` and `retake`: the store's clock, and the live steps recorded under the id (copied). */
export function acquiredAnswer(steps: StoredSteps | undefined, now: number): ClaimResult {
  const resumed = live(steps, now);
  return resumed === undefined
    ? { state: 'acquired', time: now }
    : {
        state: 'acquired',
        time: now,
        steps: { fingerprint: resumed.fingerprint, steps: resumed.steps.map((step) => ({ ...step })) },
      };
}

export function claim(kept: Kept | undefined, input: ClaimInput, now: number): Transition<ClaimResult> {
  const rec = kept?.record;
  const verdict = claimVerdict(rec, input, now);
  if (verdict === 'held') return [kept, heldAnswer(rec!, input, now)];
  if (verdict === 'finished') return [kept, finishedAnswer(rec!, input)];
  if (verdict === 'late') return [kept, lateAnswer(now)];
  return [{ ...kept, record: claimed(live(rec, now), input, now, undefined) }, acquiredAnswer(kept?.steps, now)];
}

// --- complete ---------------------------------------------------------------------------------

/**
 * What a completion does: `write` the outcome when the token holds the claim
 * or the record is absent (expired, evicted: no one else holds or ran it);
 * else the answer, with nothing written: `stored` already (this token's
 * completion sent twice), `held` by another live claim, another outcome
 * `finished`.
 */
export function completeVerdict(
  rec: StoredRecord<unknown> | undefined,
  input: Pick<CompleteInput, 'token'>,
  now: number,
): 'write' | CompleteResult {
  const found = live(rec, now);
  if (found === undefined) return 'write';
  if (found.token !== input.token) return found.state === 'in_progress' ? 'held' : 'finished';
  return found.state === 'in_progress' ? 'write' : 'stored';
}

/** The outcome a completion writes: it keeps the time of the claim it finishes (a recreated record: now). */
export function completed<M>(
  rec: StoredRecord<M> | undefined,
  input: Pick<CompleteInput, 'state' | 'fingerprint' | 'token' | 'body' | 'ttl'>,
  now: number,
  meta: M,
): StoredRecord<M> {
  return {
    state: input.state,
    fingerprint: input.fingerprint,
    token: input.token,
    body: input.body,
    expiresAt: until(now, input.ttl),
    claimedAt: rec?.claimedAt ?? now,
    lockTtl: undefined,
    meta,
  };
}

/** Whether a completion that writes deletes the steps: those of an operation that used steps go with it. */
export const clearsSteps = (input: Pick<CompleteInput, 'clearSteps'>): boolean => input.clearSteps === true;

export function complete(kept: Kept | undefined, input: CompleteInput, now: number): Transition<CompleteResult> {
  const rec = live(kept?.record, now);
  const verdict = completeVerdict(rec, input, now);
  if (verdict !== 'write') return [kept, verdict];
  const steps = clearsSteps(input) ? undefined : kept?.steps;
  return [{ record: completed(rec, input, now, undefined), steps }, 'stored'];
}

// --- release, extend --------------------------------------------------------------------------

/** A release deletes the record when the token holds its live claim (the steps stay); else nothing. */
export function release(kept: Kept | undefined, input: FencedInput, now: number): Transition<boolean> {
  if (!holds(kept?.record, input.token, now)) return [kept, false];
  return [kept?.steps === undefined ? undefined : { steps: kept.steps }, true];
}

/** The claim an extend writes: the lease renewed from now. */
export const renewed = <M>(rec: StoredRecord<M>, lockTtl: number, now: number): StoredRecord<M> => ({
  ...rec,
  expiresAt: until(now, lockTtl),
  lockTtl,
});

/** An extend renews the claim when the token holds it; else nothing. */
export function extend(kept: Kept | undefined, input: ExtendInput, now: number): Transition<boolean> {
  if (!holds(kept?.record, input.token, now)) return [kept, false];
  return [{ ...kept, record: renewed(kept!.record!, input.lockTtl, now) }, true];
}

// --- saveStep ---------------------------------------------------------------------------------

/**
 * What a step's save does: `append` it when the token holds the claim and the
 * live steps end right before its index; else the answer, with nothing
 * written: `fenced` (the token holds no live claim), `stored` already (the
 * same name at that index: a save sent twice), `conflict` (another name
 * there, or a gap).
 */
export function saveStepVerdict(
  rec: StoredRecord<unknown> | undefined,
  steps: StoredSteps | undefined,
  input: Pick<SaveStepInput, 'token' | 'index' | 'name'>,
  now: number,
): 'append' | SaveStepResult {
  if (!holds(rec, input.token, now)) return 'fenced';
  const recorded = live(steps, now)?.steps;
  const count = recorded?.length ?? 0;
  if (input.index < count) return recorded![input.index]!.name === input.name ? 'stored' : 'conflict';
  return input.index > count ? 'conflict' : 'append';
}

/** The steps after an append: the new one last, every step living for ttl from now, under the saver's fingerprint. */
export function appended(
  steps: StoredSteps | undefined,
  input: Pick<SaveStepInput, 'fingerprint' | 'name' | 'body' | 'ttl'>,
  now: number,
): StoredSteps {
  return {
    fingerprint: input.fingerprint,
    steps: [...(steps?.steps ?? []), { name: input.name, body: input.body }],
    expiresAt: until(now, input.ttl),
  };
}

export function saveStep(kept: Kept | undefined, input: SaveStepInput, now: number): Transition<SaveStepResult> {
  const verdict = saveStepVerdict(kept?.record, kept?.steps, input, now);
  if (verdict !== 'append') return [kept, verdict];
  return [{ ...kept, steps: appended(live(kept?.steps, now), input, now) }, 'stored'];
}

// --- expiry -----------------------------------------------------------------------------------

/** What is left under an id at `now`: expired records and steps are gone. */
export function expire(kept: Kept | undefined, now: number): Kept | undefined {
  const record = live(kept?.record, now);
  const steps = live(kept?.steps, now);
  return record === undefined && steps === undefined ? undefined : { record, steps };
}

// --- the restart fence (the Redis store's `restartFence`) -------------------------------------

/**
 * The restart fence, as the Redis scripts' `fenced()` keeps it: `lostAt` is
 * the marker (0 while the data set was never lost; undefined: the marker is
 * missing, so the data was lost now). Answers the marker to keep and, while
 * the fence is up, the time until which absent records may not be taken or
 * recreated: `window` ms (the caller's lockTtl) after the loss.
 */
export function fence(lostAt: number | undefined, now: number, window: number): [number, number | undefined] {
  const lost = lostAt ?? now;
  const reopen = lost + window;
  return [lost, now < reopen ? reopen : undefined];
}
