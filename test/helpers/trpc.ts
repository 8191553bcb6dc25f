import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  createTRPCClient,
  httpBatchLink,
  httpLink,
  type Operation,
  type TRPCClientError,
  type TRPCLink,
} from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';
import { type CreateHTTPContextOptions, createHTTPServer } from '@trpc/server/adapters/standalone';

export interface TestServer {
  url: string;
  close(): Promise<void>;
}

/** A real tRPC HTTP server on a free port; the context carries `req`, `res` and whatever `extra` adds. */
export async function startServer<TRouter extends AnyTRPCRouter>(
  router: TRouter,
  extra: (opts: CreateHTTPContextOptions) => object = () => ({}),
): Promise<TestServer> {
  return listen(
    createHTTPServer({
      router,
      createContext: (opts) => ({ req: opts.req, res: opts.res, ...extra(opts) }),
    }),
  );
}

/** Listens on a free port of loopback; `close` also cuts open connections. */
export async function listen(server: Server): Promise<TestServer> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Response headers seen by a client, in order. */
export type Seen = Headers[];

interface ClientOptions {
  batch?: boolean;
  transformer?: any;
  seen?: Seen;
}

/**
 * A real tRPC client. The key of each call comes from its context:
 * `mutate(input, { context: { key } })`, sent as `Idempotency-Key`, or as
 * `Idempotency-Key-<i>` per call of a batch. `context.headers` adds raw headers.
 */
export function createClient<TRouter extends AnyTRPCRouter>(url: string, options: ClientOptions = {}) {
  const seen = options.seen;
  const fetchAndRecord: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    seen?.push(response.headers);
    return response;
  };
  const link: TRPCLink<TRouter> = options.batch
    ? httpBatchLink({
        url,
        transformer: options.transformer,
        fetch: fetchAndRecord,
        headers: ({ opList }: { opList: readonly Operation[] }) => {
          const headers: Record<string, string> = {};
          opList.forEach((op, i) => {
            if (typeof op.context.key === 'string') headers[`Idempotency-Key-${i}`] = op.context.key;
            Object.assign(headers, op.context.headers ?? {});
          });
          return headers;
        },
      } as any)
    : httpLink({
        url,
        transformer: options.transformer,
        fetch: fetchAndRecord,
        headers: ({ op }: { op: Operation }) => ({
          ...(typeof op.context.key === 'string' ? { 'Idempotency-Key': op.context.key } : {}),
          ...((op.context.headers as Record<string, string>) ?? {}),
        }),
      } as any);
  return createTRPCClient<TRouter>({ links: [link] });
}

/** The rejection of `promise`, failing the test if it resolves. */
export async function rejectionOf(promise: Promise<unknown>): Promise<TRPCClientError<AnyTRPCRouter>> {
  try {
    await promise;
  } catch (error) {
    return error as TRPCClientError<AnyTRPCRouter>;
  }
  throw new Error('expected the call to fail, but it succeeded');
}

/** A promise and the function that resolves it, to hold a procedure until the test lets it go. */
export function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

export { sleep } from './redis.js';
