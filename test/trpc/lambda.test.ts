/**
 * The AWS Lambda adapter (`awsLambdaRequestHandler`) fed constructed events:
 * API Gateway REST APIs (payload 1.0), HTTP APIs (payload 2.0) and Lambda
 * function URLs (payload 2.0 too), each built from the header lines a client
 * sent, the way AWS builds them:
 *
 * - 1.0 keeps header names as the client wrote them; `headers` holds the
 *   last value of a repeated header, `multiValueHeaders` every value;
 * - 2.0 lower-cases the names and joins a repeated header's values with ",".
 *
 * The adapter gives `createContext` the event, not a request, and has no
 * response object: the context and the `responseMeta` bridge are docs/lambda.md's
 * `context.ts` block, loaded from the page and run here. The events are typed
 * here (no @types/aws-lambda) with the fields the adapter reads.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initTRPC } from '@trpc/server';
import { awsLambdaRequestHandler } from '@trpc/server/adapters/aws-lambda';
import type { TRPCRequestInfo } from '@trpc/server/http';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { blocksOf } from '../../scripts/check-docs.js';
import {
  type IdempotencyEvent,
  type IdempotencyMeta,
  idempotencyErrorFormatter,
  memoryStore,
  withIdempotency,
} from '../../src/index.js';

/** What docs/lambda.md's context.ts exports. */
interface Recipe {
  createContext(opts: { event: LambdaEvent; info: TRPCRequestInfo }): RecipeContext;
  responseMeta(opts: { ctx?: { resHeaders?: Headers } }): { headers?: Headers };
}
type RecipeContext = {
  headers: Record<string, string | string[] | undefined>;
  info: TRPCRequestInfo;
  resHeaders: Headers;
};

const recipeDir = mkdtempSync(join(tmpdir(), 'lambda-recipe-'));
afterAll(() => rmSync(recipeDir, { recursive: true, force: true }));

/** docs/lambda.md's context.ts, as the page shows it (its imports are types only). */
async function loadRecipe(): Promise<Recipe> {
  const page = 'docs/lambda.md';
  const text = readFileSync(new URL(`../../${page}`, import.meta.url), 'utf8');
  const block = blocksOf(page, text).find((b) => b.title === 'context.ts');
  if (block === undefined) throw new Error(`${page} has no context.ts block`);
  const file = join(recipeDir, 'context.ts');
  writeFileSync(file, block.code);
  return (await import(file)) as Recipe;
}
const { createContext, responseMeta } = await loadRecipe();

type HeaderLines = [name: string, value: string][];

/** An API Gateway REST API event (payload 1.0), behind a `/trpc/{proxy+}` resource. */
interface RestApiEvent {
  resource: string;
  path: string;
  httpMethod: string;
  headers: Record<string, string | undefined>;
  multiValueHeaders: Record<string, string[] | undefined>;
  queryStringParameters: Record<string, string | undefined> | null;
  multiValueQueryStringParameters: Record<string, string[] | undefined> | null;
  pathParameters: Record<string, string | undefined> | null;
  stageVariables: null;
  requestContext: { domainName: string; httpMethod: string; path: string; stage: string; requestId: string };
  body: string | null;
  isBase64Encoded: boolean;
}

/** An HTTP API or function URL event (payload 2.0). */
interface HttpApiEvent {
  version: '2.0';
  routeKey: string;
  rawPath: string;
  rawQueryString: string;
  headers: Record<string, string | undefined>;
  pathParameters?: Record<string, string | undefined>;
  requestContext: {
    domainName: string;
    requestId: string;
    http: { method: string; path: string; protocol: string; sourceIp: string; userAgent: string };
  };
  body?: string;
  isBase64Encoded: boolean;
}

type LambdaEvent = RestApiEvent | HttpApiEvent;

interface LambdaResult {
  statusCode: number;
  headers?: Record<string, string>;
  body: string;
}

/** A call: the procedure path (`pay`, or `pay,pay` with `batch`), the header lines sent, the body. */
interface Call {
  path: string;
  lines: HeaderLines;
  body: string;
  batch?: boolean;
}

function restApiEvent({ path, lines, body, batch }: Call): RestApiEvent {
  const headers: Record<string, string> = { 'Content-Type': 'application/json' };
  const multiValueHeaders: Record<string, string[]> = { 'Content-Type': ['application/json'] };
  for (const [name, value] of lines) {
    headers[name] = value; // the last value wins
    (multiValueHeaders[name] ??= []).push(value);
  }
  const query = batch ? { batch: '1' } : null;
  return {
    resource: '/trpc/{proxy+}',
    path: `/trpc/${path}`,
    httpMethod: 'POST',
    headers,
    multiValueHeaders,
    queryStringParameters: query,
    multiValueQueryStringParameters: batch ? { batch: ['1'] } : null,
    pathParameters: { proxy: path },
    stageVariables: null,
    requestContext: {
      domainName: 'abc123.execute-api.eu-west-1.amazonaws.com',
      httpMethod: 'POST',
      path: `/prod/trpc/${path}`,
      stage: 'prod',
      requestId: randomUUID(),
    },
    body,
    isBase64Encoded: false,
  };
}

/** Payload 2.0: names lower-cased, a repeated header's values joined with ",". */
function headers2(lines: HeaderLines): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  for (const [name, value] of lines) {
    const lower = name.toLowerCase();
    headers[lower] = headers[lower] === undefined ? value : `${headers[lower]},${value}`;
  }
  return headers;
}

function httpApiEvent({ path, lines, body, batch }: Call): HttpApiEvent {
  return {
    version: '2.0',
    routeKey: 'POST /trpc/{proxy+}',
    rawPath: `/trpc/${path}`,
    rawQueryString: batch ? 'batch=1' : '',
    headers: headers2(lines),
    pathParameters: { proxy: path },
    requestContext: {
      domainName: 'abc123.execute-api.eu-west-1.amazonaws.com',
      requestId: randomUUID(),
      http: { method: 'POST', path: `/trpc/${path}`, protocol: 'HTTP/1.1', sourceIp: '192.0.2.1', userAgent: 'test' },
    },
    body,
    isBase64Encoded: false,
  };
}

function functionUrlEvent({ path, lines, body, batch }: Call): HttpApiEvent {
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: `/${path}`,
    rawQueryString: batch ? 'batch=1' : '',
    headers: headers2(lines),
    requestContext: {
      domainName: 'abcdefgh.lambda-url.eu-west-1.on.aws',
      requestId: randomUUID(),
      http: { method: 'POST', path: `/${path}`, protocol: 'HTTP/1.1', sourceIp: '192.0.2.1', userAgent: 'test' },
    },
    body: Buffer.from(body).toString('base64'), // function URLs send a JSON body base64-encoded
    isBase64Encoded: true,
  };
}

const t = initTRPC
  .context<{ headers: RecipeContext['headers']; info?: TRPCRequestInfo; resHeaders?: Headers }>()
  .meta<IdempotencyMeta>()
  .create({ errorFormatter: idempotencyErrorFormatter });

function app() {
  let runs = 0;
  let hold: { entered: () => void; release: Promise<void> } | undefined;
  const events: IdempotencyEvent[] = [];
  const idempotent = withIdempotency(t.procedure, {
    scope: 'global',
    store: memoryStore(),
    onEvent: (e) => events.push(e),
  });
  const router = t.router({
    pay: idempotent.input(z.object({ amount: z.number() })).mutation(async ({ input }) => {
      const held = hold;
      held?.entered();
      await held?.release;
      return { run: ++runs, amount: input.amount };
    }),
  });
  /** Makes the next run wait until `release()`; `entered` settles once it runs. */
  function holdNextRun() {
    let entered!: () => void;
    let release!: () => void;
    const started = new Promise<void>((resolve) => (entered = resolve));
    hold = { entered, release: new Promise<void>((resolve) => (release = resolve)) };
    return {
      started,
      release: () => {
        hold = undefined;
        release();
      },
    };
  }
  return { router, events, holdNextRun, runs: () => runs };
}

interface Answer {
  status: number;
  headers: Record<string, string>;
  result?: { run: number; amount: number };
  reason?: string;
  message?: string;
}

function answerOf(result: LambdaResult): Answer {
  const body = JSON.parse(result.body) as {
    result?: { data: Answer['result'] };
    error?: { message: string; data?: { idempotency?: { reason: string } } };
  };
  return {
    status: result.statusCode,
    headers: result.headers ?? {},
    result: body.result?.data,
    reason: body.error?.data?.idempotency?.reason,
    message: body.error?.message,
  };
}

describe.each([
  ['API Gateway REST API (payload 1.0)', restApiEvent],
  ['API Gateway HTTP API (payload 2.0)', httpApiEvent],
  ['Lambda function URL', functionUrlEvent],
] as const)('the AWS Lambda adapter, %s', (_name, eventOf) => {
  const { router, events, holdNextRun, runs } = app();
  const handler = awsLambdaRequestHandler({
    router,
    createContext,
    responseMeta,
  });

  async function pay(lines: HeaderLines, amount = 1): Promise<Answer> {
    const event = eventOf({ path: 'pay', lines, body: JSON.stringify({ amount }) });
    return answerOf((await handler(event, {})) as LambdaResult);
  }

  it('runs a first call, replays its retry with Idempotent-Replayed: true, refuses another payload with 422', async () => {
    const before = runs();
    const key = randomUUID();
    const first = await pay([['Idempotency-Key', key]], 3);
    const again = await pay([['Idempotency-Key', key]], 3);
    expect(first).toMatchObject({ status: 200, result: { run: before + 1, amount: 3 } });
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(again).toMatchObject({ status: 200, result: first.result });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['idempotent-replayed-0']).toBeUndefined(); // info tells the layer it is no batch

    const other = await pay([['Idempotency-Key', key]], 4);
    expect(other).toMatchObject({ status: 422, reason: 'payload_mismatch' });
    expect(runs()).toBe(before + 1);
  });

  it('answers a concurrent duplicate 409 with Retry-After, then replays the first answer', async () => {
    const before = runs();
    const key = randomUUID();
    const held = holdNextRun();
    const first = pay([['Idempotency-Key', key]], 5);
    let duplicate: Answer;
    try {
      await Promise.race([held.started, first]); // the first run holds the key, or failed without running
      duplicate = await pay([['Idempotency-Key', key]], 5);
    } finally {
      held.release();
    }
    expect(duplicate).toMatchObject({ status: 409, reason: 'in_progress' });
    expect(duplicate.headers['retry-after']).toMatch(/^\d+$/);
    expect(await first).toMatchObject({ status: 200, result: { run: before + 1, amount: 5 } });
    expect(await pay([['Idempotency-Key', key]], 5)).toMatchObject({
      status: 200,
      headers: { 'idempotent-replayed': 'true' },
      result: { run: before + 1 },
    });
    expect(runs()).toBe(before + 1);
  });

  it.each(['Idempotency-Key', 'IDEMPOTENCY-KEY', 'idempotency-key', 'idempotency-Key'])(
    'finds the key header written %s',
    async (name) => {
      const before = runs();
      const key = randomUUID();
      const first = await pay([[name, key]], 6);
      const again = await pay([[name, key]], 6);
      expect(first).toMatchObject({ status: 200, result: { run: before + 1 } });
      expect(again).toMatchObject({ status: 200, headers: { 'idempotent-replayed': 'true' }, result: first.result });
      expect(runs()).toBe(before + 1);
    },
  );

  it('answers 400 key_missing without a key, and runs nothing', async () => {
    const before = runs();
    expect(await pay([])).toMatchObject({ status: 400, reason: 'key_missing' });
    expect(runs()).toBe(before);
  });

  it.each([
    ['two keys', [randomUUID(), randomUUID()]],
    ['the same key twice', ['k-1', 'k-1']],
  ])('refuses a key header sent twice (%s) with 400 key_invalid, and runs nothing', async (_label, [a, b]) => {
    const before = runs();
    const answer = await pay([
      ['Idempotency-Key', a!],
      ['Idempotency-Key', b!],
    ]);
    expect(answer).toMatchObject({ status: 400, reason: 'key_invalid' });
    expect(answer.message).toMatch(/Idempotency-Key/);
    expect(runs()).toBe(before);
    expect(events.at(-1)).toMatchObject({ result: 'rejected', reason: 'key_invalid' });
  });

  it('refuses a key header sent twice under two spellings with 400 key_invalid', async () => {
    const before = runs();
    const answer = await pay([
      ['Idempotency-Key', randomUUID()],
      ['idempotency-key', randomUUID()],
    ]);
    expect(answer).toMatchObject({ status: 400, reason: 'key_invalid' });
    expect(runs()).toBe(before);
  });

  it('reads Idempotency-Key-<i> per call of a batch and marks each replayed call', async () => {
    const before = runs();
    const [k0, k1] = [randomUUID(), randomUUID()];
    const batch = (lines: HeaderLines) =>
      handler(
        eventOf({
          path: 'pay,pay',
          batch: true,
          lines,
          body: JSON.stringify({ 0: { amount: 7 }, 1: { amount: 8 } }),
        }),
        {},
      ) as Promise<LambdaResult>;
    const first = await batch([
      ['Idempotency-Key-0', k0],
      ['idempotency-key-1', k1],
    ]);
    expect(first.statusCode).toBe(200);
    expect(runs()).toBe(before + 2);
    const again = await batch([
      ['Idempotency-Key-0', k0],
      ['Idempotency-Key-1', k1],
    ]);
    expect(again.statusCode).toBe(200);
    expect(again.headers).toMatchObject({ 'idempotent-replayed-0': 'true', 'idempotent-replayed-1': 'true' });
    expect(again.headers?.['idempotent-replayed']).toBeUndefined();
    expect(JSON.parse(again.body)).toEqual(JSON.parse(first.body));
    expect(runs()).toBe(before + 2);
  });
});

describe('the AWS Lambda adapter with the context { headers: event.headers } (payload 1.0)', () => {
  const { router, runs } = app();
  const handler = awsLambdaRequestHandler({
    router,
    createContext: ({ event }: { event: RestApiEvent }) => ({ headers: event.headers }),
  });
  const pay = async (lines: HeaderLines) =>
    answerOf((await handler(restApiEvent({ path: 'pay', lines, body: '{"amount":1}' }), {})) as LambdaResult);

  it('finds a key sent as Idempotency-Key, and replays its retry (without a marker: no resHeaders)', async () => {
    const key = randomUUID();
    const first = await pay([['Idempotency-Key', key]]);
    const again = await pay([['Idempotency-Key', key]]);
    expect(first).toMatchObject({ status: 200, result: { run: 1 } });
    expect(again).toMatchObject({ status: 200, result: { run: 1 } });
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(runs()).toBe(1);
  });
});
