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
    for (;;) {
      const timer = this.#timers.shift();
      if (timer === undefined) return undefined;
      if (timer.cancelled) continue;
      this.now = timer.at;
      return timer;
    }
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
