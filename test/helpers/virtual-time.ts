/**
 * Virtual time for engine tests: every timer and clock the engine reads on one fake clock that the
 * test advances, and a store whose calls can be delayed or lost on that clock. vitest's fake timers
 * drive the time; the engine reaches them through its injectable clock (src/core/clock.ts): build it
 * with {@link virtualEngine}, which passes {@link virtualClock}.
 */
import { vi } from 'vitest';
import type { EngineClock } from '../../src/core/clock.js';
import { createEngine } from '../../src/core/engine.js';
import type { IdempotencyEngine, IdempotencyEngineOptions, IdempotencyStore } from '../../src/index.js';

let current: EngineClock | undefined;

/**
 * Starts the fake clock at 0. Undo with {@link useRealTime}. `setImmediate` stays real: the fake one
 * called from a timer's callback is run a millisecond later, and the engine's timer queue runs its
 * callbacks after a `setImmediate`; advancing the fake clock yields to real immediates after each timer.
 */
export function useVirtualTime(): void {
  vi.useFakeTimers({
    toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'],
    now: 0,
  });
  current = virtualClock();
}

/**
 * The engine's clock on vitest's fake timers (read at each call, so it follows them). A new object
 * per test: the engine's timer queues are per clock, so none is left armed on a clock gone real.
 */
export function virtualClock(): EngineClock {
  return {
    now: () => globalThis.performance.now(),
    timeOrigin: 0,
    wallNow: () => Date.now(),
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout>),
    setImmediate: (fn) => setImmediate(fn),
  };
}

/** An engine on the virtual clock of this test (createIdempotencyEngine's options, a store required). */
export function virtualEngine(options: IdempotencyEngineOptions & { store: IdempotencyStore }): IdempotencyEngine {
  if (current === undefined) throw new Error('virtualEngine: call useVirtualTime() first');
  return createEngine({ ...options, clock: current });
}

/** Runs the timers still pending (a store timeout's, a renewal's), then goes back to real time. A
 * repeating timer (a memory store's sweep: close the store) is given up on after 100 rounds.
 */
export async function useRealTime(): Promise<void> {
  for (let round = 0; round < 100 && vi.getTimerCount() > 0; round++) await vi.runOnlyPendingTimersAsync();
  vi.useRealTimers();
  current = undefined;
}

/** The virtual time, in ms since {@link useVirtualTime}. */
export const virtualNow = (): number => Date.now();

/** Waits `ms` of virtual time (a fake timer). */
export const elapse = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What happens to one store call: `lost` is sent and never arrives (no answer, no error, no effect). */
export type Fate = { lost: true } | { lost?: false; delay?: number; error?: Error };

/** The store calls of one kind, numbered from 1 in the order they are made. */
export type Plan = Partial<Record<'claim' | 'extend' | 'complete' | 'release', (call: number) => Fate>>;

/**
 * `inner` behind a network that follows `plan`: each call of a planned kind is lost, fails, or is
 * delayed by `delay` ms each way (sent, handled `delay` later, answered `delay` after that).
 * Records when each call was handled by `inner` and what it answered.
 */
export function networkStore(
  inner: IdempotencyStore,
  plan: Plan = {},
  /** Called when a claim or renewal took hold in `inner`, at that time. */
  onHold?: (at: number) => void,
) {
  const handled: { op: string; at: number; answer: unknown }[] = [];
  const counts: Record<string, number> = {};
  const never = new Promise<never>(() => {});
  function through<I, O>(op: 'claim' | 'extend' | 'complete' | 'release', call: (input: I) => Promise<O>) {
    return async (input: I): Promise<O> => {
      const n = (counts[op] = (counts[op] ?? 0) + 1);
      const fate = plan[op]?.(n) ?? {};
      if (fate.lost === true) return never;
      const delay = fate.delay ?? 0;
      if (delay > 0) await elapse(delay);
      if (fate.error !== undefined) throw fate.error;
      const answer = await call(input);
      handled.push({ op, at: virtualNow(), answer });
      if (answer === true || (answer as { state?: string }).state === 'acquired') onHold?.(virtualNow());
      if (delay > 0) await elapse(delay);
      return answer;
    };
  }
  const store: IdempotencyStore = {
    ...inner,
    name: inner.name ?? 'network',
    claim: through('claim', (input) => inner.claim(input)),
    extend: through('extend', (input) => inner.extend(input)),
    complete: through('complete', (input) => inner.complete(input)),
    release: through('release', (input) => inner.release(input)),
  };
  return { store, handled, counts };
}
