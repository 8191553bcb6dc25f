/**
 * The Worker through which d1.suite.ts drives the SQLite store of `trpc-idempotency/drizzle` on D1 from
 * Node, as store-worker.ts does the Durable Object store: each call (`POST /store/<method>`, JSON) is
 * made on `drizzleStore({ db: drizzle(env.DB) })` inside workerd; `transaction` runs the store's
 * transactional mode once, and answers what came of it.
 */
import { drizzle } from 'drizzle-orm/d1';
import { drizzleStore } from 'trpc-idempotency/drizzle';

interface Env {
  DB: Parameters<typeof drizzle>[0];
}

type Methods = Record<string, (input: unknown) => Promise<unknown>>;
const METHODS = ['claim', 'complete', 'release', 'extend', 'saveStep', 'purgeExpired'];
const ADMIN = ['inspect', 'list', 'forget'];

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    if (request.method === 'GET') return new Response('d1-worker');
    const [, prefix, method = ''] = new URL(request.url).pathname.split('/');
    if (prefix !== 'store' || request.method !== 'POST') return new Response('POST /store/<method>', { status: 404 });
    const store = drizzleStore({ db: drizzle(env.DB) });
    const input = await request.json();
    try {
      if (method === 'transaction') {
        return Response.json({ answer: await store.transaction!(async () => 'committed') });
      }
      const target = ADMIN.includes(method)
        ? (store.admin as unknown as Methods)
        : METHODS.includes(method)
          ? (store as unknown as Methods)
          : undefined;
      if (target === undefined) return new Response(`no store method ${method}`, { status: 404 });
      const answer = await target[method]!(method === 'purgeExpired' ? undefined : input);
      return Response.json({ answer: answer ?? null });
    } catch (error) {
      return Response.json({ error: `${(error as Error).name}: ${(error as Error).message}` }, { status: 500 });
    }
  },
};
