/**
 * The Redis store's restart fence (`restartFence`) over the memory store: what the fenced scripts
 * (src/stores/redis/scripts.ts, FENCE and the scripts that call it) answer unlike the plain ones,
 * so that the model (oracle.ts) and the simulation (test/sim) can lose a store's data the way Redis
 * does. The marker and its window are the protocol's `fence()` (src/core/protocol/record.ts); what
 * each script does with them:
 * - a claim of an absent record (not late) raises the fence and, while it is up, takes nothing:
 *   the store throws (503), saying until when;
 * - a completion that finds its record absent raises it (for no time) and stores;
 * - a renewal or a step save that finds the record absent while the fence is up (or raises it)
 *   recreates the caller's claim; a step past the recorded ones is then answered stored without
 *   being recorded (the steps before the loss are gone with it).
 * Every other answer is the memory store's.
 */
import { fence } from '../../src/core/protocol/record.js';
import type { ClaimInput, CompleteInput, ExtendInput, SaveStepInput } from '../../src/core/store.js';
import type { MemoryStore } from '../../src/index.js';

/** Handed back where the fence changes nothing: the memory store answers. */
export const PASS = Symbol('pass');

/** A claim the fence refused (the Redis store throws it as an error; see `fencedClaim`). */
export interface FencedClaim {
  state: 'fenced';
  /** The store's time. */
  time: number;
  /** When claims of absent records are taken again. */
  reopen: number;
}

export type FenceOp =
  | { kind: 'claim'; input: ClaimInput }
  | { kind: 'complete'; input: CompleteInput }
  | { kind: 'extend'; input: ExtendInput }
  | { kind: 'saveStep'; input: SaveStepInput }
  | { kind: 'release' | 'inspect' | 'forget'; input: unknown };

export class RestartFence {
  /** The markers found missing since the last restart, and when (a marker not here: 0 before any restart, else missing). */
  readonly #lost = new Map<string, number>();
  #restarted = false;
  /** Whether the last operation recreated a claim. */
  recreated = false;

  /**
   * `extra`: ms the caller adds to every lease (the oracle's inclusive expiry): no part of the fence's window.
   * `markerOf`: the marker a record's scripts read (a Redis Cluster keeps one per slot); one for all by default.
   */
  constructor(
    readonly extra = 0,
    readonly markerOf: (id: string) => string = () => 'fence',
  ) {}

  /** The store lost everything, its markers with the rest. */
  restart(): void {
    this.#lost.clear();
    this.#restarted = true;
  }

  /** The marker of `id`: 0 while the data was never lost, the time a script found it missing, undefined while missing. */
  lost(id: string): number | undefined {
    return this.#lost.get(this.markerOf(id)) ?? (this.#restarted ? undefined : 0);
  }

  /** Where the fence's answer for `id` changes for a caller whose window is `window`: undefined while it never will. */
  bound(id: string, window: number): number | undefined {
    const lost = this.lost(id);
    return lost === undefined || lost === 0 ? undefined : lost + window;
  }

  #raise(id: string, now: number, window: number): number | undefined {
    const [lost, reopen] = fence(this.lost(id), now, window);
    if (lost !== 0) this.#lost.set(this.markerOf(id), lost);
    return reopen;
  }

  /** `op` on `store` at `now`, as the fenced scripts run it: their answer where the fence decides it, else PASS. */
  async apply(store: MemoryStore, op: FenceOp, now: number): Promise<unknown> {
    if (op.kind !== 'inspect') this.recreated = false;
    if (op.kind !== 'claim' && op.kind !== 'complete' && op.kind !== 'extend' && op.kind !== 'saveStep') return PASS;
    const found = await store.admin.inspect({ id: op.input.id });
    if (found.state !== 'absent') return PASS;
    switch (op.kind) {
      case 'claim': {
        const { deadline, lockTtl } = op.input;
        if (deadline !== undefined && now > deadline) return PASS; // late, before the fence is read
        const reopen = this.#raise(op.input.id, now, lockTtl - this.extra);
        return reopen === undefined ? PASS : ({ state: 'fenced', time: now, reopen } satisfies FencedClaim);
      }
      case 'complete':
        this.#raise(op.input.id, now, 0);
        return PASS;
      case 'extend':
      case 'saveStep': {
        // The oracle widens a renewal's lease by `extra`, not a step's (it carries the claim's lockTtl).
        const lease = op.input.lockTtl - (op.kind === 'extend' ? this.extra : 0);
        if (this.#raise(op.input.id, now, lease) === undefined) return op.kind === 'extend' ? false : 'fenced';
        const { id, token, fingerprint } = op.input;
        await store.claim({ id, token, fingerprint, lockTtl: lease + this.extra });
        this.recreated = true;
        if (op.kind === 'extend') return true;
        return op.input.index > found.steps.length ? 'stored' : PASS;
      }
    }
  }
}

/**
 * The Redis store's refusal of a claim while the fence is up (src/stores/redis/store.ts, `fenceUp`: "refused for
 * N ms more, until <ISO time>"), as an answer; any other error is thrown again.
 */
export function fencedClaim(error: unknown): FencedClaim {
  const said = /refused for (\d+) ms more, until (\S+Z),/.exec(error instanceof Error ? error.message : '');
  if (said === null) throw error;
  const reopen = Date.parse(said[2]!);
  return { state: 'fenced', time: reopen - Number(said[1]), reopen };
}

/** The error the Redis store throws for a claim the fence refused (for a simulated store that must throw it). */
export function fenceUpError({ time, reopen }: FencedClaim): Error {
  return new Error(
    `restart fence (simulated): claims of keys the store does not hold are refused for ${reopen - time} ms more, ` +
      `until ${new Date(reopen).toISOString()}, while operations that were running store their outcomes.`,
  );
}

/**
 * `store` behind `fence`, as one store (for the simulation): a claim the fence refuses throws as the Redis store's
 * does; `now` is the store's clock.
 */
export function behindFence(store: MemoryStore, fence: RestartFence, now: () => number): MemoryStore {
  async function through<O>(op: FenceOp, plain: () => Promise<O>): Promise<O> {
    const answer = await fence.apply(store, op, now());
    if (answer === PASS) return plain();
    if (op.kind === 'claim') throw fenceUpError(answer as FencedClaim);
    return answer as O;
  }
  const fenced: MemoryStore = Object.create(store);
  return Object.assign(fenced, {
    claim: (input: ClaimInput) => through({ kind: 'claim', input }, () => store.claim(input)),
    complete: (input: CompleteInput) => through({ kind: 'complete', input }, () => store.complete(input)),
    extend: (input: ExtendInput) => through({ kind: 'extend', input }, () => store.extend(input)),
    saveStep: (input: SaveStepInput) => through({ kind: 'saveStep', input }, () => store.saveStep!(input)),
  });
}
