import type { HTTPHeaders, Operation } from '@trpc/client';
import { checkHeaderName } from '../core/options.js';

/** What `httpLink` (`{ op }`) and the batch links (`{ opList }`) pass to their `headers` function. */
export type HeadersArgument = { op: Operation } | { opList: readonly Operation[] };

/** Options of {@link idempotencyHeaders}. */
export interface IdempotencyHeadersOptions<TArgument extends HeadersArgument> {
  /**
   * Your own headers: an object, or a function of the link's argument. The key
   * headers are added to them (and replace any of the same name).
   * @default none
   */
  headers?: HTTPHeaders | ((opts: TArgument) => HTTPHeaders | Promise<HTTPHeaders>);
  /**
   * The request header; must match the server's `header` option.
   * @default 'Idempotency-Key'
   */
  header?: string;
}

/**
 * The `headers` option of the terminating HTTP link: it sends the key that
 * `idempotencyLink` put in each mutation's context, as `Idempotency-Key` for
 * `httpLink`, and as `Idempotency-Key-<i>` for call `i` of a batch
 * (`httpBatchLink`, `httpBatchStreamLink`), the wire format the server reads.
 *
 * @example
 * httpBatchLink({ url, headers: idempotencyHeaders({ headers: () => ({ authorization: token() }) }) })
 */
export function idempotencyHeaders<TArgument extends HeadersArgument = HeadersArgument>(
  options: IdempotencyHeadersOptions<TArgument> = {},
): (opts: TArgument) => Promise<Record<string, string | string[] | undefined>> {
  // initialized config
  const { headers } = options;
  const header = options.header ?? 'Idempotency-Key';
  checkHeaderName(header, 'header', 'idempotencyHeaders', " matching the server's");

  // initialized for request
  return async function writeIdempotencyHeaders(opts) {
    const own = typeof headers === 'function' ? await headers(opts) : headers;
    const keyed: Record<string, string> = {};
    if ('opList' in opts) {
      opts.opList.forEach((op, i) => {
        const key = keyOf(op);
        if (key !== undefined) keyed[`${header}-${i}`] = headerValue(key);
      });
    } else {
      const key = keyOf(opts.op);
      if (key !== undefined) keyed[header] = headerValue(key);
    }
    return merge(own, keyed);
  };
}

function keyOf(op: Operation): string | undefined {
  const key = op.context.idempotencyKey;
  if (key === undefined || key === null || op.type !== 'mutation') return undefined;
  if (typeof key !== 'string') {
    // A holder reaches this point only if no idempotencyLink resolved it.
    throw new TypeError(
      'trpc-idempotency: context.idempotencyKey is not a string here. Put idempotencyLink() before the terminating link: it turns a key holder into the key of each operation.',
    );
  }
  return key;
}

/**
 * The header's value for `key`: the key itself, or, when the server would
 * read it otherwise (a comma makes a list; a leading quote starts a quoted
 * string), a Structured Field string: `"a,b"`, with `"` and `\` escaped.
 */
function headerValue(key: string): string {
  return key.includes(',') || key.charCodeAt(0) === 0x22 ? `"${key.replace(/["\\]/g, '\\$&')}"` : key;
}

/** `own` then `keyed`; names compare case-insensitively, so a key header is never sent twice. */
function merge(
  own: HTTPHeaders | undefined,
  keyed: Record<string, string>,
): Record<string, string | string[] | undefined> {
  const entries: Array<[string, string | string[] | undefined]> =
    own === undefined
      ? []
      : Symbol.iterator in own
        ? Array.from(own as Iterable<[string, string]>)
        : Object.entries(own);
  const replaced = new Set(Object.keys(keyed).map((name) => name.toLowerCase()));
  const out: Record<string, string | string[] | undefined> = {};
  for (const [name, value] of entries) if (!replaced.has(name.toLowerCase())) out[name] = value;
  return Object.assign(out, keyed);
}
