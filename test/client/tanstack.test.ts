/**
 * TanStack Query's own retries and resumed mutations, through idempotencyLink,
 * against a real tRPC HTTP server on the memory store, a real TCP proxy that
 * drops responses, and TanStack's real QueryClient and persister (query-core,
 * query-persist-client-core, query-async-storage-persister) over a storage
 * with React Native AsyncStorage's interface.
 */
import { createAsyncStoragePersister } from '@tanstack/query-async-storage-persister';
import { MutationObserver, onlineManager, QueryClient } from '@tanstack/query-core';
import { persistQueryClientRestore, persistQueryClientSave } from '@tanstack/query-persist-client-core';
import { afterEach, describe, expect, it } from 'vitest';
import {
  IDEMPOTENCY_FIELD,
  isKeyExpiredError,
  isRetryableError,
  readIdempotencyKey,
  resumeMutations,
  shouldPersistMutation,
  withIdempotencyKey,
} from '../../src/client.js';
import { memoryStore } from '../../src/index.js';
import { createIdempotentClient, type PaymentsServer, startPaymentsServer, UUID_V4, until } from '../helpers/client.js';
import { startDropProxy } from '../helpers/drop-proxy.js';
import { gate, rejectionOf } from '../helpers/trpc.js';

const closing: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(closing.splice(0).map((c) => c.close()));
});

async function serve(): Promise<PaymentsServer> {
  const server = await startPaymentsServer(memoryStore());
  closing.push(server);
  return server;
}
const keysSeen = (server: PaymentsServer) => server.requests.map((r) => r.headers['idempotency-key']);

/** A storage with AsyncStorage's interface (getItem, setItem, removeItem, each a promise), in memory: what a reload keeps. */
function memoryStorage() {
  const items = new Map<string, string>();
  return {
    items,
    getItem: async (name: string) => items.get(name) ?? null,
    setItem: async (name: string, value: string) => void items.set(name, value),
    removeItem: async (name: string) => void items.delete(name),
  };
}

describe('TanStack Query retries through idempotencyLink', () => {
  // The link's own retries are off (maxAttempts 1): every retry here is TanStack's, a new tRPC operation.
  it('without a carried key, each TanStack retry is a new operation with a new UUID: the procedure runs once per attempt', async () => {
    const server = await serve();
    const proxy = await startDropProxy({ targetUrl: server.url, drop: 2 });
    closing.push(proxy);
    const { trpc } = createIdempotentClient(server, { url: proxy.url, link: { maxAttempts: 1 } });
    const queryClient = new QueryClient();
    const pay = new MutationObserver(queryClient, {
      mutationFn: (input: { amount: number }) => trpc.pay.mutate(input),
      retry: 2,
      retryDelay: 0,
    });

    await pay.mutate({ amount: 700 });

    const keys = keysSeen(server);
    expect(keys).toHaveLength(3);
    for (const key of keys) expect(key).toMatch(UUID_V4);
    expect(new Set(keys).size).toBe(3); // three keys: the server cannot tell the attempts are one payment
    expect(server.runs('pay')).toHaveLength(3); // charged three times
    expect(proxy.dropped).toBe(2);
  });

  it('with withIdempotencyKey, every TanStack retry sends the key made at the call: the procedure runs once, the last attempt gets the replay', async () => {
    const server = await serve();
    const proxy = await startDropProxy({ targetUrl: server.url, drop: 2 });
    closing.push(proxy);
    const { trpc } = createIdempotentClient(server, { url: proxy.url, link: { maxAttempts: 1 } });
    const queryClient = new QueryClient();
    const pay = new MutationObserver(queryClient, {
      mutationFn: (input: { amount: number }) => trpc.pay.mutate(input),
      retry: (failures, error) => failures < 3 && isRetryableError(error),
      retryDelay: 0,
    });

    const variables = withIdempotencyKey({ amount: 700 });
    const charge = await pay.mutate(variables);

    const { key } = readIdempotencyKey(variables)!;
    expect(key).toMatch(UUID_V4);
    expect(keysSeen(server)).toEqual([key, key, key]);
    expect(server.runs('pay')).toEqual([{ path: 'pay', input: { amount: 700 } }]);
    expect(charge.amount).toBe(700);
    // the field never reaches the server: the input it fingerprints is the caller's
    expect(server.requests.every((r) => !r.url.includes(encodeURIComponent(IDEMPOTENCY_FIELD)))).toBe(true);
  });

  it('a mutation made offline waits, paused, and is sent with its key once the network is back', async () => {
    const server = await serve();
    const { trpc } = createIdempotentClient(server, { link: { maxAttempts: 1 } });
    const queryClient = new QueryClient();
    queryClient.mount(); // resumes paused mutations when onlineManager says online
    onlineManager.setOnline(false);
    try {
      const pay = new MutationObserver(queryClient, {
        mutationFn: (input: { amount: number }) => trpc.pay.mutate(input),
      });
      const variables = withIdempotencyKey({ amount: 400 });
      const paid = pay.mutate(variables);
      await until(() => pay.getCurrentResult().isPaused);
      expect(server.requests).toHaveLength(0);
      onlineManager.setOnline(true);
      expect(await paid).toMatchObject({ amount: 400 });
      expect(keysSeen(server)).toEqual([readIdempotencyKey(variables)!.key]);
    } finally {
      onlineManager.setOnline(true);
      queryClient.unmount();
    }
  });

  it('a mutation in flight when the page unloads is persisted with its key and, restored in a new QueryClient, sent again with it', async () => {
    const server = await serve();
    const { trpc } = createIdempotentClient(server, { link: { maxAttempts: 1 } });
    const storage = memoryStorage();
    const persister = createAsyncStoragePersister({ storage, throttleTime: 0 });
    const dehydrateOptions = { shouldDehydrateMutation: shouldPersistMutation };
    const mutationFn = (input: { amount: number }) => trpc.pay.mutate(input);

    // the first page: the payment reaches the server, whose answer is held, and the page goes away
    const release = gate();
    server.holdPayments(release.opened);
    const first = new QueryClient();
    first.setMutationDefaults(['pay'], { mutationFn });
    const variables = withIdempotencyKey({ amount: 900 });
    void new MutationObserver<unknown, Error, { amount: number }>(first, { mutationKey: ['pay'] })
      .mutate(variables)
      .catch(() => {});
    await until(() => server.requests.length === 1);
    await persistQueryClientSave({ queryClient: first, persister, dehydrateOptions });
    await until(() => storage.items.has('REACT_QUERY_OFFLINE_CACHE')); // the persister writes on a timer
    expect(JSON.parse(storage.items.get('REACT_QUERY_OFFLINE_CACHE')!).clientState.mutations).toHaveLength(1);
    first.clear();
    release.open();
    await until(() => server.runs('pay').length === 1);

    // the next page: restores the persisted mutation and resumes it
    const next = new QueryClient();
    next.setMutationDefaults(['pay'], { mutationFn });
    await persistQueryClientRestore({ queryClient: next, persister });
    const [restored] = next.getMutationCache().getAll();
    expect(restored!.state).toMatchObject({ status: 'pending', isPaused: false });
    await resumeMutations(next);

    const { key } = readIdempotencyKey(variables)!;
    expect(keysSeen(server)).toEqual([key, key]);
    expect(server.runs('pay')).toHaveLength(1);
    expect(restored!.state.status).toBe('success');
    expect(restored!.state.data).toMatchObject({ amount: 900 });
  });

  it('persists what TanStack persists by default and pending calls with a key and a mutationKey, no other pending call', async () => {
    const server = await serve();
    const { trpc } = createIdempotentClient(server, { link: { maxAttempts: 1 } });
    const release = gate();
    server.holdPayments(release.opened);
    const queryClient = new QueryClient();
    const observe = (mutationKey?: string[]) =>
      new MutationObserver(queryClient, {
        mutationKey,
        mutationFn: (input: object) => trpc.pay.mutate(input as never),
      });
    void observe(['pay'])
      .mutate(withIdempotencyKey({ amount: 1 }))
      .catch(() => {});
    void observe(['pay'])
      .mutate({ amount: 2 })
      .catch(() => {}); // no key: sent again it could charge twice
    void observe()
      .mutate(withIdempotencyKey({ amount: 3 }))
      .catch(() => {}); // no mutationKey: no mutationFn after a reload
    await until(() => server.requests.length === 3);
    const persisted = queryClient
      .getMutationCache()
      .getAll()
      .filter(shouldPersistMutation)
      .map((m) => (m.state.variables as { amount: number }).amount);
    expect(persisted).toEqual([1]);
    release.open();
    await until(() =>
      queryClient
        .getMutationCache()
        .getAll()
        .every((m) => m.state.status === 'success'),
    );
    expect(queryClient.getMutationCache().getAll().filter(shouldPersistMutation)).toEqual([]);
  });

  it('a carried key older than maxKeyAgeMs is not sent: the call fails with IdempotencyKeyExpiredError, never retried', async () => {
    const server = await serve();
    let now = 1_000_000;
    const { trpc } = createIdempotentClient(server, { link: { maxKeyAgeMs: 60_000, now: () => now } });
    const variables = withIdempotencyKey({ amount: 300 }, { now: () => now });
    now += 60_001;
    const queryClient = new QueryClient();
    let attempts = 0;
    const pay = new MutationObserver(queryClient, {
      mutationFn: (input: { amount: number }) => {
        attempts++;
        return trpc.pay.mutate(input);
      },
      retry: (failures, error) => failures < 3 && isRetryableError(error),
      retryDelay: 0,
    });

    const error = await rejectionOf(pay.mutate(variables));

    expect(isKeyExpiredError(error)).toBe(true);
    expect(isRetryableError(error)).toBe(false);
    expect(error.message).toContain('more than 60000 ms ago (maxKeyAgeMs)');
    expect(attempts).toBe(1);
    expect(server.requests).toHaveLength(0);
    // at the limit it is still sent
    now -= 1;
    await trpc.pay.mutate(variables);
    expect(keysSeen(server)).toEqual([readIdempotencyKey(variables)!.key]);
  });

  it('refuses a key given both in the input and in the context, and a malformed key field, before sending anything', async () => {
    const server = await serve();
    const { trpc } = createIdempotentClient(server);
    const both = await rejectionOf(
      trpc.pay.mutate(withIdempotencyKey({ amount: 5 }), { context: { idempotencyKey: 'k-1' } }),
    );
    expect(both.message).toContain('pay got a key in its input (withIdempotencyKey) and one in context.idempotencyKey');
    const malformed = await rejectionOf(trpc.pay.mutate({ amount: 5, [IDEMPOTENCY_FIELD]: 'k-1' } as never));
    expect(malformed.message).toContain('is not { key, createdAt }. Make it with withIdempotencyKey(input).');
    expect(server.requests).toHaveLength(0);
    expect(() => withIdempotencyKey('x' as never)).toThrow(
      'withIdempotencyKey: the input is a string; a key travels in an object input',
    );
    const keyed = withIdempotencyKey({ amount: 5 }, { key: 'order-77' });
    expect(withIdempotencyKey(keyed)).toBe(keyed); // an input that has its key keeps it
    expect(() => withIdempotencyKey({ amount: 5 }, { key: 'bad key\n' })).toThrow(
      'options.key is an invalid idempotency key',
    );
  });
});
