/**
 * How the engine turns an outcome into the string a store keeps, and back.
 * The tRPC adapter supplies one built on the router's data transformer.
 */
export interface OutcomeCodec<T> {
  serialize(value: T): string;
  deserialize(body: string): T;
  /**
   * The stored form of a failure, or `undefined` to release the key instead
   * so the client can retry with it.
   */
  serializeError(error: unknown): string | undefined;
  deserializeError(body: string): unknown;
}

/**
 * JSON for results; failures are never stored (every error releases the key).
 * The default outside tRPC: a queue consumer that throws wants the message
 * redelivered and run again.
 *
 * A value JSON would not give back as it is (a Map, Set, Date, RegExp, typed
 * array, class instance, function, symbol, BigInt, NaN or Infinity, an
 * `undefined` array item) is refused rather than stored changed: the engine
 * then records the outcome as unreplayable, so a retry gets
 * `outcome_unreplayable` instead of a replay that differs from the first
 * answer. Pass a codec of your own (superjson, say) to store such values.
 */
export const jsonCodec: OutcomeCodec<unknown> = {
  // `undefined` (a procedure returning nothing) has no JSON form: store it as ''.
  serialize: (value) => (value === undefined ? '' : JSON.stringify(value, faithfully)),
  deserialize: (body) => (body === '' ? undefined : JSON.parse(body)),
  serializeError: () => undefined,
  deserializeError: (body) => new Error(body),
};

/** A JSON.stringify replacer that throws where the JSON text would not read back as the value. */
function faithfully(this: unknown, key: string, value: unknown): unknown {
  // `value` is what toJSON() returned; the holder still has the value itself.
  const original = (this as Record<string, unknown>)[key];
  if (typeof original === 'object' && original !== null) {
    const proto = Object.getPrototypeOf(original) as object | null;
    if (proto !== Object.prototype && proto !== null && !Array.isArray(original)) {
      const kind = (proto as { constructor?: { name?: string } }).constructor?.name || 'object';
      throw new TypeError(
        `A ${kind} has no faithful JSON form (it would be replayed as ${kind === 'Date' ? 'a string' : 'a plain object'}).`,
      );
    }
  } else if (
    typeof value === 'number' ? !Number.isFinite(value) : typeof value === 'function' || typeof value === 'symbol'
  ) {
    throw new TypeError(`A ${typeof value === 'number' ? String(value) : typeof value} has no JSON form.`);
  } else if (value === undefined && Array.isArray(this)) {
    throw new TypeError('An undefined array item would be replayed as null.');
  }
  return value;
}
