import { performance } from 'node:perf_hooks';

/** The wall clock's lead over the monotonic one (ms): constant unless the wall clock steps. */
const wallLead = () => Date.now() - performance.now();

/** A wall-clock step smaller than this is noise (the two clocks are read a few µs apart). */
const STEP_MS = 50;

/**
 * Runs `test`; if it fails while the machine's wall clock stepped (a virtual
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
      if (Math.abs(step) < STEP_MS || attempt === attempts) throw error;
      console.warn(
        `the wall clock stepped by ${Math.round(step)} ms while the test ran (the store times expiries by it): ` +
          `running it again (${attempt + 1} of ${attempts}). It failed with: ${String(error)}`,
      );
    }
  }
}
