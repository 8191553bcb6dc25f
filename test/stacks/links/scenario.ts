/**
 * Runs inside a temporary project that has one tRPC version installed (see
 * ../links.test.ts), so everything here resolves that version's packages and
 * the packed trpc-idempotency. It is compiled with `tsc` against that version
 * first, so a type that changed between tRPC versions fails the run too.
 *
 * The server is shaped like create-t3-app's: the fetch adapter, a context of
 * `{ headers }` only (no request, no response headers), superjson, and an
 * error formatter of its own that knows nothing of this library. Every client
 * link tRPC ships is driven against it, with that formatter and with
 * `idempotencyErrorFormatter`. It prints one JSON report on stdout.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  createTRPCClient,
  httpBatchLink,
  httpBatchStreamLink,
  httpLink,
  httpSubscriptionLink,
  loggerLink,
  splitLink,
  TRPCClientError,
  type TRPCLink,
} from '@trpc/client';
import { initTRPC } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { EventSource } from 'eventsource';
import superjson from 'superjson';
import { IdempotencyConfigError, idempotencyErrorFormatter, memoryStore, withIdempotency } from 'trpc-idempotency';
import { getHttpStatus, getIdempotencyReason, idempotencyHeaders, idempotencyLink } from 'trpc-idempotency/client';
import { z } from 'zod';

type Formatter = 't3' | 'library';

const runs = new Map<string, number>();
let chargeIds = 0;

function buildApp(formatter: Formatter, transformerOption: 'given' | 'left out') {
  // t3's context: the headers, nothing else.
  const createTRPCContext = async (opts: { headers: Headers }) => ({ ...opts });
  const t = initTRPC.context<typeof createTRPCContext>().create({
    transformer: superjson,
    errorFormatter:
      formatter === 'library'
        ? idempotencyErrorFormatter
        : ({ shape }) => ({ ...shape, data: { ...shape.data, zodError: null } }),
  });
  const idempotentProcedure = withIdempotency(t.procedure, {
    scope: 'global',
    store: memoryStore(),
    ...(transformerOption === 'given' ? { transformer: superjson } : {}),
  });
  const router = t.router({
    pay: idempotentProcedure
      .input(z.object({ amount: z.number().int().positive(), tag: z.string() }))
      .mutation(async ({ input }) => {
        runs.set(input.tag, (runs.get(input.tag) ?? 0) + 1);
        await new Promise((resolve) => setTimeout(resolve, 150));
        return {
          chargeId: ++chargeIds,
          amount: input.amount,
          createdAt: new Date(),
          cents: BigInt(input.amount) * 100n,
        };
      }),
    ticks: t.procedure.subscription(async function* () {
      for (let i = 1; i <= 3; i++) yield i;
    }),
  });
  return { router, createTRPCContext };
}

type App = ReturnType<typeof buildApp>;

/** Node http in front of `fetchRequestHandler`, the way Next.js calls a route handler. */
async function serve(app: App) {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (typeof value === 'string') headers.set(name, value);
        else if (Array.isArray(value)) for (const v of value) headers.append(name, v);
      }
      const request = new Request(`http://localhost${req.url ?? '/'}`, {
        method: req.method,
        headers,
        body: req.method === 'GET' || req.method === 'HEAD' ? undefined : Buffer.concat(chunks),
      });
      const response = await fetchRequestHandler({
        endpoint: '/api/trpc',
        req: request,
        router: app.router,
        // create-t3-app's route: `createContext: () => createTRPCContext({ headers: req.headers })`
        createContext: () => app.createTRPCContext({ headers: request.headers }),
      });
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body !== null) {
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk);
      }
      res.end();
    })().catch((error: unknown) => {
      res.destroy(error as Error);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/trpc`;
  return { url, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

type LinkName = 'httpLink' | 'httpBatchLink' | 'httpBatchStreamLink' | 'splitLink+httpSubscriptionLink';

interface Seen {
  /** response headers of every HTTP answer */
  replayedHeaders: number;
  requests: number;
}

/**
 * The client the docs give for each link: loggerLink first, idempotencyLink
 * next, the terminating link last with `headers: idempotencyHeaders()`.
 * `fetch` counts requests, reads replay headers, and can drop one answer.
 */
function makeClient(url: string, link: LinkName, seen: Seen, drop: { next: boolean }) {
  const fetchSpy: typeof fetch = async (input, init) => {
    seen.requests++;
    const response = await fetch(input, init);
    for (const [name] of response.headers) if (name.startsWith('idempotent-replayed')) seen.replayedHeaders++;
    if (drop.next && String(input).includes('pay')) {
      drop.next = false;
      await response.arrayBuffer(); // the server ran the call; the answer is lost on the way back
      throw new TypeError('fetch failed: connection reset (dropped by the test)');
    }
    return response;
  };
  const opts = { url, transformer: superjson, fetch: fetchSpy, headers: idempotencyHeaders() };
  const terminating: TRPCLink<App['router']> =
    link === 'httpLink'
      ? httpLink(opts)
      : link === 'httpBatchLink'
        ? httpBatchLink(opts)
        : link === 'httpBatchStreamLink'
          ? httpBatchStreamLink(opts)
          : splitLink({
              condition: (op) => op.type === 'subscription',
              // Node 20 has no EventSource: the `eventsource` package stands in for the browser's.
              true: httpSubscriptionLink({ url, transformer: superjson, EventSource }),
              false: httpBatchStreamLink(opts),
            });
  return createTRPCClient<App['router']>({
    links: [loggerLink({ enabled: () => false }), idempotencyLink({ baseDelayMs: 50 }), terminating],
  });
}

type Charge = { chargeId: number; amount: number; createdAt: Date; cents: bigint };

function describe(value: unknown): string {
  const charge = value as Charge;
  return `${charge.chargeId}:${charge.createdAt instanceof Date ? 'Date' : typeof charge.createdAt}:${typeof charge.cents}`;
}

function failure(error: unknown) {
  return {
    status: getHttpStatus(error),
    reason: getIdempotencyReason(error) ?? null,
    isClientError: error instanceof TRPCClientError,
  };
}

async function scenario(link: LinkName, formatter: Formatter) {
  const app = buildApp(formatter, 'given');
  const server = await serve(app);
  const seen: Seen = { replayedHeaders: 0, requests: 0 };
  const drop = { next: false };
  const client = makeClient(server.url, link, seen, drop);
  const tag = (name: string) => `${link}/${formatter}/${name}`;
  const pay = (name: string, key: string, amount = 100) =>
    client.pay.mutate({ amount, tag: tag(name) }, { context: { idempotencyKey: key } });
  const key = (name: string) => `${tag(name)}-${Math.random().toString(36).slice(2)}`;
  try {
    // Three mutations at once: one batch on the batch links.
    const k = [key('a'), key('b'), key('c')];
    const first = await Promise.all([pay('a', k[0]!), pay('b', k[1]!), pay('c', k[2]!)]);
    const batchRequests = seen.requests;
    // The same keys again: every call replays, nothing runs.
    const again = await Promise.all([pay('a', k[0]!), pay('b', k[1]!), pay('c', k[2]!)]);
    // A double click: two calls with one key while the first runs. The second meets 409 and is retried.
    const dk = key('double');
    const double = await Promise.allSettled([pay('double', dk), pay('double', dk)]);
    // A dropped answer: the call ran, the client saw a network failure and retried with the same key.
    drop.next = true;
    const dropped = await pay('dropped', key('dropped')).then(describe, (e: unknown) => failure(e));
    // A mixed batch: a replay, a fresh key, a used key with another payload.
    const fresh = key('fresh');
    const mixed = await Promise.allSettled([pay('a', k[0]!), pay('fresh', fresh), pay('b', k[1]!, 999)]);
    const ticks: number[] = [];
    if (link === 'splitLink+httpSubscriptionLink') {
      await new Promise<void>((resolve, reject) => {
        const sub = client.ticks.subscribe(undefined, {
          onData: (n) => ticks.push(n),
          onError: reject,
          onComplete: () => {
            sub.unsubscribe();
            resolve();
          },
        });
        setTimeout(() => {
          sub.unsubscribe();
          resolve();
        }, 3000);
      });
    }
    return {
      link,
      formatter,
      runs: Object.fromEntries(['a', 'b', 'c', 'double', 'dropped', 'fresh'].map((n) => [n, runs.get(tag(n)) ?? 0])),
      first: first.map(describe),
      again: again.map(describe),
      batchRequests,
      double: double.map((r) => (r.status === 'fulfilled' ? describe(r.value) : failure(r.reason))),
      dropped,
      mixed: mixed.map((r) => (r.status === 'fulfilled' ? describe(r.value) : failure(r.reason))),
      replayedHeaders: seen.replayedHeaders,
      ticks,
    };
  } finally {
    await server.close();
  }
}

async function main() {
  const links: LinkName[] = ['httpLink', 'httpBatchLink', 'httpBatchStreamLink', 'splitLink+httpSubscriptionLink'];
  const results = [];
  for (const link of links)
    for (const formatter of ['t3', 'library'] as const) results.push(await scenario(link, formatter));
  // Without the transformer option: read from the builder (@trpc/server >= 11.22), or refused at creation.
  let leftOut: string;
  try {
    buildApp('t3', 'left out');
    leftOut = 'accepted';
  } catch (error) {
    leftOut = error instanceof IdempotencyConfigError ? `refused: ${error.message}` : `threw: ${String(error)}`;
  }
  process.stdout.write(`${JSON.stringify({ results, leftOut })}\n`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
