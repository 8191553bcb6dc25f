/**
 * A few rules every store keeps whatever its implementation, checked on the
 * oracle's answers in its exact virtual time: the oracle (the memory store) is
 * the reference the other stores are compared with, so these say what the
 * reference itself must never do. Each names the rule it guards; an answer the
 * rules do not decide is not checked.
 */
import type { ClaimResult, RecordedSteps } from '../../src/core/store.js';
import { EXPIRY_ROUNDING, type RecordInfo } from '../../src/core/store-admin.js';
import type { Op } from './oracle.js';

interface Shadow {
  /** A stored outcome and when it expires. */
  outcome?: { token: string; fingerprint: string; state: 'completed' | 'failed'; body: string; until: number };
  /** The live claim: its token, fingerprint and expiry. */
  holder?: { token: string; fingerprint: string; until: number };
  /** Tokens whose claim ended (taken over, released, completed, forgotten): they hold nothing until they claim again. */
  lost: Set<string>;
  /** The steps saved since the last clear, and when they expire. */
  steps?: RecordedSteps & { until: number };
}

export class Invariants {
  #ids = new Map<string, Shadow>();

  /** `extra`: the ms the oracle adds to every lease (see model-run.ts); a step save's lockTtl is not widened. */
  constructor(readonly extra = 0) {}

  /** The store lost everything: nothing it held binds what it answers next. */
  restart(): void {
    this.#ids.clear();
  }

  #of(id: string): Shadow {
    let shadow = this.#ids.get(id);
    if (shadow === undefined) this.#ids.set(id, (shadow = { lost: new Set() }));
    return shadow;
  }

  /**
   * Checks the oracle's `answer` to `op` at virtual time `t`, then learns from it: a violated rule, or undefined.
   * `recreated`: the op found its record lost with the store's data and recreated the caller's claim (the restart
   * fence, restart-fence.ts), as a renewal or a step save may while the fence is up, whoever held it.
   */
  check(op: Op, answer: unknown, t: number, recreated = false): string | undefined {
    const s = this.#of(op.input.id);
    const outcome = s.outcome !== undefined && s.outcome.until > t ? s.outcome : undefined;
    const holder = s.holder !== undefined && s.holder.until > t ? s.holder : undefined;
    const steps = s.steps !== undefined && s.steps.until > t ? s.steps : undefined;
    const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
    const lose = (token: string) => {
      s.lost.add(token);
      if (s.holder?.token === token) s.holder = undefined;
    };
    if (recreated && (op.kind === 'extend' || op.kind === 'saveStep')) {
      if (holder !== undefined || outcome !== undefined) return 'only a lost record is recreated';
      const { token, fingerprint, lockTtl } = op.input;
      s.holder = { token, fingerprint, until: t + lockTtl + (op.kind === 'saveStep' ? this.extra : 0) };
      s.lost.delete(token);
      if (op.kind === 'extend') return answer === true ? undefined : 'a recreated claim is renewed';
      // The steps before the loss are gone: a step past those recorded since is answered stored, not recorded.
      if (op.input.index > (steps?.steps.length ?? 0))
        return answer === 'stored' ? undefined : 'a step past the lost ones is let through';
      return this.check(op, answer, t);
    }
    switch (op.kind) {
      case 'claim': {
        const { token, fingerprint, lockTtl } = op.input;
        const a = answer as ClaimResult;
        if (outcome !== undefined) {
          // A finished record is never claimable before its ttl, and replays its body only to its own fingerprint.
          const expected = { state: outcome.state, fingerprint: outcome.fingerprint };
          const body = outcome.fingerprint === fingerprint ? { body: outcome.body } : {};
          const { time: _, ...rest } = a;
          if (!same(rest, { ...expected, ...body })) return 'a stored outcome answers every claim until its ttl';
          return undefined;
        }
        if (holder !== undefined && holder.token !== token && a.state !== 'in_progress')
          return 'a live claim is never taken by another token';
        if (a.state !== 'acquired') return undefined;
        if (!same(a.steps, steps === undefined ? undefined : { fingerprint: steps.fingerprint, steps: steps.steps }))
          return 'a claim that takes a record gets exactly the live steps saved since the last clear';
        if (s.holder !== undefined && s.holder.token !== token) s.lost.add(s.holder.token);
        s.holder = { token, fingerprint, until: t + lockTtl };
        s.lost.delete(token);
        return undefined;
      }
      case 'extend': {
        const { token, lockTtl } = op.input;
        const holds = holder?.token === token;
        if (answer !== holds)
          return holds ? 'the live holder can extend its claim' : 'a token that lost its claim cannot extend it';
        if (holds) s.holder = { ...holder!, until: t + lockTtl };
        return undefined;
      }
      case 'release': {
        const holds = holder?.token === op.input.token;
        if (answer !== holds) return 'only the live holder releases, and it always can';
        if (holds) lose(op.input.token);
        return undefined;
      }
      case 'saveStep': {
        const { token, index, name, body, fingerprint, ttl } = op.input;
        if (holder?.token !== token) return answer === 'fenced' ? undefined : 'only the live holder saves a step';
        const count = steps?.steps.length ?? 0;
        const expected =
          index < count
            ? steps!.steps[index]!.name === name
              ? 'stored'
              : 'conflict'
            : index > count
              ? 'conflict'
              : 'stored';
        if (answer !== expected) return 'steps are saved in order, once each, a save sent twice answered stored';
        if (index === count)
          s.steps = { fingerprint, steps: [...(steps?.steps ?? []), { name, body }], until: t + ttl };
        return undefined;
      }
      case 'complete': {
        const { token, fingerprint, state, body, ttl, clearSteps } = op.input;
        const expected =
          outcome !== undefined
            ? outcome.token === token
              ? 'stored'
              : 'finished'
            : holder !== undefined && holder.token !== token
              ? 'held'
              : 'stored';
        if (answer !== expected) return 'a completion is fenced by the live claim and by an outcome already stored';
        if (expected === 'stored' && outcome === undefined) {
          s.outcome = { token, fingerprint, state, body, until: t + ttl };
          lose(token);
          if (clearSteps === true) s.steps = undefined;
        }
        return undefined;
      }
      case 'forget': {
        const { state, token, steps: alsoSteps } = op.input;
        let deleted = false;
        if (state === 'absent') {
          if (outcome !== undefined || holder !== undefined) return answer === false ? undefined : 'forget absent kept';
        } else if (
          state === 'in_progress' ? holder?.token === token : outcome?.state === state && outcome.token === token
        ) {
          // Only as the operator read it: not renewed (or stored again) since, a few ms of rounding allowed.
          const until = state === 'in_progress' ? holder!.until : outcome!.until;
          if (op.input.expiresAt !== undefined && until > op.input.expiresAt + EXPIRY_ROUNDING)
            return answer === false ? undefined : 'an operator deletes a record only if not renewed since the read';
          deleted = true;
          if (state === 'in_progress') lose(token!);
          else s.outcome = undefined;
        } else {
          return answer === false ? undefined : 'an operator deletes a record only as it was seen';
        }
        if (alsoSteps === true && steps !== undefined) {
          deleted = true;
          s.steps = undefined;
        }
        return answer === deleted ? undefined : 'an operator deletes a record only as it was seen';
      }
      case 'inspect': {
        const info = answer as RecordInfo;
        const state = outcome?.state ?? (holder !== undefined ? 'in_progress' : 'absent');
        if (info.state !== state) return 'inspect shows the record as the operations left it';
        if (
          !same(
            info.steps.map((step) => step.name),
            steps?.steps.map((step) => step.name) ?? [],
          )
        )
          return 'inspect shows the live steps';
        return undefined;
      }
    }
  }
}
