import type { Attempt } from './attempt.js';
import type { Answer } from './guarded-store.js';
import type { EngineRuntime } from './runtime.js';
import { interruptibleSleep } from './timing.js';

/** Polling when nothing notifies (a store without `onSettled`, or a failed subscription): it is the only way to learn. */
const FIRST_POLL_MS = 25;
const MAX_POLL_MS = 1_000;
// Subscribed, a poll only catches a lost message or a crashed holder's expired claim, so it starts later and backs off further.
const FIRST_SUBSCRIBED_POLL_MS = 500;
const MAX_SUBSCRIBED_POLL_MS = 5_000;

/**
 * `inFlight: 'wait'`: claims, and while another request holds the key with
 * the same payload, waits for it to settle, up to `waitTimeout`. Woken by the
 * store's notification when it has one, and polling with bounded, jittered
 * backoff in any case (a crashed holder sends nothing; its claim just expires),
 * and always once more at the deadline.
 * Returns the last answer: the outcome to replay, the key (if the holder gave
 * it back), or `in_progress` when the wait is over.
 */
export async function claimOrWait(
  runtime: EngineRuntime,
  attempt: Attempt,
  signal: AbortSignal | undefined,
): Promise<Answer> {
  const { store, now } = runtime;
  const { fp, policy } = attempt;
  let result = await store.claim(attempt, true);
  if (result.state !== 'in_progress' || result.fingerprint !== fp) return result;

  const deadline = now() + policy.waitTimeout;
  let notified = false;
  let wakeCurrent: (() => void) | undefined;
  const onSettled = () => {
    notified = true;
    wakeCurrent?.();
  };
  let unsubscribe: (() => void) | undefined;
  try {
    unsubscribe = await store.subscribe(attempt, onSettled);
  } catch {
    // Reported by the guard: without notifications, polling alone finds the outcome.
  }
  const subscribed = unsubscribe !== undefined;
  const maxDelay = subscribed ? MAX_SUBSCRIBED_POLL_MS : MAX_POLL_MS;
  try {
    let delay = subscribed ? FIRST_SUBSCRIBED_POLL_MS : FIRST_POLL_MS;
    // Claim again now that we listen, so a completion between the first
    // claim and the subscription is not missed.
    for (;;) {
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
      const remaining = deadline - now();
      if (remaining <= 0 || signal?.aborted) return result;
      if (notified) continue; // settled while we were claiming
      const sleep = interruptibleSleep(Math.min(delay * (0.5 + Math.random() / 2), remaining), signal);
      wakeCurrent = sleep.wake;
      await sleep.promise;
      wakeCurrent = undefined;
      delay = Math.min(delay * 2, maxDelay);
    }
  } finally {
    unsubscribe?.();
  }
}
