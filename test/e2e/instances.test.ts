/**
 * Two instances of the example app, as separate processes, sharing one
 * idempotency store (Redis, then PostgreSQL) and one ledger (PostgreSQL).
 * First calls and retries go to different instances.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DATABASE_URL, isolatedSchema, type PgSchema, withSearchPath } from '../helpers/postgres.js';
import { startTcpProxy } from '../helpers/proxy.js';
import { connectRedis, deleteByPrefix, REDIS_URL, sleep, uniquePrefix } from '../helpers/redis.js';
import { type Instance, pay, startInstance } from './helpers.js';

const LOCK_TTL = 3_000; // storeTimeout is then 1 s (lockTtl / 3)
const redis = connectRedis();
afterAll(() => redis.disconnect());

describe.each(['redis', 'postgres'] as const)('two instances sharing the %s store', (store) => {
  let pgs: PgSchema;
  let a: Instance;
  let b: Instance;
  const started: Instance[] = [];
  const prefix = uniquePrefix(`e2e-${store}`);
  const env = () => ({
    IDEMPOTENCY_STORE: store,
    DATABASE_URL: pgs.url,
    REDIS_PREFIX: prefix,
    LOCK_TTL: String(LOCK_TTL),
  });
  const launch = async (name: string, extra: Record<string, string> = {}) => {
    const instance = await startInstance(`${store}-${name}`, { ...env(), ...extra });
    started.push(instance);
    return instance;
  };
  const charges = async (user: string) =>
    (await pgs.pool.query<{ n: number }>('select count(*)::int as n from charges where user_id = $1', [user])).rows[0]!
      .n;

  beforeAll(async () => {
    // the instances create their tables themselves (both at once: one migrates, the other waits)
    pgs = await isolatedSchema(`e2e_${store}`, 2, false);
    [a, b] = await Promise.all([launch('a'), launch('b')]);
  }, 120_000);
  afterAll(async () => {
    await Promise.all(started.map((i) => i.kill('SIGKILL')));
    await deleteByPrefix(redis, prefix);
    await pgs?.drop();
  });

  it('1. without a key: 400, nothing charged', async () => {
    const user = randomUUID();
    expect(await pay(a, { user })).toMatchObject({ status: 400, reason: 'key_missing' });
    expect(await charges(user)).toBe(0);
  });

  it('2 and 3. the first call charges on one instance; the retry on the other replays it', async () => {
    const user = randomUUID();
    const key = randomUUID();
    const first = await pay(a, { user, key, clientTimestamp: 1 });
    expect(first).toMatchObject({ status: 200, instance: `${store}-a`, replayed: false });
    const retry = await pay(b, { user, key, clientTimestamp: 2 });
    expect(retry).toMatchObject({ status: 200, instance: `${store}-b`, replayed: true, chargeId: first.chargeId });
    expect(await charges(user)).toBe(1);
  });

  it('4. the same key with another amount, on the other instance: 422', async () => {
    const user = randomUUID();
    const key = randomUUID();
    await pay(a, { user, key, amount: 1000 });
    expect(await pay(b, { user, key, amount: 9999 })).toMatchObject({ status: 422, reason: 'payload_mismatch' });
    expect(await charges(user)).toBe(1);
  });

  it('5. the same key on both instances at once: one charges, the other gets 409', async () => {
    const user = randomUUID();
    const key = randomUUID();
    const answers = await Promise.all([pay(a, { user, key }), pay(b, { user, key })]);
    expect(answers.map((x) => x.status).sort()).toEqual([200, 409]);
    expect(answers.find((x) => x.status === 409)?.reason).toBe('in_progress');
    expect(await charges(user)).toBe(1);
  });

  it('6. kill -9 of the instance holding the claim mid-charge: the retry on the other charges once, after lockTtl', async () => {
    const victim = await launch('victim', { CHARGE_DELAY_MS: '60000', LOG_EVENTS: '1' });
    const user = randomUUID();
    const key = randomUUID();
    const lost = pay(victim, { user, key }).catch(() => 'connection lost');
    await victim.waitFor(/"result":"acquired"/);
    await victim.kill('SIGKILL');
    expect(await lost).toBe('connection lost');
    expect(await pay(b, { user, key })).toMatchObject({ status: 409 });
    await sleep(LOCK_TTL + 300);
    const retry = await pay(b, { user, key });
    expect(retry).toMatchObject({ status: 200, replayed: false });
    expect(await pay(a, { user, key })).toMatchObject({ status: 200, replayed: true, chargeId: retry.chargeId });
    expect(await charges(user)).toBe(1);
  });

  it('7. the store unreachable: 503 (fail-closed), nothing charged, and service resumes', async () => {
    // the instance reaches its store through a proxy we can cut
    const target = store === 'redis' ? new URL(REDIS_URL) : new URL(DATABASE_URL);
    const proxy = await startTcpProxy({ targetHost: target.hostname, targetPort: Number(target.port) });
    const through = new URL(store === 'redis' ? REDIS_URL : withSearchPath(DATABASE_URL, pgs.schema));
    through.port = String(proxy.port);
    const cut = await launch(
      'cut',
      store === 'redis' ? { REDIS_URL: through.toString() } : { DATABASE_URL: through.toString() },
    );
    const user = randomUUID();
    expect(await pay(cut, { user, key: randomUUID() })).toMatchObject({ status: 200 });
    await proxy.close();
    const refused = await pay(cut, { user, key: randomUUID() });
    expect(refused).toMatchObject({ status: 503, reason: 'store_unavailable' });
    expect(await charges(user)).toBe(1);
    // the other instances never noticed
    expect(await pay(a, { user, key: randomUUID() })).toMatchObject({ status: 200 });
  });

  it('100 concurrent calls with one key spread over both instances: one charge', async () => {
    const user = randomUUID();
    const key = randomUUID();
    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, i) => pay(i % 2 === 0 ? a : b, { user, key, clientTimestamp: i })),
    );
    const ok = answers.filter((x) => x.status === 200);
    expect(ok.length + answers.filter((x) => x.status === 409).length).toBe(100);
    expect(new Set(ok.map((x) => x.chargeId)).size).toBe(1);
    expect(await charges(user)).toBe(1);
  });

  it('exposes its checks as OpenTelemetry metrics on /metrics, per instance and result', async () => {
    const user = randomUUID();
    const key = randomUUID();
    await pay(a, { user, key });
    await pay(a, { user, key });
    const text = await (await fetch(`${a.url}/metrics`)).text();
    expect(text).toMatch(/idempotency_checks_total\{[^}]*idempotency_result="acquired"[^}]*\} [1-9]/);
    expect(text).toMatch(/idempotency_checks_total\{[^}]*idempotency_result="replayed"[^}]*\} [1-9]/);
    expect(text).toMatch(/idempotency_check_duration_bucket/);
    expect(text).not.toContain(key);
  });
});
