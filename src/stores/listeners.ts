/** Listeners by key, for a store's `onSettled`: `add` returns how to remove one, `notify` calls a key's. */
export class KeyedListeners {
  readonly #byKey = new Map<string, Set<() => void>>();

  add(key: string, listener: () => void): () => void {
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

  notify(key: string): void {
    const set = this.#byKey.get(key);
    if (set !== undefined) for (const listener of set) listener();
  }
}
