/**
 * The store's clock, as seen from the engine: how to write "the engine gives
 * up on this claim at T" in the store's own time, so that a claim the store
 * receives after its caller gave up (it waited in a driver's offline queue
 * through an outage) changes nothing.
 *
 * Each claim answer carries the store's time. For a call sent at `sentAt`
 * (the engine's time: its clock's `timeOrigin + now()`, monotonic, never the `now` option) and handled at `storeTime` (the store's), the store's
 * lead over the engine is at most `storeTime - sentAt`: the call cannot be
 * handled before it was sent. The largest such bound over a recent window is
 * kept, so a deadline computed from it is never earlier, in real time, than
 * the engine's own give-up: the store refuses only claims whose callers gave
 * up. A store clock that jumps ahead of the bound makes a claim answer `late`
 * early; the engine then learns the new bound from that answer and claims again.
 */

/** How long a bound is kept: a store clock stepped back is forgotten after this. */
const WINDOW_MS = 60_000;
/** Store clocks answer in whole milliseconds: their time may be up to 1 ms behind. */
const RESOLUTION_MS = 1;

export class StoreClock {
  #current = Number.NEGATIVE_INFINITY;
  #previous = Number.NEGATIVE_INFINITY;
  #windowStart = Number.NEGATIVE_INFINITY;

  /** Learns from one answer: a call sent at `sentAt` (engine time) was handled at `storeTime`. */
  observe(sentAt: number, storeTime: number): void {
    if (sentAt - this.#windowStart >= WINDOW_MS) {
      this.#previous = this.#current;
      this.#current = Number.NEGATIVE_INFINITY;
      this.#windowStart = sentAt;
    }
    const lead = storeTime - sentAt + RESOLUTION_MS;
    if (lead > this.#current) this.#current = lead;
  }

  /**
   * The store-clock deadline of a call sent at `sentAt` that the engine gives
   * up on after `timeout` ms, or undefined before any answer taught a bound.
   */
  deadline(sentAt: number, timeout: number): number | undefined {
    const lead = Math.max(this.#current, this.#previous);
    return lead === Number.NEGATIVE_INFINITY ? undefined : Math.ceil(sentAt + timeout + lead);
  }
}
