/**
 * Virtual time for the simulation: one timeline every simulated process reads, each through a clock
 * of its own (src/core/clock.ts) whose timers die with the process. Nothing here sleeps: the
 * simulation fires the next timer when nothing else can happen (simulation.ts).
 */
import type { EngineClock } from '../../src/core/clock.js';

interface Timer {
  at: number;
  seq: number;
  fn: () => void;
  owner: string;
  cancelled: boolean;
}

export class Timeline {
  now = 0;
  /**
   * Picks which of `n` timers due at the same ms, each the first of its owner then, fires first: processes and
   * the network are independent, so any order of theirs can happen (a process's own keep their order, as Node's).
   * First come by default.
   */
  readonly #pick: (n: number) => number;

  constructor(pick: (n: number) => number = () => 0) {
    this.#pick = pick;
  }

  #seq = 0;
  // Sorted by (at, seq): few timers are pending at once, so an insertion beats a heap here.
  readonly #timers: Timer[] = [];

  /** Calls `fn` at `at` (after the timers already due then); `owner` can cancel it with {@link cancelOwner}. */
  add(at: number, fn: () => void, owner: string): Timer {
    const timer: Timer = { at: Math.max(at, this.now), seq: this.#seq++, fn, owner, cancelled: false };
    let i = this.#timers.length;
    while (i > 0 && this.#timers[i - 1]!.at > timer.at) i--;
    this.#timers.splice(i, 0, timer);
    return timer;
  }

  /** A crashed process's timers never fire. */
  cancelOwner(owner: string): void {
    for (const timer of this.#timers) if (timer.owner === owner) timer.cancelled = true;
  }

  /** Takes the next timer due, if any, moving the time to it. */
  next(): Timer | undefined {
    while (this.#timers[0]?.cancelled === true) this.#timers.shift();
    const first = this.#timers[0];
    if (first === undefined) return undefined;
    // The first timer of each owner due at that ms (the timers are sorted by time, then by when they were set).
    const heads: number[] = [];
    const owners = new Set<string>();
    for (let i = 0; i < this.#timers.length && this.#timers[i]!.at === first.at; i++) {
      const timer = this.#timers[i]!;
      if (timer.cancelled || owners.has(timer.owner)) continue;
      owners.add(timer.owner);
      heads.push(i);
    }
    const at = heads.length === 1 ? heads[0]! : heads[this.#pick(heads.length)]!;
    const [timer] = this.#timers.splice(at, 1);
    this.now = timer!.at;
    return timer;
  }

  get pending(): number {
    return this.#timers.filter((t) => !t.cancelled).length;
  }

  /**
   * The clock of one process: the timeline's time, read from a wall clock `skew` ms off the store's,
   * and timers owned by `owner`.
   */
  clock(owner: string, origin: number): EngineClock {
    return {
      now: () => this.now,
      timeOrigin: origin,
      wallNow: () => origin + this.now,
      // As Node: a delay under 1 ms is 1 ms.
      setTimeout: (fn, ms) => this.add(this.now + Math.max(ms, 1), fn, owner),
      clearTimeout: (timer) => {
        if (timer !== undefined) (timer as Timer).cancelled = true;
      },
      setImmediate: (fn) => {
        this.add(this.now, fn, owner);
      },
    };
  }
}
