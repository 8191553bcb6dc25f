/** The retry defaults of `idempotencyLink`, for reuse (a TanStack `retryDelay`, your own loop). */
export const DEFAULT_RETRY = {
  /** Attempts per mutation, the first included. */
  maxAttempts: 5,
  /** The cap of the first retry's wait, in ms; it doubles with each attempt. */
  baseDelayMs: 500,
  /** The longest single wait, in ms, and the longest `Retry-After` honoured. */
  maxDelayMs: 30_000,
} as const;

/**
 * Exponential backoff with full jitter: after attempt `attempts` (1 for the
 * first call) wait `random(0, min(maxDelayMs, baseDelayMs * 2^(attempts-1)))`.
 * Full jitter spreads the retries of many clients that failed together (a
 * restart, a network blip) instead of sending them back in waves.
 */
export function backoffDelay(opts: {
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  random: () => number;
}): number {
  const ceiling = Math.min(opts.maxDelayMs, opts.baseDelayMs * 2 ** Math.max(0, opts.attempts - 1));
  return Math.floor(opts.random() * ceiling);
}
