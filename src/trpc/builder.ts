import { configError, describeValue } from '../core/options.js';
import { createIdempotencyEngine } from '../default-engine.js';
import { checkOptions, procedureOptions, type WithIdempotencyOptions } from './options.js';
import { outputParsersOf } from './output.js';
import { type AdapterConfig, idempotentResolver } from './request.js';
import { trpcCodec } from './transformer-codec.js';
import { routerTransformer } from './transformer-shim.js';

/**
 * A procedure builder, by shape: `TRPCProcedureBuilder`'s number of type
 * parameters changed within tRPC 11 (8 in 11.19, 9 later), so naming it
 * would tie these declarations to one version.
 */
interface AnyBuilder {
  _def: { procedure?: boolean; meta?: unknown; middlewares?: unknown };
  mutation(resolver: (opts: any) => any): any;
}

/** The context a resolver of `B` gets, after its middlewares. */
type ContextOf<B> = B extends { mutation(resolver: (opts: infer O) => any): any }
  ? O extends { ctx: infer C }
    ? C
    : never
  : never;

/**
 * Makes every mutation built from `base` idempotent. Chain `.input()`,
 * `.use()` and `.meta()` in any order: the check always runs last, right
 * before the resolver, so it sees the parsed input and the context your
 * middlewares built. Queries and subscriptions are left untouched.
 *
 * @example
 * export const idempotentProcedure = withIdempotency(authedProcedure, {
 *   store: redisStore({ client: redis }),
 *   scope: ({ ctx }) => ctx.user.id,
 * });
 * pay: idempotentProcedure.input(z.object({ amount: z.number() })).mutation(({ input }) => charge(input)),
 */
export function withIdempotency<TBuilder extends AnyBuilder>(
  base: TBuilder,
  options: WithIdempotencyOptions<ContextOf<TBuilder>>,
): TBuilder {
  // initialized config
  if (!isBuilder(base)) {
    throw configError(
      'withIdempotency',
      `the first argument must be a tRPC procedure builder, such as t.procedure or a procedure built from it, got ${describeValue(base)}.`,
    );
  }
  // JavaScript callers may leave the options out: they learn what scope to pass.
  checkOptions(options === undefined ? {} : options);
  const engine = options.engine ?? createIdempotencyEngine(options);
  const adapter: AdapterConfig = {
    engine,
    header: (options.header ?? 'Idempotency-Key').toLowerCase(),
    headerLabel: options.header ?? 'Idempotency-Key',
    replayedHeader: options.replayedHeader ?? 'Idempotent-Replayed',
    getKey: options.getKey,
    scope: options.scope === 'global' ? undefined : options.scope,
    codec: trpcCodec(routerTransformer(base._def, options.transformer)),
  };
  const defaultRequired = options.required ?? true;

  // initialized per procedure, when `.mutation()` is called
  function mutation(target: AnyBuilder, resolver: (opts: any) => unknown) {
    const overrides = procedureOptions((target._def.meta as { idempotency?: unknown } | undefined)?.idempotency);
    if (overrides === false) return target.mutation(resolver);
    const policy = overrides === undefined ? engine.defaults : engine.policy(overrides, 'meta.idempotency');
    const required = overrides?.required ?? defaultRequired;
    return target.mutation(
      idempotentResolver(adapter, { policy, required, outputs: outputParsersOf(target._def) }, resolver),
    );
  }

  // Every builder method returns a wrapped builder, and `.mutation()` wraps the
  // resolver with the check, so chaining order does not matter.
  function wrap(builder: AnyBuilder): AnyBuilder {
    return new Proxy(builder, {
      get(target, prop, receiver) {
        if (prop === 'mutation') return (resolver: (opts: any) => unknown) => mutation(target, resolver);
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function' || prop === 'query' || prop === 'subscription') return value;
        return (...args: unknown[]) => {
          const out = (value as (...a: unknown[]) => unknown).apply(target, args);
          return isBuilder(out) ? wrap(out) : out;
        };
      },
    });
  }

  return wrap(base) as TBuilder;
}

function isBuilder(value: unknown): value is AnyBuilder {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as AnyBuilder).mutation === 'function' &&
    (value as AnyBuilder)._def?.procedure === true
  );
}
