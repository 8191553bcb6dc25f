import { randomUUID } from 'node:crypto';
import { amountOf, pay } from '../../fixtures/pay-app.js';

export interface LoadOptions {
  /** Base URLs of the live application instances; read before every attempt. */
  targets: () => string[];
  durationMs: number;
  /** Clients sending at once, each one operation after another (closed loop). */
  concurrency: number;
  /** Share of operations that reuse a recent key instead of a new one. @default 0.2 */
  duplicateRatio?: number;
  /** How long an execution takes (ms). @default 5 */
  holdMs?: () => number;
  /** A key that has not succeeded this long after it was first sent counts as stuck. @default 30_000 */
  giveUpMs?: number;
  /** Mutation path, or each key's (every duplicate of a key must go to the same procedure). @default 'pay' */
  path?: string | ((key: string) => string);
  /** Stops early when it returns true. */
  stop?: () => boolean;
  /** Called with every HTTP attempt once it is answered (or failed), for timelines. */
  onAttempt?: (attempt: Attempt) => void;
}

/** One HTTP attempt of an operation. */
export interface Attempt {
  key: string;
  /** The instance it was sent to (undefined: no instance was live). */
  url: string | undefined;
  /** HTTP status, 0 for a network failure. */
  status: number;
  /** Date.now() when it was sent and when it was answered. */
  sentAt: number;
  answeredAt: number;
  chargeId?: string;
  replayed: boolean;
}

export interface KeyRecord {
  key: string;
  /** Every chargeId a client received for this key. */
  chargeIds: Set<string>;
  firstSentAt: number;
  succeededAt?: number;
  /** The longest a request of this key waited from its first refusal (409, 503, network) to its success. */
  blockedMs: number;
  /** A request of this key gave up (never succeeded within giveUpMs) or got an unexpected answer. */
  failed?: string;
}

export interface LoadResult {
  keys: Map<string, KeyRecord>;
  /** HTTP attempts, retries included. */
  requests: number;
  /** Operations (a new key or a duplicate), each retried until it succeeds. */
  operations: number;
  duplicates: number;
  replayed: number;
  byStatus: Record<string, number>;
  /** Answers other than 200, by status and reason (`data.idempotency.reason`, `-` without one): `409 in_progress`, `0 -`... */
  refusals: Record<string, number>;
  elapsedMs: number;
  /** Successful operations that finished during each second of the run. */
  perSecond: number[];
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Drives `pay` (or `path`) like real clients with idempotency keys: each
 * operation keeps its key and retries 409, 503, network failures, and the
 * reasons `in_progress`, `store_unavailable` and `step_unrecorded` whatever
 * their status, with a short jittered backoff until it succeeds, on any live
 * instance. A share of
 * operations reuse a recent key (a duplicate submit, a retry from another
 * tab), some while the first is in flight, some after it finished.
 */
export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const { targets, durationMs, concurrency } = options;
  const duplicateRatio = options.duplicateRatio ?? 0.2;
  const holdMs = options.holdMs ?? (() => 5);
  const giveUpMs = options.giveUpMs ?? 30_000;
  const pathOf =
    typeof options.path === 'function' ? options.path : () => (options.path as string | undefined) ?? 'pay';
  const keys = new Map<string, KeyRecord>();
  const recent: string[] = [];
  const byStatus: Record<string, number> = {};
  const refusals: Record<string, number> = {};
  const perSecond: number[] = [];
  let requests = 0;
  let operations = 0;
  let duplicates = 0;
  let replayed = 0;
  const start = Date.now();
  const end = start + durationMs;

  async function operation(key: string) {
    const record = keys.get(key)!;
    const input = { amount: amountOf(key), holdMs: holdMs() };
    const path = pathOf(key);
    const sentAt = Date.now();
    let refusedAt: number | undefined;
    for (let attempt = 0; ; attempt++) {
      const live = targets();
      const url = live[Math.floor(Math.random() * live.length)];
      const attemptAt = Date.now();
      const result =
        url === undefined ? { status: 0, replayed: false } : await pay(url, key, input, { timeoutMs: 15_000, path });
      requests++;
      byStatus[result.status] = (byStatus[result.status] ?? 0) + 1;
      options.onAttempt?.({
        key,
        url,
        status: result.status,
        sentAt: attemptAt,
        answeredAt: Date.now(),
        ...('chargeId' in result && result.chargeId !== undefined ? { chargeId: result.chargeId } : {}),
        replayed: result.replayed,
      });
      if (result.status === 200 && 'chargeId' in result && result.chargeId !== undefined) {
        record.chargeIds.add(result.chargeId);
        const now = Date.now();
        record.succeededAt ??= now;
        if (refusedAt !== undefined) record.blockedMs = Math.max(record.blockedMs, now - refusedAt);
        if (result.replayed) replayed++;
        const second = Math.floor((now - start) / 1000);
        perSecond[second] = (perSecond[second] ?? 0) + 1;
        return;
      }
      if (result.status !== 200) {
        const refusal = `${result.status} ${('reason' in result && result.reason) || '-'}`;
        refusals[refusal] = (refusals[refusal] ?? 0) + 1;
      }
      // Retried by reason, whatever the status, as idempotencyLink does: a step whose result was not
      // recorded answers 500 step_unrecorded (the key was given back for a retry, docs/steps.md).
      const reason = 'reason' in result ? result.reason : undefined;
      const retryable = reason === 'in_progress' || reason === 'store_unavailable' || reason === 'step_unrecorded';
      if (result.status !== 409 && result.status !== 503 && result.status !== 0 && !retryable) {
        record.failed = `unexpected ${result.status} ${JSON.stringify(result)}`;
        return;
      }
      refusedAt ??= Date.now();
      if (Date.now() - sentAt > giveUpMs) {
        record.failed = `still refused after ${giveUpMs} ms (last ${result.status})`;
        return;
      }
      await sleep(10 + Math.random() * 40 * Math.min(attempt + 1, 4));
    }
  }

  async function worker() {
    while (Date.now() < end && options.stop?.() !== true) {
      let key: string;
      if (recent.length > 0 && Math.random() < duplicateRatio) {
        key = recent[Math.floor(Math.random() * recent.length)]!;
        duplicates++;
      } else {
        key = randomUUID();
        keys.set(key, { key, chargeIds: new Set(), firstSentAt: Date.now(), blockedMs: 0 });
        recent.push(key);
        if (recent.length > 64) recent.shift();
      }
      operations++;
      await operation(key);
    }
  }

  await Promise.all(Array.from({ length: concurrency }, worker));
  return {
    keys,
    requests,
    operations,
    duplicates,
    replayed,
    byStatus,
    refusals,
    elapsedMs: Date.now() - start,
    perSecond,
  };
}

/** Keys whose clients received two different results: the one thing a client must never see. */
export function conflictingResults(result: LoadResult): KeyRecord[] {
  return [...result.keys.values()].filter((r) => r.chargeIds.size > 1);
}

/**
 * Sends every succeeded key once more and returns those whose answer is not
 * a replay of the result the clients received: lost outcomes.
 */
export async function lostOutcomes(
  result: LoadResult,
  url: () => string,
  path = 'pay',
  parallel = 16,
): Promise<{ key: string; got: string }[]> {
  const done = [...result.keys.values()].filter((r) => r.chargeIds.size > 0);
  const lost: { key: string; got: string }[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < done.length) {
        const record = done[next++]!;
        const again = await pay(url(), record.key, { amount: amountOf(record.key) }, { path });
        const expected = [...record.chargeIds][0];
        if (again.status !== 200 || !again.replayed || again.chargeId !== expected) {
          lost.push({
            key: record.key,
            got: `${again.status} replayed=${again.replayed} ${again.chargeId ?? again.reason ?? ''}`,
          });
        }
      }
    }),
  );
  return lost;
}
