export interface LeaseOptions {
  lockTtl: number;
  now: () => number;
  /** The caller's signal: its abort is forwarded to the lease's signal. */
  signal: AbortSignal | undefined;
  /** Renews the claim; resolves false if the claim is no longer ours. */
  extend: () => Promise<boolean>;
  onError: (error: unknown) => void;
  onLost: () => void;
}

export interface Lease {
  /** Aborts when the caller's signal aborts or the claim is lost. */
  readonly signal: AbortSignal;
  stop(): void;
}

/**
 * Keeps a claim alive while its operation runs by renewing it every
 * `lockTtl / 3`, so a slow but alive operation is never run twice. If the store
 * says the claim is gone, or renewals fail until the claim must have expired,
 * the lease's signal aborts: someone else may now run the operation.
 */
export function startLease(options: LeaseOptions): Lease {
  const { lockTtl, now, extend, onError, onLost } = options;
  const controller = new AbortController();
  const outer = options.signal;
  const forward = () => controller.abort(outer?.reason);
  if (outer !== undefined) {
    if (outer.aborted) forward();
    else outer.addEventListener('abort', forward, { once: true });
  }

  let confirmedAt = now();
  let inFlight = false;
  let stopped = false;
  const lose = () => {
    if (stopped) return;
    stop();
    onLost();
    controller.abort(new Error('The idempotency claim was lost: the operation may run again elsewhere.'));
  };
  const timer = setInterval(() => {
    if (inFlight) return;
    inFlight = true;
    const attemptAt = now();
    extend().then(
      (held) => {
        inFlight = false;
        if (held) confirmedAt = attemptAt;
        else lose();
      },
      (error) => {
        inFlight = false;
        onError(error);
        // Unconfirmed for a whole lockTtl: the claim has expired in the store.
        if (now() - confirmedAt >= lockTtl) lose();
      },
    );
  }, Math.max(Math.floor(lockTtl / 3), 1));
  timer.unref();

  function stop() {
    stopped = true;
    clearInterval(timer);
    outer?.removeEventListener('abort', forward);
  }

  return { signal: controller.signal, stop };
}
