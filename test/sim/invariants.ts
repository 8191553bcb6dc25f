/**
 * What must hold after every simulated world (simulation.ts), each checked against the sentence of
 * the docs that promises it. {@link check} returns the violations (empty: all held) and the
 * documented causes of the second runs it allowed, counted for the report.
 */
import { isIdempotencyErrorInstance } from '../../src/core/idempotency-error.js';
import { confirmed } from './faulty-store.js';
import { durationOf, type Outcome, processName, type Run, recordIdOf, stepsOf } from './world.js';

export type Cause =
  | 'released'
  | 'holder_crashed'
  | 'store_forgot'
  | 'renewals_lost_past_bound'
  | 'completion_unconfirmed';

export interface Verdict {
  violations: string[];
  /** Second runs allowed, by the documented cause that allowed them. */
  causes: Partial<Record<Cause, number>>;
}

const DOCUMENTED_REASONS = new Set([
  'in_progress',
  'payload_mismatch',
  'store_unavailable',
  'step_mismatch',
  'step_unrecorded',
]);

export function check(out: Outcome): Verdict {
  const { scenario, runs, calls, crashedAt, restartedAt } = out;
  const { lockTtl, storeTimeout } = scenario;
  const period = Math.max(Math.floor(lockTtl / 3), 1);
  const violations: string[] = [];
  const causes: Verdict['causes'] = {};
  const restartBetween = (from: number, to: number) => restartedAt.some((t) => t >= from && t <= to);

  // 1. At most once per key. docs/getting-started.md: "a slow but alive request is never run twice", "k
  // renewals lost in a row (no answer, or an error) are survived when lockTtl / 3 + k × storeTimeout + d <
  // lockTtl"; the causes it documents for a second run: "released → absent" (a 5xx, a throw), "holder
  // crashed"; docs/stores.md: "Without persistence a restart comes back empty: outcomes and claims are
  // gone"; docs/durability.md: without the fence "a retry of a key still running runs beside it"; the
  // completion "is retried in the background until lockTtl has passed ... past that, a retry of the
  // client may run the operation again" (docs/troubleshooting.md).
  const excuse = (first: Run, at: number): Cause | undefined => {
    // Released: the store gave the key back by then, or the run ended in an error (see below).
    const releases = calls.filter((c) => c.op === 'release' && c.token === first.token);
    if (releases.some((c) => c.answer === true && c.appliedAt !== undefined && c.appliedAt <= at)) return 'released';
    // A run that ended in an error gave its key back, whatever its release answered (refused: the claim was
    // already gone, lost with a store's data or expired): "released → absent (retry runs again)".
    const ranIntoError = first.threw === true || first.released !== undefined;
    if (ranIntoError && first.end !== undefined && first.end <= at) return 'released';
    const crashed = crashedAt.get(first.process);
    if (crashed !== undefined && crashed <= at) return 'holder_crashed';
    // With the fence, docs/durability.md: "a retry of a finished key; never a key still running": only a run
    // that had ended before the store restarted (its outcome, stored or on its way, forgotten).
    const restarts = restartedAt.filter((t) => t >= first.start - storeTimeout && t <= at);
    if (restarts.some((t) => !scenario.fence || (first.end !== undefined && first.end <= t))) return 'store_forgot';
    const mine = calls.filter((c) => c.token === first.token && c.process === first.process && c.sentAt <= at);
    // The bound's d: the longest a confirmed call of this claim took to reach the store.
    let d = 0;
    for (const c of mine) if (confirmed(c.fault, storeTimeout) && c.fault.kind === 'ok') d = Math.max(d, c.fault.delay);
    let run = 0;
    let longest = 0;
    for (const c of mine.filter((c) => c.op === 'extend')) {
      run = confirmed(c.fault, storeTimeout) ? 0 : run + 1;
      longest = Math.max(longest, run);
    }
    if (longest > 0 && period + longest * storeTimeout + d >= lockTtl) return 'renewals_lost_past_bound';
    if (
      first.end !== undefined &&
      first.end <= at &&
      mine.some((c) => c.op === 'complete' && !confirmed(c.fault, storeTimeout))
    )
      return 'completion_unconfirmed';
    return undefined;
  };
  const byKey = new Map<number, Run[]>();
  for (const run of runs) byKey.set(run.key, [...(byKey.get(run.key) ?? []), run]);
  for (const [key, list] of byKey) {
    for (let j = 1; j < list.length; j++) {
      const second = list[j]!;
      for (const first of list.slice(0, j)) {
        const cause = excuse(first, second.start);
        if (cause === undefined) {
          violations.push(
            `k${key} ran twice: r${first.request} (${first.process}, from ${first.start}) and r${second.request} ` +
              `(${second.process}, from ${second.start}), with no documented cause (getting-started.md: "a slow but alive request is never run twice")`,
          );
        } else {
          causes[cause] = (causes[cause] ?? 0) + 1;
          // docs/getting-started.md: "The resolver's `signal` aborts as soon as the claim is lost: a renewal finds
          // it gone, no renewal was confirmed for a whole `lockTtl`": from then on the store may give the key to
          // another request.
          const running = first.end === undefined || first.end > second.start;
          const crashed = crashedAt.get(first.process);
          const alive = crashed === undefined || crashed > second.start;
          if (
            cause === 'renewals_lost_past_bound' &&
            running &&
            alive &&
            !(first.abortedAt !== undefined && first.abortedAt <= second.start)
          ) {
            violations.push(
              `r${first.request}'s signal had not aborted when r${second.request} took k${key} at ${second.start} (aborted: ${first.abortedAt ?? 'never'})`,
            );
          }
        }
      }
    }
  }

  // 2. Every attempt ends with exactly one documented answer within a bound, never a hang or an
  // unhandled rejection. docs/reference/options.md (storeTimeout): "The longest one store call may take ... past it the
  // call counts as a store failure"; errors.md lists the reasons. The bound: the claim (a late answer
  // is claimed once more: 2 calls, plus a release of another payload's steps), a wait (waitTimeout,
  // 'wait' mode: up to 3 claims and a subscription more), the operation and its step saves, the completion.
  for (const { request, at } of out.sent) {
    const r = scenario.requests[request]!;
    const process = processName(r.process);
    const mine = out.answers.filter((a) => a.request === request);
    const ran = runs.some((run) => run.request === request);
    const steps = stepsOf(r.key);
    const claimPhase = r.wait ? lockTtl + 7 * storeTimeout : 3 * storeTimeout;
    const bound = at + claimPhase + (ran ? durationOf(r) + steps * storeTimeout : 0) + storeTimeout + 1;
    const crashed = crashedAt.get(process);
    if (crashed !== undefined && crashed <= bound && mine.length === 0) continue; // its process died first
    if (mine.length !== 1) {
      violations.push(`r${request} got ${mine.length} answers (sent at ${at}; expected one by ${bound})`);
      continue;
    }
    const answer = mine[0]!;
    if (answer.at > bound)
      violations.push(`r${request} answered at ${answer.at}, past its bound ${bound} (sent at ${at})`);
    if (answer.thrown !== undefined) {
      const reason = isIdempotencyErrorInstance(answer.thrown) ? answer.thrown.reason : undefined;
      if (reason === undefined || !DOCUMENTED_REASONS.has(reason)) {
        violations.push(`r${request} answered with an undocumented error: ${String(answer.thrown)}`);
      }
    } else if (answer.result !== undefined && !answer.result.ok) {
      const error = answer.result.error;
      const own = error instanceof Error && error.message === `r${request} declined`;
      const reason = isIdempotencyErrorInstance(error) ? error.reason : undefined;
      if (!ran || !(own || (reason !== undefined && DOCUMENTED_REASONS.has(reason)))) {
        violations.push(`r${request} answered with an error that is not its operation's: ${String(error)}`);
      }
    } else if (answer.result?.ok === true && !answer.result.replayed && answer.result.value !== `r${request}`) {
      violations.push(`r${request} answered ${answer.result.value} as its own run`);
    }
  }
  for (const reason of out.unhandled) violations.push(`unhandled rejection: ${String(reason)}`);

  // 3. A replay equals the first outcome. docs/getting-started.md: "Completed or failed with the same
  // fingerprint: replay" (docs/getting-started.md: "The second answer carries `Idempotent-Replayed: true` and the
  // same `chargeId`").
  for (const answer of out.answers) {
    if (answer.result?.ok !== true || !answer.result.replayed) continue;
    const r = scenario.requests[answer.request]!;
    const values = runs.filter((run) => run.key === r.key && run.value !== undefined).map((run) => run.value);
    const sameKey = values.length === 1 ? values[0] === answer.result.value : values.includes(answer.result.value);
    if (!sameKey) {
      violations.push(
        `r${answer.request} replayed ${answer.result.value}, but k${r.key}'s runs returned [${values.join(', ')}]`,
      );
    }
  }

  // 4. A completed step never runs again. docs/steps.md: "On a retry, the recorded step at its position
  // resolves to its result"; docs/durability.md, after an empty restart: "Outcomes stored before the loss are
  // gone, fence or not; steps recorded before it too": the steps of a run the store restarted under (its save
  // after the restart, past the lost ones, is answered stored unrecorded).
  for (const c of calls) {
    if (c.op !== 'save_step' || c.answer !== 'stored' || c.appliedAt === undefined) continue;
    const key = [0, 1].find((k) => recordIdOf(k) === c.id);
    const since = runs.find((run) => run.token === c.token)?.start ?? c.appliedAt;
    for (const sr of out.stepRuns) {
      if (sr.key !== key || sr.name !== c.step || sr.at <= c.appliedAt || restartBetween(since, sr.at)) continue;
      violations.push(`k${key} step ${sr.name} ran again at ${sr.at} (r${sr.request}), recorded at ${c.appliedAt}`);
    }
  }

  // 5. Every claimed run emits exactly one terminal event. docs/reference/events.md: the completion
  // "ends, at most 2 × lockTtl after that first failure, in one of" completed (completed_late),
  // lease_lost (fenced) or store_error (gave_up); lease_lost is "once per claim"; a completion that
  // lands after a gave_up "is reported when it lands". A run ends in completed, released, a failed
  // release's store_error, or a gave_up; with none of them, its claim was reported lost.
  for (const run of runs) {
    if (crashedAt.has(run.process)) continue;
    // The request's own events; and its lease's, emitted by the lease's timer while the operation ran
    // (in no request's context): those are told apart only when no other run of the key overlaps in this process.
    const window = (e: Outcome['events'][number], r: Run) =>
      e.request === undefined &&
      e.process === r.process &&
      e.key === r.key &&
      e.at >= r.start &&
      e.at <= (r.end ?? out.end);
    const shared = runs.some(
      (other) =>
        other !== run &&
        other.process === run.process &&
        other.key === run.key &&
        other.start <= (run.end ?? out.end) &&
        (other.end ?? out.end) >= run.start,
    );
    const events = out.events.filter((e) => e.request === run.request || (!shared && window(e, run)));
    const lostByTimer = shared && out.events.some((e) => window(e, run) && e.event.result === 'lease_lost');
    const ends = events.filter(
      ({ event: e }) =>
        e.result === 'completed' ||
        e.result === 'released' ||
        (e.result === 'store_error' && (e.operation === 'release' || e.reason === 'gave_up')),
    );
    const lost = events.filter(({ event: e }) => e.result === 'lease_lost');
    const names = ends.map(({ event: e }) => `${e.result}${e.reason === undefined ? '' : `(${e.reason})`}`);
    const lateAfterGaveUp =
      names.length === 2 && names[0] === 'store_error(gave_up)' && names[1] === 'completed(completed_late)';
    if (lost.length > 1) violations.push(`r${run.request}'s claim was reported lost ${lost.length} times`);
    if (ends.length > 1 && !lateAfterGaveUp) {
      violations.push(`r${run.request} ended in ${ends.length} events: ${names.join(', ')}`);
    }
    if (ends.length === 0 && lost.length === 0 && !lostByTimer) {
      violations.push(`r${run.request} ended in no terminal event`);
    }
    if (run.end !== undefined && ends.length > 0) {
      const limit = run.end + storeTimeout + 2 * lockTtl + 1;
      if (ends[0]!.at > limit)
        violations.push(`r${run.request}'s terminal event came at ${ends[0]!.at}, past ${limit}`);
    }
  }
  // 6. A claim that lands after its caller gave up is given back. docs/architecture.md: the guarded
  // store puts "a deadline in the store's clock on every claim", and "a claim that lands late given back".
  for (const c of calls) {
    if (c.op !== 'claim' || c.fault.kind !== 'ok' || c.fault.delay + c.fault.back < storeTimeout) continue;
    if ((c.answer as { state?: string } | undefined)?.state !== 'acquired') continue;
    const crashed = crashedAt.get(c.process);
    if (crashed !== undefined && crashed <= c.sentAt + c.fault.delay + c.fault.back) continue;
    if (runs.some((run) => run.token === c.token)) continue; // answered in time after all, by a retry of the claim
    if (!calls.some((other) => other.op === 'release' && other.token === c.token && other.sentAt >= c.appliedAt!)) {
      violations.push(
        `claim #${c.call} (${c.process}) took k${[0, 1].find((k) => recordIdOf(k) === c.id)} after its caller gave up, and was never given back`,
      );
    }
  }
  return { violations, causes };
}
