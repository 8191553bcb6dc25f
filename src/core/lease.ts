import type { Attempt } from './attempt.js';
import type { EngineRuntime } from './runtime.js';
import type { Timed, TimerQueue } from './timing.js';

type LostReason = 'fenced' | 'unconfirmed' | 'max_run_time';

/** How often a claim of `lockTtl` is renewed: every third of it. */
export const renewalPeriod = (lockTtl: number): number => Math.max(Math.floor(lockTtl / 3), 1);

/**
 * Keeps a claim alive while its operation runs, so a slow but alive operation is never run twice.
 *
 * The store keeps a claim lockTtl from when it took the claim or its last renewal, which is no
 * earlier than when the engine sent it: so the lease counts lockTtl from the sending of the last
 * claim or renewal the store confirmed. The first renewal goes out lockTtl / 3 after the claim was
 * sent, each next one lockTtl / 3 after the one before, whether or not that one was answered; one
 * that fails or times out is sent again storeTimeout after it was sent (at once, for a timeout),
 * unless a newer one went out meanwhile. So k renewals lost in a row are survived when
 * lockTtl / 3 + k × storeTimeout + the time a renewal takes to reach the store < lockTtl: one at
 * the largest storeTimeout allowed (lockTtl / 3), 19 at the defaults. The lease also wakes when
 * the claim may expire, unconfirmed: the signal aborts then (`unconfirmed`), as it does when the
 * store says the claim is another's (`fenced`) or `maxRunTime` has passed.
 *
 * One object per claimed run, renewed through the shared {@link TimerQueue} of its period: most
 * runs stop it at once, so it makes no timer, closure or AbortController of its own until it needs one.
 */
export class Lease implements Timed {
  due = 0;
  prev: Timed | undefined = undefined;
  next: Timed | undefined = undefined;
  queue: TimerQueue | undefined = undefined;
  /** When the operation started (the engine clock's `now()` time), for events' durations. */
  readonly started: number;
  // Created when first read: most operations never look at their signal.
  #controller: AbortController | undefined;
  #lostWith: Error | undefined;
  /** When the last claim or renewal the store confirmed was sent (the engine clock's `now()` time). */
  #confirmedAt: number;
  /** Renewals sent: a failed one is sent again only if it is still the latest. */
  #sent = 0;
  /** The last renewal failed: the next failures go unreported until one succeeds (the guard reported the first). */
  #failing = false;
  #stopped = false;

  constructor(
    private readonly runtime: EngineRuntime,
    private readonly attempt: Attempt,
  ) {
    this.started = runtime.clock.now();
    this.#confirmedAt = attempt.claimSentAt;
    this.#wakeAt(attempt.claimSentAt + renewalPeriod(attempt.policy.lockTtl));
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

  /** Its time came: a renewal is due, or the claim may expire unconfirmed, or maxRunTime passed. */
  fire(): void {
    this.queue = undefined;
    this.#renew();
  }

  /**
   * Wakes at `at` (the engine clock's `now()` time), or sooner if the claim may expire unconfirmed or
   * maxRunTime passes before then, so the signal aborts on time.
   */
  #wakeAt(at: number): void {
    const { lockTtl, maxRunTime } = this.attempt.policy;
    let due = Math.min(at, this.#confirmedAt + lockTtl);
    if (maxRunTime !== undefined) due = Math.min(due, this.started + maxRunTime);
    const period = renewalPeriod(lockTtl);
    this.queue?.remove(this);
    // In the leases' own queues (timing.ts's ClockTimers), apart from the store calls' timeouts.
    this.runtime.timers.leases(period).addSince(this, due - period);
  }

  #renew(): void {
    if (this.#stopped) return;
    const { lockTtl, maxRunTime } = this.attempt.policy;
    const sentAt = this.runtime.clock.now();
    if (maxRunTime !== undefined && sentAt - this.started >= maxRunTime) {
      this.#lose('max_run_time');
      return;
    }
    if (sentAt - this.#confirmedAt >= lockTtl) {
      this.#lose('unconfirmed');
      return;
    }
    const n = ++this.#sent;
    // The next a period from now, whatever this one's fate: after a stalled event loop, one renewal.
    this.#wakeAt(sentAt + renewalPeriod(lockTtl));
    this.#extend(this.#failing).then(
      (held) => {
        if (!held) return this.#lose('fenced');
        this.#failing = false;
        if (sentAt > this.#confirmedAt) this.#confirmedAt = sentAt;
        // Woken before the claim might expire, counted from the previous confirmation: a period from this one now.
        if (n === this.#sent && !this.#stopped) this.#wakeAt(sentAt + renewalPeriod(lockTtl));
      },
      () => this.#failed(n, sentAt),
    );
  }

  /** Renewal `n`, sent at `sentAt`, failed or timed out: sent again storeTimeout after it was sent (now, for a timeout). */
  #failed(n: number, sentAt: number): void {
    this.#failing = true;
    if (this.#stopped || n !== this.#sent) return; // a newer renewal is on its way: its answer decides
    const { lockTtl, storeTimeout } = this.attempt.policy;
    const at = sentAt + Math.min(storeTimeout, renewalPeriod(lockTtl));
    if (at <= this.runtime.clock.now()) this.#renew();
    else this.#wakeAt(at);
  }

  async #extend(quiet: boolean): Promise<boolean> {
    const { store, emit, observed, clock } = this.runtime;
    const { name, keyHash } = this.attempt;
    const renewStart = observed ? clock.now() : 0;
    const held = await store.extend(this.attempt, quiet);
    if (held && observed) emit({ result: 'renewed', name, keyHash, durationMs: clock.now() - renewStart });
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
    this.runtime.emit({
      result: 'lease_lost',
      name,
      keyHash,
      durationMs: this.runtime.clock.now() - this.started,
      reason,
    });
  }
}
