/**
 * The Worker through which workers.test.ts drives the Durable Object store from Node: each store call
 * (`POST /store/<method>` with its input as JSON) is made on `durableObjectStore` here, inside workerd,
 * whose shards (`IdempotencyShard`, SQLite-backed) run the calls; the answer goes back as JSON. Two
 * Workers of the test serve this file, bound to one namespace: two isolates that share the records.
 */
import { durableObjectStore, IdempotencyShard, type ShardNamespace } from 'trpc-idempotency/durable-object';

/** The shard class the test binds: every expired row swept by the alarm at once, so the test sees the sweep. */
export class TestShard extends IdempotencyShard {
  protected override readonly sweepInterval = 0;
}

interface Env {
  IDEMPOTENCY: ShardNamespace;
}

const METHODS = ['claim', 'complete', 'release', 'extend', 'saveStep', 'rows'] as const;
const ADMIN = ['inspect', 'list', 'forget'] as const;

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    if (request.method === 'GET') return new Response('store-worker');
    const [, prefix, method = ''] = new URL(request.url).pathname.split('/');
    if (prefix !== 'store' || request.method !== 'POST') return new Response('POST /store/<method>', { status: 404 });
    // 16 shards: a listing's pages cross shards, and stop at the shards one page may visit
    const store = durableObjectStore({ namespace: env.IDEMPOTENCY, shards: 16 });
    const input = await request.json();
    try {
      const target = (ADMIN as readonly string[]).includes(method)
        ? (store.admin as unknown as Record<string, (input: unknown) => Promise<unknown>>)
        : (METHODS as readonly string[]).includes(method)
          ? (store as unknown as Record<string, (input: unknown) => Promise<unknown>>)
          : undefined;
      if (target === undefined) return new Response(`no store method ${method}`, { status: 404 });
      const answer = await target[method]!(input);
      return Response.json({ answer: answer ?? null });
    } catch (error) {
      return Response.json({ error: `${(error as Error).name}: ${(error as Error).message}` }, { status: 500 });
    }
  },
};
