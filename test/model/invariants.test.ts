/**
 * The invariants that check the oracle (invariants.ts) catch what they name: each case feeds them an answer a
 * broken store could give.
 */
import { describe, expect, it } from 'vitest';
import { Invariants } from './invariants.js';
import type { Op } from './oracle.js';

const id = 's:op:k';
const claim = (token: string, lockTtl = 100): Op => ({
  kind: 'claim',
  input: { id, token, fingerprint: `fp-${token}`, lockTtl },
});
const complete = (token: string): Op => ({
  kind: 'complete',
  input: { id, token, fingerprint: `fp-${token}`, state: 'completed', body: `body-${token}`, ttl: 100 },
});

describe('the invariants the oracle is checked against', () => {
  it('a completed record is never claimable before its ttl, nor replayed to another fingerprint', () => {
    const rules = new Invariants();
    expect(rules.check(claim('a'), { state: 'acquired', time: 0 }, 0)).toBeUndefined();
    expect(rules.check(complete('a'), 'stored', 10)).toBeUndefined();
    expect(rules.check(claim('b'), { state: 'acquired', time: 50 }, 50)).toMatch(/stored outcome/);
    expect(rules.check(claim('b'), { state: 'completed', fingerprint: 'fp-a', body: 'body-a' }, 50)).toMatch(
      /stored outcome/,
    );
    expect(rules.check(claim('b'), { state: 'completed', fingerprint: 'fp-a' }, 50)).toBeUndefined();
    expect(rules.check(claim('b'), { state: 'acquired', time: 110 }, 110)).toBeUndefined();
  });

  it('a token that lost its claim cannot extend it, save a step or release it', () => {
    const rules = new Invariants();
    rules.check(claim('a', 10), { state: 'acquired', time: 0 }, 0);
    rules.check(claim('b'), { state: 'acquired', time: 20 }, 20);
    const extend: Op = { kind: 'extend', input: { id, token: 'a', lockTtl: 100, fingerprint: 'fp-a' } };
    expect(rules.check(extend, true, 30)).toMatch(/lost its claim cannot extend/);
    const step: Op = {
      kind: 'saveStep',
      input: { id, token: 'a', fingerprint: 'fp-a', index: 0, name: 's', body: '1', ttl: 100, lockTtl: 100 },
    };
    expect(rules.check(step, 'stored', 30)).toMatch(/only the live holder saves/);
    expect(rules.check({ kind: 'release', input: { id, token: 'a' } }, true, 30)).toMatch(/only the live holder/);
    expect(rules.check(complete('a'), 'stored', 30)).toMatch(/fenced by the live claim/);
  });

  it('a live claim is never taken by another token, and the steps go to the claim that takes it next', () => {
    const rules = new Invariants();
    rules.check(claim('a'), { state: 'acquired', time: 0 }, 0);
    expect(rules.check(claim('b'), { state: 'acquired', time: 50 }, 50)).toMatch(/never taken by another token/);
    const step: Op = {
      kind: 'saveStep',
      input: { id, token: 'a', fingerprint: 'fp-a', index: 0, name: 's', body: '1', ttl: 1_000, lockTtl: 100 },
    };
    expect(rules.check(step, 'stored', 60)).toBeUndefined();
    expect(rules.check({ kind: 'release', input: { id, token: 'a' } }, true, 70)).toBeUndefined();
    expect(rules.check(claim('b'), { state: 'acquired', time: 80 }, 80)).toMatch(/exactly the live steps/);
  });
});
