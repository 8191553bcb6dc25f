/**
 * The model-based contract on the memory store: the store and the oracle on
 * one virtual clock (no window: every answer and time must be equal), the
 * oracle checked by the invariants. No server: it runs many sequences quickly.
 */
import { memoryStore } from '../../src/index.js';
import { modelTest } from './model-run.js';

modelTest(
  'memory',
  () => {
    let now = 1_700_000_000_000;
    return {
      store: memoryStore({ now: () => now }),
      clock: () => now,
      advance: async (ms: number) => {
        now += ms;
      },
      slack: 0,
    };
  },
  500,
);
