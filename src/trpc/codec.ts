import { getTRPCErrorFromUnknown, type TRPCCombinedDataTransformer, TRPCError } from '@trpc/server';
import { getHTTPStatusCodeFromError } from '@trpc/server/http';
import type { OutcomeCodec } from '../core/codec.js';

/**
 * 4xx statuses that release the key instead of being stored: they describe
 * the moment (timeout, conflict, rate limit, client gone), not the operation.
 */
export const RELEASED_CLIENT_STATUSES: ReadonlySet<number> = new Set([408, 409, 429, 499]);

interface StoredError {
  code: TRPCError['code'];
  message: string;
}

/**
 * Stores results through the router's data transformer, so a replay is what
 * the first call returned (with superjson: the same Date, BigInt or Map).
 * A `TRPCError` with a 4xx status is stored and replayed as the same error;
 * any other failure releases the key.
 */
export function trpcCodec(transformer: TRPCCombinedDataTransformer | undefined): OutcomeCodec<unknown> {
  const output = transformer?.output;
  return {
    serialize(value) {
      const wire = output === undefined ? value : output.serialize(value);
      return wire === undefined ? '' : JSON.stringify(wire);
    },
    deserialize(body) {
      if (body === '') return undefined;
      const wire: unknown = JSON.parse(body);
      return output === undefined ? wire : output.deserialize(wire);
    },
    serializeError(error) {
      const trpcError = getTRPCErrorFromUnknown(error);
      const status = getHTTPStatusCodeFromError(trpcError);
      if (status < 400 || status >= 500 || RELEASED_CLIENT_STATUSES.has(status)) return undefined;
      const stored: StoredError = { code: trpcError.code, message: trpcError.message };
      return JSON.stringify(stored);
    },
    deserializeError(body) {
      const stored = JSON.parse(body) as StoredError;
      return new TRPCError({ code: stored.code, message: stored.message });
    },
  };
}
