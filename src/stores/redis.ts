import type { Cluster, Redis } from 'ioredis';
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
import { settledNotifications } from './redis-notifications.js';
import { type ScriptKeys, scriptRunner } from './redis-script-runner.js';
import { CLAIM, COMPLETE, EXTEND, RELEASE, SAVE_STEP } from './redis-scripts.js';

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

  const run = scriptRunner(client);
  const notifications = settledNotifications(client, channel);
  /** A script on a record key, and its steps key if given. */
  const onKeys = (key: string, key2?: string): ScriptKeys => (key2 === undefined ? [1, key] : [2, key, key2]);

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
      const reply = (await run(CLAIM, onKeys(key, stepsKeyOf(key)), args)) as [string, string | number, unknown?];
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
      const reply = await run(COMPLETE, onKeys(key, clearSteps === true ? stepsKeyOf(key) : undefined), [
        token,
        state === 'completed' ? 'c' : 'f',
        body,
        Math.ceil(ttl),
        channel,
        fingerprint,
        key,
      ]);
      const result = COMPLETED[reply as number];
      if (result === undefined) throw new Error(`redisStore: unexpected reply ${String(reply)} to a completion.`);
      return result;
    },

    async saveStep({ id, token, fingerprint, index, name, body, ttl }: SaveStepInput): Promise<SaveStepResult> {
      const key = keyOf(id);
      const reply = await run(SAVE_STEP, onKeys(key, stepsKeyOf(key)), [
        token,
        fingerprint,
        index,
        name,
        body,
        Math.ceil(ttl),
      ]);
      const result = SAVED[reply as number];
      if (result === undefined) throw new Error(`redisStore: unexpected reply ${String(reply)} to a step.`);
      return result;
    },

    async release({ id, token }: FencedInput): Promise<boolean> {
      const key = keyOf(id);
      return (await run(RELEASE, onKeys(key), [token, channel, key])) === 1;
    },

    async extend({ id, token, lockTtl }: ExtendInput): Promise<boolean> {
      return (await run(EXTEND, onKeys(keyOf(id)), [token, Math.ceil(lockTtl)])) === 1;
    },

    onSettled: (id: string, listener: () => void) => notifications.listen(keyOf(id), listener),

    close: () => notifications.close(),
  };
}
