import { IdempotencyError } from '../core/idempotency-error.js';

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
 * name it). Header names are case-insensitive: a fetch `Headers` looks them
 * up so itself, and a plain object is searched for every spelling of `name`
 * (API Gateway's REST API events keep the names as the client wrote them).
 *
 * A key header holds one key. Sent more than once, its values reach us
 * joined with ", " (by Node, and by a fetch `Headers`; with "," by API
 * Gateway's HTTP APIs and function URLs), as an array (Node's
 * `headersDistinct`, API Gateway's `multiValueHeaders`), or under two
 * spellings of its name in a plain object. An array of more than one value,
 * or two spellings, are refused; a fetch `Headers` cannot tell a joined list
 * from one value with a comma in it. So the rule, the same on every adapter:
 * an unquoted value containing a comma is a list and is refused; a key that
 * really contains a comma is sent as a quoted Structured Field string
 * (`"a,b"`), which `parseIdempotencyKey` unquotes (and where a list of quoted
 * strings, `"a", "b"`, fails as an unescaped quote).
 */
export function readHeader(ctx: unknown, name: string, label = name): string | undefined {
  const request = requestOf(ctx) as (RequestLike & NodeRequestLike) | undefined;
  const headers = request?.headers ?? (ctx as ContextLike | undefined)?.headers;
  if (headers === undefined) return undefined;
  let value: string | undefined;
  if (typeof headers.get === 'function') {
    value = (headers.get as (n: string) => string | null)(name) ?? undefined;
  } else {
    const plain = headers as PlainHeaders;
    // Node lower-cases the names in its headers object (a repeated header's spellings are one name there).
    const raw = Array.isArray(request?.rawHeaders) ? plain[name] : anySpelling(plain, name, label);
    if (Array.isArray(raw)) {
      if (raw.length > 1) throw sentTimes(label, raw.length);
      value = raw[0];
    } else {
      value = typeof raw === 'string' ? raw : undefined;
    }
    // Node joins repeated values with ", ": a value without a comma was sent once, and
    // headersDistinct (built for every header on first read) is left alone.
    if (value?.includes(',')) {
      const distinct = request?.headersDistinct?.[name];
      if (distinct !== undefined && distinct.length > 1) throw sentTimes(label, distinct.length);
    }
  }
  if (value !== undefined && value.charCodeAt(0) !== 0x22 && value.includes(',')) {
    throw new IdempotencyError(
      'key_invalid',
      `The ${label} header holds more than one value (it was sent more than once, or its value contains a comma): ` +
        'send it once per call, with one key. A key that contains a comma must be sent as a quoted string, such as "a,b".',
    );
  }
  return value;
}

type PlainHeaders = Record<string, string | string[] | undefined>;

interface NodeRequestLike {
  rawHeaders?: unknown;
  headersDistinct?: Record<string, string[] | undefined>;
}

/**
 * The value of `name` (lower case) in a plain headers object, under any
 * spelling of it. A spelling holding nothing (`undefined`, which API
 * Gateway's event types allow, or an empty list) is absent; two spellings
 * holding values are the header sent more than once. Only names of the same
 * length are compared, so the scan costs little more than a property read per
 * header.
 */
function anySpelling(headers: PlainHeaders, name: string, label: string): string | string[] | undefined {
  let found = Object.hasOwn(headers, name) ? headers[name] : undefined;
  let values = valueCount(found);
  let spellings = values === 0 ? 0 : 1;
  for (const key in headers) {
    if (key.length !== name.length || key === name || !sameName(key, name) || !Object.hasOwn(headers, key)) continue;
    const other = headers[key];
    const count = valueCount(other);
    if (count === 0) continue;
    spellings++;
    values += count;
    found = other;
  }
  if (spellings > 1) throw sentTimes(label, values);
  return values === 0 ? undefined : found;
}

/** Whether `key` spells `lower` (lower case, same length) in any case. Only ASCII letters fold: header names are ASCII. */
function sameName(key: string, lower: string): boolean {
  for (let i = 0; i < key.length; i++) {
    let c = key.charCodeAt(i);
    if (c >= 0x41 && c <= 0x5a) c += 0x20;
    if (c !== lower.charCodeAt(i)) return false;
  }
  return true;
}

function valueCount(value: string | string[] | undefined): number {
  if (value === undefined) return 0;
  return Array.isArray(value) ? value.length : 1;
}

function sentTimes(label: string, times: number): IdempotencyError {
  return new IdempotencyError('key_invalid', `The ${label} header was sent ${times} times; send it once per call.`);
}

/** True when the context comes from tRPC's WebSocket adapter (`res` is the socket). */
export function isWebSocket(ctx: unknown): boolean {
  const res = (ctx as { res?: { send?: unknown; ping?: unknown; setHeader?: unknown } } | undefined)?.res;
  return (
    res !== undefined &&
    res !== null &&
    typeof res.ping === 'function' &&
    typeof res.send === 'function' &&
    res.setHeader === undefined
  );
}

/**
 * The key of a call. A single call reads `<header>` only. Call `i` of a tRPC
 * batch reads `<header>-<i>`, and call 0 may use the plain header instead (a
 * batch of one sent by a client that knows no batches), so one key can never
 * apply to two calls; call 0 with two different keys is refused. `batch` is
 * what {@link batchOf} tells; when it cannot tell (call 0, and a context
 * without the request's URL), call 0 reads either header, as in a batch.
 */
export function readKeyHeader(ctx: unknown, header: string, batchIndex: number, label = header): string | undefined {
  const batch = batchOf(ctx, batchIndex);
  if (batch === false) return readHeader(ctx, header, label);
  const indexed = readHeader(ctx, `${header}-${batchIndex}`, `${label}-${batchIndex}`);
  if (batchIndex !== 0) return indexed;
  const plain = readHeader(ctx, header, label);
  if (indexed !== undefined && plain !== undefined && indexed !== plain) {
    throw new IdempotencyError(
      'key_invalid',
      `Call 0 of this batch has two different keys, in ${label} and ${label}-0. Send one of them.`,
    );
  }
  return indexed ?? plain;
}

const batchParam = /[?&]batch=(?:1|true)(?:&|$)/;

/**
 * Whether a call is part of a tRPC batch (`?batch=1`, even a batch of one):
 * tRPC's own `batchIndex` (above 0 only in a batch), else the request's URL,
 * else the `info` tRPC gives `createContext`, when the context carries it.
 * `undefined` when nothing tells: call 0 of a context that carries only the
 * headers (create-t3-app's `{ headers }`).
 */
export function batchOf(ctx: unknown, batchIndex: number): boolean | undefined {
  if (batchIndex > 0) return true;
  const url = requestOf(ctx)?.url;
  if (typeof url === 'string') return batchParam.test(url);
  const info = (ctx as { info?: { isBatchCall?: unknown } } | undefined)?.info;
  return typeof info?.isBatchCall === 'boolean' ? info.isBatchCall : undefined;
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
