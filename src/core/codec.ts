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
 */
export const jsonCodec: OutcomeCodec<unknown> = {
  // `undefined` (a procedure returning nothing) has no JSON form: store it as ''.
  serialize: (value) => (value === undefined ? '' : JSON.stringify(value)),
  deserialize: (body) => (body === '' ? undefined : JSON.parse(body)),
  serializeError: () => undefined,
  deserializeError: (body) => new Error(body),
};
