import { utf8Length } from '#platform';
import type { Attempt } from './attempt.js';
import { IdempotencyError, inProgressError, retryable } from './idempotency-error.js';
import { describeValue } from './options.js';
import type { EngineRuntime } from './runtime.js';
import { checkStepName, deriveStepKey, stepKeyOf, stepMisuse } from './step-key.js';
import type { RecordedStep, SaveStepResult } from './store.js';
import type { IdempotencySteps } from './types.js';

/**
 * The `step` event of a step that finished, timed from `started` (the engine clock's `now()` time; a resumed
 * step took none). Neither the clock nor the event is touched when nobody listens.
 */
function reportStep(
  runtime: EngineRuntime,
  attempt: Attempt,
  step: string,
  reason: 'ran' | 'resumed' | 'unprotected',
  started: number | undefined,
): void {
  if (!runtime.observed) return;
  runtime.emit({
    result: 'step',
    name: attempt.name,
    keyHash: attempt.keyHash,
    durationMs: started === undefined ? 0 : runtime.clock.now() - started,
    step,
    reason,
  });
}

const list = (names: readonly string[]) => `[${names.map((n) => JSON.stringify(n)).join(', ')}]`;

/**
 * The steps of one claimed run: those an earlier holder recorded, and those
 * this run has reached. Made only for an attempt that uses steps, or that found
 * steps recorded at its claim.
 */
export class StepLog {
  readonly #recorded: readonly RecordedStep[];
  readonly #reached: string[] = [];
  #running: string | undefined;
  #bytes = 0;
  /** A step was recorded or resumed: the completion deletes the steps. */
  used = false;

  constructor(
    private readonly runtime: EngineRuntime,
    private readonly attempt: Attempt,
    private readonly lease: { wasLost(): boolean; fenced(): void; readonly signal: AbortSignal },
    recorded: readonly RecordedStep[] | undefined,
  ) {
    this.#recorded = recorded ?? [];
    if (this.#recorded.length > 0) this.used = true;
  }

  async step<T>(name: string, fn: (step: { key: string }) => T | Promise<T>): Promise<T> {
    checkStepName(name);
    if (typeof fn !== 'function') {
      throw stepMisuse(
        `step(${JSON.stringify(name)}, fn): fn must be a function that does the step's work; got ${describeValue(fn)}.`,
      );
    }
    if (this.#running !== undefined) {
      throw stepMisuse(
        `step(${JSON.stringify(name)}) was called while step(${JSON.stringify(this.#running)}) is still running. ` +
          'Steps run one at a time, in order: await each step before starting the next.',
      );
    }
    if (this.#reached.includes(name)) {
      throw stepMisuse(
        `The step name ${JSON.stringify(name)} is used twice in this operation. Step names must be unique within an operation: name each one after what it does.`,
      );
    }
    const { runtime, attempt } = this;
    const index = this.#reached.length;
    this.#reached.push(name);
    const recorded = this.#recorded[index];
    if (recorded !== undefined) {
      if (recorded.name !== name) throw this.#mismatch();
      this.#bytes += utf8Length(recorded.body);
      const value = attempt.codec.deserialize(recorded.body) as T;
      reportStep(runtime, attempt, name, 'resumed', undefined);
      return value;
    }
    if (this.lease.wasLost()) throw this.#lost(name);
    this.#running = name;
    const started = runtime.observed ? runtime.clock.now() : 0;
    let value: T;
    try {
      value = await fn({ key: deriveStepKey(attempt.id, name) });
    } catch (error) {
      // The step did not complete: nothing is recorded, and a retry runs it again.
      this.#reached.pop();
      throw error;
    } finally {
      this.#running = undefined;
    }
    await this.#save(index, name, value);
    reportStep(runtime, attempt, name, 'ran', started);
    return value;
  }

  /**
   * The operation returned: every recorded step must have been reached, and
   * none may still be running. Returns the error to fail it with, if any.
   */
  finish(): IdempotencyError | undefined {
    if (this.#running !== undefined) {
      return retryable(
        stepMisuse(
          `The operation returned while step(${JSON.stringify(this.#running)}) was still running: its result cannot be recorded. ` +
            'Await every step before returning.',
        ),
      );
    }
    if (this.#reached.length < this.#recorded.length) return this.#mismatch(true);
    return undefined;
  }

  async #save(index: number, name: string, value: unknown): Promise<void> {
    const { runtime, attempt } = this;
    const { policy } = attempt;
    let body: string;
    try {
      body = attempt.codec.serialize(value);
    } catch (error) {
      throw this.#unrecorded(name, 'its result cannot be serialized', error);
    }
    const total = this.#bytes + utf8Length(body);
    if (total > policy.maxResponseBytes) {
      throw this.#unrecorded(
        name,
        `the steps' results would take ${total} bytes, more than maxResponseBytes (${policy.maxResponseBytes})`,
      );
    }
    let saved: SaveStepResult;
    try {
      saved = await runtime.store.saveStep(attempt, {
        id: attempt.id,
        token: attempt.token,
        fingerprint: attempt.fp,
        index,
        name,
        body,
        ttl: policy.ttl,
        lockTtl: policy.lockTtl,
      });
    } catch (error) {
      throw this.#unrecorded(name, 'the store did not record it', error);
    }
    if (saved === 'fenced') {
      this.lease.fenced();
      throw this.#lost(name);
    }
    if (saved === 'conflict') throw this.#mismatch();
    this.#bytes = total;
    this.used = true;
  }

  /** The sequence reached differs from the recorded one: at a step (nothing past it ran), or at the return (`returned`). */
  #mismatch(returned = false): IdempotencyError {
    const recorded = this.#recorded.map((s) => s.name);
    const where = returned
      ? 'The operation returned without reaching them all: its result was not stored'
      : 'The step that differs did not run, nor anything after it';
    return retryable(
      new IdempotencyError(
        'step_mismatch',
        `This run reached the steps ${list(this.#reached)}, but an earlier run of this key recorded ${list(recorded)}. ` +
          'A retry must reach the recorded steps by the same names, in the same order (a step renamed, reordered or skipped would mix results of different code). ' +
          `${where}, and the key was released with its recorded steps: run code that reaches the recorded steps to finish the operation.`,
      ),
    );
  }

  #unrecorded(name: string, why: string, cause?: unknown): IdempotencyError {
    return retryable(
      new IdempotencyError(
        'step_unrecorded',
        `Step ${JSON.stringify(name)} completed, but ${why}, so the operation stopped before going on. ` +
          `A retry with the same key runs this step again: its downstream call must be idempotent (send stepKey(${JSON.stringify(name)}) as its key).`,
        cause === undefined ? {} : { cause },
      ),
    );
  }

  #lost(name: string): IdempotencyError {
    const error = inProgressError(
      this.runtime.retryAfter,
      `the claim on this key was lost before step ${JSON.stringify(name)} could be recorded, and another request may hold it now`,
    );
    return retryable(error);
  }
}

/**
 * What an operation run without protection receives (fail-open while the store is down): the
 * caller's signal, and steps that simply run, since nothing can be recorded; `stepKey` still derives
 * the same keys, so downstream calls stay deduplicated.
 */
export function unprotectedRun(
  runtime: EngineRuntime,
  attempt: Attempt,
  signal: AbortSignal,
): IdempotencySteps & { signal: AbortSignal; transaction: undefined } {
  const stepKey = stepKeyOf(attempt.id);
  return {
    signal,
    transaction: undefined,
    stepKey,
    async step(name, fn) {
      const key = stepKey(name);
      const started = runtime.observed ? runtime.clock.now() : 0;
      const value = await fn({ key });
      reportStep(runtime, attempt, name, 'unprotected', started);
      return value;
    },
  };
}
