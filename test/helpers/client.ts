import type { IncomingHttpHeaders } from 'node:http';
import { createTRPCClient, httpBatchLink, httpLink, splitLink, type TRPCLink } from '@trpc/client';
import { TRPCError } from '@trpc/server';
import { z } from 'zod';
import {
  type IdempotencyLinkOptions,
  type IdempotencyRetryEvent,
  idempotencyHeaders,
  idempotencyLink,
} from '../../src/client.js';
import type { IdempotencyStore } from '../../src/index.js';
import { startPayApp } from '../fixtures/pay-app.js';

/** One HTTP request as the server received it. */
export interface ReceivedRequest {
  url: string;
  headers: IncomingHttpHeaders;
  /** performance.now() when its context was created. */
  at: number;
}

export interface PaymentsServerOptions {
  /** Install `idempotencyErrorFormatter` (the reason reaches the client in `data.idempotency`). @default true */
  formatter?: boolean;
  /** Seconds sent in Retry-After. @default 1 */
  retryAfter?: number;
}

/**
 * The pay app (test/fixtures/pay-app.ts) on `store`, with procedures of the client tests beside
 * `pay`, recording every request it receives and every execution of a procedure.
 */
export async function startPaymentsServer(store: IdempotencyStore, options: PaymentsServerOptions = {}) {
  const executions: { path: string; input: unknown }[] = [];
  /** Codes `flaky` throws, one per execution, before it succeeds. */
  const failures: TRPCError['code'][] = [];
  const requests: ReceivedRequest[] = [];

  const app = await startPayApp({
    store,
    retryAfter: options.retryAfter ?? 1,
    formatter: options.formatter !== false,
    onRequest: (req) => requests.push({ url: req.url ?? '', headers: { ...req.headers }, at: performance.now() }),
    procedures: ({ t, idempotent }) => ({
      flaky: idempotent.input(z.object({ n: z.number() })).mutation(({ input }) => {
        executions.push({ path: 'flaky', input });
        const code = failures.shift();
        if (code !== undefined) throw new TRPCError({ code, message: `failure ${code}` });
        return { ok: input.n };
      }),
      refuse: idempotent
        .input(z.object({ code: z.enum(['UNAUTHORIZED', 'FORBIDDEN', 'BAD_REQUEST']) }))
        .mutation(({ input }) => {
          executions.push({ path: 'refuse', input });
          throw new TRPCError({ code: input.code, message: `refused: ${input.code}` });
        }),
      report: idempotent
        .meta({ idempotency: { maxResponseBytes: 100 } })
        .input(z.object({ size: z.number() }))
        .mutation(({ input }) => {
          executions.push({ path: 'report', input });
          return 'x'.repeat(input.size);
        }),
      ping: t.procedure.input(z.object({ n: z.number() })).query(({ input }) => ({ pong: input.n })),
      broken: t.procedure.query(() => {
        executions.push({ path: 'broken', input: undefined });
        throw new TRPCError({ code: 'INTERNAL_SERVER_ERROR' });
      }),
    }),
  });

  return {
    url: app.url,
    close: app.close,
    router: app.router,
    failures,
    requests,
    /** Procedures `pay` started from now on wait for `until`. */
    holdPayments: app.hold,
    /** Executions of one procedure (`pay`'s with its amount as input). */
    runs: (path: string) =>
      path === 'pay'
        ? app.executions.map((e) => ({ path, input: { amount: e.amount } }))
        : executions.filter((e) => e.path === path),
  };
}

export type PaymentsServer = Awaited<ReturnType<typeof startPaymentsServer>>;
export type PaymentsRouter = PaymentsServer['router'];

export interface TestClientOptions {
  /** Where to send requests. @default the server's own URL */
  url?: string;
  /** The terminating link. @default 'http' */
  transport?: 'http' | 'batch' | 'split';
  /** Options of idempotencyLink (fast backoff unless overridden). */
  link?: IdempotencyLinkOptions;
}

/**
 * A real tRPC client with the recommended chain: idempotencyLink, then an
 * HTTP link whose headers come from idempotencyHeaders. Records the retries,
 * the attempts it sends and the response headers it sees.
 */
export function createIdempotentClient(server: PaymentsServer, options: TestClientOptions = {}) {
  const url = options.url ?? server.url;
  const retries: IdempotencyRetryEvent[] = [];
  const responses: Headers[] = [];
  const recordingFetch: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    responses.push(response.headers);
    return response;
  };
  const http = () => httpLink<PaymentsRouter>({ url, fetch: recordingFetch, headers: idempotencyHeaders() });
  const batch = () => httpBatchLink<PaymentsRouter>({ url, fetch: recordingFetch, headers: idempotencyHeaders() });
  const terminating: TRPCLink<PaymentsRouter> =
    options.transport === 'batch'
      ? batch()
      : options.transport === 'split'
        ? splitLink({ condition: (op) => op.context.skipBatch === true, true: http(), false: batch() })
        : http();
  let attempts = 0;
  // counts each attempt as idempotencyLink sends it (an aborted one included: the HTTP link may send nothing)
  const counting: TRPCLink<PaymentsRouter> =
    () =>
    ({ op, next }) => {
      attempts++;
      return next(op);
    };
  const userOnRetry = options.link?.onRetry;
  const trpc = createTRPCClient<PaymentsRouter>({
    links: [
      idempotencyLink({
        baseDelayMs: 20,
        maxDelayMs: 5_000,
        ...options.link,
        onRetry: (event) => {
          retries.push(event);
          userOnRetry?.(event);
        },
      }),
      counting,
      terminating,
    ],
  });
  /** `attempts()`: the calls idempotencyLink has passed on to the HTTP link, each attempt of each mutation. */
  return { trpc, retries, responses, attempts: () => attempts };
}

/** The idempotency key headers of a request, by name. */
export function keyHeaders(request: ReceivedRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (name.startsWith('idempotency-key') && typeof value === 'string') out[name] = value;
  }
  return out;
}

export const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** Resolves once `condition()` holds; fails after `timeoutMs`. */
export async function until(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
