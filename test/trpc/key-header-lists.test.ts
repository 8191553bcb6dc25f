/**
 * A key header that holds a list: sent more than once (which both Node and a
 * fetch `Headers` join with ", "), or one value with a comma in it. Each
 * adapter is a real HTTP server fed raw bytes, so the repeated header lines
 * reach it exactly as a client or a proxy would send them.
 *
 * The rule, the same for every adapter: an unquoted value containing a comma
 * is a list and is refused with 400 `key_invalid`; a key that really contains
 * a comma is sent as a quoted Structured Field string (`"a,b"`).
 */

import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { type AnyTRPCRouter, initTRPC } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  type IdempotencyEvent,
  type IdempotencyMeta,
  idempotencyErrorFormatter,
  memoryStore,
  withIdempotency,
} from '../../src/index.js';
import { type RawHeader, rawRequest, sendRaw } from '../helpers/raw-http.js';
import { listen, startServer, type TestServer } from '../helpers/trpc.js';

const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });

/**
 * `fetchRequestHandler` behind a Node HTTP server, as Hono's node server and
 * Next.js do: every raw header line is appended to a fetch `Headers`, which
 * joins repeated values with ", ".
 */
async function startFetchServer(router: AnyTRPCRouter): Promise<TestServer> {
  const server = createServer(async (req, res) => {
    const headers = new Headers();
    for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
    const response = await fetchRequestHandler({
      endpoint: '',
      router,
      req: new Request(`http://127.0.0.1${req.url}`, {
        method: req.method,
        headers,
        ...(hasBody ? { body: Buffer.concat(chunks) } : {}),
      }),
      createContext: ({ req: request, resHeaders }) => ({ req: request, resHeaders }),
    });
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  return listen(server);
}

interface Answer {
  status: number;
  replayed: string | undefined;
  result?: { run: number; amount: number };
  reason?: string;
  message?: string;
}

describe.each([
  ['standalone', (router: AnyTRPCRouter) => startServer(router)],
  ['fetch', startFetchServer],
] as const)('a key header holding a list, on the %s adapter', (_adapter, start) => {
  let runs = 0;
  const events: IdempotencyEvent[] = [];
  const idempotent = withIdempotency(t.procedure, {
    scope: 'global',
    store: memoryStore(),
    onEvent: (e) => events.push(e),
  });
  const router = t.router({
    pay: idempotent
      .input(z.object({ amount: z.number() }))
      .mutation(({ input }) => ({ run: ++runs, amount: input.amount })),
    ping: idempotent.mutation(() => ({ run: ++runs, amount: 0 })),
  });
  let server: TestServer;
  let port: number;
  beforeAll(async () => {
    server = await start(router);
    port = Number(new URL(server.url).port);
  });
  afterAll(() => server?.close());

  async function pay(headers: RawHeader[], amount = 1): Promise<Answer> {
    const response = await sendRaw(port, rawRequest({ path: '/pay', headers, body: JSON.stringify({ amount }) }));
    const body = JSON.parse(response.body) as {
      result?: { data: Answer['result'] };
      error?: { message: string; data?: { idempotency?: { reason: string } } };
    };
    return {
      status: response.status,
      replayed: response.headers['idempotent-replayed']?.[0],
      result: body.result?.data,
      reason: body.error?.data?.idempotency?.reason,
      message: body.error?.message,
    };
  }

  it('refuses Idempotency-Key sent twice with 400 key_invalid, and runs nothing', async () => {
    const before = runs;
    const [one, two] = [randomUUID(), randomUUID()];
    const answer = await pay([
      ['Idempotency-Key', one],
      ['Idempotency-Key', two],
    ]);
    expect(answer).toMatchObject({ status: 400, reason: 'key_invalid' });
    expect(answer.message).toMatch(/Idempotency-Key/);
    expect(answer.message).toMatch(/send it once per call/);
    expect(runs).toBe(before);
    expect(events.at(-1)).toMatchObject({ result: 'rejected', reason: 'key_invalid' });
    // nothing was stored under the joined value: sent as one quoted key, it runs now
    const joined = await pay([['Idempotency-Key', `"${one}, ${two}"`]]);
    expect(joined).toMatchObject({ status: 200, replayed: undefined, result: { run: before + 1 } });
  });

  it('refuses the same key sent twice too', async () => {
    const before = runs;
    const key = randomUUID();
    const answer = await pay([
      ['Idempotency-Key', key],
      ['Idempotency-Key', key],
    ]);
    expect(answer).toMatchObject({ status: 400, reason: 'key_invalid' });
    expect(runs).toBe(before);
  });

  it('refuses a quoted key sent twice', async () => {
    const before = runs;
    const answer = await pay([
      ['Idempotency-Key', '"a,b"'],
      ['Idempotency-Key', '"c"'],
    ]);
    expect(answer).toMatchObject({ status: 400, reason: 'key_invalid' });
    expect(runs).toBe(before);
  });

  it.each(['a,b', 'a, b', 'order-17,', ',x'])(
    'refuses the unquoted value %j, saying how to send a key with a comma',
    async (value) => {
      const before = runs;
      const answer = await pay([['Idempotency-Key', value]]);
      expect(answer).toMatchObject({ status: 400, reason: 'key_invalid' });
      expect(answer.message).toMatch(/comma/);
      expect(answer.message).toMatch(/quoted string/);
      expect(runs).toBe(before);
    },
  );

  it('accepts a key with a comma sent as a quoted string, and replays it', async () => {
    const before = runs;
    const key = `"${randomUUID()},${randomUUID()}"`;
    const first = await pay([['Idempotency-Key', key]], 5);
    const again = await pay([['Idempotency-Key', key]], 5);
    expect(first).toMatchObject({ status: 200, replayed: undefined, result: { run: before + 1, amount: 5 } });
    expect(again).toMatchObject({ status: 200, replayed: 'true', result: first.result });
    expect(runs).toBe(before + 1);
  });

  it('refuses a list of quoted strings ("a", "b") as a malformed key', async () => {
    const before = runs;
    const answer = await pay([['Idempotency-Key', '"a", "b"']]);
    expect(answer).toMatchObject({ status: 400, reason: 'key_invalid' });
    expect(runs).toBe(before);
  });

  it('applies the rule to the indexed headers of a batch: the call with a list is refused, the others run', async () => {
    const before = runs;
    const response = await sendRaw(
      port,
      rawRequest({
        path: '/ping,ping,ping?batch=1',
        headers: [
          ['Idempotency-Key-0', randomUUID()],
          ['Idempotency-Key-1', randomUUID()],
          ['Idempotency-Key-1', randomUUID()],
          ['Idempotency-Key-2', 'x,y'],
        ],
        body: '{}',
      }),
    );
    const calls = JSON.parse(response.body) as {
      result?: unknown;
      error?: { message: string; data: { idempotency?: { reason: string } } };
    }[];
    expect(calls[0]!.result).toBeDefined();
    expect(calls[1]!.error?.data.idempotency?.reason).toBe('key_invalid');
    expect(calls[1]!.error?.message).toMatch(/Idempotency-Key-1/);
    expect(calls[2]!.error?.data.idempotency?.reason).toBe('key_invalid');
    expect(calls[2]!.error?.message).toMatch(/Idempotency-Key-2.*comma/);
    expect(runs).toBe(before + 1);
  });
});
