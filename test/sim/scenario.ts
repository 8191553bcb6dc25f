/**
 * The generator of simulated worlds: timings, requests, and the fault of each store call, chosen
 * by fast-check so that a failure shrinks to few requests, few faults and early times.
 */
import fc from 'fast-check';
import type { Fault } from './faulty-store.js';
import type { Request, Scenario } from './world.js';

function faultArb(storeTimeout: number): fc.Arbitrary<Fault> {
  const delay = fc.integer({ min: 0, max: 2 * storeTimeout });
  const within = fc.integer({ min: 0, max: Math.max(Math.floor((storeTimeout - 1) / 2), 0) });
  return fc.oneof(
    // delayed, within storeTimeout
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('ok' as const), delay: within, back: within }) },
    // delayed past storeTimeout: applied after the engine gave up on it
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('ok' as const),
        delay: fc.integer({ min: storeTimeout, max: 3 * storeTimeout }),
        back: fc.integer({ min: 0, max: storeTimeout }),
      }),
    },
    { weight: 3, arbitrary: fc.constant({ kind: 'lost' as const }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('reply_lost' as const), delay }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('fail_before' as const), delay }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('error_after' as const), delay, back: delay }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'crash' as const }) },
  );
}

function requestArb(lockTtl: number, processes: number): fc.Arbitrary<Request> {
  return fc.record({
    process: fc.integer({ min: 0, max: processes - 1 }),
    key: fc.integer({ min: 0, max: 1 }),
    // Most requests close together (contention, retries while the first runs), some far apart.
    at: fc.oneof(
      { weight: 3, arbitrary: fc.integer({ min: 0, max: lockTtl }) },
      { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 * lockTtl }) },
    ),
    payload: fc.oneof({ weight: 9, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.constant(1) }),
    wait: fc.oneof({ weight: 3, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
    durations: fc.tuple(
      fc.integer({ min: 0, max: lockTtl }),
      fc.integer({ min: 0, max: lockTtl }),
      fc.integer({ min: 0, max: lockTtl }),
    ),
    throws: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
  });
}

export const scenarioArb: fc.Arbitrary<Scenario> = fc
  .record({
    lockTtl: fc.constantFrom(300, 301, 900),
    processes: fc.integer({ min: 2, max: 3 }),
    // storeTimeout as a fraction of its largest value, lockTtl / 3 (the edge the options allow) most often
    timeoutPart: fc.oneof(fc.constant(1), fc.double({ min: 0.01, max: 1, noNaN: true })),
  })
  .chain(({ lockTtl, processes, timeoutPart }) => {
    const storeTimeout = Math.max(Math.floor(Math.floor(lockTtl / 3) * timeoutPart), 1);
    return fc.record({
      lockTtl: fc.constant(lockTtl),
      storeTimeout: fc.constant(storeTimeout),
      skews: fc.array(fc.integer({ min: -5_000, max: 5_000 }), { minLength: processes, maxLength: processes }),
      requests: fc.array(requestArb(lockTtl, processes), { minLength: 2, maxLength: 6 }),
      faults: fc.array(fc.record({ call: fc.nat(60), fault: faultArb(storeTimeout) }), { maxLength: 10 }),
      partitions: fc.array(
        fc
          .record({
            process: fc.integer({ min: 0, max: processes - 1 }),
            from: fc.integer({ min: 0, max: 3 * lockTtl }),
            length: fc.integer({ min: 1, max: 2 * lockTtl }),
          })
          .map(({ process, from, length }) => ({ process, from, to: from + length })),
        { maxLength: 1 },
      ),
      crashes: fc.array(
        fc.record({
          process: fc.integer({ min: 0, max: processes - 1 }),
          at: fc.integer({ min: 0, max: 4 * lockTtl }),
        }),
        { maxLength: 1 },
      ),
      restarts: fc.oneof(
        { weight: 6, arbitrary: fc.constant<number[]>([]) },
        { weight: 1, arbitrary: fc.array(fc.integer({ min: 0, max: 4 * lockTtl }), { minLength: 1, maxLength: 1 }) },
      ),
      fence: fc.boolean(),
      seed: fc.integer(),
    });
  });
