// The `transformer` option, for @trpc/server 11.19 to 11.21. From 11.22 a
// builder carries its root config (`_def.config`), and the transformer is read
// from there. When the peer range starts at 11.22, delete this file and the
// `transformer` option and DataTransformerOption (options.ts, src/index.ts):
// the builder's transformer is then `base._def.config.transformer`.

import type { TRPCCombinedDataTransformer } from '@trpc/server';

import { configError, describeValue } from '../core/options.js';
import type { DataTransformerOption } from './options.js';
import { isIdentity } from './transformer-codec.js';

/**
 * The transformer results are stored through: the builder's, or, before
 * 11.22, where nothing a builder or a middleware sees names the router's
 * transformer, the one the caller gives. Guessing would be worse than
 * failing: a router with superjson whose results were stored as plain JSON
 * replays a Date as a string and a BigInt as an error, without a word.
 */
export function routerTransformer(
  def: object,
  given: DataTransformerOption | null | undefined,
): TRPCCombinedDataTransformer | undefined {
  const config = (def as { config?: { transformer?: TRPCCombinedDataTransformer } }).config;
  const own = config?.transformer;
  if (given === undefined) {
    if (config === undefined) {
      throw configError(
        'withIdempotency',
        'this @trpc/server (before 11.22) does not tell a procedure builder which data transformer the router uses, ' +
          'and replays must go through it. Pass the one given to initTRPC.create(): `transformer: superjson`, or `transformer: null` if the router has none.',
      );
    }
    return own;
  }
  const combined = given === null ? undefined : combine(given);
  // initTRPC keeps the transformer it was given as `output` (or the pair as is): the same object, or not the router's.
  if (
    own !== undefined &&
    combined !== undefined &&
    own.output !== combined.output &&
    own.output.serialize !== combined.output.serialize
  ) {
    throw configError(
      'withIdempotency',
      'transformer is not the one the router was created with (initTRPC.create({ transformer })). Pass the same one, or leave the option out (this @trpc/server reads it from the builder).',
    );
  }
  if (own !== undefined && combined === undefined && !isIdentity(own)) {
    throw configError(
      'withIdempotency',
      'transformer is null, but the router was created with a data transformer. Leave the option out (this @trpc/server reads it from the builder), or pass that transformer.',
    );
  }
  return combined ?? own;
}

function combine(given: DataTransformerOption): TRPCCombinedDataTransformer {
  const pair = given as Partial<TRPCCombinedDataTransformer>;
  if (isTransformer(pair.input) && isTransformer(pair.output)) return given as TRPCCombinedDataTransformer;
  if (isTransformer(given)) return { input: given, output: given };
  throw configError(
    'withIdempotency',
    `transformer must be a data transformer, such as superjson (an object with serialize and deserialize, or an { input, output } pair), or null, got ${describeValue(given)}.`,
  );
}

/** superjson's default export is a class with static methods: a function, not an object. */
function isTransformer(value: unknown): value is TRPCCombinedDataTransformer['output'] {
  const t = value as { serialize?: unknown; deserialize?: unknown } | null | undefined;
  return (
    (typeof t === 'object' || typeof t === 'function') &&
    t !== null &&
    typeof t.serialize === 'function' &&
    typeof t.deserialize === 'function'
  );
}
