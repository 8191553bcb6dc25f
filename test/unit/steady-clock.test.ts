/** The contract's guard against a stepped wall clock (test/helpers/steady-clock.ts). */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { onSteadyWallClock } from '../helpers/steady-clock.js';

afterEach(() => vi.restoreAllMocks());

describe('onSteadyWallClock', () => {
  it('throws a failure at once when the wall clock was steady', async () => {
    let runs = 0;
    await expect(
      onSteadyWallClock(async () => {
        runs++;
        throw new Error('expected completed, got acquired');
      }),
    ).rejects.toThrow('expected completed, got acquired');
    expect(runs).toBe(1);
  });

  it('runs a failed test again when the wall clock stepped while it ran, and passes if that run passes', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const realNow = Date.now;
    let runs = 0;
    await onSteadyWallClock(async () => {
      runs++;
      if (runs === 1) {
        const stepped = realNow() + 1_000;
        vi.spyOn(Date, 'now').mockImplementation(() => stepped);
        throw new Error('the record expired early');
      }
    });
    expect(runs).toBe(2);
    // Date.now counts whole ms and performance.now does not: the step of 1,000 ms can read 999
    expect(warn.mock.calls[0]?.[0]).toMatch(/the wall clock stepped by (999|10\d\d) ms .* running it again \(2 of 3\)/);
  });

  it('gives up after the attempts, with the last failure', async () => {
    vi.spyOn(console, 'warn').mockImplementation(() => {});
    let offset = 0;
    const realNow = Date.now;
    vi.spyOn(Date, 'now').mockImplementation(() => realNow() + offset);
    let runs = 0;
    await expect(
      onSteadyWallClock(async () => {
        runs++;
        offset += 1_000;
        throw new Error(`run ${runs}`);
      }),
    ).rejects.toThrow('run 3');
    expect(runs).toBe(3);
  });
});
