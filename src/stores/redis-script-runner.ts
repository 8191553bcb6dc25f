import { AsyncResource } from 'node:async_hooks';
import type { Cluster, Redis } from 'ioredis';
import { storeFailure } from '../core/errors.js';
import type { RedisScript } from './redis-scripts.js';

// How the Redis store sends its scripts (EVALSHA, batched), and reads a client's error as an outage or a fault.

/**
 * Error replies that mean the server cannot serve now rather than a fault of
 * the command: loading its data, a cluster or replica not ready, a script
 * still running, a replica promoted or demoted.
 */
const OUTAGE_REPLIES = /^(LOADING|CLUSTERDOWN|MASTERDOWN|TRYAGAIN|BUSY|READONLY|NOREPLICAS)\b/;

const isNoScript = (error: unknown) => error instanceof Error && error.message.startsWith('NOSCRIPT');

/**
 * The scope the batched scripts are sent from. A callback runs in the async
 * context it was scheduled in: scheduled by the first request of a turn, the
 * write (and a tracer's span for it) would belong to that request, though it
 * carries the scripts of every request of the turn. So it is sent from no
 * request's context, as the claim renewals run (core/timing.ts).
 */
const detached = new AsyncResource('trpc-idempotency.RedisScriptBatch');

export type ScriptKeys = [number, ...string[]];
export type ScriptArgs = (string | number)[];

/** How many replicas must acknowledge a write, within how many milliseconds (Redis's `WAIT`). */
export interface ReplicaAcks {
  replicas: number;
  timeout: number;
}

/**
 * A write the primary made but fewer replicas than asked acknowledged in
 * time: a failover now could lose it. Not an outage (the primary answered),
 * so it fails closed whatever `onStoreError` says. `reply` is the script's own.
 */
export class ReplicaAckError extends Error {
  override readonly name = 'ReplicaAckError';
  constructor(
    readonly reply: unknown,
    acknowledged: number | undefined,
    wanted: ReplicaAcks,
    cause?: unknown,
  ) {
    super(
      acknowledged === undefined
        ? `redisStore: WAIT failed after a write, so it is not known to be on ${wanted.replicas} replica(s).`
        : `redisStore: ${acknowledged} replica(s) acknowledged a write within ${wanted.timeout} ms; waitForReplicas asks for ${wanted.replicas}.`,
      cause === undefined ? undefined : { cause },
    );
  }
}

interface QueuedScript {
  script: RedisScript;
  keys: ScriptKeys;
  args: ScriptArgs;
  /** A write that waits for the replicas (only with `waitForReplicas`). */
  acked: boolean;
  resolve(reply: unknown): void;
  reject(error: unknown): void;
}

type PipelineReply = [Error | null, unknown] | undefined;

/**
 * ioredis rejects with a `ReplyError` when Redis answered with an error, and
 * with other errors (connection closed, retries exhausted, every cluster node
 * failed) when it could not get an answer: those are outages.
 */
function asStoreFailure(error: unknown): unknown {
  const reply = error instanceof Error && error.name === 'ReplyError';
  return !reply || OUTAGE_REPLIES.test((error as Error).message) ? storeFailure('unavailable', error) : error;
}

/**
 * Runs scripts on `client`: `run(script, keys, args, acked)` answers the
 * script's reply, or a store failure. With `acks`, a script run with `acked`
 * is followed by `WAIT` on the same connection (a Cluster: the script's own
 * node), and answers only once enough replicas hold what it wrote.
 */
export function scriptRunner(client: Redis | Cluster, acks?: ReplicaAcks) {
  /** Sends a script as EVALSHA, and its source once if Redis lacks it (its cache is empty after a restart or failover). */
  async function evaluate(s: RedisScript, keys: ScriptKeys, args: ScriptArgs): Promise<unknown> {
    try {
      return await client.evalsha(s.sha, ...keys, ...args);
    } catch (error) {
      if (isNoScript(error)) return await client.eval(s.source, ...keys, ...args);
      throw error;
    }
  }

  /** The script's reply once `WAIT` says the replicas hold it, else a {@link ReplicaAckError} carrying it. */
  function afterWait(reply: unknown, wait: PipelineReply, wanted: ReplicaAcks): unknown {
    if (wait === undefined || wait[0] !== null) throw new ReplicaAckError(reply, undefined, wanted, wait?.[0]);
    const acknowledged = Number(wait[1]);
    if (!(acknowledged >= wanted.replicas)) throw new ReplicaAckError(reply, acknowledged, wanted);
    return reply;
  }

  /** {@link evaluate}, then `WAIT`, in one write (one pipeline, so both reach the script's node). */
  async function evaluateAcked(s: RedisScript, keys: ScriptKeys, args: ScriptArgs, wanted: ReplicaAcks) {
    for (const source of [false, true]) {
      const pipeline = client.pipeline();
      if (source) pipeline.eval(s.source, ...keys, ...args);
      else pipeline.evalsha(s.sha, ...keys, ...args);
      const replies = (await pipeline.wait(wanted.replicas, wanted.timeout).exec()) as PipelineReply[] | null;
      const reply = replies?.[0];
      if (reply === undefined) throw new Error('redisStore: Redis returned no reply to a pipelined script.');
      if (reply[0] !== null) {
        if (!source && isNoScript(reply[0])) continue;
        throw reply[0];
      }
      return afterWait(reply[1], replies?.[1], wanted);
    }
    throw new Error('redisStore: Redis did not take the script sent as source.');
  }

  /** Runs one script on its own: with `WAIT` after it if it is a write to acknowledge. */
  const single = (call: Omit<QueuedScript, 'resolve' | 'reject'>) =>
    acks !== undefined && call.acked
      ? evaluateAcked(call.script, call.keys, call.args, acks)
      : evaluate(call.script, call.keys, call.args);

  // The scripts called in one turn of the event loop (every request whose
  // claim or completion became due in it), sent in one write. Redis answers
  // them in order; each call still gets its own reply or error. A Cluster
  // pipeline must stay in one slot and records spread over slots, so on a
  // Cluster each script is sent on its own.
  const batching = (client as Cluster).isCluster !== true;
  let queued: QueuedScript[] = [];

  function flush() {
    const calls = queued;
    queued = [];
    // With waitForReplicas, one WAIT after the batch's scripts covers every write among them.
    const wanted = acks !== undefined && calls.some((call) => call.acked) ? acks : undefined;
    if (calls.length === 1) {
      const call = calls[0]!;
      single(call).then(call.resolve, call.reject);
      return;
    }
    let sent: ReturnType<ReturnType<typeof client.pipeline>['exec']>;
    try {
      const pipeline = client.pipeline();
      for (const call of calls) pipeline.evalsha(call.script.sha, ...call.keys, ...call.args);
      if (wanted !== undefined) pipeline.wait(wanted.replicas, wanted.timeout);
      sent = pipeline.exec();
    } catch (error) {
      for (const call of calls) call.reject(error);
      return;
    }
    sent.then(
      (replies) => {
        const wait = wanted === undefined ? undefined : (replies?.[calls.length] as PipelineReply);
        for (let i = 0; i < calls.length; i++) {
          const call = calls[i]!;
          const reply = replies?.[i];
          if (reply === undefined) call.reject(new Error('redisStore: Redis returned no reply to a pipelined script.'));
          else if (reply[0] === null) {
            if (wanted === undefined || !call.acked) call.resolve(reply[1]);
            else {
              try {
                call.resolve(afterWait(reply[1], wait, wanted));
              } catch (error) {
                call.reject(error);
              }
            }
          } else if (isNoScript(reply[0])) single(call).then(call.resolve, call.reject);
          else call.reject(reply[0]);
        }
      },
      (error: unknown) => {
        for (const call of calls) call.reject(error);
      },
    );
  }

  /**
   * Runs a script on its keys (a record key, its steps key, the fence marker: same slot).
   * `acked`: a write that, with `waitForReplicas`, must reach the replicas before it answers.
   */
  return async function run(s: RedisScript, keys: ScriptKeys, args: ScriptArgs, acked = false): Promise<unknown> {
    try {
      if (!batching) return await single({ script: s, keys, args, acked });
      return await new Promise((resolve, reject) => {
        if (queued.push({ script: s, keys, args, acked, resolve, reject }) === 1) {
          detached.runInAsyncScope(setImmediate, undefined, flush);
        }
      });
    } catch (error) {
      throw error instanceof ReplicaAckError ? error : asStoreFailure(error);
    }
  };
}
