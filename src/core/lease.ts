import { signalGetter } from './signal-getter.js';

export interface LeaseOptions {
  lockTtl: number;
  /** Stop renewing after this long (ms), as if the claim were lost. */
  maxRunTime: number | undefined;
  now: () => number;
  /** Renews the claim; resolves false if the claim is no longer ours. */
  extend: () => Promise<boolean>;
  onError: (error: unknown) => void;
  onLost: (reason: 'fenced' | 'unconfirmed' | 'max_run_time') => void;
}

export interface Lease {
  /**
   * Aborts when the claim is lost. It does not follow the caller's signal: a
   * caller that went away (a timeout, a dropped connection) will retry, and
   * the operation should finish so that the retry gets the replay.
   */
  readonly signal: AbortSignal;
  stop(): void;
  /** True once the claim was lost (and `onLost` called). */
  wasLost(): boolean;
}

/**
 * Keeps a claim alive while its operation runs by renewing it every
 * `lockTtl / 3`, so a slow but alive operation is never run twice. If the store
 * says the claim is gone, or renewals fail until the claim must have expired,
 * the lease's signal aborts: someone else may now run the operation.
 */
export function startLease(options: LeaseOptions): Lease {
  const { lockTtl, maxRunTime, now, extend, onError, onLost } = options;
  // Created when first read: most operations never look at their signal, and
  // an AbortController costs several microseconds on every call.
  let controller: AbortController | undefined;
  let lostWith: Error | undefined;
  const startedAt = now();
  let confirmedAt = startedAt;
  let inFlight = false;
  let stopped = false;
  const lose = (reason: 'fenced' | 'unconfirmed' | 'max_run_time') => {
    if (stopped) return;
    stop();
    onLost(reason);
    lostWith = new Error(`The idempotency claim was lost (${reason}): the operation may run again elsewhere.`);
    controller?.abort(lostWith);
  };
  const timer = setInterval(
    () => {
      if (maxRunTime !== undefined && now() - startedAt >= maxRunTime) return lose('max_run_time');
      if (inFlight) return;
      inFlight = true;
      const attemptAt = now();
      extend().then(
        (held) => {
          inFlight = false;
          if (held) confirmedAt = attemptAt;
          else lose('fenced');
        },
        (error) => {
          inFlight = false;
          onError(error);
          // Unconfirmed for a whole lockTtl: the claim has expired in the store.
          if (now() - confirmedAt >= lockTtl) lose('unconfirmed');
        },
      );
    },
    Math.max(Math.floor(lockTtl / 3), 1),
  );
  timer.unref();

  function stop() {
    stopped = true;
    clearInterval(timer);
  }

  return withLeaseSignal({ stop, wasLost: () => lostWith !== undefined }, () => {
    if (controller === undefined) {
      controller = new AbortController();
      if (lostWith !== undefined) controller.abort(lostWith);
    }
    return controller.signal;
  });
}

const withLeaseSignal = signalGetter((makeSignal: () => AbortSignal) => makeSignal());
