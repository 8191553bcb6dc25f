import { AsyncResource } from 'node:async_hooks';
import type { Cluster, Redis } from 'ioredis';
import { storeFailure } from '../core/errors.js';
import { configError, describeValue } from '../core/options.js';
import type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  CompleteResult,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  RecordedSteps,
  SaveStepInput,
  SaveStepResult,
} from '../core/store.js';
import { CLAIM, COMPLETE, EXTEND, RELEASE, type RedisScript, SAVE_STEP } from './redis-scripts.js';

export interface RedisStoreOptions {
  /**
   * Your ioredis client: a `Redis` (single node, Sentinel) or a `Cluster`.
   * The store never reconfigures or closes it.
   */
  client: Redis | Cluster;
  /**
   * Prefix of every key the store writes. The record key is
   * `<prefix>{<scope>:<path>:<key>}`; the braces are a hash tag, so a record
   * lives in one Redis Cluster slot.
   * @default 'idem:'
   */
  prefix?: string;
}

export interface RedisStore extends IdempotencyStore {
  readonly name: 'redis';
  /** The Redis key of a record id (for inspection and tests), without the client's own `keyPrefix`. */
  keyOf(id: string): string;
  /**
   * Closes the subscriber connection the store opened for `inFlight: 'wait'`
   * notifications, if any. Your client is left alone.
   */
  close(): Promise<void>;
}

const STATES = { c: 'completed', f: 'failed' } as const;
const COMPLETED: readonly CompleteResult[] = ['finished', 'stored', 'held'];
const SAVED: readonly SaveStepResult[] = ['fenced', 'stored', 'conflict'];

/** The steps hash (see redis-scripts.ts) from HGETALL's flat list of fields and values. */
function parseSteps(flat: unknown): RecordedSteps {
  const fields = new Map<string, string>();
  const list = flat as string[];
  for (let i = 0; i + 1 < list.length; i += 2) fields.set(String(list[i]), String(list[i + 1]));
  const count = Number(fields.get('n') ?? 0);
  const steps: RecordedSteps['steps'] = [];
  for (let i = 0; i < count; i++) {
    const name = fields.get(`k${i}`);
    const body = fields.get(`b${i}`);
    if (name === undefined || body === undefined) throw new Error(`redisStore: the steps hash lacks step ${i}.`);
    steps.push({ name, body });
  }
  return { fingerprint: fields.get('f') ?? '', steps };
}

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

type ScriptKeys = [number, ...string[]];
type ScriptArgs = (string | number)[];

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

/**
 * A store on Redis. Each transition is one Lua script sent as EVALSHA (EVAL
 * once after a NOSCRIPT): a first execution costs 2 commands (claim,
 * complete), a replay 1 and an in-flight rejection 1, plus a renewal every
 * lockTtl / 3 for operations that run that long. The scripts called in one
 * turn of the event loop go out in one write (one pipeline), except on a Cluster.
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  // initialized config
  const { client, prefix = 'idem:' } = options;
  if (client === undefined || client === null || typeof (client as Redis).evalsha !== 'function') {
    throw configError(
      'redisStore',
      `client must be an ioredis Redis or Cluster instance, got ${describeValue(client)}.`,
    );
  }
  if (typeof prefix !== 'string' || /[{}]/.test(prefix)) {
    throw configError(
      'redisStore',
      `prefix must be a string without braces (the store adds the hash tag), got ${describeValue(prefix)}.`,
    );
  }
  const channel = `${prefix}settled`;
  const keyOf = (id: string) => `${prefix}{${id}}`;
  const stepsKeyOf = (key: string) => `${key}:steps`;

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

  /** Runs a script on one key, or on a record key and its steps key (`key2`: same hash tag, same slot). */
  async function run(s: RedisScript, key: string, args: ScriptArgs, key2?: string): Promise<unknown> {
    const keys: ScriptKeys = key2 === undefined ? [1, key] : [2, key, key2];
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
  }

  // initialized on first wait: one subscriber connection, one channel, and
  // the waiters of each record key.
  let subscriber: Redis | Cluster | undefined;
  let subscribed: Promise<void> | undefined;
  const waiters = new Map<string, Set<() => void>>();

  function subscribe(): Promise<void> {
    if (subscribed !== undefined) return subscribed;
    let sub = subscriber;
    if (sub === undefined) {
      // A subscribed connection can run nothing else: the store opens its own.
      sub = subscriber = (client.duplicate as (this: Redis | Cluster) => Redis | Cluster).call(client);
      sub.on('error', () => {
        // Reconnection (and resubscription) is ioredis's job; waiters poll meanwhile.
      });
      sub.on('message', (_channel: string, key: string) => {
        const set = waiters.get(key);
        if (set !== undefined) for (const listener of set) listener();
      });
    }
    const pending = sub.subscribe(channel).then(
      () => undefined,
      (error: unknown) => {
        subscribed = undefined;
        throw error;
      },
    );
    subscribed = pending;
    return pending;
  }

  return {
    name: 'redis',
    keyOf,

    async claim({ id, fingerprint, token, lockTtl, waiting, deadline }: ClaimInput): Promise<ClaimResult> {
      const args = [
        token,
        fingerprint,
        Math.ceil(lockTtl),
        waiting ? '1' : '0',
        deadline === undefined ? '' : Math.floor(deadline),
      ];
      const key = keyOf(id);
      const reply = (await run(CLAIM, key, args, stepsKeyOf(key))) as [string, string | number, unknown?];
      const state = reply[0];
      if (state === 'a') {
        return reply.length > 2
          ? { state: 'acquired', time: reply[1] as number, steps: parseSteps(reply[2]) }
          : { state: 'acquired', time: reply[1] as number };
      }
      if (state === 'l') return { state: 'late', time: reply[1] as number };
      if (state === 'p') return { state: 'in_progress', fingerprint: reply[1] as string };
      const finished = STATES[state as keyof typeof STATES];
      if (finished === undefined) throw new Error(`redisStore: unexpected record state ${String(state)} at a claim.`);
      return reply.length > 2
        ? { state: finished, fingerprint: reply[1] as string, body: reply[2] as string }
        : { state: finished, fingerprint: reply[1] as string };
    },

    async complete({ id, fingerprint, token, state, body, ttl, clearSteps }: CompleteInput): Promise<CompleteResult> {
      const key = keyOf(id);
      const reply = await run(
        COMPLETE,
        key,
        [token, state === 'completed' ? 'c' : 'f', body, Math.ceil(ttl), channel, fingerprint, key],
        clearSteps === true ? stepsKeyOf(key) : undefined,
      );
      const result = COMPLETED[reply as number];
      if (result === undefined) throw new Error(`redisStore: unexpected reply ${String(reply)} to a completion.`);
      return result;
    },

    async saveStep({ id, token, fingerprint, index, name, body, ttl }: SaveStepInput): Promise<SaveStepResult> {
      const key = keyOf(id);
      const reply = await run(SAVE_STEP, key, [token, fingerprint, index, name, body, Math.ceil(ttl)], stepsKeyOf(key));
      const result = SAVED[reply as number];
      if (result === undefined) throw new Error(`redisStore: unexpected reply ${String(reply)} to a step.`);
      return result;
    },

    async release({ id, token }: FencedInput): Promise<boolean> {
      const key = keyOf(id);
      return (await run(RELEASE, key, [token, channel, key])) === 1;
    },

    async extend({ id, token, lockTtl }: ExtendInput): Promise<boolean> {
      return (await run(EXTEND, keyOf(id), [token, Math.ceil(lockTtl)])) === 1;
    },

    async onSettled(id: string, listener: () => void) {
      await subscribe();
      const key = keyOf(id);
      let set = waiters.get(key);
      if (set === undefined) waiters.set(key, (set = new Set()));
      set.add(listener);
      return () => {
        set.delete(listener);
        if (set.size === 0 && waiters.get(key) === set) waiters.delete(key);
      };
    },

    async close() {
      const sub = subscriber;
      subscriber = undefined;
      subscribed = undefined;
      if (sub !== undefined) await sub.quit().catch(() => sub.disconnect());
    },
  };
}
