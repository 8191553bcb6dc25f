import { IdempotencyKeyError } from '../core/errors.js';

/**
 * Reading the key from, and writing headers to, the HTTP request behind a tRPC
 * call. tRPC gives middlewares only the context, so the request must be in it:
 * `createContext: ({ req, res }) => ({ req, res })` with the standalone,
 * node-http and Express adapters, `({ req, resHeaders })` with the fetch
 * adapter. `getKey` replaces all of this for other transports.
 */

type HeaderBag = { get(name: string): string | null } | Record<string, string | string[] | undefined>;

interface RequestLike {
  headers?: HeaderBag;
  url?: string;
}

interface ContextLike {
  req?: RequestLike;
  request?: RequestLike;
  headers?: HeaderBag;
  res?: {
    setHeader?: (name: string, value: string) => unknown;
    header?: (name: string, value: string) => unknown;
    headersSent?: boolean;
  };
  resHeaders?: { set(name: string, value: string): void };
}

function requestOf(ctx: unknown): RequestLike | undefined {
  const c = ctx as ContextLike | undefined;
  return c?.req ?? c?.request;
}

/** The headers of the request behind `ctx`, or undefined if the context carries none. */
function headersOf(ctx: unknown): HeaderBag | undefined {
  return requestOf(ctx)?.headers ?? (ctx as ContextLike | undefined)?.headers;
}

export function hasRequestHeaders(ctx: unknown): boolean {
  return headersOf(ctx) !== undefined;
}

/**
 * One header's value; `name` must be lower case (`label` is how messages
 * name it). A header sent more than once (which Node would join with ", "
 * into what looks like one key) is refused.
 */
export function readHeader(ctx: unknown, name: string, label = name): string | undefined {
  const headers = headersOf(ctx);
  if (headers === undefined) return undefined;
  if (typeof headers.get === 'function') return (headers.get as (n: string) => string | null)(name) ?? undefined;
  const value = (headers as Record<string, string | string[] | undefined>)[name];
  // Node joins repeated values with ", ": a value without a comma was sent once, and
  // headersDistinct (built for every header on first read) need not be consulted.
  if (typeof value !== 'string' || value.includes(',')) {
    const distinct = (requestOf(ctx) as { headersDistinct?: Record<string, string[] | undefined> } | undefined)?.headersDistinct?.[name];
    if (distinct !== undefined && distinct.length > 1) {
      throw new IdempotencyKeyError('key_invalid', `The ${label} header was sent ${distinct.length} times; send it once per call.`);
    }
  }
  return Array.isArray(value) ? value.join(', ') : value;
}

/** True when the context comes from tRPC's WebSocket adapter (`res` is the socket). */
export function isWebSocket(ctx: unknown): boolean {
  const res = (ctx as { res?: { send?: unknown; ping?: unknown; setHeader?: unknown } } | undefined)?.res;
  return res !== undefined && res !== null && typeof res.ping === 'function' && typeof res.send === 'function' && res.setHeader === undefined;
}

/**
 * The key of a call. A single call reads `<header>` only. Call `i` of a tRPC
 * batch reads `<header>-<i>`, and call 0 may use the plain header instead (a
 * batch of one sent by a client that knows no batches), so one key can never
 * apply to two calls; call 0 with two different keys is refused.
 */
export function readKeyHeader(ctx: unknown, header: string, batchIndex: number, label = header): string | undefined {
  if (!isBatchRequest(ctx)) return readHeader(ctx, header, label);
  const indexed = readHeader(ctx, `${header}-${batchIndex}`, `${label}-${batchIndex}`);
  if (batchIndex !== 0) return indexed;
  const plain = readHeader(ctx, header, label);
  if (indexed !== undefined && plain !== undefined && indexed !== plain) {
    throw new IdempotencyKeyError('key_invalid', `Call 0 of this batch has two different keys, in ${label} and ${label}-0. Send one of them.`);
  }
  return indexed ?? plain;
}

const batchParam = /[?&]batch=(?:1|true)(?:&|$)/;

/** True when the request is a tRPC batch (`?batch=1`), even a batch of one call. */
export function isBatchRequest(ctx: unknown): boolean {
  const url = requestOf(ctx)?.url;
  return typeof url === 'string' && batchParam.test(url);
}

/** Sets a response header if the context gives a way to (fetch `resHeaders`, node `res`, Fastify reply). */
export function setResponseHeader(ctx: unknown, name: string, value: string): void {
  const c = ctx as ContextLike | undefined;
  if (c === undefined || c === null) return;
  if (c.resHeaders !== undefined && typeof c.resHeaders.set === 'function') {
    c.resHeaders.set(name, value);
  } else if (c.res !== undefined && typeof c.res.setHeader === 'function') {
    // Streaming responses flush headers early; a late header is dropped, not an error.
    if (c.res.headersSent !== true) c.res.setHeader(name, value);
  } else if (c.res !== undefined && typeof c.res.header === 'function') {
    c.res.header(name, value);
  }
}
