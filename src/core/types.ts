import type { IdempotencyEvent, IdempotencyEventHandler } from './events.js';
import type { OutcomeCodec } from './outcome-codec.js';
import type { IdempotencyPolicyOptions, ResolvedPolicy } from './policy.js';
import type { IdempotencyStore } from './store.js';

// The engine's public types: its options, what it runs, and what it returns.

export interface IdempotencyEngineOptions extends IdempotencyPolicyOptions {
  /**
   * Where claims and outcomes live. Use a shared store (Redis, PostgreSQL)
   * as soon as more than one process serves the same operations.
   * @default memoryStore(), given by the entry points (`core/` imports no store)
   */
  store?: IdempotencyStore;
  /**
   * The longest a single store call may take, in milliseconds; past it the
   * call counts as a store failure (see `onStoreError`), and a renewal is sent
   * again. At most lockTtl / 3.
   * @default 1_000, or lockTtl / 3 when that is less
   */
  storeTimeout?: number;
  /**
   * Seconds a client is told to wait (`Retry-After`) when its key is in flight.
   * @default 1
   */
  retryAfter?: number;
  /** Receives one structured event per check and per transition. Must not throw. */
  onEvent?: IdempotencyEventHandler;
  /**
   * The clock, for deadlines.
   * @default Date.now
   */
  now?: () => number;
}

/**
 * Recovery points: `step(name, fn)` inside a protected operation.
 *
 * A step runs `fn` once per key. When it completes, its result is recorded in
 * the store (fenced by the holder's token) before the operation goes on. A
 * later holder of the same key (the retry that runs once a crashed holder's
 * claim expired, or after the key was released) gets each recorded step's
 * result back instead of running it again, and runs only the steps that never
 * completed. `stepKey(name)` derives a key for the step's downstream call, so
 * that a step interrupted inside that call is deduplicated downstream.
 */
export interface IdempotencySteps {
  /**
   * Runs `fn` once for this key and records its result before the operation
   * goes on; a retry that reaches this step after a crash gets the recorded
   * result instead. Steps run one at a time, each awaited, with names unique
   * in the operation; a retry must reach them in the same order.
   * `fn` gets the step's derived `key` (see {@link stepKey}).
   */
  step<T>(name: string, fn: (step: { key: string }) => T | Promise<T>): Promise<T>;
  /**
   * A key derived from this operation's identity (scope, name, client key)
   * and the step's name: a UUID (version 8, from SHA-256), the same for every
   * retry of the key. Pass it as the `Idempotency-Key` of the step's
   * downstream call (a payment provider, another service protected by this
   * library), so that a step interrupted in the middle of that call is not
   * run twice downstream.
   */
  stepKey(name: string): string;
}

/** What the operation receives: its signal, its transaction, and its steps (see {@link IdempotencySteps}). */
export interface RunOptions extends IdempotencySteps {
  /**
   * Aborts when the claim is lost (the operation may then run elsewhere). It does not follow the
   * caller's signal: a caller that gives up will retry, and the operation should finish so the retry
   * gets its outcome. (Run unprotected under fail-open, it is the caller's signal.)
   */
  signal: AbortSignal;
  /** With `transaction: true`: the store's transaction (a Drizzle transaction); make your writes through it. */
  transaction?: unknown;
}

/** One operation to run at most once per key. */
export interface ExecuteInput<T> {
  /** The client's key, already validated (see `parseIdempotencyKey`). */
  key: string;
  /** The operation's name (the procedure path): part of the record identity and of the fingerprint. */
  name: string;
  /**
   * Who the key belongs to (user, tenant). Keys of different scopes never meet.
   * Undefined: no scope. Any other non-string (null, a number) is refused (`input_unsupported`).
   */
  scope?: string | undefined;
  /** The operation's input, fingerprinted to detect reuse of a key with another payload. */
  payload: unknown;
  /**
   * The operation. `signal` aborts if the claim is lost; `transaction` is the
   * store's transaction in transactional mode.
   */
  run: (opts: RunOptions) => Promise<T>;
  /** How outcomes are serialized and which errors are stored. */
  codec?: OutcomeCodec<T>;
  /** A policy from {@link IdempotencyEngine.policy}; the engine's own when omitted. */
  policy?: ResolvedPolicy;
  /** The caller's signal: aborts waiting (`inFlight: 'wait'`); `run` gets it only when it runs unprotected (fail-open). */
  signal?: AbortSignal | undefined;
}

export type ExecuteResult<T> =
  | { ok: true; value: T; replayed: boolean }
  | { ok: false; error: unknown; replayed: boolean };

export interface IdempotencyEngine {
  /** The engine's resolved default policy. */
  readonly defaults: ResolvedPolicy;
  readonly store: IdempotencyStore;
  /** Resolves (and validates) a per-operation policy over the engine's defaults. Call it once, not per request. */
  policy(overrides?: IdempotencyPolicyOptions, where?: string): ResolvedPolicy;
  /**
   * Runs the operation once per key and returns its outcome, replayed or
   * fresh. Throws only idempotency errors (`in_progress`, `payload_mismatch`,
   * `store_unavailable`, `input_unsupported`); the operation's own error, and a
   * replayed `response_too_large` or `outcome_unreplayable`, are returned as `ok: false`.
   */
  execute<T>(input: ExecuteInput<T>): Promise<ExecuteResult<T>>;
  /**
   * Like {@link execute}, but returns the value and throws the operation's
   * error, fresh or replayed.
   */
  run<T>(input: Omit<ExecuteInput<T>, 'run'>, fn: ExecuteInput<T>['run']): Promise<{ value: T; replayed: boolean }>;
  /** Emits an event through `onEvent` (adapters report rejections before the engine runs). */
  emit(event: IdempotencyEvent): void;
}
