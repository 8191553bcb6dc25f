import { AsyncContext } from '#platform';
import type { Attempt } from './attempt.js';
import { IdempotencyConfigError, IdempotencyError } from './idempotency-error.js';
import type { RunStorage } from './platform/types.js';
import type { EngineRuntime } from './runtime.js';
import { signalGetter } from './signal-getter.js';
import { stepKeyOf } from './step-key.js';
import { StepLog } from './steps.js';
import type { RecordedStep } from './store.js';
import type { IdempotencySteps } from './types.js';

/** What a protected operation can reach from anywhere in its run. */
export interface ProtectedRun extends IdempotencySteps {
  /** Aborts when the claim is lost. */
  readonly signal: AbortSignal;
  /** The store's transaction in transactional mode. */
  readonly transaction: unknown;
}

// One instance per process, even if two copies of this package are loaded:
// the adapter of one copy and the store of another must see the same run.
const key = Symbol.for('trpc-idempotency.call');
const registry = globalThis as unknown as Record<symbol, RunStorage<ProtectedRun> | undefined>;

/**
 * Where the runtime has no AsyncLocalStorage (a Cloudflare Worker without nodejs_compat, a browser):
 * no run is ever current, and what needs one is refused rather than run without it. What is lost
 * is the transactional mode (a store that finds the run's transaction from deep in the operation:
 * a transaction held open across awaits cannot be found without an async context).
 */
class NoAsyncContext implements RunStorage<ProtectedRun> {
  getStore(): undefined {
    return undefined;
  }
  run<R>(): R {
    throw new IdempotencyConfigError(
      'This store runs the operation inside its transaction (transactional mode), which needs AsyncLocalStorage, ' +
        'and this runtime has none. On Cloudflare Workers, enable the nodejs_compat compatibility flag.',
    );
  }
  exit<R>(fn: () => R): R {
    return fn();
  }
}

/**
 * The protected run in progress, for code deep in the operation (the Drizzle
 * store finds its transaction here). Not passed through tRPC's context:
 * `next({ ctx })` would copy the context into a plain object, and a context
 * built as a class instance would lose its methods.
 */
export const currentRun: RunStorage<ProtectedRun> = (registry[key] ??=
  AsyncContext === undefined ? new NoAsyncContext() : new AsyncContext<ProtectedRun>());

type LeaseLike = { readonly signal: AbortSignal; wasLost(): boolean; fenced(): void };

const withSourceSignal = signalGetter((source: LeaseLike) => source.signal);

/**
 * The run of an operation under a claim. Its signal is read through from the
 * lease; its step log is made only for an operation that uses steps (or finds
 * some recorded).
 */
export class ClaimedRun implements ProtectedRun {
  // Declared, then assigned in the constructor: a class field is a defineProperty per instance, slower than assignment.
  declare readonly signal: AbortSignal;
  declare readonly transaction: unknown;
  /** The step log, if the run used steps or found some recorded. */
  declare steps: StepLog | undefined;
  declare private readonly runtime: EngineRuntime;
  declare private readonly attempt: Attempt;
  declare private readonly lease: LeaseLike;

  constructor(
    runtime: EngineRuntime,
    attempt: Attempt,
    lease: LeaseLike,
    transaction: unknown,
    recorded: readonly RecordedStep[] | undefined,
  ) {
    this.runtime = runtime;
    this.attempt = attempt;
    this.lease = lease;
    this.transaction = transaction;
    this.steps = recorded === undefined ? undefined : new StepLog(runtime, attempt, lease, recorded);
    withSourceSignal(this, lease);
  }

  // Getters returning bound functions: an operation destructures them (`async ({ step }) => ...`).
  get step(): IdempotencySteps['step'] {
    return (name, fn) => this.#step(name, fn);
  }

  get stepKey(): IdempotencySteps['stepKey'] {
    return stepKeyOf(this.attempt.id);
  }

  #step<T>(name: string, fn: (step: { key: string }) => T | Promise<T>): Promise<T> {
    if (this.steps === undefined) {
      const { store } = this.runtime;
      if (!store.savesSteps) {
        return Promise.reject(
          new IdempotencyError(
            'step_misuse',
            `step(${JSON.stringify(name)}): this store (${store.name}) cannot record steps. ` +
              'Use memoryStore(), redisStore() or drizzleStore(), or a store that implements saveStep.',
          ),
        );
      }
      this.steps = new StepLog(this.runtime, this.attempt, this.lease, undefined);
    }
    return this.steps.step(name, fn);
  }
}

/**
 * Runs `fn` as the current run. On Node 20, entering an AsyncLocalStorage
 * slows every promise in the process, so a run enters {@link currentRun} only
 * where code deep in the operation must reach it: a transaction, or a run
 * nested in another one (so it never sees the outer run's transaction).
 */
export function runAsCurrent<T>(run: ProtectedRun, fn: () => T): T {
  if (run.transaction === undefined && currentRun.getStore() === undefined) return fn();
  return currentRun.run(run, fn);
}
