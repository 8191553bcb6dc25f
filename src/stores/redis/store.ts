import { configError, describeValue } from '../../core/options.js';
import {
  byCode,
  CLAIM_REPLY,
  COMPLETE_REPLY,
  DONE_REPLY,
  SAVE_STEP_REPLY,
  STATE_CODE,
} from '../../core/protocol/codes.js';
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
} from '../../core/store.js';
import type { StoreAdmin } from '../../core/store-admin.js';
import type { SettledListener } from '../listeners.js';
import { redisAdmin } from './admin.js';
import { connectionOf, type RedisClient } from './client.js';
import { fenceMarkers } from './fence.js';
import { settledNotifications } from './notifications.js';
import { ReplicaAckError, type ReplicaAcks, type ScriptArgs, type ScriptKeys, scriptRunner } from './script-runner.js';
import { FENCED, UNFENCED } from './scripts.js';

export interface RedisStoreOptions {
  /**
   * Your client: an ioredis `Redis` (single node, Sentinel) or `Cluster`, or a
   * node-redis client (`createClient`, connected), cluster (`createCluster`)
   * or Sentinel (`createSentinel`). The store never reconfigures or closes it.
   */
  client: RedisClient;
  /**
   * Prefix of every key the store writes. The record key is
   * `<prefix>{<scope>:<path>:<key>}`; the braces are a hash tag, so a record
   * lives in one Redis Cluster slot.
   * @default 'idem:'
   */
  prefix?: string;
  /**
   * Refuse to take over absent keys for one lockTtl after Redis lost its data
   * (an empty restart, a flush), so that operations still running store their
   * outcomes before a retry could run them again: those claims answer 503.
   * Redis tells by a marker that `initialize()` writes once; run it when the
   * Redis is new, not at every start (docs/durability.md, "The restart fence").
   * @default false
   */
  restartFence?: boolean;
  /**
   * Wait until this many replicas hold each claim, completion, renewal and
   * step (Redis's `WAIT`, on the record's own node) before the operation runs
   * or the answer goes out, so that a failover to a replica cannot lose them.
   * Fewer replicas within `timeout` ms fails closed (503, nothing runs; a
   * completion is tried again in the background). Keep `timeout` below the
   * engine's `storeTimeout`. Unset: no wait.
   */
  waitForReplicas?: ReplicaAcks;
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
  /**
   * Writes the restart fence's markers where they are missing (one, or one per
   * slot on a Cluster) and answers how many it wrote. Run it once on a new
   * Redis, as you run migrations: run at every start, it would tell a Redis
   * that lost its data that it lost nothing. Without it, the fence's first
   * claims on a new Redis wait one lockTtl.
   */
  initialize(): Promise<{ written: number }>;
  /** The operator's reads and deletes (inspect, list by SCAN, forget): see admin.ts. */
  readonly admin: StoreAdmin;
}

// The scripts' replies, decoded by the table they are written from (core/protocol/codes.ts).
const CLAIMED = byCode(CLAIM_REPLY);
const COMPLETED = byCode(COMPLETE_REPLY);
const SAVED = byCode(SAVE_STEP_REPLY);

/** The steps hash (see scripts.ts) from HGETALL's flat list of fields and values. */
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
 * A store on Redis. Each transition is one Lua script sent as EVALSHA (EVAL
 * once after a NOSCRIPT): a first execution costs 2 commands (claim,
 * complete), a replay 1 and an in-flight rejection 1, plus a renewal every
 * lockTtl / 3 for operations that run that long. The scripts called in one
 * turn of the event loop go out in one write (one pipeline), except on a Cluster.
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  // initialized config
  const { client, prefix = 'idem:', restartFence = false, waitForReplicas } = options;
  const connection = connectionOf(client);
  if (connection === undefined) {
    throw configError(
      'redisStore',
      'client must be an ioredis Redis or Cluster, or a node-redis client, cluster or Sentinel ' +
        `(createClient, createCluster, createSentinel), got ${describeValue(client)}.`,
    );
  }
  if (typeof prefix !== 'string' || /[{}]/.test(prefix)) {
    throw configError(
      'redisStore',
      `prefix must be a string without braces (the store adds the hash tag), got ${describeValue(prefix)}.`,
    );
  }
  if (typeof restartFence !== 'boolean') {
    throw configError('redisStore', `restartFence must be true or false, got ${describeValue(restartFence)}.`);
  }
  if (waitForReplicas !== undefined) checkReplicaAcks(waitForReplicas);
  if (waitForReplicas !== undefined && !connection.ordered) {
    throw configError(
      'redisStore',
      "waitForReplicas needs each WAIT on the connection of the write it waits for, and node-redis's Sentinel client " +
        "sends commands over a pool of connections. Use ioredis's Sentinel client (new Redis({ sentinels, name })) for durable mode.",
    );
  }
  const channel = `${prefix}settled`;
  const keyOf = (id: string) => `${prefix}{${id}}`;
  const stepsKeyOf = (key: string) => `${key}:steps`;

  const run = scriptRunner(connection, waitForReplicas);
  const { CLAIM, COMPLETE, EXTEND, RELEASE, SAVE_STEP } = restartFence ? FENCED : UNFENCED;
  const notifications = settledNotifications(connection, channel);
  const markers = fenceMarkers(connection, prefix);
  /** A script's keys: a record key, its steps key if given, and the fence marker when the fence is on. */
  const onKeys = (key: string, key2?: string): ScriptKeys => {
    const keys: ScriptKeys = key2 === undefined ? [1, key] : [2, key, key2];
    if (restartFence) {
      keys.push(markers.of(key));
      keys[0]++;
    }
    return keys;
  };

  return {
    name: 'redis',
    keyOf,
    admin: redisAdmin({ client, connection, prefix, channel }),

    async claim({ id, fingerprint, token, lockTtl, waiting, deadline }: ClaimInput): Promise<ClaimResult> {
      const args: ScriptArgs = [
        token,
        fingerprint,
        Math.ceil(lockTtl),
        deadline === undefined ? '' : Math.floor(deadline),
      ];
      if (waiting) args.push('1');
      const key = keyOf(id);
      let reply: [string, string | number, unknown?];
      try {
        reply = (await run(CLAIM, onKeys(key, stepsKeyOf(key)), args, true)) as typeof reply;
      } catch (error) {
        if (!(error instanceof ReplicaAckError)) throw error;
        // Only a claim that took the record wrote something a failover must keep: a replay, a 409
        // or a refusal stands without the replicas. One taken on the primary only is given back,
        // so that the retry is not held off for lockTtl.
        reply = error.reply as typeof reply;
        if (reply[0] === CLAIM_REPLY.acquired) {
          void run(RELEASE, onKeys(key), [token, channel, key]).catch(() => {});
          throw error;
        }
      }
      const state = CLAIMED[reply[0]];
      if (state === 'acquired') {
        return reply.length > 2
          ? { state, time: reply[1] as number, steps: parseSteps(reply[2]) }
          : { state, time: reply[1] as number };
      }
      if (state === 'late') return { state, time: reply[1] as number };
      if (state === 'fenced') throw fenceUp(reply[1] as number, reply[2] as number);
      if (state === 'in_progress') {
        return reply.length > 2 && (reply[2] as number) >= 0
          ? { state, fingerprint: reply[1] as string, expiresIn: reply[2] as number }
          : { state, fingerprint: reply[1] as string };
      }
      if (state === undefined) throw new Error(`redisStore: unexpected record state ${String(reply[0])} at a claim.`);
      // The script compared the fingerprints: a finished record's body comes alone when they match (and
      // nothing but the state for a record without one).
      if (reply.length > 2) return { state, fingerprint: reply[1] as string };
      return reply.length === 2 ? { state, fingerprint, body: reply[1] as string } : { state, fingerprint };
    },

    async complete({ id, fingerprint, token, state, body, ttl, clearSteps }: CompleteInput): Promise<CompleteResult> {
      const key = keyOf(id);
      // The record, the fence's marker, then the steps key only when the steps go (see COMPLETE).
      const keys: ScriptKeys = [1, key];
      if (restartFence) keys.push(markers.of(key));
      if (clearSteps === true) keys.push(stepsKeyOf(key));
      keys[0] = keys.length - 1;
      const args: ScriptArgs = [token, STATE_CODE[state], body, Math.ceil(ttl), channel, fingerprint];
      // The notify message is the key as the store names it: KEYS[1] itself, unless the client adds a prefix.
      if (connection.keyPrefix !== '') args.push(key);
      const reply = await run(COMPLETE, keys, args, true);
      const result = COMPLETED[reply as number];
      if (result === undefined) throw new Error(`redisStore: unexpected reply ${String(reply)} to a completion.`);
      return result;
    },

    async saveStep({
      id,
      token,
      fingerprint,
      index,
      name,
      body,
      ttl,
      lockTtl,
    }: SaveStepInput): Promise<SaveStepResult> {
      const key = keyOf(id);
      const reply = await run(
        SAVE_STEP,
        onKeys(key, stepsKeyOf(key)),
        [token, fingerprint, index, name, body, Math.ceil(ttl), Math.ceil(lockTtl)],
        true,
      );
      const result = SAVED[reply as number];
      if (result === undefined) throw new Error(`redisStore: unexpected reply ${String(reply)} to a step.`);
      return result;
    },

    async release({ id, token }: FencedInput): Promise<boolean> {
      const key = keyOf(id);
      return (await run(RELEASE, onKeys(key), [token, channel, key])) === DONE_REPLY.yes;
    },

    async extend({ id, token, lockTtl, fingerprint }: ExtendInput): Promise<boolean> {
      return (await run(EXTEND, onKeys(keyOf(id)), [token, Math.ceil(lockTtl), fingerprint], true)) === DONE_REPLY.yes;
    },

    onSettled: (id: string, listener: SettledListener) => notifications.listen(keyOf(id), listener),

    close: () => notifications.close(),

    async initialize() {
      let written = 0;
      const all = markers.all();
      // In chunks, so a Cluster's 16384 markers never sit in one queue at once.
      for (let i = 0; i < all.length; i += 512) {
        const replies = await Promise.all(
          all.slice(i, i + 512).map((marker) => connection.send(['SET', marker, '0', 'NX'], marker)),
        );
        written += replies.filter((reply) => reply === 'OK').length;
      }
      return { written };
    },
  };
}

function checkReplicaAcks(acks: ReplicaAcks): void {
  const { replicas, timeout } = (acks ?? {}) as Partial<ReplicaAcks>;
  if (!Number.isInteger(replicas) || (replicas as number) < 1) {
    throw configError(
      'redisStore',
      `waitForReplicas.replicas must be a whole number of at least 1, got ${describeValue(replicas)}.`,
    );
  }
  if (!Number.isInteger(timeout) || (timeout as number) < 1) {
    throw configError(
      'redisStore',
      `waitForReplicas.timeout must be a whole number of milliseconds of at least 1 (WAIT's 0 would wait forever), got ${describeValue(timeout)}.`,
    );
  }
}

/** A claim the restart fence refused: it fails closed (503 whatever onStoreError says), and says until when. */
function fenceUp(time: number, reopen: number): Error {
  return new Error(
    `redisStore: Redis has lost its data (an empty restart or a flush: the restart fence's marker is missing), ` +
      `so claims of keys it does not hold are refused for ${Math.max(0, reopen - time)} ms more, until ` +
      `${new Date(reopen).toISOString()}, while operations that were running store their outcomes. ` +
      'If this Redis is new, run store.initialize() once (docs/durability.md, "The restart fence").',
  );
}
