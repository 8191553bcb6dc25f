/**
 * The Durable Object store as the contract suites in Node drive it: each call is sent to
 * store-worker.ts inside workerd (`POST <base>/store/<method>`), which makes it on
 * `durableObjectStore` there. Nothing is decided here: the answer is the one workerd gave.
 */
import type { IdempotencyStore, StoreAdmin } from '../../../src/core.js';

export interface ForwardingStore extends IdempotencyStore {
  readonly name: 'durable-object';
  readonly admin: StoreAdmin;
  /** The rows the shards keep, expired ones not swept yet included. */
  rows(): Promise<number>;
}

export function forwardingStore(base: string): ForwardingStore {
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
    name: 'durable-object',
    claim: forward('claim'),
    complete: forward('complete'),
    release: forward('release'),
    extend: forward('extend'),
    saveStep: forward('saveStep'),
    rows: () => send('rows', {}),
    admin: { inspect: forward('inspect'), list: forward('list'), forget: forward('forget') },
  };
}
