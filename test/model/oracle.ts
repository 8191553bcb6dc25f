/**
 * The model of the model-based contract suite: the memory store on a virtual
 * clock, the rules once. Each store operation is data (`Op`), run the same way
 * on the store under test and on the oracle (`exec`). The oracle keeps the log
 * of what it ran and at which virtual time, so that it can try an operation at
 * several times without committing to one (`tryAt` replays the log into a new
 * memory store): a real store's clock is known only within the round trip of
 * each call, and near an expiry the answer depends on which side of it the
 * store ran.
 *
 * For a store with the restart fence, the oracle loses its data as Redis does
 * (`restart`), and runs each operation through the fence (restart-fence.ts).
 */
import type {
  ClaimInput,
  CompleteInput,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  SaveStepInput,
} from '../../src/core/store.js';
import type { ForgetInput, InspectInput, RecordInfo } from '../../src/core/store-admin.js';
import { type MemoryStore, memoryStore } from '../../src/index.js';
import { fencedClaim, PASS, RestartFence } from './restart-fence.js';

export type Op =
  | { kind: 'claim'; input: ClaimInput }
  | { kind: 'complete'; input: CompleteInput }
  | { kind: 'release'; input: FencedInput }
  | { kind: 'extend'; input: ExtendInput }
  | { kind: 'saveStep'; input: SaveStepInput }
  | { kind: 'inspect'; input: InspectInput }
  | { kind: 'forget'; input: ForgetInput };

/** Runs `op` on `store`: its answer, as the store gives it. */
export async function exec(store: IdempotencyStore, op: Op): Promise<unknown> {
  switch (op.kind) {
    case 'claim':
      return store.claim(op.input).catch(fencedClaim);
    case 'complete':
      return store.complete(op.input);
    case 'release':
      return store.release(op.input);
    case 'extend':
      return store.extend(op.input);
    case 'saveStep':
      return store.saveStep!(op.input);
    case 'inspect':
      return store.admin!.inspect(op.input);
    case 'forget':
      return store.admin!.forget(op.input);
  }
}

/** The restart fence of the store under test (see restart-fence.ts). */
export interface FenceOptions {
  extra: number;
  markerOf?: (id: string) => string;
}

/** What the oracle is of: the store's data lost, or an operation at a time. */
type Entry = { op: Op; t: number } | 'restart';

/** The memory store on a virtual clock (behind the restart fence, for a store that has it), with the log that rebuilds it. */
class Replica {
  now: number;
  store: MemoryStore;
  readonly fence: RestartFence | undefined;
  readonly log: Entry[] = [];
  constructor(now: number, fence: FenceOptions | undefined) {
    this.now = now;
    this.store = memoryStore({ now: () => this.now });
    this.fence = fence === undefined ? undefined : new RestartFence(fence.extra, fence.markerOf);
  }
  async apply(op: Op, t: number): Promise<unknown> {
    this.now = t;
    this.log.push({ op, t });
    const fenced = this.fence === undefined ? PASS : await this.fence.apply(this.store, op, t);
    return fenced === PASS ? exec(this.store, op) : fenced;
  }
  /** Everything lost (the fence's marker too). */
  restart(): void {
    this.log.push('restart');
    this.store.close();
    this.store = memoryStore({ now: () => this.now });
    this.fence?.restart();
  }
  /** Whether the last write recreated a claim (see restart-fence.ts). */
  get recreated(): boolean {
    return this.fence?.recreated === true;
  }
}

/**
 * The oracle's time goes forward record by record, not as one clock: the memory store reads a record at the
 * time of the operation on it, and drops nothing else (it sweeps only when full, or each minute), so an
 * operation on one record may run a millisecond before the last operation on another. A real store's times
 * are whole ms (or rounded by us): two operations in one of its milliseconds may need the oracle at
 * different sides of a boundary.
 */
export class Oracle {
  #replica: Replica;
  readonly #floor = new Map<string, number>();
  readonly start: number;
  readonly #fence: FenceOptions | undefined;

  /** `fence`: the store under test has the restart fence, and adds `extra` ms to each lease (see model-run.ts). */
  constructor(start: number, fence?: FenceOptions) {
    this.start = start;
    this.#fence = fence;
    this.#replica = new Replica(start, fence);
  }

  /** The time of the last operation on `id`: the oracle never goes back on a record. */
  floor(id: string): number {
    return this.#floor.get(id) ?? this.start;
  }

  /** The record and steps of `id` as the oracle has them at `t` (at least its floor). */
  peek(id: string, t = this.floor(id)): Promise<RecordInfo> {
    this.#replica.now = Math.max(t, this.floor(id));
    return this.#replica.store.admin.inspect({ id, body: true });
  }

  /** A read of `id` (not an operation of the log) took place at `t`: the oracle never goes back on the record. */
  observe(id: string, t: number): void {
    this.#floor.set(id, Math.max(t, this.floor(id)));
  }

  /** `op` at `t` on a copy of the oracle: its answer, and the copy to `commit` if that answer is the one. */
  async tryAt(op: Op, t: number): Promise<{ answer: unknown; replica: Replica }> {
    const replica = new Replica(this.start, this.#fence);
    for (const entry of this.#replica.log) {
      if (entry === 'restart') replica.restart();
      else await replica.apply(entry.op, entry.t);
    }
    const answer = await replica.apply(op, Math.max(t, this.floor(op.input.id)));
    return { answer, replica };
  }

  /** `op` at `t`, committed. */
  async run(op: Op, t: number): Promise<unknown> {
    const at = Math.max(t, this.floor(op.input.id));
    this.#floor.set(op.input.id, at);
    return this.#replica.apply(op, at);
  }

  /** Keeps the copy `replica` made by `tryAt` of `op` at `t`. */
  commit(replica: Replica, op: Op, t: number): void {
    this.#replica.store.close();
    this.#replica = replica;
    this.#floor.set(op.input.id, Math.max(t, this.floor(op.input.id)));
  }

  /** The store lost everything. */
  restart(): void {
    this.#replica.restart();
  }

  /** Whether the last operation committed recreated a claim (the restart fence). */
  get recreated(): boolean {
    return this.#replica.recreated;
  }

  /** Where the fence's answer to an operation on `id` with a lease of `window` ms changes, if it can. */
  fenceBound(id: string, window: number): number | undefined {
    return this.#replica.fence?.bound(id, window);
  }

  close(): void {
    this.#replica.store.close();
  }
}

export type { Replica };
