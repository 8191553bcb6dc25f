import type { Attempt } from './attempt.js';
import type { Answer } from './guarded-store.js';
import type { EngineRuntime } from './runtime.js';
import { interruptibleSleep } from './timing.js';

/** Polling, while the store cannot notify (no `onSettled`, a failed subscription, or it says they are down). */
const FIRST_POLL_MS = 25;
const MAX_POLL_MS = 1_000;
/** A check at the holder's expiry comes this late: the store counts whole ms, and a check 1 ms early costs one more. */
const EXPIRY_MARGIN_MS = 5;
/**
 * While the store notifies, the holder's claim is checked once it would expire unrenewed, and no sooner than
 * this backoff: a holder that renews a short lockTtl costs a check per backoff step, not one per renewal,
 * and a crashed one is found at worst that late.
 */
const FIRST_EXPIRY_CHECK_MS = 500;
const MAX_EXPIRY_CHECK_MS = 5_000;

/**
 * `inFlight: 'wait'`: claims, and while another request holds the key with
 * the same payload, waits for it to settle, up to `waitTimeout`. While the
 * store notifies, the waiter checks only when told the record may have
 * settled, when the holder's claim expires unless renewed (a crashed holder
 * sends nothing), and once more at the deadline: whatever the holder's
 * duration, a holder that settles within the wait costs each waiter 3 claims
 * (and, if its claim can expire within the wait, a short lockTtl, one per
 * expiry it outlives by renewing, no more often than a backoff from 500 ms to
 * 5 s). While the store cannot notify, it polls with bounded, jittered backoff.
 * Returns the last answer: the outcome to replay, the key (if the holder gave
 * it back), or `in_progress` when the wait is over.
 */
export async function claimOrWait(
  runtime: EngineRuntime,
  attempt: Attempt,
  signal: AbortSignal | undefined,
): Promise<Answer> {
  const { store, now, clock } = runtime;
  const { fp, policy } = attempt;
  let result = await store.claim(attempt, true);
  if (result.state !== 'in_progress' || result.fingerprint !== fp) return result;

  const deadline = now() + policy.waitTimeout;
  /** Set by the store: the record may have settled (check now). */
  let notified = false;
  /** Whether the store can notify; false makes the waiter poll. */
  let notifying = true;
  let interrupted = false;
  let wake: (() => void) | undefined;
  const listener = (up?: boolean) => {
    notifying = up !== false;
    if (notifying) notified = true;
    interrupted = true;
    wake?.();
  };
  let unsubscribe: (() => void) | undefined;
  try {
    unsubscribe = await store.subscribe(attempt, listener);
  } catch {
    // Reported by the guard: without notifications, polling alone finds the outcome.
  }
  if (unsubscribe === undefined) notifying = false;
  let delay = FIRST_POLL_MS;
  const nextPoll = () => {
    const ms = delay * (0.5 + Math.random() / 2);
    delay = Math.min(delay * 2, MAX_POLL_MS);
    return now() + ms;
  };
  let expiryDelay = FIRST_EXPIRY_CHECK_MS;
  const nextExpiryCheck = (checked: number, expiresIn: number) => {
    const ms = Math.max(expiresIn + EXPIRY_MARGIN_MS, expiryDelay);
    expiryDelay = Math.min(expiryDelay * 2, MAX_EXPIRY_CHECK_MS);
    return checked + ms;
  };
  try {
    // Claim again now that we listen, so a completion between the first claim
    // and the subscription is not missed (without one, the first poll comes first).
    let claimNow = unsubscribe !== undefined;
    for (;;) {
      if (claimNow) {
        notified = false;
        try {
          result = await store.claim(attempt, true, true);
        } catch {
          // The holder was seen running: a store failure now must not let
          // this request run unprotected beside it (fail-open), so it gets 409,
          // and one check is reported, in_progress, not a failed claim too.
          return result;
        }
        if (result.state !== 'in_progress') return result;
      }
      claimNow = true;
      const checked = now();
      if (deadline - checked <= 0 || signal?.aborted) return result;
      if (notified) continue; // settled while we were claiming
      // Without news: the holder's expiry while the store notifies, else the next poll; the deadline at the latest.
      let polling = !notifying;
      let due = Math.min(deadline, polling ? nextPoll() : nextExpiryCheck(checked, result.expiresIn ?? policy.lockTtl));
      for (;;) {
        interrupted = false;
        const sleep = interruptibleSleep(Math.max(due - now(), 0), signal, clock);
        wake = sleep.wake;
        await sleep.promise;
        wake = undefined;
        if (!interrupted || notified || signal?.aborted) break;
        // Told that notifications stopped: poll until they are back.
        if (!notifying && !polling) {
          polling = true;
          due = Math.min(due, nextPoll());
        }
      }
    }
  } finally {
    unsubscribe?.();
  }
}
