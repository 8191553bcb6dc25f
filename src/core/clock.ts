import { realClock as platformClock } from '#platform';

/**
 * The engine's time, from one source: its timers, its monotonic clock and its wall clock. The
 * engine reads no other clock, so a test can run it, and several engines on one store, on virtual
 * time (`test/helpers/virtual-time.ts`, `test/sim/`). Internal: the engine's `clock` option exists
 * for those tests and is not part of the documented API.
 */
export interface EngineClock {
  /** Monotonic milliseconds (`performance.now()`): store timeouts, renewals, durations. */
  now(): number;
  /**
   * The wall-clock time of `now()`'s 0 (`performance.timeOrigin`): `timeOrigin + now()` is the
   * engine's time, from which claims' deadlines in the store's clock are derived (store-clock.ts).
   */
  readonly timeOrigin: number;
  /** Wall-clock milliseconds since the epoch (`Date.now()`): the default of the engine's `now` option. */
  wallNow(): number;
  /** Calls `fn` after `ms`; the timer never keeps the process alive (unref'd). */
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(timer: unknown): void;
  /** Calls `fn` once pending I/O was read (`setImmediate`). */
  setImmediate(fn: () => void): void;
}

/** The runtime's clocks and timers (#platform: Node's, or Web standards'): the default. */
export const realClock: EngineClock = platformClock;
