import { type Operation, type OperationResultEnvelope, TRPCClientError, type TRPCLink } from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';
// tRPC's own observable, as its retryLink uses. The only @trpc/server module this
// entry loads at run time: @trpc/client imports it (and other @trpc/server
// modules) itself, so it adds nothing to what a tRPC client already loads.
import { observable, type Unsubscribable } from '@trpc/server/observable';
import { checkFunction, checkPositiveMs, checkTimerMs, checkWholeNumber, configError } from '../core/options.js';
import { backoffDelay, DEFAULT_RETRY } from './backoff.js';
import { IdempotencyKeyExpiredError, readIdempotencyKey, withoutIdempotencyKey } from './carried-key.js';
import { getRetryAfterMs, isRetryableError } from './failed-call.js';
import { canMakeRandomKeys, randomKey, resolveKey } from './key-holder.js';

type ClientError = TRPCClientError<AnyTRPCRouter>;

/** What `retry` receives. */
export interface IdempotencyRetryOptions {
  /** The operation that failed, its key in `op.context.idempotencyKey`. */
  op: Operation;
  /** Why the last attempt failed. */
  error: ClientError;
  /** The attempts made so far, the first call included. */
  attempts: number;
}

/** What `onRetry` receives, before the wait. */
export interface IdempotencyRetryEvent extends IdempotencyRetryOptions {
  /** The key every attempt of this operation sends. */
  key: string;
  /** How long the link waits before the next attempt, in ms. */
  delayMs: number;
}

/** Options of {@link idempotencyLink}. */
export interface IdempotencyLinkOptions {
  /**
   * Attempts per mutation, the first included; `1` turns retries off.
   * @default 5
   */
  maxAttempts?: number;
  /**
   * The cap of the first retry's wait, in ms; it doubles each attempt (full jitter: the wait is random below the cap).
   * @default 500
   */
  baseDelayMs?: number;
  /**
   * The longest wait between two attempts, in ms. A `Retry-After` longer than this ends the retries.
   * @default 30_000
   */
  maxDelayMs?: number;
  /**
   * Gives up on an attempt after this many ms and retries it with the same key (the server may still be running it: the retry then meets 409 and waits).
   * @default none: an attempt waits as long as the transport does
   */
  timeoutMs?: number;
  /**
   * Whether a failed attempt is retried. An abort and `maxAttempts` stop the retries whatever it says.
   * @default ({ error }) => isRetryableError(error): network failures, timeouts, 409 with Retry-After, 408, 429, 500, 502, 503, 504
   */
  retry?: (opts: IdempotencyRetryOptions) => boolean;
  /**
   * Called before each wait, for logging and metrics. What it throws is ignored.
   * @default none
   */
  onRetry?: (opts: IdempotencyRetryEvent) => void;
  /**
   * Makes the key of a mutation whose context brings none. Must return 1 to 255 printable ASCII characters.
   * @default randomKey: a UUID v4 from the Web Crypto API
   */
  generateKey?: () => string;
  /**
   * The oldest key carried in an input (`withIdempotencyKey`) that is sent, in ms since it was made; an older
   * one fails with `IdempotencyKeyExpiredError`, unsent. Set it to the server's `ttl`: past it the server may
   * have forgotten the first outcome and would run the call again.
   * @default 86_400_000 (24 h, the server's default ttl)
   */
  maxKeyAgeMs?: number;
  /**
   * The clock that `maxKeyAgeMs` is measured with, in ms since the epoch: the one `withIdempotencyKey` dates keys with.
   * @default Date.now
   */
  now?: () => number;
  /**
   * A random number in [0, 1), for the jitter.
   * @default Math.random
   */
  random?: () => number;
}

/** The server's default `ttl`, the default of `maxKeyAgeMs`. */
const DEFAULT_MAX_KEY_AGE_MS = 24 * 60 * 60 * 1000;

/**
 * Gives every mutation one idempotency key and retries it with that key.
 *
 * The key is the one the input carries (`withIdempotencyKey(input)`, taken out
 * of the input before it is sent), else the caller's `context.idempotencyKey`
 * (a string, or a holder from `createIdempotencyKey()`), else a new UUID v4; it is fixed once per
 * operation and sent on every attempt, so a retry can only replay or finish
 * the first execution. The link derives a new operation and never changes the
 * caller's context object. Queries and subscriptions pass through untouched.
 *
 * Place it before the terminating link, and give that link
 * `headers: idempotencyHeaders()` so the key reaches the server.
 *
 * @example
 * createTRPCClient<AppRouter>({
 *   links: [idempotencyLink(), httpBatchLink({ url, headers: idempotencyHeaders() })],
 * });
 */
export function idempotencyLink<TRouter extends AnyTRPCRouter = AnyTRPCRouter>(
  options: IdempotencyLinkOptions = {},
): TRPCLink<TRouter> {
  // initialized config
  const maxAttempts = options.maxAttempts ?? DEFAULT_RETRY.maxAttempts;
  const baseDelayMs = options.baseDelayMs ?? DEFAULT_RETRY.baseDelayMs;
  const maxDelayMs = options.maxDelayMs ?? DEFAULT_RETRY.maxDelayMs;
  const { timeoutMs, onRetry } = options;
  const retry = options.retry ?? (({ error }: IdempotencyRetryOptions) => isRetryableError(error));
  const generateKey = options.generateKey ?? randomKey;
  const random = options.random ?? Math.random;
  const maxKeyAgeMs = options.maxKeyAgeMs ?? DEFAULT_MAX_KEY_AGE_MS;
  const now = options.now ?? Date.now;
  const where = 'idempotencyLink';
  checkWholeNumber(maxAttempts, 'maxAttempts', where, { min: 1 });
  checkTimerMs(baseDelayMs, 'baseDelayMs', where, { allowZero: true });
  checkTimerMs(maxDelayMs, 'maxDelayMs', where, { allowZero: true });
  checkPositiveMs(maxKeyAgeMs, 'maxKeyAgeMs', where);
  for (const name of ['retry', 'onRetry', 'generateKey', 'random', 'now'] as const) {
    if (options[name] !== undefined) checkFunction(options[name], name, where);
  }
  if (timeoutMs !== undefined) checkTimerMs(timeoutMs, 'timeoutMs', where);
  if (options.generateKey === undefined && !canMakeRandomKeys()) {
    throw configError(where, 'this runtime has no Web Crypto API to make keys; pass generateKey.');
  }

  /** `op` with its key in a new context (TanStack Query passes one context object to every call), and without the key the input carried. */
  function keyedOperation(op: Operation): Operation {
    const carried = readIdempotencyKey(op.input);
    if (carried === undefined) {
      return { ...op, context: { ...op.context, idempotencyKey: resolveKey(op.context.idempotencyKey, generateKey) } };
    }
    if (op.context.idempotencyKey !== undefined && op.context.idempotencyKey !== null) {
      throw new TypeError(
        `trpc-idempotency: ${op.path} got a key in its input (withIdempotencyKey) and one in context.idempotencyKey. Pass it one way only.`,
      );
    }
    if (now() - carried.createdAt > maxKeyAgeMs) throw new IdempotencyKeyExpiredError({ ...carried, maxKeyAgeMs });
    const input = withoutIdempotencyKey(op.input as object);
    return { ...op, input, context: { ...op.context, idempotencyKey: carried.key } };
  }

  return () => {
    // initialized in app
    return ({ op, next }) => {
      // initialized for request
      if (op.type !== 'mutation') return next(op);
      return observable<OperationResultEnvelope<unknown, ClientError>, ClientError>((observer) => {
        const signal = op.signal ?? undefined;
        let keyed: Operation;
        try {
          keyed = keyedOperation(op);
        } catch (cause) {
          observer.error(TRPCClientError.from(cause as Error));
          return () => {};
        }
        const key = keyed.context.idempotencyKey as string;
        let attempts = 0;
        let current: Unsubscribable | undefined;
        let waitTimer: ReturnType<typeof setTimeout> | undefined;
        let attemptTimer: ReturnType<typeof setTimeout> | undefined;
        let finished = false;

        const stop = () => {
          finished = true;
          clearTimeout(waitTimer);
          clearTimeout(attemptTimer);
          signal?.removeEventListener('abort', onAbort);
          const attempt = current;
          current = undefined;
          attempt?.unsubscribe(); // aborts its request if it is still running
        };
        const fail = (error: ClientError) => {
          if (finished) return;
          stop();
          observer.error(error);
        };
        // Even mid-request: a batch link only aborts a request once every call in it is aborted.
        function onAbort() {
          fail(TRPCClientError.from(abortReason(signal)));
        }

        function failed(error: ClientError) {
          if (finished) return;
          if (signal?.aborted) return fail(error);
          let again = false;
          try {
            again = attempts < maxAttempts && retry({ op: keyed, error, attempts });
          } catch {
            again = false;
          }
          const retryAfterMs = again ? getRetryAfterMs(error) : undefined;
          if (!again || (retryAfterMs !== undefined && retryAfterMs > maxDelayMs)) return fail(error);
          // Retry-After is a lower bound: waiting less would only meet the same 409 or 503.
          const delayMs = Math.max(retryAfterMs ?? 0, backoffDelay({ attempts, baseDelayMs, maxDelayMs, random }));
          try {
            onRetry?.({ op: keyed, error, attempts, key, delayMs });
          } catch {
            // A logging hook must not change what the call does.
          }
          if (finished) return; // onRetry aborted the call
          waitTimer = setTimeout(send, delayMs);
        }

        function send() {
          attempts++;
          let done = false;
          if (timeoutMs !== undefined) {
            attemptTimer = setTimeout(() => {
              done = true;
              const late = current;
              current = undefined;
              late?.unsubscribe();
              failed(TRPCClientError.from(timeoutReason(timeoutMs, attempts)));
            }, timeoutMs);
          }
          let subscription: Unsubscribable;
          try {
            // `finished`: tRPC's observable still forwards what arrives after an unsubscribe.
            subscription = next(keyed).subscribe({
              next(envelope) {
                if (!done && !finished) observer.next(envelope);
              },
              error(error) {
                if (done || finished) return;
                done = true;
                clearTimeout(attemptTimer);
                current = undefined;
                failed(error);
              },
              complete() {
                if (done || finished) return;
                done = true;
                current = undefined;
                stop();
                observer.complete();
              },
            });
          } catch (cause) {
            if (finished) throw cause; // thrown by our own subscriber, once notified
            // A link below that throws instead of erroring: the call fails, not retried.
            done = true;
            clearTimeout(attemptTimer);
            current = undefined;
            fail(TRPCClientError.from(cause as Error));
            return;
          }
          if (!done) current = subscription;
        }

        if (signal?.aborted) {
          onAbort();
          return stop;
        }
        signal?.addEventListener('abort', onAbort, { once: true });
        send();
        return stop;
      });
    };
  };
}

function abortReason(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason;
  return reason instanceof Error ? reason : new DOMException('This operation was aborted', 'AbortError');
}

function timeoutReason(timeoutMs: number, attempt: number): Error {
  return new DOMException(`Attempt ${attempt} got no answer within ${timeoutMs} ms.`, 'TimeoutError');
}
