import { getTRPCErrorFromUnknown, type TRPCCombinedDataTransformer, TRPCError } from '@trpc/server';
import { getHTTPStatusCodeFromError } from '@trpc/server/http';
import { deserializeFaithfully, serializeFaithfully } from '../core/faithful-json.js';
import type { OutcomeCodec } from '../core/outcome-codec.js';

/**
 * 4xx statuses that release the key instead of being stored: they describe
 * the moment (timeout, conflict, rate limit, client gone), not the operation.
 */
export const RELEASED_CLIENT_STATUSES: ReadonlySet<number> = new Set([408, 409, 429, 499]);

/** Cause fields kept: scalars, strings up to this long (a `reasonCode`, a `declineCode`), not a request's data. */
const MAX_FIELD_CHARS = 1_024;

type Scalar = string | number | boolean | null;

interface StoredError {
  code: TRPCError['code'];
  message: string;
  /** The error's cause: its name, message and own enumerable fields of scalar value. */
  cause?: { name: string; message: string; fields?: Record<string, Scalar> };
}

/**
 * Stores results so that a replay is what the first call returned: through
 * the router's data transformer when it has one (with superjson: the same
 * Date, BigInt or Map), else as JSON that gives back Dates, Maps, Sets,
 * BigInts and undefined as they were (see faithful-json.ts). A `TRPCError`
 * with a 4xx status is stored and replayed as the same error, with the name,
 * message and scalar fields of its cause; any other failure releases the key.
 */
export function trpcCodec(transformer: TRPCCombinedDataTransformer | undefined): OutcomeCodec<unknown> {
  const output = transformer === undefined || isIdentity(transformer) ? undefined : transformer.output;
  const serialize =
    output === undefined
      ? serializeFaithfully
      : (value: unknown) => {
          const wire = output.serialize(value);
          return wire === undefined ? '' : JSON.stringify(wire);
        };
  const deserialize =
    output === undefined
      ? deserializeFaithfully
      : (body: string) => (body === '' ? undefined : output.deserialize(JSON.parse(body)));
  return {
    serialize,
    deserialize,
    serializeError(error) {
      const trpcError = getTRPCErrorFromUnknown(error);
      const status = getHTTPStatusCodeFromError(trpcError);
      if (status < 400 || status >= 500 || RELEASED_CLIENT_STATUSES.has(status)) return undefined;
      const stored: StoredError = { code: trpcError.code, message: trpcError.message };
      const { cause } = trpcError;
      if (cause instanceof Error) {
        stored.cause = { name: cause.name, message: cause.message };
        const fields = fieldsOf(cause);
        if (fields !== undefined) stored.cause.fields = fields;
      }
      return JSON.stringify(stored);
    },
    deserializeError(body) {
      const stored = JSON.parse(body) as StoredError;
      const cause = stored.cause === undefined ? undefined : rebuildCause(stored.cause);
      return new TRPCError({ code: stored.code, message: stored.message, ...(cause === undefined ? {} : { cause }) });
    },
  };
}

/**
 * The own enumerable fields of an error whose values are scalars (strings up
 * to MAX_FIELD_CHARS, finite numbers, booleans, null), or undefined if it has
 * none: what a formatter reads (a `reasonCode`), not what it carries (a
 * request's config and headers, a response body), which would sit in the
 * store for `ttl`.
 */
function fieldsOf(error: Error): Record<string, Scalar> | undefined {
  let fields: Record<string, Scalar> | undefined;
  for (const key of Object.keys(error)) {
    if (key === 'stack' || key === 'message' || key === 'name') continue;
    const value = (error as unknown as Record<string, unknown>)[key];
    const scalar =
      value === null ||
      typeof value === 'boolean' ||
      (typeof value === 'number' && Number.isFinite(value)) ||
      (typeof value === 'string' && value.length <= MAX_FIELD_CHARS);
    if (!scalar) continue;
    fields ??= {};
    Object.defineProperty(fields, key, { value, enumerable: true, writable: true, configurable: true });
  }
  return fields;
}

/** An `Error` with the stored name, message and fields: not the original class, nor its stack. */
function rebuildCause(stored: NonNullable<StoredError['cause']>): Error {
  const cause = new Error(stored.message);
  Object.defineProperty(cause, 'name', { value: stored.name, writable: true, configurable: true, enumerable: false });
  const fields = stored.fields;
  if (typeof fields === 'object' && fields !== null) {
    for (const key of Object.keys(fields)) {
      Object.defineProperty(cause, key, { value: fields[key], writable: true, configurable: true, enumerable: true });
    }
  }
  return cause;
}

/** tRPC's default transformer passes values through untouched. */
export function isIdentity(transformer: TRPCCombinedDataTransformer): boolean {
  const probe = { probe: 1 };
  try {
    return transformer.output.serialize(probe) === probe;
  } catch {
    return false;
  }
}
