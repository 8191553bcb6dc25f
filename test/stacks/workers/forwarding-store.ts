/**
 * A store inside workerd as the contract suites in Node drive it: each call is sent to a Worker
 * (`POST <base>/store/<method>`: store-worker.ts, which makes it on `durableObjectStore`; d1-worker.ts,
 * on `drizzleStore` over D1). Nothing is decided here: the answer is the one workerd gave.
 */
import type { IdempotencyStore, StoreAdmin } from '../../../src/core.js';

export interface ForwardingStore<N extends string = 'durable-object'> extends IdempotencyStore {
  /** The name of the store in workerd (the admin contract reads it: the SQL stores track no waiters). */
  readonly name: N;
  readonly admin: StoreAdmin;
  /** The rows the shards keep, expired ones not swept yet included (the Durable Object store). */
  rows(): Promise<number>;
  /** `purgeExpired()` of the Drizzle store. */
  purgeExpired(): Promise<number>;
}

export function forwardingStore<N extends string = 'durable-object'>(
  base: string,
  name: N = 'durable-object' as N,
): ForwardingStore<N> {
  async function send<T>(method: string, input: unknown): Promise<T> {
    const response = await fetch(`${base}/store/${method}`, { method: 'POST', body: JSON.stringify(input) });
    const text = await response.text();
    const reply = JSON.parse(text) as { answer?: T; error?: string };
    if (!response.ok || reply.error !== undefined) throw new Error(`${method}: ${reply.error ?? text}`);
    return reply.answer as T;
  }
  const forward =
    <I, A>(method: string) =>
    (input: I) =>
      send<A>(method, input);
  return {
    name,
    claim: forward('claim'),
    complete: forward('complete'),
    release: forward('release'),
    extend: forward('extend'),
    saveStep: forward('saveStep'),
    rows: () => send('rows', {}),
    purgeExpired: () => send('purgeExpired', {}),
    admin: { inspect: forward('inspect'), list: forward('list'), forget: forward('forget') },
  };
}
