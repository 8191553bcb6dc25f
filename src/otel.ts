// trpc-idempotency/otel: OpenTelemetry metrics and spans, built on the engine's events.
// It needs only @opentelemetry/api: without an SDK in the application, every call is a no-op.

import {
  type Attributes,
  type Context,
  type Counter,
  context,
  type Histogram,
  type MeterProvider,
  metrics,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  type TracerProvider,
  trace,
  ValueType,
} from '@opentelemetry/api';
import type { IdempotencyEvent, IdempotencyEventHandler } from './core/events.js';
import { checkBoolean, checkFunction, configError } from './core/options.js';

export type { IdempotencyEvent, IdempotencyEventHandler } from './core/events.js';

/** Options of {@link openTelemetry}. */
export interface OpenTelemetryOptions {
  /**
   * Where metrics go. The global one is looked up on every event, so an SDK
   * registered after this handler was created is still used.
   * @default the global MeterProvider (`metrics.getMeterProvider()`)
   */
  meterProvider?: MeterProvider;
  /**
   * Where spans go.
   * @default the global TracerProvider (`trace.getTracerProvider()`)
   */
  tracerProvider?: TracerProvider;
  /**
   * Record the metrics (`idempotency.checks`, `idempotency.check.duration`, ...).
   * @default true
   */
  metrics?: boolean;
  /**
   * Record a span per check (`idempotency.check <procedure>`), a child of the active span.
   * @default true
   */
  spans?: boolean;
  /**
   * Another handler that receives every event too, such as a logger. It runs
   * after the telemetry is recorded, and a throw in one never stops the other.
   * @default none
   */
  onEvent?: IdempotencyEventHandler;
}

/**
 * Bucket boundaries of `idempotency.check.duration`, in seconds: from 100 µs (the
 * memory store) through a few ms (Redis, PostgreSQL) to 10 s (`inFlight: 'wait'`).
 * A View in your SDK overrides them.
 */
export const CHECK_DURATION_BUCKETS: readonly number[] = Object.freeze([
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
]);

/** The instrumentation scope (meter and tracer name). Kept equal to package.json by a test. */
const SCOPE_NAME = 'trpc-idempotency';
const SCOPE_VERSION = '0.2.0';

// Attribute names. `idempotency.*` is this library's namespace; error.type is OpenTelemetry's.
const RESULT = 'idempotency.result';
const PROCEDURE = 'idempotency.procedure';
const STORE = 'idempotency.store.name';
const STORE_OPERATION = 'idempotency.store.operation';
const REASON = 'idempotency.reason';
const KEY_HASH = 'idempotency.key.hash';
const RECORD_STATE = 'idempotency.record.state';
const REPLAY_BODY_SIZE = 'idempotency.replay.body.size';
const STEP = 'idempotency.step';
const ERROR_TYPE = 'error.type';

interface Instruments {
  provider: MeterProvider;
  checks: Counter;
  checkDuration: Histogram;
  storeErrors: Counter;
  leaseLost: Counter;
  leaseRenewed: Counter;
  replayBytes: Counter;
  evictions: Counter;
  steps: Counter;
}

/**
 * Turns the engine's events into OpenTelemetry metrics and spans. Pass the
 * result as `onEvent`:
 *
 * @example
 * const idempotentProcedure = withIdempotency(t.procedure, {
 *   store: redisStore({ client: redis }),
 *   onEvent: openTelemetry({ onEvent: (event) => logger.info(event) }),
 * });
 *
 * Metrics carry the result, procedure and store; spans add the key's hash.
 * The raw key, the scope and the payload never reach either (events do not
 * hold them). Procedure paths are bounded, so cardinality is too; outside
 * tRPC, give `engine.execute` bounded names.
 */
export function openTelemetry(options: OpenTelemetryOptions = {}): IdempotencyEventHandler {
  // initialized config
  const { meterProvider, tracerProvider, metrics: withMetrics = true, spans: withSpans = true, onEvent } = options;
  const where = 'openTelemetry';
  if (meterProvider !== undefined && typeof meterProvider?.getMeter !== 'function') {
    throw configError(
      where,
      'meterProvider must be a MeterProvider (new MeterProvider() from @opentelemetry/sdk-metrics); leave it out to use the global one.',
    );
  }
  if (tracerProvider !== undefined && typeof tracerProvider?.getTracer !== 'function') {
    throw configError(
      where,
      'tracerProvider must be a TracerProvider (from @opentelemetry/sdk-trace-base or sdk-trace-node); leave it out to use the global one.',
    );
  }
  if (onEvent !== undefined) checkFunction(onEvent, 'onEvent', where, 'a function that takes an event');
  checkBoolean(withMetrics, 'metrics', where);
  checkBoolean(withSpans, 'spans', where);

  // Resolved again whenever the provider changes (an SDK registered late, or replaced in tests).
  let instruments: Instruments | undefined;
  let tracer: { provider: TracerProvider; tracer: Tracer } | undefined;

  function currentInstruments(): Instruments {
    const provider = meterProvider ?? metrics.getMeterProvider();
    if (instruments?.provider !== provider) instruments = createInstruments(provider);
    return instruments;
  }

  function currentTracer(): Tracer {
    const provider = tracerProvider ?? trace.getTracerProvider();
    if (tracer?.provider !== provider) tracer = { provider, tracer: provider.getTracer(SCOPE_NAME, SCOPE_VERSION) };
    return tracer.tracer;
  }

  function record(event: IdempotencyEvent) {
    const store = event.store ?? 'custom';
    const check = isCheck(event);
    let metricContext: Context | undefined;
    if (check && withSpans) {
      const span = startCheckSpan(currentTracer(), event, store);
      // The duration's exemplars point at the check's span.
      if (withMetrics) metricContext = trace.setSpan(context.active(), span);
    }
    if (withMetrics) recordMetrics(currentInstruments(), event, store, check, metricContext);
  }

  // initialized for each event
  return function recordIdempotencyTelemetry(event: IdempotencyEvent) {
    try {
      record(event);
    } catch {
      // Telemetry must never change the outcome of a request, nor silence the other handler.
    }
    onEvent?.(event);
  };
}

/**
 * The events that end a check, one per protected request: the claim's answer,
 * a failed claim, or a refusal before the store. Fail-open's `unprotected`
 * follows a `store_error` already counted, so it is not a second check.
 */
function isCheck(event: IdempotencyEvent): boolean {
  switch (event.result) {
    case 'acquired':
    case 'replayed':
    case 'in_progress':
    case 'mismatch':
    case 'rejected':
      return true;
    case 'store_error':
      return event.operation === 'claim';
    case 'unprotected':
      return event.reason !== 'store_error';
    default:
      return false;
  }
}

/** Refusals and unkeyed calls never reach the store: their duration is not a check's. */
function reachedStore(event: IdempotencyEvent): boolean {
  return event.result !== 'rejected' && event.result !== 'unprotected';
}

function createInstruments(provider: MeterProvider): Instruments {
  const meter = provider.getMeter(SCOPE_NAME, SCOPE_VERSION);
  const counter = (name: string, unit: string, description: string) =>
    meter.createCounter(name, { description, unit, valueType: ValueType.INT });
  return {
    provider,
    checks: counter(
      'idempotency.checks',
      '{check}',
      'Idempotency checks, by result (acquired, replayed, in_progress, mismatch, store_error, rejected, unprotected).',
    ),
    checkDuration: meter.createHistogram('idempotency.check.duration', {
      description: 'Time to check an idempotency key against the store (a claim, or a replay read), waits included.',
      unit: 's',
      advice: { explicitBucketBoundaries: [...CHECK_DURATION_BUCKETS] },
    }),
    storeErrors: counter(
      'idempotency.store.errors',
      '{error}',
      'Idempotency store calls that failed or timed out, by operation.',
    ),
    leaseLost: counter(
      'idempotency.lease.lost',
      '{lease}',
      'Claims lost while their operation ran (fenced, unconfirmed, max_run_time): the operation may run twice.',
    ),
    leaseRenewed: counter(
      'idempotency.lease.renewed',
      '{renewal}',
      'Claims renewed while their operation ran (every lockTtl / 3).',
    ),
    replayBytes: counter('idempotency.replay.bytes', 'By', 'Size of the stored outcomes sent back as replays.'),
    steps: counter(
      'idempotency.steps',
      '{step}',
      'Steps of protected operations, by outcome: ran (and recorded), resumed (a retry reused the recorded result), unprotected (run while failing open).',
    ),
    evictions: counter(
      'idempotency.store.evictions',
      '{record}',
      'Finished records a bounded store dropped before their ttl to make room: a retry of their keys would run again.',
    ),
  };
}

function recordMetrics(
  m: Instruments,
  event: IdempotencyEvent,
  store: string,
  check: boolean,
  metricContext: Context | undefined,
) {
  if (check) {
    const attributes: Attributes = { [RESULT]: event.result, [PROCEDURE]: event.name, [STORE]: store };
    if (event.reason !== undefined && !reachedStore(event)) attributes[REASON] = event.reason;
    m.checks.add(1, attributes);
    if (reachedStore(event)) m.checkDuration.record(event.durationMs / 1_000, attributes, metricContext);
  }
  switch (event.result) {
    case 'store_error':
      m.storeErrors.add(1, {
        [PROCEDURE]: event.name,
        [STORE]: store,
        [STORE_OPERATION]: event.operation ?? 'unknown',
        [ERROR_TYPE]: event.error?.name ?? 'Error',
      });
      break;
    case 'lease_lost':
      m.leaseLost.add(1, { [PROCEDURE]: event.name, [STORE]: store, [REASON]: event.reason ?? 'unknown' });
      break;
    case 'renewed':
      m.leaseRenewed.add(1, { [PROCEDURE]: event.name, [STORE]: store });
      break;
    case 'replayed':
      if (event.bytes !== undefined) m.replayBytes.add(event.bytes, { [PROCEDURE]: event.name, [STORE]: store });
      break;
    case 'evicted':
      m.evictions.add(1, { [PROCEDURE]: event.name, [STORE]: store });
      break;
    case 'step':
      m.steps.add(1, {
        [PROCEDURE]: event.name,
        [STORE]: store,
        [STEP]: event.step ?? 'unknown',
        [REASON]: event.reason ?? 'unknown',
      });
      break;
  }
}

/**
 * The check already happened: its span is created now with its real start
 * time, under the active context (the request's span is its parent), and ended at once.
 * Times are `performance.now()` values, which the SDK anchors to the same
 * clock as its other spans (epoch milliseconds from `timeOrigin` drift from it).
 */
function startCheckSpan(tracer: Tracer, event: IdempotencyEvent, store: string): Span {
  const end = performance.now();
  const attributes: Attributes = { [RESULT]: event.result, [PROCEDURE]: event.name, [STORE]: store };
  if (event.keyHash !== undefined) attributes[KEY_HASH] = event.keyHash;
  if (event.reason !== undefined) attributes[REASON] = event.reason;
  if (event.state !== undefined) attributes[RECORD_STATE] = event.state;
  if (event.bytes !== undefined) attributes[REPLAY_BODY_SIZE] = event.bytes;
  if (event.result === 'store_error') {
    attributes[STORE_OPERATION] = event.operation ?? 'claim';
    attributes[ERROR_TYPE] = event.error?.name ?? 'Error';
  }
  const span = tracer.startSpan(
    `idempotency.check ${event.name}`,
    { kind: SpanKind.INTERNAL, startTime: Math.max(end - event.durationMs, 0), attributes },
    context.active(),
  );
  if (event.result === 'store_error') {
    span.setStatus({ code: SpanStatusCode.ERROR, message: event.error?.message ?? 'store error' });
  }
  span.end(end);
  return span;
}
