/**
 * A measuring instrument, not a store to use: the library's engine and tRPC adapter on a Redis store that
 * sends the plain commands the peers send instead of the Redis store's Lua scripts. It is what the Redis
 * store would cost without its guarantees, so the difference between the two rows is their price:
 * - a claim is one `SET key value NX PX lockTtl GET` (atomic, as node-idempotency's and Powertools' SET NX),
 *   with no deadline: a claim that reaches Redis after the engine gave up on it still takes the key;
 * - a completion is one `SET key value PX ttl`, fenced by nothing: a holder whose claim expired overwrites
 *   the outcome of the request that took the key over;
 * - no steps, no notifications for waiting requests.
 * The commands called in one turn of the event loop go out in one write, as the Redis store's scripts do,
 * so that the commands are the only difference.
 */
import { AsyncResource } from 'node:async_hooks';
import type { Redis } from 'ioredis';
import type { ClaimResult, CompleteResult, IdempotencyStore } from '../../dist/core.js';

const SEP = '\u0000';
// Sent from no request's async context, as the Redis store sends its batch.
const detached = new AsyncResource('bench.PlainRedisBatch');
const STATES = { c: 'completed', f: 'failed' } as const;

interface Queued {
  args: (string | number)[];
  resolve(reply: unknown): void;
  reject(error: unknown): void;
}

export function plainRedisStore(client: Redis, prefix = 'idem-plain:'): IdempotencyStore {
  const keyOf = (id: string) => `${prefix}{${id}}`;
  let queued: Queued[] = [];

  function flush() {
    const calls = queued;
    queued = [];
    if (calls.length === 1) {
      const call = calls[0]!;
      client.call('SET', call.args).then(call.resolve, call.reject);
      return;
    }
    const pipeline = client.pipeline();
    for (const call of calls) pipeline.call('SET', call.args);
    pipeline.exec().then(
      (replies) => {
        for (let i = 0; i < calls.length; i++) {
          const reply = replies?.[i];
          if (reply === undefined) calls[i]!.reject(new Error('no reply to a pipelined SET'));
          else if (reply[0] === null) calls[i]!.resolve(reply[1]);
          else calls[i]!.reject(reply[0]);
        }
      },
      (error: unknown) => {
        for (const call of calls) call.reject(error);
      },
    );
  }

  function set(...args: (string | number)[]): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (queued.push({ args, resolve, reject }) === 1) detached.runInAsyncScope(setImmediate, undefined, flush);
    });
  }

  return {
    name: 'redis-plain',

    async claim({ id, fingerprint, token, lockTtl }): Promise<ClaimResult> {
      const old = (await set(
        keyOf(id),
        `p${SEP}${fingerprint}${SEP}${token}`,
        'PX',
        Math.ceil(lockTtl),
        'NX',
        'GET',
      )) as string | null;
      if (old === null) return { state: 'acquired', time: Date.now() };
      const [state, storedFingerprint = '', , body] = old.split(SEP);
      if (state === 'p') return { state: 'in_progress', fingerprint: storedFingerprint };
      const finished = STATES[state as keyof typeof STATES];
      return storedFingerprint === fingerprint
        ? { state: finished, fingerprint: storedFingerprint, body }
        : { state: finished, fingerprint: storedFingerprint };
    },

    async complete({ id, fingerprint, token, state, body, ttl }): Promise<CompleteResult> {
      const value = `${state === 'completed' ? 'c' : 'f'}${SEP}${fingerprint}${SEP}${token}${SEP}${body}`;
      await set(keyOf(id), value, 'PX', Math.ceil(ttl));
      return 'stored';
    },

    async release({ id }) {
      return (await client.del(keyOf(id))) === 1;
    },

    async extend({ id, lockTtl }) {
      return (await client.pexpire(keyOf(id), Math.ceil(lockTtl))) === 1;
    },
  };
}
