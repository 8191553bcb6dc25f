/**
 * The commands of the model-based suite: what fast-check generates (plain
 * data, printed as one line each), and how one is run against the store under
 * test and the oracle. A run has 2 record ids and 4 tokens; a token is one
 * attempt, so it always claims with the same fingerprint and completes with the
 * same outcome (a re-send by a driver is the same call again), as the engine does.
 */
import fc from 'fast-check';
import type { RecordInfo } from '../../src/core/store-admin.js';
import type { Op } from './oracle.js';

export const IDS = 2;
export const TOKENS = 4;
/** Per token: its fingerprint, outcome, and the ttl of its outcome and steps (short ones expire within a run). */
const FINGERPRINTS = ['fpA', 'fpB', 'fpA', 'fpB'];
const STATES = ['completed', 'failed', 'completed', 'failed'] as const;
// Empty, JSON, and what PostgreSQL must encode to store (NUL; a leading \u0001).
const BODIES = ['{"ok":1}', '', 'a\u0000b é€😀', '\u0001x'];
const TTLS = [15, 60_000, 40, 25];
/** Per token: the ttl of its steps, mostly long, so that claims that take a record over resume them. */
const STEP_TTLS = [60_000, 60_000, 40, 200];
const STEP_LOCK_TTL = 5_000;

export type Spec =
  | {
      kind: 'claim';
      id: number;
      token: number;
      lockTtl: number;
      waiting: boolean;
      /** None, long past (answers late when the record is free), or far ahead. */
      deadline: 'none' | 'past' | 'future';
      /** See `aimed`. */
      aim: boolean;
    }
  | { kind: 'complete'; id: number; token: number; clearSteps: boolean; aim: boolean }
  | { kind: 'release'; id: number; token: number; aim: boolean }
  | { kind: 'extend'; id: number; token: number; lockTtl: number; aim: boolean }
  | { kind: 'saveStep'; id: number; token: number; index: number; renamed: boolean; aim: boolean }
  | { kind: 'inspect'; id: number; body: boolean }
  | {
      kind: 'forget';
      id: number;
      token: number;
      state: 'absent' | 'in_progress' | 'completed' | 'failed';
      steps: boolean;
      aim: boolean;
      /**
       * `expiresAt` in the input: none, the record's expiry as the oracle has it (what an operator read), or
       * 20 ms before it (a claim renewed since the read). `seen`: that expiry, set when aimed.
       */
      expiry: 'none' | 'seen' | 'earlier';
      seen?: number;
    }
  /** Lets time pass: a few ms, or to `offset` ms around the oracle's next expiry (at most 100 ms). */
  | { kind: 'advance'; to: 'tick' | 'expiry'; offset: number }
  /** The store loses everything (an empty restart, a flush): only for a store whose harness can do it. */
  | { kind: 'restart' }
  /**
   * An operator's listing, every page, of the records in `state` (any), of this run's operation name or of every
   * name, claimed at least `olderThan` ms ago (none: no such filter); this run's records are compared.
   */
  | {
      kind: 'list';
      state: 'any' | 'in_progress' | 'completed' | 'failed';
      named: boolean;
      olderThan: 'none' | 0 | 15 | 60 | 10_000;
    };

const id = fc.nat({ max: IDS - 1 });
const token = fc.nat({ max: TOKENS - 1 });
const lockTtl = fc.constantFrom(10, 30, 30, 80, 80, 5_000);
/**
 * Aimed at the record as the oracle has it (see `aimed`): random tokens rarely hold the claim they name, so
 * without it renewals, releases, steps and the claims that resume them would seldom succeed.
 */
const aim = fc.constantFrom(true, true, false);

export const specArbitrary: fc.Arbitrary<Spec> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('claim' as const),
      id,
      token,
      lockTtl,
      waiting: fc.boolean(),
      deadline: fc.constantFrom('none' as const, 'none' as const, 'past' as const, 'future' as const),
      aim: fc.constantFrom(true, false, false, false),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('complete' as const), id, token, clearSteps: fc.boolean(), aim }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('release' as const), id, token, aim }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('extend' as const), id, token, lockTtl, aim }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('saveStep' as const),
      id,
      token,
      index: fc.nat({ max: 2 }),
      renamed: fc.constantFrom(false, false, false, true),
      aim,
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('inspect' as const), id, body: fc.boolean() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('list' as const),
      state: fc.constantFrom('any' as const, 'in_progress' as const, 'completed' as const, 'failed' as const),
      named: fc.constantFrom(true, true, false),
      olderThan: fc.constantFrom(
        'none' as const,
        'none' as const,
        0 as const,
        15 as const,
        60 as const,
        10_000 as const,
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('forget' as const),
      id,
      token,
      state: fc.constantFrom('absent' as const, 'in_progress' as const, 'completed' as const, 'failed' as const),
      steps: fc.boolean(),
      aim,
      expiry: fc.constantFrom('none' as const, 'none' as const, 'seen' as const, 'earlier' as const),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('advance' as const),
      to: fc.constantFrom('tick' as const, 'expiry' as const, 'expiry' as const),
      offset: fc.integer({ min: -3, max: 4 }),
    }),
  },
);

/** The commands with, now and then, the store losing everything. */
export const specWithRestartArbitrary: fc.Arbitrary<Spec> = fc.oneof(
  { weight: 20, arbitrary: specArbitrary },
  { weight: 1, arbitrary: fc.constant({ kind: 'restart' as const }) },
);

/** Names of a run's records and tokens. */
export interface Names {
  /** The operation name in every record id of the run. */
  name: string;
  ids: readonly string[];
  tokens: readonly string[];
}

/**
 * `spec` aimed at the record as the oracle has it (`seen`), when it asks to be: its token the one that holds the
 * claim (or, for forget, the record's token and state; for saveStep, the next index too). Unchanged when there is
 * nothing to aim at.
 */
export function aimed(spec: Spec, seen: RecordInfo, names: Names): Spec {
  if (
    spec.kind === 'advance' ||
    spec.kind === 'restart' ||
    spec.kind === 'list' ||
    spec.kind === 'inspect' ||
    !spec.aim
  )
    return spec;
  const token = seen.token === undefined ? -1 : names.tokens.indexOf(seen.token);
  if (spec.kind === 'forget')
    return seen.state === 'absent'
      ? { ...spec, state: 'absent' }
      : { ...spec, state: seen.state, token, ...(seen.expiresAt === undefined ? {} : { seen: seen.expiresAt }) };
  if (seen.state !== 'in_progress' || token < 0) return { ...spec, aim: false };
  if (spec.kind === 'saveStep') return { ...spec, token, index: spec.renamed ? spec.index : seen.steps.length };
  return { ...spec, token };
}

/** The store operation of `spec`, in a run whose records and tokens are `names`; `now` is the store's clock. */
export function opOf(spec: Exclude<Spec, { kind: 'advance' | 'restart' | 'list' }>, names: Names, now: number): Op {
  const id = names.ids[spec.id]!;
  if (spec.kind === 'inspect') return { kind: 'inspect', input: { id, body: spec.body } };
  const t = spec.token;
  const token = names.tokens[t]!;
  const fingerprint = FINGERPRINTS[t]!;
  switch (spec.kind) {
    case 'claim': {
      const deadline = { none: undefined, past: now - 1_000, future: now + 60_000 }[spec.deadline];
      const input = { id, token, fingerprint, lockTtl: spec.lockTtl, waiting: spec.waiting };
      return { kind: 'claim', input: deadline === undefined ? input : { ...input, deadline } };
    }
    case 'complete': {
      const input = { id, token, fingerprint, state: STATES[t]!, body: BODIES[t]!, ttl: TTLS[t]! };
      return { kind: 'complete', input: spec.clearSteps ? { ...input, clearSteps: true } : input };
    }
    case 'release':
      return { kind: 'release', input: { id, token } };
    case 'extend':
      return { kind: 'extend', input: { id, token, lockTtl: spec.lockTtl, fingerprint } };
    case 'saveStep': {
      const name = spec.renamed ? `other${spec.index}` : `step${spec.index}`;
      const body = `${BODIES[t]}#${spec.index}`;
      return {
        kind: 'saveStep',
        input: { id, token, fingerprint, index: spec.index, name, body, ttl: STEP_TTLS[t]!, lockTtl: STEP_LOCK_TTL },
      };
    }
    case 'forget': {
      const input = { id, state: spec.state, steps: spec.steps };
      const read = spec.seen ?? now;
      const expiresAt = { none: undefined, seen: read, earlier: read - 20 }[spec.expiry];
      const bounded = expiresAt === undefined ? input : { ...input, expiresAt };
      return { kind: 'forget', input: spec.state === 'absent' ? bounded : { ...bounded, token } };
    }
  }
}

/** One line for a spec: `claim k0 t1 lockTtl=30 waiting deadline=past`. */
export function showSpec(spec: Spec): string {
  const { kind, ...rest } = spec;
  const parts: string[] = [kind];
  for (const [key, value] of Object.entries(rest)) {
    if (key === 'id') parts.push(`k${value}`);
    else if (key === 'token') parts.push(`t${value}`);
    else if (key === 'aim') parts.push(value ? '(aimed)' : '');
    else if (value === true) parts.push(key);
    else if (value !== false && !(key === 'deadline' && value === 'none')) parts.push(`${key}=${value}`);
  }
  return parts.filter((part) => part !== '').join(' ');
}
