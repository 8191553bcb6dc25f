import { IdempotencyError } from '../core/idempotency-error.js';
import { signalGetter } from '../core/signal-getter.js';
import type { IdempotencySteps, RunOptions } from '../core/types.js';

// The resolver's `signal` is the claim's, read through (see signalGetter) from
// the run that `steps(opts)` finds.
const withRunSignal = signalGetter((run: RunOptions) => run.signal);

/** The resolver's options with the claim's signal in place of the request's. */
export function withClaimSignal(opts: Record<string | symbol, unknown>, run: RunOptions): unknown {
  const { signal: _, ...rest } = opts;
  return withRunSignal(rest, run);
}

/**
 * The steps of a protected mutation, from the options its resolver receives:
 * `step(name, fn)` runs `fn` once per key and records its result, so that a
 * retry after a crash resumes after the last completed step; `stepKey(name)`
 * is the key to send downstream. See {@link IdempotencySteps}.
 *
 * @example
 * pay: idempotentProcedure.input(payment).mutation(async (opts) => {
 *   const { step } = steps(opts);
 *   const charge = await step('charge', ({ key }) => provider.charge(opts.input, { idempotencyKey: key }));
 *   return { chargeId: charge.id };
 * }),
 * @throws {IdempotencyError} `step_misuse` when `opts` are not those of a protected mutation's resolver.
 */
export function steps(opts: object): IdempotencySteps {
  const run = withRunSignal.sourceOf(opts);
  if (run === undefined) {
    throw new IdempotencyError(
      'step_misuse',
      "steps(opts) needs the options a protected mutation's resolver receives, as in `.mutation(async (opts) => { const { step } = steps(opts); ... })`. " +
        'These options are not: the procedure is not built with withIdempotency, is a query, runs without a key (required: false), or the options were rebuilt from their fields (pass the object the resolver received).',
    );
  }
  return run;
}
