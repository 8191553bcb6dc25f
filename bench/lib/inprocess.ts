/**
 * The in-process measurements' router (overhead.ts, profile-inprocess.ts): the bench's mutation
 * without idempotency (`plain`), with it (`idempotent`: memory store, key from the context), and
 * with the least an idempotency layer does in process (`minimal`, see {@link minimalLayer}),
 * called through server-side callers, so no HTTP is measured.
 */
import { initTRPC, TRPCError } from '@trpc/server';
import { fingerprint } from '../../dist/core.js';
import { memoryStore, withIdempotency } from '../../dist/index.js';
import { type PayInput, parsePayInput } from './app.js';

export interface InProcessCtx {
  key: string;
}

export const INPUT: PayInput = { amount: 4200, currency: 'eur' };

const t = initTRPC.context<InProcessCtx>().create();
const idempotent = withIdempotency(t.procedure, {
  scope: 'global',
  store: memoryStore(),
  getKey: ({ ctx }) => ctx.key,
});
const resolve = ({ input }: { input: PayInput }) => ({
  id: 'pay_1234567',
  amount: input.amount,
  currency: input.currency,
  status: 'succeeded',
  created: 1_700_001_234_567,
  description: 'Benchmark payment: one Redis INCR per call; this text pads the result to about two hundred bytes.',
});

/**
 * A measuring instrument, not a layer to use: what any idempotency layer does per call in process, and
 * nothing more. It fingerprints the input (the library's own function), looks the key up in a Map bounded
 * to the memory store's default 10,000 entries (the oldest dropped), and either replays the stored JSON or
 * marks the key in flight, runs the resolver, and stores its result as JSON. No claim token, no store
 * timeouts, no lease, no fence, no events, no error classification, no async store interface. The
 * difference between it and `idempotent` is what those cost in process.
 */
function minimalLayer<I, R>(resolver: (opts: { input: I }) => R) {
  const records = new Map<string, { fp: string; body: string | undefined }>();
  // The oldest key, found by one iterator that goes on from where it stopped: a fresh one per eviction
  // would step over every slot deleted at the Map's head until it rehashes.
  let oldest = records.keys();
  const evict = () => {
    let next = oldest.next();
    if (next.done === true) next = (oldest = records.keys()).next();
    records.delete(next.value!);
  };
  return async (opts: { ctx: InProcessCtx; input: I; path: string }) => {
    const id = `:${opts.path}:${opts.ctx.key}`;
    const fp = fingerprint(opts.path, opts.input);
    const found = records.get(id);
    if (found !== undefined) {
      if (found.fp !== fp) throw new TRPCError({ code: 'UNPROCESSABLE_CONTENT', message: 'another payload' });
      if (found.body === undefined) throw new TRPCError({ code: 'CONFLICT', message: 'in flight' });
      return JSON.parse(found.body) as R;
    }
    if (records.size >= 10_000) evict();
    const record: { fp: string; body: string | undefined } = { fp, body: undefined };
    records.set(id, record);
    const value = await resolver(opts);
    record.body = JSON.stringify(value);
    return value;
  };
}

const router = t.router({
  plain: t.procedure.input(parsePayInput).mutation(resolve),
  idempotent: idempotent.input(parsePayInput).mutation(resolve),
  minimal: t.procedure.input(parsePayInput).mutation(minimalLayer(resolve)),
});

/** A caller on one context object: change `ctx.key` between calls to give each its own key. */
export const callerFor = t.createCallerFactory(router);

/**
 * The same router on the Redis store (over ioredis or node-redis, on REDIS_URL), its keys under a prefix
 * of this process's own: `close()` deletes them and closes the client.
 */
export async function redisCallerFor(library: 'ioredis' | 'node-redis', ctx: InProcessCtx) {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const { redisStore } = await import('../../dist/redis.js');
  const prefix = `bench-inprocess-${process.pid}:`;
  let client: Parameters<typeof redisStore>[0]['client'];
  let keys: (pattern: string) => Promise<string[]>;
  let del: (keys: string[]) => Promise<unknown>;
  let quit: () => Promise<unknown>;
  if (library === 'ioredis') {
    const { Redis } = await import('ioredis');
    const redis = new Redis(url);
    client = redis;
    keys = (pattern) => redis.keys(pattern);
    del = (list) => redis.del(...list);
    quit = () => redis.quit();
  } else {
    const { createClient } = await import('redis');
    const redis = await createClient({ url }).connect();
    client = redis;
    keys = (pattern) => redis.keys(pattern);
    del = (list) => redis.del(list);
    quit = () => redis.quit();
  }
  const r = initTRPC.context<InProcessCtx>().create();
  const procedure = withIdempotency(r.procedure, {
    scope: 'global',
    store: redisStore({ client, prefix }),
    getKey: ({ ctx }) => ctx.key,
  });
  const caller = r.createCallerFactory(
    r.router({
      plain: r.procedure.input(parsePayInput).mutation(resolve),
      idempotent: procedure.input(parsePayInput).mutation(resolve),
      minimal: r.procedure.input(parsePayInput).mutation(minimalLayer(resolve)),
    }),
  )(ctx);
  return {
    caller,
    async close() {
      const found = await keys(`${prefix}*`);
      for (let i = 0; i < found.length; i += 1_000) await del(found.slice(i, i + 1_000));
      await quit();
    },
  };
}
