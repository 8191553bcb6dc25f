/**
 * How the memory store shares its room between scopes: what each scope holds,
 * and what goes first when room is needed.
 *
 * A scope's share is max(entries / maxEntries, bytes / maxBytes), its running
 * claims and steps counted. Room is taken from the scope with the largest
 * share, the oldest of its evictable entries first, but never for a scope
 * whose share, with the room it asks for, is larger: that one gives up its
 * own. An entry is evictable once no claim holds it: a finished record, or
 * the steps a released or expired claim left. When the largest has nothing
 * evictable (its records are running claims and their steps), the scope
 * asking gives up its own, or gets no room: no other scope pays for it. So a
 * scope that fills the store evicts only its own entries, and no caller
 * sending fresh keys, holding many claims or releasing them after a step,
 * can make another caller's retry run again.
 */

/** What one scope holds, and its place in the heap of scopes that hold anything. */
export interface ScopeUsage<E extends object = object> {
  /** The scope part of its ids (`scopeOfRecordId`). */
  readonly name: string;
  entries: number;
  bytes: number;
  /** max(entries / maxEntries, bytes / maxBytes): the heap's key. */
  share: number;
  /**
   * Its evictable entries and their ids, oldest first (insertion order: when no claim held them any
   * more). Keyed by entry, since a record and the steps of the same id can both be there.
   */
  readonly evictable: Map<E, string>;
  /** Where the search for the oldest evictable entry resumes (see `victim`). */
  oldest: MapIterator<[E, string]> | undefined;
  /** Its index in the heap, -1 while it holds nothing. */
  at: number;
}

export class ScopeShares<E extends object> {
  /** Entries and bytes of every scope together. */
  entries = 0;
  bytes = 0;
  readonly #scopes = new Map<string, ScopeUsage<E>>();
  /** A max-heap by share of the scopes that hold anything: the largest in O(1), kept in O(log scopes). */
  readonly #heap: ScopeUsage<E>[] = [];

  constructor(
    readonly maxEntries: number,
    readonly maxBytes: number,
  ) {}

  /** The usage of scope `name`, if it holds anything. */
  get(name: string): ScopeUsage<E> | undefined {
    return this.#scopes.get(name);
  }

  /** The usage of scope `name`, made when it holds nothing yet. */
  usage(name: string): ScopeUsage<E> {
    let s = this.#scopes.get(name);
    if (s === undefined) {
      s = { name, entries: 0, bytes: 0, share: 0, evictable: new Map(), oldest: undefined, at: -1 };
      this.#scopes.set(name, s);
    }
    return s;
  }

  /** Counts `dEntries` entries and `dBytes` bytes more (or fewer) for `s`; a scope left empty is forgotten. */
  account(s: ScopeUsage<E>, dEntries: number, dBytes: number): void {
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

  /** No claim holds `entry` (of id `id`, scope `s`) any more: it may be evicted from now on, after the older ones. */
  free(s: ScopeUsage<E>, entry: E, id: string): void {
    s.evictable.set(entry, id);
  }

  /** `entry`, of scope `s`, may not be evicted any more: it is gone (expired, deleted or evicted), or a claim holds it again. */
  withdraw(s: ScopeUsage<E>, entry: E): void {
    s.evictable.delete(entry);
  }

  /**
   * The entry to evict, and its id, so that scope `owner` (undefined: one
   * that holds nothing yet) gets `more` entries and `moreBytes` bytes: the
   * oldest of the scope with the largest share, when it has one and that
   * share is not smaller than the one `owner` would have with the room it
   * asks for; else `owner`'s own oldest. Undefined when that is not there either.
   */
  victim(owner: ScopeUsage<E> | undefined, more: number, moreBytes: number): [E, string] | undefined {
    const wanted =
      owner === undefined
        ? Math.max(more / this.maxEntries, moreBytes / this.maxBytes)
        : Math.max((owner.entries + more) / this.maxEntries, (owner.bytes + moreBytes) / this.maxBytes);
    const largest = this.#heap[0];
    const from = largest !== undefined && largest.evictable.size > 0 && largest.share >= wanted ? largest : owner;
    if (from === undefined || from.evictable.size === 0) return undefined;
    // Resumed where the last eviction stopped: a fresh iterator would step over every deleted entry before it.
    let next = (from.oldest ??= from.evictable.entries()).next();
    if (next.done === true) next = (from.oldest = from.evictable.entries()).next();
    return next.value;
  }

  #place(s: ScopeUsage<E>, i: number): void {
    this.#heap[i] = s;
    s.at = i;
  }

  #siftUp(s: ScopeUsage<E>): void {
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

  #siftDown(s: ScopeUsage<E>): void {
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

  #unheap(s: ScopeUsage<E>): void {
    const last = this.#heap.pop()!;
    if (last !== s) {
      this.#place(last, s.at);
      this.#siftUp(last);
      this.#siftDown(last);
    }
    s.at = -1;
  }
}
