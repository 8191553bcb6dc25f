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

interface QueuedScript {
  script: RedisScript;
  keys: ScriptKeys;
  args: ScriptArgs;
  resolve(reply: unknown): void;
  reject(error: unknown): void;
}

/**
 * ioredis rejects with a `ReplyError` when Redis answered with an error, and
 * with other errors (connection closed, retries exhausted, every cluster node
 * failed) when it could not get an answer: those are outages.
 */
function asStoreFailure(error: unknown): unknown {
  const reply = error instanceof Error && error.name === 'ReplyError';
  return !reply || OUTAGE_REPLIES.test((error as Error).message) ? storeFailure('unavailable', error) : error;
}

/** Runs scripts on `client`: `run(script, keys, args)` answers the script's reply, or a store failure. */
export function scriptRunner(client: Redis | Cluster) {
  /** Sends a script as EVALSHA, and its source once if Redis lacks it (its cache is empty after a restart or failover). */
  async function evaluate(s: RedisScript, keys: ScriptKeys, args: ScriptArgs): Promise<unknown> {
    try {
      return await client.evalsha(s.sha, ...keys, ...args);
    } catch (error) {
      if (isNoScript(error)) return await client.eval(s.source, ...keys, ...args);
      throw error;
    }
  }

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
    if (calls.length === 1) {
      const call = calls[0]!;
      evaluate(call.script, call.keys, call.args).then(call.resolve, call.reject);
      return;
    }
    let sent: ReturnType<ReturnType<typeof client.pipeline>['exec']>;
    try {
      const pipeline = client.pipeline();
      for (const call of calls) pipeline.evalsha(call.script.sha, ...call.keys, ...call.args);
      sent = pipeline.exec();
    } catch (error) {
      for (const call of calls) call.reject(error);
      return;
    }
    sent.then(
      (replies) => {
        for (let i = 0; i < calls.length; i++) {
          const call = calls[i]!;
          const reply = replies?.[i];
          if (reply === undefined) call.reject(new Error('redisStore: Redis returned no reply to a pipelined script.'));
          else if (reply[0] === null) call.resolve(reply[1]);
          else if (isNoScript(reply[0])) evaluate(call.script, call.keys, call.args).then(call.resolve, call.reject);
          else call.reject(reply[0]);
        }
      },
      (error: unknown) => {
        for (const call of calls) call.reject(error);
      },
    );
  }

  /** Runs a script on its keys (a record key, and its steps key: same hash tag, same slot). */
  return async function run(s: RedisScript, keys: ScriptKeys, args: ScriptArgs): Promise<unknown> {
    try {
      if (!batching) return await evaluate(s, keys, args);
      return await new Promise((resolve, reject) => {
        if (queued.push({ script: s, keys, args, resolve, reject }) === 1) {
          detached.runInAsyncScope(setImmediate, undefined, flush);
        }
      });
    } catch (error) {
      throw asStoreFailure(error);
    }
  };
}
