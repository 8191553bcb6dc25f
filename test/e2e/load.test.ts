/**
 * Load on two instances sharing Redis: 100 requests per second for 10 s, 30%
 * of them reusing an earlier key, alternating instances.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { connectRedis, deleteByPrefix, uniquePrefix } from '../helpers/redis.js';
import { type Answer, type Instance, pay, startInstance } from './helpers.js';

const RATE = 100;
const SECONDS = 10;
const DUPLICATES = 0.3;

const redis = connectRedis();
const prefix = uniquePrefix('e2e-load');
let pgs: PgSchema;
let instances: Instance[] = [];

beforeAll(async () => {
  pgs = await isolatedSchema('e2e_load', 4, false);
  const env = { IDEMPOTENCY_STORE: 'redis', DATABASE_URL: pgs.url, REDIS_PREFIX: prefix, CHARGE_DELAY_MS: '30' };
  instances = await Promise.all([startInstance('load-a', env), startInstance('load-b', env)]);
}, 120_000);
afterAll(async () => {
  await Promise.all(instances.map((i) => i.kill('SIGKILL')));
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
  await pgs?.drop();
});

describe('load', () => {
  it(`${RATE} requests/s for ${SECONDS} s, ${DUPLICATES * 100}% duplicates: one charge per key, every duplicate replayed or 409`, async () => {
    const user = `load-${randomUUID()}`;
    const keys: string[] = [];
    const calls: { key: string; duplicate: boolean; answer: Promise<Answer> }[] = [];
    const total = RATE * SECONDS;
    await new Promise<void>((done) => {
      let sent = 0;
      const timer = setInterval(() => {
        const duplicate = keys.length > 0 && Math.random() < DUPLICATES;
        const key = duplicate ? keys[Math.floor(Math.random() * keys.length)]! : randomUUID();
        if (!duplicate) keys.push(key);
        // the same operation every time a key is used: the amount is derived from the key
        const amount = 100 + (parseInt(key.slice(0, 4), 16) % 900);
        calls.push({ key, duplicate, answer: pay(instances[sent % 2]!, { user, key, amount, clientTimestamp: sent }) });
        if (++sent === total) {
          clearInterval(timer);
          done();
        }
      }, 1_000 / RATE);
    });
    const answers = await Promise.all(calls.map((c) => c.answer));

    const { rows } = await pgs.pool.query<{ n: number }>('select count(*)::int as n from charges where user_id = $1', [
      user,
    ]);
    expect(rows[0]!.n).toBe(keys.length);

    // the first success of each key is its charge; every other answer for the key is that charge or a 409
    const chargeOf = new Map<string, number>();
    calls.forEach((c, i) => {
      const a = answers[i]!;
      if (a.status === 200 && !a.replayed && a.chargeId !== undefined) {
        expect(chargeOf.has(c.key)).toBe(false); // never two executions of one key
        chargeOf.set(c.key, a.chargeId);
      }
    });
    expect(chargeOf.size).toBe(keys.length);
    let replays = 0;
    let conflicts = 0;
    calls.forEach((c, i) => {
      const a = answers[i]!;
      if (a.status === 409) conflicts++;
      else {
        expect(a.status).toBe(200);
        expect(a.chargeId).toBe(chargeOf.get(c.key));
        if (a.replayed) replays++;
      }
    });
    const duplicates = calls.filter((c) => c.duplicate).length;
    expect(replays + conflicts).toBe(duplicates);
    console.log(
      `load: ${total} requests (${keys.length} keys, ${duplicates} duplicates: ${replays} replayed, ${conflicts} got 409), ` +
        `${rows[0]!.n} charges, instances ${new Set(answers.map((a) => a.instance)).size}`,
    );
  });
});
