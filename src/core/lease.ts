import { performance } from 'node:perf_hooks';
import type { Attempt } from './attempt.js';
import type { EngineRuntime } from './runtime.js';
import { detachedTimeout, type Timed, type TimerQueue, timerQueue } from './timing.js';

type LostReason = 'fenced' | 'unconfirmed' | 'max_run_time';

/** How often a claim of `lockTtl` is renewed: every third of it. */
export const renewalPeriod = (lockTtl: number): number => Math.max(Math.floor(lockTtl / 3), 1);

/**
 * Keeps a claim alive while its operation runs, so a slow but alive operation is never run twice.
 *
 * The store keeps a claim lockTtl from when it took the claim or its last renewal, which is no
 * earlier than when the engine sent it: so the lease counts lockTtl from the sending of the last
 * claim or renewal the store confirmed. Renewals go out every lockTtl / 3 from the claim's sending,
 * whether or not one is still on its way; one that fails or times out is sent again storeTimeout
 * after it was sent (at once, for a timeout), unless a newer one went out meanwhile. So k renewals
 * lost in a row are survived when lockTtl / 3 + k × storeTimeout + the time a renewal takes to
 * reach the store < lockTtl: one at the largest storeTimeout allowed (lockTtl / 3), 19 at the
 * defaults. Unconfirmed for a whole lockTtl, the claim may have expired: the signal aborts then
 * (`unconfirmed`), as it does when the store says the claim is another's (`fenced`).
 *
 * One object per claimed run, renewed through the shared {@link TimerQueue} of its period: most
 * runs stop it at once, so it makes no timer, closure or AbortController of its own until it needs one.
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
  /** runtime.now() at the start, for maxRunTime. */
  readonly #startedAt: number;
  /** When the last claim or renewal the store confirmed was sent (performance.now() time). */
  #confirmedAt: number;
  /** Renewals sent: a failed one is retried only if it is still the latest. */
  #sent = 0;
  /** The retry of a renewal that failed, when it waits for its time. */
  #retry: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(
    private readonly runtime: EngineRuntime,
    private readonly attempt: Attempt,
  ) {
    this.started = performance.now();
    this.#startedAt = runtime.now();
    this.#confirmedAt = attempt.claimSentAt;
    timerQueue(renewalPeriod(attempt.policy.lockTtl)).addSince(this, attempt.claimSentAt);
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
    if (this.#retry !== undefined) {
      clearTimeout(this.#retry);
      this.#retry = undefined;
    }
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
    this.queue = undefined;
    // From now, not from when it was due: after a stalled event loop, one renewal, not one per period missed.
    timerQueue(renewalPeriod(this.attempt.policy.lockTtl)).add(this, performance.now());
    this.#renew();
  }

  #renew(): void {
    if (this.#stopped) return;
    const { lockTtl, maxRunTime } = this.attempt.policy;
    if (maxRunTime !== undefined && this.runtime.now() - this.#startedAt >= maxRunTime) {
      this.#lose('max_run_time');
      return;
    }
    const sentAt = performance.now();
    if (sentAt - this.#confirmedAt >= lockTtl) {
      this.#lose('unconfirmed');
      return;
    }
    const n = ++this.#sent;
    if (this.#retry !== undefined) {
      clearTimeout(this.#retry);
      this.#retry = undefined;
    }
    this.#extend().then(
      (held) => {
        if (!held) this.#lose('fenced');
        else if (sentAt > this.#confirmedAt) this.#confirmedAt = sentAt;
      },
      // The guard reported the failure.
      () => this.#failed(n, sentAt),
    );
  }

  /** Renewal `n`, sent at `sentAt`, failed or timed out: sent again, at the latest when the claim may expire. */
  #failed(n: number, sentAt: number): void {
    if (this.#stopped || n !== this.#sent) return; // a newer renewal is on its way: its answer decides
    const { lockTtl, storeTimeout } = this.attempt.policy;
    const retryAt = Math.min(sentAt + storeTimeout, this.#confirmedAt + lockTtl);
    const wait = retryAt - performance.now();
    if (wait <= 0) this.#renew();
    else
      this.#retry = detachedTimeout(() => {
        this.#retry = undefined;
        this.#renew();
      }, Math.ceil(wait));
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
