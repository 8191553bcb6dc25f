/** A store's `onSettled` listener: no argument when the record may have settled, false when notifications stopped. */
export type SettledListener = (notifying?: boolean) => void;

/**
 * Listeners by key, for a store's `onSettled`: `add` returns how to remove one, `notify` calls a key's,
 * `notifyAll` every one (notifications stopped, or are back).
 */
export class KeyedListeners {
  readonly #byKey = new Map<string, Set<SettledListener>>();

  add(key: string, listener: SettledListener): () => void {
    let set = this.#byKey.get(key);
    if (set === undefined) this.#byKey.set(key, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.#byKey.get(key) === set) this.#byKey.delete(key);
    };
  }

  /** Someone listens for `key`. */
  has(key: string): boolean {
    return this.#byKey.has(key);
  }

  /** Someone listens at all. */
  get size(): number {
    return this.#byKey.size;
  }

  notify(key: string): void {
    const set = this.#byKey.get(key);
    if (set !== undefined) for (const listener of set) listener();
  }

  notifyAll(notifying: boolean): void {
    for (const set of [...this.#byKey.values()]) for (const listener of [...set]) listener(notifying);
  }
}
