/**
 * How the memory store shares its room between scopes: what each scope holds,
 * and which finished record goes first when room is needed.
 *
 * A scope's share is max(entries / maxEntries, bytes / maxBytes), its running
 * claims and steps counted. Room is taken from the scope with the largest
 * share, oldest finished record first, but never for a scope whose share,
 * with the room it asks for, is larger: that one gives up its own. When the
 * largest has nothing finished (its records are running claims), the scope
 * asking gives up its own, or gets no room: no other scope pays for it. So a
 * scope that fills the store evicts only its own records, and no caller
 * sending fresh keys (or holding many claims) can make another caller's
 * retry run again.
 */

/** A finished (completed or failed) record, as a scope keeps it for eviction. */
export interface Finished {
  readonly bytes: number;
}

/** What one scope holds, and its place in the heap of scopes that have finished records. */
export interface ScopeUsage<R extends Finished = Finished> {
  /** The scope part of its ids (`scopeOfRecordId`). */
  readonly name: string;
  entries: number;
  bytes: number;
  /** max(entries / maxEntries, bytes / maxBytes): the heap's key. */
  share: number;
  /** Its finished records, oldest first (insertion order is completion order). */
  readonly finished: Map<string, R>;
  /** Where the search for the oldest finished record resumes (see `victim`). */
  oldest: MapIterator<[string, R]> | undefined;
  /** Its index in the heap, -1 while it holds nothing. */
  at: number;
}

export class ScopeShares<R extends Finished> {
  /** Entries and bytes of every scope together. */
  entries = 0;
  bytes = 0;
  readonly #scopes = new Map<string, ScopeUsage<R>>();
  /** A max-heap by share of the scopes that hold anything: the largest in O(1), kept in O(log scopes). */
  readonly #heap: ScopeUsage<R>[] = [];

  constructor(
    readonly maxEntries: number,
    readonly maxBytes: number,
  ) {}

  /** The usage of scope `name`, if it holds anything. */
  get(name: string): ScopeUsage<R> | undefined {
    return this.#scopes.get(name);
  }

  /** The usage of scope `name`, made when it holds nothing yet. */
  usage(name: string): ScopeUsage<R> {
    let s = this.#scopes.get(name);
    if (s === undefined) {
      s = { name, entries: 0, bytes: 0, share: 0, finished: new Map(), oldest: undefined, at: -1 };
      this.#scopes.set(name, s);
    }
    return s;
  }

  /** Counts `dEntries` entries and `dBytes` bytes more (or fewer) for `s`; a scope left empty is forgotten. */
  account(s: ScopeUsage<R>, dEntries: number, dBytes: number): void {
    this.entries += dEntries;
    this.bytes += dBytes;
    s.entries += dEntries;
    s.bytes += dBytes;
    const share = Math.max(s.entries / this.maxEntries, s.bytes / this.maxBytes);
    const grew = share > s.share;
    s.share = share;
    if (s.entries === 0) {
      if (s.at >= 0) this.#unheap(s);
      this.#scopes.delete(s.name);
    } else if (s.at < 0) {
      s.at = this.#heap.length;
      this.#heap.push(s);
      this.#siftUp(s);
    } else if (grew) {
      this.#siftUp(s);
    } else {
      this.#siftDown(s);
    }
  }

  /** `rec`, of scope `s`, is finished: it may be evicted from now on. */
  finish(s: ScopeUsage<R>, id: string, rec: R): void {
    s.finished.set(id, rec);
  }

  /** A finished record of scope `s` is gone (expired or evicted). */
  unfinish(s: ScopeUsage<R>, id: string): void {
    s.finished.delete(id);
  }

  /**
   * The finished record to evict so that scope `owner` (undefined: one that
   * holds nothing yet) gets `more` entries and `moreBytes` bytes: the oldest
   * of the scope with the largest share, when it has one and that share is
   * not smaller than the one `owner` would have with the room it asks for;
   * else `owner`'s own oldest. Undefined when that is not there either.
   */
  victim(owner: ScopeUsage<R> | undefined, more: number, moreBytes: number): [string, R] | undefined {
    const wanted =
      owner === undefined
        ? Math.max(more / this.maxEntries, moreBytes / this.maxBytes)
        : Math.max((owner.entries + more) / this.maxEntries, (owner.bytes + moreBytes) / this.maxBytes);
    const largest = this.#heap[0];
    const from = largest !== undefined && largest.finished.size > 0 && largest.share >= wanted ? largest : owner;
    if (from === undefined || from.finished.size === 0) return undefined;
    // Resumed where the last eviction stopped: a fresh iterator would step over every deleted entry before it.
    let next = (from.oldest ??= from.finished.entries()).next();
    if (next.done === true) next = (from.oldest = from.finished.entries()).next();
    return next.value;
  }

  #place(s: ScopeUsage<R>, i: number): void {
    this.#heap[i] = s;
    s.at = i;
  }

  #siftUp(s: ScopeUsage<R>): void {
    const heap = this.#heap;
    let i = s.at;
    while (i > 0) {
      const parent = heap[(i - 1) >> 1]!;
      if (parent.share >= s.share) break;
      this.#place(parent, i);
      i = (i - 1) >> 1;
    }
    this.#place(s, i);
  }

  #siftDown(s: ScopeUsage<R>): void {
    const heap = this.#heap;
    let i = s.at;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= heap.length) break;
      const c = left + 1 < heap.length && heap[left + 1]!.share > heap[left]!.share ? left + 1 : left;
      const child = heap[c]!;
      if (child.share <= s.share) break;
      this.#place(child, i);
      i = c;
    }
    this.#place(s, i);
  }

  #unheap(s: ScopeUsage<R>): void {
    const last = this.#heap.pop()!;
    if (last !== s) {
      this.#place(last, s.at);
      this.#siftUp(last);
      this.#siftDown(last);
    }
    s.at = -1;
  }
}
