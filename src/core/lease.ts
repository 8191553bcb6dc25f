import { performance } from 'node:perf_hooks';
import type { Attempt } from './attempt.js';
import type { EngineRuntime } from './runtime.js';
import { type Timed, type TimerQueue, timerQueue } from './timing.js';

type LostReason = 'fenced' | 'unconfirmed' | 'max_run_time';

/**
 * Keeps a claim alive while its operation runs by renewing it every
 * `lockTtl / 3`, so a slow but alive operation is never run twice. If the store
 * says the claim is gone, or renewals fail until the claim must have expired,
 * the lease's signal aborts: someone else may now run the operation.
 *
 * One object per claimed run, renewed through the shared {@link TimerQueue} of
 * its period: most runs stop it at once, so it makes no timer, closure or
 * AbortController of its own until it needs one.
 */
export class Lease implements Timed {
  due = 0;
  prev: Timed | undefined = undefined;
  next: Timed | undefined = undefined;
  queue: TimerQueue | undefined = undefined;
  /** When the operation started (performance.now() time), for events' durations. */
  readonly started: number;
  // Created when first read: most operations never look at their signal.
  #controller: AbortController | undefined;
  #lostWith: Error | undefined;
  readonly #startedAt: number;
  #confirmedAt: number;
  #inFlight = false;
  #stopped = false;

  constructor(
    private readonly runtime: EngineRuntime,
    private readonly attempt: Attempt,
  ) {
    this.started = performance.now();
    this.#startedAt = this.#confirmedAt = runtime.now();
    timerQueue(Math.max(Math.floor(attempt.policy.lockTtl / 3), 1)).add(this, this.started);
  }

  /** Aborts when the claim is lost, not when the caller goes away (see `RunOptions.signal`). */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#lostWith !== undefined) this.#controller.abort(this.#lostWith);
    }
    return this.#controller.signal;
  }

  stop(): void {
    this.#stopped = true;
    this.queue?.remove(this);
  }

  /** True once the claim was lost (and reported). */
  wasLost(): boolean {
    return this.#lostWith !== undefined;
  }

  /**
   * The claim was lost to another holder (a refused completion, release or step): reported once,
   * whoever notices first, and the signal aborts if the operation is still running.
   */
  fenced(): void {
    if (this.wasLost()) return;
    this.stop();
    this.#markLost('fenced');
  }

  /** A renewal is due (the queue calls it every period until stopped). */
  fire(): void {
    const { lockTtl, maxRunTime } = this.attempt.policy;
    const { now } = this.runtime;
    this.queue = undefined;
    timerQueue(Math.max(Math.floor(lockTtl / 3), 1)).add(this, performance.now());
    if (maxRunTime !== undefined && now() - this.#startedAt >= maxRunTime) {
      this.#lose('max_run_time');
      return;
    }
    if (this.#inFlight) return;
    this.#inFlight = true;
    const attemptAt = now();
    this.#extend().then(
      (held) => {
        this.#inFlight = false;
        if (held) this.#confirmedAt = attemptAt;
        else this.#lose('fenced');
      },
      () => {
        this.#inFlight = false;
        // The guard reported the failure. Unconfirmed for a whole lockTtl: the claim has expired in the store.
        if (now() - this.#confirmedAt >= lockTtl) this.#lose('unconfirmed');
      },
    );
  }

  async #extend(): Promise<boolean> {
    const { store, emit, observed } = this.runtime;
    const { name, keyHash } = this.attempt;
    const renewStart = observed ? performance.now() : 0;
    const held = await store.extend(this.attempt);
    if (held && observed) emit({ result: 'renewed', name, keyHash, durationMs: performance.now() - renewStart });
    return held;
  }

  #lose(reason: LostReason): void {
    if (this.#stopped) return;
    this.stop();
    this.#markLost(reason);
  }

  #markLost(reason: LostReason): void {
    this.#report(reason);
    this.#lostWith = new Error(`The idempotency claim was lost (${reason}): the operation may run again elsewhere.`);
    this.#controller?.abort(this.#lostWith);
  }

  #report(reason: LostReason): void {
    const { name, keyHash } = this.attempt;
    this.runtime.emit({ result: 'lease_lost', name, keyHash, durationMs: performance.now() - this.started, reason });
  }
}
