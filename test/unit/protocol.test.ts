/**
 * The record's rules as pure transitions (core/protocol), on their own and
 * against the memory store, which is a Map over their pieces: on generated
 * sequences of operations and clock moves, both give the same answers.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { forget, inspect } from '../../src/core/protocol/reads.js';
import {
  claim,
  complete,
  extend,
  fence,
  type Kept,
  release,
  saveStep,
  type Transition,
} from '../../src/core/protocol/record.js';
import { memoryStore } from '../../src/stores/memory/store.js';

const id = 'scope:op:key';
const claimOf = (token: string, fingerprint = 'f1') => ({ id, token, fingerprint, lockTtl: 100 });
const completionOf = (token: string, fingerprint = 'f1') =>
  ({ id, token, fingerprint, state: 'completed', body: 'ok', ttl: 300 }) as const;

describe('the protocol', () => {
  it('claims a free record, answers the holder to another claim, replays the outcome to the same payload only', () => {
    let kept: Kept | undefined;
    let answer: unknown;
    [kept, answer] = claim(kept, claimOf('t1'), 0);
    expect(answer).toEqual({ state: 'acquired', time: 0 });
    [kept, answer] = claim(kept, { ...claimOf('t2'), waiting: true }, 10);
    expect(answer).toEqual({ state: 'in_progress', fingerprint: 'f1', expiresIn: 90 });
    [kept, answer] = complete(kept, completionOf('t1'), 20);
    expect(answer).toBe('stored');
    expect(claim(kept, claimOf('t3'), 30)[1]).toEqual({ state: 'completed', fingerprint: 'f1', body: 'ok' });
    expect(claim(kept, claimOf('t3', 'f2'), 30)[1]).toEqual({ state: 'completed', fingerprint: 'f1' });
    expect(claim(kept, claimOf('t3'), 320)[1]).toEqual({ state: 'acquired', time: 320 });
  });

  it('fences a holder whose claim expired and was taken over, and takes nothing after a deadline', () => {
    let [kept] = claim(undefined, claimOf('t1'), 0);
    [kept] = claim(kept, claimOf('t2'), 100);
    expect(extend(kept, { ...claimOf('t1'), lockTtl: 100 }, 110)[1]).toBe(false);
    expect(release(kept, claimOf('t1'), 110)[1]).toBe(false);
    expect(complete(kept, completionOf('t1'), 110)[1]).toBe('held');
    expect(saveStep(kept, { ...claimOf('t1'), index: 0, name: 's', body: 'b', ttl: 300 }, 110)[1]).toBe('fenced');
    expect(claim(undefined, { ...claimOf('t3'), deadline: 5 }, 6)).toEqual([undefined, { state: 'late', time: 6 }]);
  });

  it('keeps steps past a release for the next claim, and clears them with a completion that asks to', () => {
    const step = (index: number, name: string, t: number, kept: Kept | undefined) =>
      saveStep(kept, { ...claimOf('t1'), index, name, body: name.toUpperCase(), ttl: 300 }, t);
    let [kept] = claim(undefined, claimOf('t1'), 0);
    let answer: unknown;
    [kept, answer] = step(0, 'a', 1, kept);
    expect(answer).toBe('stored');
    expect(step(0, 'a', 2, kept)[1]).toBe('stored');
    expect(step(0, 'b', 2, kept)[1]).toBe('conflict');
    expect(step(2, 'c', 2, kept)[1]).toBe('conflict');
    [kept] = release(kept, claimOf('t1'), 3);
    [kept, answer] = claim(kept, claimOf('t2'), 4);
    expect(answer).toEqual({
      state: 'acquired',
      time: 4,
      steps: { fingerprint: 'f1', steps: [{ name: 'a', body: 'A' }] },
    });
    [kept] = complete(kept, { ...completionOf('t2'), clearSteps: true }, 5);
    expect(kept?.steps).toBeUndefined();
  });

  it('refuses absent records for one window after the restart fence finds its marker missing', () => {
    expect(fence(undefined, 1_000, 100)).toEqual([1_000, 1_100]);
    expect(fence(1_000, 1_099, 100)).toEqual([1_000, 1_100]);
    expect(fence(1_000, 1_100, 100)).toEqual([1_000, undefined]);
    expect(fence(0, 1_000, 100)).toEqual([0, undefined]);
  });
});

type Op =
  | { op: 'claim'; token: string; fingerprint: string; waiting: boolean; deadline?: number }
  | { op: 'complete'; token: string; fingerprint: string; clearSteps: boolean }
  | { op: 'release' | 'extend'; token: string }
  | { op: 'saveStep'; token: string; index: number; name: string }
  | { op: 'forget'; state: 'absent' | 'in_progress' | 'completed'; token: string; steps: boolean }
  | { op: 'inspect' }
  | { op: 'wait'; ms: number };

const token = fc.constantFrom('t1', 't2', 't3');
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    op: fc.constant('claim' as const),
    token,
    fingerprint: fc.constantFrom('f1', 'f2'),
    waiting: fc.boolean(),
    deadline: fc.option(fc.integer({ min: 0, max: 600 }), { nil: undefined }),
  }),
  fc.record({ op: fc.constant('complete' as const), token, fingerprint: fc.constant('f1'), clearSteps: fc.boolean() }),
  fc.record({ op: fc.constantFrom('release' as const, 'extend' as const), token }),
  fc.record({ op: fc.constant('saveStep' as const), token, index: fc.nat(2), name: fc.constantFrom('a', 'b') }),
  fc.record({
    op: fc.constant('forget' as const),
    state: fc.constantFrom('absent' as const, 'in_progress' as const, 'completed' as const),
    token,
    steps: fc.boolean(),
  }),
  fc.constant({ op: 'inspect' as const }),
  fc.record({ op: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 150 }) }),
);

describe('the memory store', () => {
  it('answers as the protocol does, on any sequence of operations and clock moves', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 40 }), async (ops) => {
        let clock = 0;
        const store = memoryStore({ now: () => clock });
        let kept: Kept | undefined;
        try {
          for (const o of ops) {
            if (o.op === 'wait') {
              clock += o.ms;
              continue;
            }
            let model: Transition<unknown>;
            let actual: unknown;
            const fenced = { id, token: o.op === 'inspect' ? '' : o.token };
            if (o.op === 'claim') {
              const input = { ...claimOf(o.token, o.fingerprint), waiting: o.waiting, deadline: o.deadline };
              model = claim(kept, input, clock);
              actual = await store.claim(input);
            } else if (o.op === 'complete') {
              const input = { ...completionOf(o.token, o.fingerprint), clearSteps: o.clearSteps };
              model = complete(kept, input, clock);
              actual = await store.complete(input);
            } else if (o.op === 'release') {
              model = release(kept, fenced, clock);
              actual = await store.release(fenced);
            } else if (o.op === 'extend') {
              const input = { ...fenced, lockTtl: 100, fingerprint: 'f1' };
              model = extend(kept, input, clock);
              actual = await store.extend(input);
            } else if (o.op === 'saveStep') {
              const input = { ...claimOf(o.token), index: o.index, name: o.name, body: o.name, ttl: 300 };
              model = saveStep(kept, input, clock);
              actual = await store.saveStep!(input);
            } else if (o.op === 'forget') {
              const input = { id, state: o.state, token: o.token, steps: o.steps };
              model = forget(kept, input, clock);
              actual = await store.admin.forget(input);
            } else {
              model = [kept, inspect(kept?.record, kept?.steps, { id, body: true }, clock, () => false)];
              actual = await store.admin.inspect({ id, body: true });
            }
            expect(actual).toEqual(model[1]);
            kept = model[0];
          }
        } finally {
          store.close();
        }
      }),
      { numRuns: 300 },
    );
  });
});
