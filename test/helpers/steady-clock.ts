import { performance } from 'node:perf_hooks';

/**
 * The wall clock's lead over the monotonic one (ms): constant unless the wall clock steps. The wall clock is
 * read between two readings of the monotonic one, again (a few times at most) while they are more than 0.5 ms
 * apart: a thread descheduled between the two clocks' readings, as on a loaded machine, would look like a step.
 */
export function wallLead(): number {
  for (let tries = 0; ; tries++) {
    const before = performance.now();
    const wall = Date.now();
    const after = performance.now();
    if (after - before <= 0.5 || tries === 4) return wall - (before + after) / 2;
  }
}

/** A wall-clock step smaller than this is noise (the two clocks are read a few µs apart). */
const STEP_MS = 50;

/**
 * Thrown by {@link within}: the machine was too slow for the test's timing to decide anything.
 */
export class TooSlow extends Error {}

/**
 * Throws {@link TooSlow} if more than `ms` passed since `since` (performance.now()): a test on a real
 * server's clock states its premise (e.g. "the renewed claim, of lockTtl 400, cannot have expired yet")
 * with it, before the assertion that relies on it.
 */
export function within(since: number, ms: number, premise: string): void {
  const took = performance.now() - since;
  if (took > ms) throw new TooSlow(`${premise}: ${Math.round(took)} ms passed, more than ${ms}`);
}

/**
 * Runs `test`; if it fails while the machine's wall clock stepped, or on a {@link TooSlow} premise (a virtual
 * machine's clock is corrected after a pause), runs it again, up to `attempts`
 * times in all. Redis and PostgreSQL time expiries by the wall clock, so a
 * step of a second expires a record a second early: a test timing a ttl of
 * hundreds of ms cannot decide anything across it. A failure on a steady
 * clock is thrown at once.
 */
export async function onSteadyWallClock(test: () => Promise<void>, attempts = 3): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const before = wallLead();
    try {
      await test();
      return;
    } catch (error) {
      const step = wallLead() - before;
      const slow = error instanceof TooSlow;
      if ((!slow && Math.abs(step) < STEP_MS) || attempt === attempts) throw error;
      console.warn(
        slow
          ? `the machine was too slow for the test to decide (${error.message}): running it again (${attempt + 1} of ${attempts})`
          : `the wall clock stepped by ${Math.round(step)} ms while the test ran (the store times expiries by it): ` +
              `running it again (${attempt + 1} of ${attempts}). It failed with: ${String(error)}`,
      );
    }
  }
}
