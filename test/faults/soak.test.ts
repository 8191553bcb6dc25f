/**
 * The short soak (the 2-minute one is `npm run soak`): two app processes on
 * Redis, clients with 20% duplicate keys, one process killed with SIGKILL and
 * started again every 8 s.
 */
import { describe, expect, it } from 'vitest';
import { runSoak } from './helpers/soak.js';

const LOCK_TTL = 2_000;
/** Retry backoff, a restart and a busy machine on top of lockTtl: a bound, not a speed claim. */
const SLACK = 3_000;

describe('soak, short', () => {
  it('25 s with a process killed every 8 s: no double execution, no lost outcome, no key stuck beyond lockTtl', async () => {
    const report = await runSoak({ durationMs: 25_000, killEveryMs: 8_000, concurrency: 16, lockTtl: LOCK_TTL });
    console.info('[soak, short]', JSON.stringify(report));
    expect(report.processKills).toBeGreaterThanOrEqual(2);
    expect(report.operations).toBeGreaterThan(500);
    expect(report.examples).toEqual([]);
    expect(report.doubleExecutions).toBe(0);
    expect(report.conflictingResults).toBe(0);
    expect(report.lostOutcomes).toBe(0);
    expect(report.stuckKeys).toBe(0);
    expect(report.maxBlockedMs).toBeLessThan(LOCK_TTL + SLACK);
  });
});
