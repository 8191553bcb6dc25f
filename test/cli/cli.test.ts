/**
 * `npx trpc-idempotency`, the built CLI run as a child process, against real
 * stores: Redis (ioredis and node-redis), a 3-master Redis Cluster started for
 * this file (both clients) and PostgreSQL (a schema of this file's own). The
 * records are made through the public API (the stores' claim, complete,
 * saveStep, and the engine for a holder that renews its claim); the CLI reads
 * and deletes them with the stores' own code. Exit codes, the human output
 * and the `--json` documents are checked.
 */

import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, readFileSync } from 'node:fs';
import { initTRPC } from '@trpc/server';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Cluster } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redact } from '../../src/cli/connect.js';
import { connectSql, MYSQL_LOCK_WAIT_TIMEOUT } from '../../src/cli/connect-sql.js';
import { createIdempotencyEngine, type IdempotencyStore, recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import { withIdempotency } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { PACKAGE_MIGRATIONS } from '../../src/stores/drizzle/embedded-migrations.js';
import { MYSQL_MIGRATIONS } from '../../src/stores/drizzle/mysql/embedded-migrations.js';
import { SQLITE_MIGRATIONS } from '../../src/stores/drizzle/sqlite/embedded-migrations.js';
import { isolatedDatabase, MYSQL_URL } from '../helpers/mysql.js';
import { DATABASE_URL, isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { claimWithSteps } from '../helpers/records.js';
import { connectRedis, deleteByPrefix, REDIS_URL, sleep, uniquePrefix } from '../helpers/redis.js';
import { type PrivateCluster, startPrivateCluster } from '../helpers/redis-server.js';
import { sqliteFile } from '../helpers/sqlite.js';
import { type BuiltCli, buildCli, REPO } from './built-cli.js';

let cli: BuiltCli;
let schema: PgSchema;
let cluster: PrivateCluster;
let clusterClient: Cluster;
const redis = connectRedis();
const prefix = uniquePrefix('cli');

beforeAll(async () => {
  [cli, schema, cluster] = await Promise.all([buildCli(), isolatedSchema('cli'), startPrivateCluster(3)]);
  clusterClient = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));
}, 120_000);

afterAll(async () => {
  cli?.remove();
  clusterClient?.disconnect();
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
  await Promise.all([schema?.drop(), cluster?.stop()]);
});

interface Kind {
  name: string;
  /** The CLI's store flags. */
  flags(): string[];
  /** The store the records are made with, as the application makes it. */
  store(): IdempotencyStore;
  /**
   * Every test; otherwise (node-redis: the same store and commands, another client for the CLI)
   * the states and the release of a live claim only.
   */
  full: boolean;
  /**
   * Moves the live claim on `id` to `remaining` ms before its expiry, as if its holder had not
   * renewed it since: the time the operator's commands judge a claim by, without waiting for it.
   */
  age(id: string, remaining: number): Promise<void>;
}

/** On Redis a claim's remaining lease is its key's time to live. */
const ageOnRedis =
  (client: () => { pexpire(key: string, ms: number): Promise<number> }, prefixOf: () => string) =>
  async (id: string, remaining: number) => {
    expect(await client().pexpire(redisStore({ client: redis, prefix: prefixOf() }).keyOf(id), remaining)).toBe(1);
  };
const ageOnPostgres = async (id: string, remaining: number) => {
  const { rowCount } = await schema.pool.query(
    `update idempotency_keys set expires_at = statement_timestamp() + $2::float8 * interval '1 millisecond'
      where id = $1 and state = 'in_progress' and expires_at > statement_timestamp()`,
    [id, remaining],
  );
  expect(rowCount).toBe(1);
};

const clusterUrls = () => cluster.ports.map((port) => `redis://127.0.0.1:${port}`);
const KINDS: Kind[] = [
  {
    name: 'redis (ioredis)',
    flags: () => ['--redis', REDIS_URL, '--prefix', prefix],
    store: () => redisStore({ client: redis, prefix }),
    full: true,
    age: ageOnRedis(
      () => redis,
      () => prefix,
    ),
  },
  {
    name: 'redis (node-redis)',
    flags: () => ['--redis', REDIS_URL, '--prefix', prefix, '--redis-client', 'node-redis'],
    store: () => redisStore({ client: redis, prefix }),
    full: false,
    age: ageOnRedis(
      () => redis,
      () => prefix,
    ),
  },
  {
    name: 'redis cluster (ioredis)',
    // seed nodes as repeated flags and as a comma-separated list
    flags: () => [
      '--redis',
      clusterUrls()[0]!,
      '--redis',
      clusterUrls().slice(1).join(','),
      '--cluster',
      '--prefix',
      'cli:',
    ],
    store: () => redisStore({ client: clusterClient, prefix: 'cli:' }),
    full: true,
    age: ageOnRedis(
      () => clusterClient,
      () => 'cli:',
    ),
  },
  {
    name: 'redis cluster (node-redis)',
    flags: () => ['--redis', clusterUrls().join(','), '--cluster', '--redis-client', 'node-redis', '--prefix', 'cli:'],
    store: () => redisStore({ client: clusterClient, prefix: 'cli:' }),
    full: false,
    age: ageOnRedis(
      () => clusterClient,
      () => 'cli:',
    ),
  },
  {
    name: 'postgresql',
    flags: () => ['--database-url', DATABASE_URL, '--schema', schema.schema],
    store: () => drizzleStore({ db: schema.db }),
    full: true,
    age: ageOnPostgres,
  },
];

type Json = Record<string, any>;

const procedure = () => `cli.op${randomUUID().slice(0, 8)}`;

async function completed(store: IdempotencyStore, id: string, body: string, state: 'completed' | 'failed') {
  expect((await store.claim({ id, fingerprint: 'fp', token: `t-${id}`, lockTtl: 10_000 })).state).toBe('acquired');
  expect(await store.complete({ id, fingerprint: 'fp', token: `t-${id}`, state, body, ttl: 600_000 })).toBe('stored');
}

/** The JSON lines written to stderr (the events). */
const eventLines = (stderr: string): Json[] =>
  stderr
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line));

describe.each(KINDS)('on $name', (kind) => {
  // Not registered at all on the node-redis variants (not skipped): what they test is the admin
  // layer and the CLI, the same on every client; the client's own paths are in the tests all variants run.
  const itFull = (kind.full ? it : () => {}) as typeof it;
  const flags = () => kind.flags();

  it('inspects each state, named as the layer names it or by id, in words and as JSON', async () => {
    const store = kind.store();
    const p = procedure();
    const name = (key: string) => ['--scope', 'u1', '--procedure', p, '--key', key];

    const absent = await cli.json<Json>(['inspect', ...flags(), ...name('k-absent')]);
    expect(absent.code).toBe(4);
    expect(absent.doc).toMatchObject({ id: recordId('u1', p, 'k-absent'), state: 'absent', procedure: p, steps: [] });
    expect(absent.doc.keyHash).toMatch(/^[0-9a-f]{16}$/);
    const absentText = await cli.run(['inspect', ...flags(), ...name('k-absent')]);
    expect(absentText.code).toBe(4);
    expect(absentText.stdout).toContain('absent: no record under this key');

    const body = '{"charge":"ch_é€"}';
    await completed(store, recordId('u1', p, 'k-done'), body, 'completed');
    const done = await cli.json<Json>(['inspect', ...flags(), ...name('k-done')]);
    expect(done.code).toBe(0);
    expect(done.doc).toMatchObject({ state: 'completed', bytes: Buffer.byteLength(body), fingerprint: 'fp' });
    expect(done.doc.body).toBeUndefined();
    expect(done.doc.expiresAt - done.doc.time).toBeGreaterThan(590_000);
    const doneText = await cli.run(['inspect', ...flags(), ...name('k-done'), '--body']);
    expect(doneText.code).toBe(0);
    expect(doneText.stdout).toMatch(/state +completed: a stored result/);
    expect(doneText.stdout).toMatch(new RegExp(`outcome +${Buffer.byteLength(body)} B`));
    expect(doneText.stdout).toMatch(/claimed +(\d+ms|\d+\.\ds) ago \(20\d\d-/);
    expect(doneText.stdout).toContain(`body         ${body}`);
    expect((await cli.json<Json>(['inspect', ...flags(), ...name('k-done'), '--body'])).doc.body).toBe(body);

    await completed(store, recordId('u1', p, 'k-failed'), '{"code":"BAD_REQUEST"}', 'failed');
    const failed = await cli.json<Json>(['inspect', ...flags(), ...name('k-failed')]);
    expect(failed.code).toBe(0);
    expect(failed.doc).toMatchObject({ state: 'failed', bytes: 22 });

    const held = recordId('u1', p, 'k-held');
    await claimWithSteps(store, held, {
      token: 'attempt-1',
      lockTtl: 60_000,
      ttl: 600_000,
      steps: [
        { name: 'reserve', body: '{"r":1}' },
        { name: 'charge', body: '"é"' },
      ],
    });
    const inProgress = await cli.json<Json>(['inspect', ...flags(), '--id', held]);
    expect(inProgress.code).toBe(0);
    expect(inProgress.doc).toMatchObject({
      id: held,
      state: 'in_progress',
      token: 'attempt-1',
      lockTtl: 60_000,
      live: true,
      steps: [
        { name: 'reserve', bytes: 7 },
        { name: 'charge', bytes: 4 },
      ],
    });
    const heldText = await cli.run(['inspect', ...flags(), ...name('k-held')]);
    expect(heldText.stdout).toMatch(/state +in_progress/);
    expect(heldText.stdout).toMatch(/lease +\d+\.\ds left, renewed (\d+ms|\d+\.\ds) ago .*: its holder is alive/);
    expect(heldText.stdout).toMatch(/steps +2 recorded, expire in 9m \d+s: reserve \(7 B\), charge \(4 B\)/);
    await store.release({ id: held, token: 'attempt-1' });
  });

  it('stuck finds a claim its holder keeps renewing; release refuses it without --force, frees it with --force', async () => {
    const store = kind.store();
    const p = procedure();
    const key = randomUUID();
    const id = recordId('u1', p, key);
    // a holder that hangs: its engine renews the claim every lockTtl / 3 while the operation waits
    // (every 20 s: the test ends before the first renewal, so the claim's liveness never nears its edge)
    const engine = createIdempotencyEngine({ store, lockTtl: 60_000 });
    let finish!: () => void;
    const hanging = engine
      .run({ key, name: p, scope: 'u1', payload: { amount: 1 } }, () => new Promise<void>((r) => (finish = r)))
      .catch((error: unknown) => error);
    await sleep(1_200);

    const stuck = await cli.json<Json>(['stuck', ...flags(), '--older-than', '1s', '--procedure', p]);
    expect(stuck.code).toBe(0);
    expect(stuck.doc.complete).toBe(true);
    expect(stuck.doc.olderThan).toBe(1_000);
    expect(stuck.doc.records).toHaveLength(1);
    expect(stuck.doc.records[0]).toMatchObject({ id, procedure: p, state: 'in_progress', lockTtl: 60_000, live: true });
    const stuckText = await cli.run(['stuck', ...flags(), '--older-than', '1s', '--procedure', p]);
    expect(stuckText.stdout).toContain('1 claim in progress taken at least 1.0s ago');
    expect(stuckText.stdout).toContain(id);
    expect(stuckText.stdout).toMatch(/claimed \d+\.\ds ago, \d+\.\ds left, renewed .*: its holder is alive/);
    expect((await cli.json<Json>(['stuck', ...flags(), '--older-than', '1h', '--procedure', p])).doc.records).toEqual(
      [],
    );

    const name = ['--scope', 'u1', '--procedure', p, '--key', key];
    const refused = await cli.json<Json>(['release', ...flags(), ...name]);
    expect(refused.code).toBe(3);
    expect(refused.doc).toMatchObject({ done: false, reason: 'live', record: { state: 'in_progress', live: true } });
    const refusedText = await cli.run(['release', ...flags(), ...name, '--confirm']);
    expect(refusedText.code).toBe(3);
    expect(refusedText.stdout).toMatch(/Refused, nothing was deleted: its holder renewed it .* ago/);
    expect(refusedText.stdout).toContain('the operation runs twice');
    expect(refusedText.stdout).toContain('--force');
    expect(eventLines(refusedText.stderr)).toEqual([]);

    const forced = await cli.json<Json>(['release', ...flags(), ...name, '--force']);
    expect(forced.code).toBe(0);
    expect(forced.doc).toMatchObject({ done: true, record: { id, state: 'in_progress' } });
    expect(forced.doc.event).toMatchObject({ result: 'released', reason: 'operator_forced', name: p });
    expect(eventLines(forced.stderr)).toEqual([forced.doc.event]);
    expect(forced.doc.event.keyHash).toBe(forced.doc.record.keyHash);

    expect((await cli.run(['inspect', ...flags(), ...name])).code).toBe(4);
    expect((await store.claim({ id, fingerprint: 'fp', token: 'next', lockTtl: 5_000 })).state).toBe('acquired');
    finish();
    await hanging;
    await store.release({ id, token: 'next' });
  });

  itFull('a claim no longer renewed: a dry run says what it would do, --confirm releases it', async () => {
    const store = kind.store();
    const p = procedure();
    const id = recordId(undefined, p, 'k');
    // a lease of 15 s, not renewed for more than half of it: its holder is not running (and the
    // claim lasts another 7 s, for the four commands below on a busy machine)
    await store.claim({ id, fingerprint: 'fp', token: 'gone', lockTtl: 15_000 });
    await kind.age(id, 7_000);

    const dry = await cli.json<Json>(['release', ...flags(), '--procedure', p, '--key', 'k']);
    expect(dry.code).toBe(3);
    expect(dry.doc).toMatchObject({ done: false, reason: 'unconfirmed', record: { live: false } });
    const dryText = await cli.run(['release', ...flags(), '--procedure', p, '--key', 'k']);
    expect(dryText.stdout).toContain('Dry run, nothing was deleted: this would release the claim of attempt gone');
    expect(dryText.stdout).toContain('Run it again with --confirm');
    expect(dryText.stdout).toMatch(/its holder stopped renewing it/);
    expect((await cli.run(['inspect', ...flags(), '--id', id])).code).toBe(0);

    const released = await cli.json<Json>(['release', ...flags(), '--id', id, '--confirm']);
    expect(released.code).toBe(0);
    expect(released.doc.event).toMatchObject({ result: 'released', reason: 'operator', name: p });
    expect((await cli.run(['inspect', ...flags(), '--id', id])).code).toBe(4);
  });

  itFull('forgets a stored outcome only with --outcome and --confirm; an absent record answers 4', async () => {
    const store = kind.store();
    const p = procedure();
    const id = recordId('u9', p, 'k');
    await completed(store, id, '{"ok":true}', 'completed');
    const refused = await cli.run(['release', ...flags(), '--id', id]);
    expect(refused.code).toBe(3);
    expect(refused.stdout).toContain('this would forget the stored result (11 B)');
    expect(refused.stdout).toContain('runs the operation again instead of replaying it');
    expect(refused.stdout).toContain('run it again with --outcome');
    // --confirm alone is meant for a claim: an outcome stored since is not forgotten by it
    const confirmOnly = await cli.json<Json>(['release', ...flags(), '--id', id, '--confirm']);
    expect(confirmOnly.code).toBe(3);
    expect(confirmOnly.doc).toMatchObject({ done: false, reason: 'outcome' });
    const dry = await cli.run(['release', ...flags(), '--id', id, '--outcome']);
    expect(dry.code).toBe(3);
    expect(dry.stdout).toContain(`Run it again with --confirm --outcome --token t-${id}`);

    const done = await cli.json<Json>(['release', ...flags(), '--id', id, '--confirm', '--outcome']);
    expect(done.code).toBe(0);
    expect(done.doc.event).toMatchObject({ result: 'forgotten', reason: 'operator', state: 'completed' });
    const again = await cli.json<Json>(['release', ...flags(), '--id', id, '--confirm', '--outcome']);
    expect(again.code).toBe(4);
    expect(again.doc).toMatchObject({ done: false, reason: 'absent' });
    expect((await store.claim({ id, fingerprint: 'fp', token: 'new', lockTtl: 5_000 })).state).toBe('acquired');
    await store.release({ id, token: 'new' });
  });

  itFull('--steps deletes the steps an absent record left', async () => {
    const store = kind.store();
    const p = procedure();
    const id = recordId('u1', p, 'k');
    await claimWithSteps(store, id, { ttl: 600_000, steps: [{ name: 'reserve', body: '1' }] });
    await store.release({ id, token: 'a' });

    const absent = await cli.run(['inspect', ...flags(), '--id', id]);
    expect(absent.code).toBe(4);
    expect(absent.stdout).toMatch(/steps +1 recorded, .*reserve \(1 B\)/);
    const withoutSteps = await cli.run(['release', ...flags(), '--id', id, '--confirm']);
    expect(withoutSteps.code).toBe(4);
    expect(withoutSteps.stdout).toContain('--steps deletes them');
    const deleted = await cli.json<Json>(['release', ...flags(), '--id', id, '--confirm', '--steps']);
    expect(deleted.code).toBe(0);
    expect(deleted.doc.event).toMatchObject({ result: 'forgotten', reason: 'operator' });
    expect((await cli.json<Json>(['inspect', ...flags(), '--id', id])).doc.steps).toEqual([]);
  });

  itFull('stats counts records by state and by procedure, within --max', async () => {
    const store = kind.store();
    const p = procedure();
    await completed(store, recordId(undefined, p, 'a'), '1', 'completed');
    await completed(store, recordId(undefined, p, 'b'), '2', 'completed');
    await completed(store, recordId(undefined, p, 'c'), '3', 'failed');
    await store.claim({ id: recordId(undefined, p, 'd'), fingerprint: 'fp', token: 'd', lockTtl: 10_000 });
    const counts = { in_progress: 1, completed: 2, failed: 1 };
    const stats = await cli.json<Json>(['stats', ...flags(), '--procedure', p]);
    expect(stats.code).toBe(0);
    expect(stats.doc).toMatchObject({ byState: counts, byProcedure: { [p]: counts }, complete: true });
    const text = await cli.run(['stats', ...flags(), '--procedure', p]);
    expect(text.stdout).toContain('1 in progress, 2 completed, 1 failed');
    expect(text.stdout).toMatch(new RegExp(`by procedure:\\n  ${p.replace('.', '\\.')}  1 in progress`));
    const all = await cli.json<Json>(['stats', ...flags()]);
    expect(all.doc.byProcedure[p]).toEqual(counts);
    const partial = await cli.json<Json>(['stats', ...flags(), '--max', '1']);
    expect(partial.code).toBe(0);
    expect(partial.doc.complete).toBe(false);
    expect((await cli.run(['stats', ...flags(), '--max', '1'])).stdout).toContain('the counts are partial');
    await store.release({ id: recordId(undefined, p, 'd'), token: 'd' });
  });
});

// How a record is named is the CLI's, the same on every store: tested on Redis (an absent record's lines on
// PostgreSQL are in the environment's test).
describe('naming a record', () => {
  const kind = KINDS[0]!;
  it("--scope global names the records of a procedure with scope: 'global'; an absent record says what was read", async () => {
    const op = `global${randomUUID().slice(0, 8)}`;
    const t = initTRPC.create();
    const router = t.router({
      [op]: withIdempotency(t.procedure, { store: kind.store(), scope: 'global', getKey: () => 'k' }).mutation(
        () => 'charged',
      ),
    });
    await t.createCallerFactory(router)({})[op]!();

    const named = ['--procedure', op, '--key', 'k'];
    const global = await cli.json<Json>(['inspect', ...kind.flags(), '--scope', 'global', ...named]);
    expect(global.code).toBe(0);
    expect(global.doc).toMatchObject({ id: recordId(undefined, op, 'k'), state: 'completed' });
    const globalText = await cli.run(['inspect', ...kind.flags(), '--scope', 'global', ...named]);
    expect(globalText.stdout).toMatch(new RegExp(`procedure +${op} \\(scope 'global' \\(no scope\\), key k\\)`));

    // under a scope, it is another record: absent, and the output says where it looked and why it may be elsewhere
    const scoped = await cli.run(['inspect', ...kind.flags(), '--scope', 'u1', ...named]);
    expect(scoped.code).toBe(4);
    expect(scoped.stdout).toContain(`read         ${recordId('u1', op, 'k')} at ${redact(REDIS_URL)}`);
    expect(scoped.stdout).toContain(`prefix ${prefix}`);
    expect(scoped.stdout).toMatch(/scope: 'global' .*leave --scope out/);
    // with --json, the JSON document on stdout, the message on stderr (release says it too)
    const released = await cli.json<Json>(['release', ...kind.flags(), '--scope', 'u1', ...named, '--confirm']);
    expect(released.code).toBe(4);
    expect(released.doc).toMatchObject({ done: false, reason: 'absent', record: { state: 'absent' } });
    expect(released.stderr).toContain(`no record ${recordId('u1', op, 'k')} at ${redact(REDIS_URL)}`);
    expect(released.stderr).toMatch(/scope: 'global' .*leave --scope out/);

    // unscoped, a record of a scoped procedure is not found either: the hint says to pass --scope
    const unscoped = await cli.run(['inspect', ...kind.flags(), '--procedure', op, '--key', 'other']);
    expect(unscoped.code).toBe(4);
    expect(unscoped.stdout).toMatch(/no scope: .*--scope/);
    // and --scope global, absent: a tenant whose id is the word global is reached with --id
    const absentGlobal = await cli.run([
      'inspect',
      ...kind.flags(),
      '--scope',
      'global',
      '--procedure',
      op,
      '--key',
      'other',
    ]);
    expect(absentGlobal.code).toBe(4);
    expect(absentGlobal.stdout).toMatch(/the word global, pass --id/);
  });
});

describe('PostgreSQL only', () => {
  it('migrate applies the migrations to a fresh schema once; purge deletes expired rows', async () => {
    const fresh = await isolatedSchema('cli_fresh', 2, false);
    try {
      const flags = ['--database-url', DATABASE_URL, '--schema', fresh.schema];
      const before = await cli.run(['inspect', ...flags, '--procedure', 'p', '--key', 'k']);
      expect(before.code).toBe(1);
      expect(before.stderr).toContain(`no idempotency_keys table in ${fresh.schema}`);

      const journal = ['--migrations-schema', fresh.schema];
      const first = await cli.json<Json>(['migrate', ...flags, ...journal]);
      expect(first.code).toBe(0);
      expect(first.doc).toMatchObject({
        applied: PACKAGE_MIGRATIONS.length,
        migrations: PACKAGE_MIGRATIONS.map((m) => m.tag),
        schema: fresh.schema,
      });
      const second = await cli.run(['migrate', ...flags, ...journal]);
      expect(second.code).toBe(0);
      expect(second.stdout).toContain('Up to date: no migration applied');

      const store = drizzleStore({ db: fresh.db });
      await store.claim({ id: recordId(undefined, 'p', 'old-claim'), fingerprint: 'fp', token: 'a', lockTtl: 1 });
      await store.claim({ id: recordId(undefined, 'p', 'old'), fingerprint: 'fp', token: 'b', lockTtl: 5_000 });
      await store.complete({
        id: recordId(undefined, 'p', 'old'),
        fingerprint: 'fp',
        token: 'b',
        state: 'completed',
        body: '1',
        ttl: 1,
      });
      await completed(store, recordId(undefined, 'p', 'kept'), '1', 'completed');
      await sleep(50);
      const purged = await cli.json<Json>(['purge', ...flags, '--batch-size', '1']);
      expect(purged.code).toBe(0);
      expect(purged.doc.purged).toBe(2);
      const none = await cli.run(['purge', ...flags]);
      expect(none.stdout).toContain('Purged 0 expired rows');
      expect((await cli.run(['inspect', ...flags, '--procedure', 'p', '--key', 'kept'])).code).toBe(0);
    } finally {
      await fresh.drop();
    }
  });

  it('a record that changes between the read and the delete is kept: exit 5', async () => {
    const store = drizzleStore({ db: schema.db });
    const p = procedure();
    const id = recordId(undefined, p, 'k');
    await store.claim({ id, fingerprint: 'fp', token: 'slow', lockTtl: 10_000 });
    await ageOnPostgres(id, 4_900); // not renewed for half its lease: release --confirm would go ahead
    // Its holder completes in a transaction left open: the CLI reads the claim as it was committed,
    // and its delete waits for the row until the completion commits.
    const client = new pg.Client({ connectionString: schema.url });
    await client.connect();
    try {
      await client.query('begin');
      expect(
        await drizzleStore({ db: drizzle(client) }).complete({
          id,
          fingerprint: 'fp',
          token: 'slow',
          state: 'completed',
          body: '1',
          ttl: 60_000,
        }),
      ).toBe('stored');
      const release = cli.json<Json>([
        'release',
        '--database-url',
        DATABASE_URL,
        '--schema',
        schema.schema,
        '--id',
        id,
        '--confirm',
      ]);
      const waits = async () =>
        (
          await schema.pool.query(
            "select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()",
          )
        ).rows[0].n as number;
      for (let i = 0; (await waits()) === 0; i++) {
        if (i > 200) throw new Error('the CLI never waited for the row');
        await sleep(25);
      }
      await client.query('commit');
      const changed = await release;
      expect(changed.code).toBe(5);
      expect(changed.doc).toMatchObject({
        done: false,
        reason: 'changed',
        record: { state: 'in_progress', token: 'slow' },
      });
      expect(eventLines(changed.stderr)).toEqual([]);
      expect(
        (await cli.json<Json>(['inspect', '--database-url', DATABASE_URL, '--schema', schema.schema, '--id', id])).doc
          .state,
      ).toBe('completed');
    } finally {
      await client.end();
    }
  });
});

/**
 * MySQL/MariaDB and SQLite: one pass each through every command, on a database of its own (not as KINDS,
 * which would run every test above again on each: the admin and the CLI's commands are the same code).
 */
interface Dialect {
  name: string;
  /** A database of its own, without the table; `flags` name it for the CLI. */
  open(): Promise<{ flags: string[]; store: () => IdempotencyStore; migrations: number; drop(): Promise<void> }>;
  /** Where migrate says the table went. */
  where: RegExp;
  /** --database-url values refused before any connection, and what the refusal says. */
  refused: [string[], RegExp][];
}

const DIALECTS: Dialect[] = [
  {
    name: 'MariaDB (mysql2)',
    async open() {
      const fresh = await isolatedDatabase('cli', 2, false);
      return {
        flags: ['--database-url', fresh.url],
        store: () => drizzleStore({ db: fresh.db }),
        migrations: MYSQL_MIGRATIONS.length,
        drop: () => fresh.drop(),
      };
    },
    where: /The idempotency_keys table is in database idem_cli_/,
    refused: [
      [
        ['--database-url', MYSQL_URL, '--schema', 'app'],
        /--schema is for PostgreSQL; on MySQL the table is in the URL's database/,
      ],
      [
        ['--database-url', 'mysql://root:secret@127.0.0.1:3306'],
        /"mysql:\/\/root:\*\*\*@127\.0\.0\.1:3306" names no database: pass mysql:\/\/user:password@host:port\/db/,
      ],
      [
        ['--database-url', MYSQL_URL, '--sqlite-client', 'libsql'],
        /--sqlite-client is for a SQLite file .*leave it out/,
      ],
    ],
  },
  {
    name: 'SQLite (better-sqlite3, and libSQL)',
    async open() {
      const fresh = await sqliteFile('cli', false);
      return {
        flags: ['--database-url', `sqlite:${fresh.path}`],
        store: () => drizzleStore({ db: fresh.better() }),
        migrations: SQLITE_MIGRATIONS.length,
        drop: async () => fresh.drop(),
      };
    },
    where: /The idempotency_keys table is in the file \/.*idempotency\.db\./,
    refused: [
      [
        ['--database-url', 'sqlite:app.db', '--schema', 'main'],
        /--schema is for PostgreSQL; on SQLite the table is in the file itself/,
      ],
      [
        ['--database-url', 'sqlite::memory:'],
        /names no SQLite file: pass sqlite:path or file:path .*an in-memory database would be empty/,
      ],
      [['--database-url', 'sqlite:'], /names no SQLite file/],
      [
        ['--database-url', 'sqlite:app.db', '--sqlite-client', 'sqlite3'],
        /--sqlite-client "sqlite3": pass better-sqlite3 or libsql/,
      ],
    ],
  },
];

describe.each(DIALECTS)('on $name', (dialect) => {
  it('migrate, inspect, release, stuck, stats and purge through the CLI; its flags refused with what to pass', async () => {
    const fresh = await dialect.open();
    try {
      const flags = fresh.flags;
      const before = await cli.run(['inspect', ...flags, '--procedure', 'p', '--key', 'k']);
      expect(before.code).toBe(1);
      expect(before.stderr).toMatch(/no idempotency_keys table.*create it with `trpc-idempotency migrate`/);

      const first = await cli.json<Json>(['migrate', ...flags]);
      expect(first.code).toBe(0);
      expect(first.doc).toMatchObject({ applied: fresh.migrations, table: 'idempotency_keys' });
      const second = await cli.run(['migrate', ...flags]);
      expect(second.code).toBe(0);
      expect(second.stdout).toContain('Up to date: no migration applied (journal __trpc_idempotency_migrations).');
      expect(second.stdout).toMatch(dialect.where);

      const store = fresh.store();
      const p = procedure();
      const held = recordId('u1', p, 'k-held');
      await claimWithSteps(store, held, { token: 'attempt-1', lockTtl: 60_000, ttl: 600_000 });
      await completed(store, recordId('u1', p, 'k-done'), '{"charge":"ch_1"}', 'completed');
      const claim = await cli.json<Json>(['inspect', ...flags, '--scope', 'u1', '--procedure', p, '--key', 'k-held']);
      expect(claim.code).toBe(0);
      expect(claim.doc).toMatchObject({ state: 'in_progress', token: 'attempt-1', live: true, steps: [{ name: 's' }] });
      const done = await cli.run(['inspect', ...flags, '--scope', 'u1', '--procedure', p, '--key', 'k-done', '--body']);
      expect(done.code).toBe(0);
      expect(done.stdout).toMatch(/state +completed: a stored result/);
      expect(done.stdout).toContain('body         {"charge":"ch_1"}');

      const stuck = await cli.json<Json>(['stuck', ...flags, '--older-than', '0']);
      expect(stuck.code).toBe(0);
      expect(stuck.doc.records).toMatchObject([{ id: held, state: 'in_progress', live: true }]);
      const stats = await cli.json<Json>(['stats', ...flags]);
      expect(stats.doc).toMatchObject({ byState: { in_progress: 1, completed: 1, failed: 0 }, complete: true });

      const dry = await cli.json<Json>(['release', ...flags, '--id', recordId('u1', p, 'k-done'), '--outcome']);
      expect(dry.code).toBe(3);
      expect(dry.doc).toMatchObject({ done: false, reason: 'unconfirmed' });
      const forgotten = await cli.json<Json>([
        'release',
        ...flags,
        '--id',
        recordId('u1', p, 'k-done'),
        '--outcome',
        '--confirm',
      ]);
      expect(forgotten.code).toBe(0);
      expect(forgotten.doc.event).toMatchObject({ result: 'forgotten' });
      const live = await cli.run(['release', ...flags, '--id', held, '--confirm']);
      expect(live.code).toBe(3);
      const forced = await cli.json<Json>(['release', ...flags, '--id', held, '--force', '--steps']);
      expect(forced.code).toBe(0);
      expect(forced.doc.event).toMatchObject({ result: 'released', reason: 'operator_forced' });
      expect((await cli.run(['inspect', ...flags, '--id', held])).code).toBe(4);

      // expired by the time the CLI runs: a claim of 1 ms, an outcome kept 1 ms
      await store.claim({ id: recordId(undefined, p, 'old-claim'), fingerprint: 'fp', token: 'a', lockTtl: 1 });
      await store.claim({ id: recordId(undefined, p, 'old'), fingerprint: 'fp', token: 'b', lockTtl: 5_000 });
      const old = { id: recordId(undefined, p, 'old'), fingerprint: 'fp', token: 'b', body: '1', ttl: 1 };
      expect(await store.complete({ ...old, state: 'completed' })).toBe('stored');
      await completed(store, recordId(undefined, p, 'kept'), '1', 'completed');
      const purged = await cli.json<Json>(['purge', ...flags, '--batch-size', '1']);
      expect(purged.code).toBe(0);
      expect(purged.doc.purged).toBe(2);
      expect((await cli.run(['inspect', ...flags, '--procedure', p, '--key', 'kept'])).code).toBe(0);

      for (const [args, message] of [
        ...dialect.refused,
        [
          ['migrate', ...flags, '--migrations-schema', 'x'],
          /--migrations-schema is for PostgreSQL; on (MySQL|SQLite) the journal is in/,
        ],
      ] as [string[], RegExp][]) {
        const command = args[0] === 'migrate' ? [] : ['stats'];
        const refused = await cli.run([...command, ...args]);
        expect(refused.code, args.join(' ')).toBe(2);
        expect(refused.stderr, args.join(' ')).toMatch(message);
        expect(refused.stdout).toBe('');
      }
    } finally {
      await fresh.drop();
    }
  });
});

describe('MariaDB only', () => {
  it("waits MYSQL_LOCK_WAIT_TIMEOUT (10 s) for a row lock on every connection of its pool, not InnoDB's 50 s", async () => {
    const fresh = await isolatedDatabase('cli_lock_wait', 1);
    const connection = await connectSql({ kind: 'mysql', url: fresh.url, database: fresh.database }, true);
    try {
      // Two statements sent in one tick: the pool, with no connection yet, opens one for each (its two), each
      // asked for its session's setting.
      const answers = await Promise.all(
        [1, 2].map(() => connection.query('select @@session.innodb_lock_wait_timeout as wait, connection_id() as id')),
      );
      expect(new Set(answers.map(([row]) => row!.id)).size, 'two connections').toBe(2);
      for (const [row] of answers) expect(Number(row!.wait)).toBe(MYSQL_LOCK_WAIT_TIMEOUT);
      expect(MYSQL_LOCK_WAIT_TIMEOUT).toBeLessThan(50);
    } finally {
      await connection.close();
      await fresh.drop();
    }
  });
});

describe('SQLite only', () => {
  it('libSQL reads the file better-sqlite3 wrote, named by a file: URL; a missing file is never created', async () => {
    const file = await sqliteFile('cli_libsql');
    try {
      const id = recordId(undefined, procedure(), 'k');
      await completed(drizzleStore({ db: file.better() }), id, '12', 'completed');
      const read = await cli.json<Json>([
        'inspect',
        '--database-url',
        `file://${file.path}`,
        '--sqlite-client',
        'libsql',
        '--id',
        id,
      ]);
      expect(read.code).toBe(0);
      expect(read.doc).toMatchObject({ state: 'completed', bytes: 2 });
      const missing = `${file.path}-missing`;
      const absent = await cli.run(['stats', '--database-url', `sqlite:${missing}`]);
      expect(absent.code).toBe(1);
      expect(absent.stderr).toContain(`no SQLite file at ${missing}: check the path`);
      expect(existsSync(missing)).toBe(false);
    } finally {
      file.drop();
    }
  });
});

describe('Redis only', () => {
  it("initialize writes the restart fence's markers once", async () => {
    const fence = `${prefix}fence:`;
    const first = await cli.json<Json>(['initialize', '--redis', REDIS_URL, '--prefix', fence]);
    expect(first.code).toBe(0);
    expect(first.doc).toEqual({ written: 1, prefix: fence });
    const again = await cli.run(['initialize', '--redis', REDIS_URL, '--prefix', fence]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('were all there already');
    const onCluster = await cli.json<Json>([
      'initialize',
      '--redis',
      clusterUrls().join(','),
      '--cluster',
      '--prefix',
      'fence:',
    ]);
    expect(onCluster.code).toBe(0);
    expect(onCluster.doc.written).toBeGreaterThan(1);
  });
});

describe('the command line', () => {
  it('--help on every command and at the top, --version, and the executable file itself', async () => {
    const top = await cli.run(['--help']);
    expect(top.code).toBe(0);
    expect(top.stdout).toContain('Usage: trpc-idempotency <command>');
    const helps: Record<string, string> = {};
    for (const command of ['inspect', 'release', 'stuck', 'stats', 'migrate', 'purge', 'initialize']) {
      const help = await cli.run([command, '--help']);
      expect(help.code, command).toBe(0);
      expect(help.stdout).toContain(`Usage: trpc-idempotency ${command}`);
      expect(help.stdout).toContain('Exit codes:');
      expect((await cli.run([command, '-h'])).stdout).toBe(help.stdout);
      expect(top.stdout).toContain(`  ${command} `);
      helps[command] = help.stdout;
    }
    expect((await cli.run(['help', 'release'])).stdout).toContain('--force');
    // the store URLs' variables, where the command takes that store
    const both = /TRPC_IDEMPOTENCY_REDIS_URL[\s\S]*TRPC_IDEMPOTENCY_DATABASE_URL/;
    for (const command of ['inspect', 'release', 'stuck', 'stats']) expect(helps[command]).toMatch(both);
    expect(top.stdout).toMatch(both);
    for (const command of ['migrate', 'purge']) expect(helps[command]).toContain('TRPC_IDEMPOTENCY_DATABASE_URL');
    expect(helps.initialize).toContain('TRPC_IDEMPOTENCY_REDIS_URL');
    expect(helps.initialize).not.toContain('TRPC_IDEMPOTENCY_DATABASE_URL');
    expect(helps.inspect).toContain('--scope global');
    const version = JSON.parse(readFileSync(`${REPO}/package.json`, 'utf8')).version;
    expect((await cli.run(['--version'])).stdout.trim()).toBe(version);

    const source = readFileSync(cli.entry, 'utf8');
    expect(source.startsWith('#!/usr/bin/env node\n')).toBe(true);
    chmodSync(cli.entry, 0o755);
    const { execFileSync } = await import('node:child_process');
    expect(execFileSync(cli.entry, ['--version']).toString().trim()).toBe(version);
  });

  it('reads the store URLs from the environment when no flag gives them; a flag wins', async () => {
    const env = { TRPC_IDEMPOTENCY_REDIS_URL: REDIS_URL, TRPC_IDEMPOTENCY_DATABASE_URL: DATABASE_URL };
    const id = recordId('u1', procedure(), 'k');
    await completed(redisStore({ client: redis, prefix }), id, '1', 'completed');

    const redisOnly = { TRPC_IDEMPOTENCY_REDIS_URL: env.TRPC_IDEMPOTENCY_REDIS_URL };
    const fromRedisEnv = await cli.json<Json>(['inspect', '--prefix', prefix, '--id', id], { env: redisOnly });
    expect(fromRedisEnv.code).toBe(0);
    expect(fromRedisEnv.doc).toMatchObject({ id, state: 'completed', bytes: 1 });
    // an empty variable is no variable; an absent record's lines name the address read (its password hidden)
    // and the schema
    const pgOnly = { ...env, TRPC_IDEMPOTENCY_REDIS_URL: '' };
    const pgId = recordId('u1', procedure(), 'none');
    const absent = await cli.run(['inspect', '--schema', schema.schema, '--id', pgId], { env: pgOnly });
    expect(absent.code).toBe(4);
    expect(absent.stdout).toContain(`read         ${pgId} at ${redact(DATABASE_URL)}, schema ${schema.schema}`);
    expect(absent.stdout).toContain('A record in another --schema is another record.');

    // both set: a flag chooses (and wins over its own variable), or the command's store does
    const both = await cli.run(['inspect', '--id', id], { env });
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(
      /both TRPC_IDEMPOTENCY_REDIS_URL and TRPC_IDEMPOTENCY_DATABASE_URL are set: .*--redis URL or --database-url URL, or empty one/,
    );
    const flagged = await cli.json<Json>(['inspect', '--redis', REDIS_URL, '--prefix', prefix, '--id', id], {
      env: { ...env, TRPC_IDEMPOTENCY_REDIS_URL: 'redis://127.0.0.1:1' },
    });
    expect(flagged.doc.state).toBe('completed');
    const initialized = await cli.json<Json>(['initialize', '--prefix', `${prefix}env:`], { env });
    expect(initialized.doc).toEqual({ written: 1, prefix: `${prefix}env:` });

    // a bad value is named by its variable
    const bad = await cli.run(['stats'], { env: { TRPC_IDEMPOTENCY_DATABASE_URL: 'mongodb://u:secret@db/app' } });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(
      /stats: TRPC_IDEMPOTENCY_DATABASE_URL "mongodb:\/\/u:\*\*\*@db\/app" is not a database URL: pass postgres:\/\/.*, mysql:\/\/.*, or sqlite:path/,
    );
    const wrongStore = await cli.run(['migrate'], { env: redisOnly });
    expect(wrongStore.stderr).toMatch(
      /migrate is for the SQL databases \(PostgreSQL, MySQL\/MariaDB, SQLite\): pass --database-url URL \(or set TRPC_IDEMPOTENCY_DATABASE_URL\)/,
    );
  });

  it('usage errors exit with 2 and say what to pass; nothing is read', async () => {
    const redisFlags = ['--redis', REDIS_URL];
    const cases: [string[], RegExp][] = [
      [['frobnicate'], /no command frobnicate\. The commands: inspect, release/],
      [['--redis', REDIS_URL, 'inspect'], /the command comes first, not --redis/],
      [
        ['inspect', ...redisFlags, '--procedure', 'p', '--key', 'k', '--frob'],
        /inspect: Unknown option '--frob'.*inspect --help/,
      ],
      [
        ['inspect', ...redisFlags, '--key', 'k'],
        /inspect: missing --procedure P: name the record with --procedure P --key K/,
      ],
      [['release', ...redisFlags], /release: missing --procedure P and --key K/],
      [['inspect', ...redisFlags, '--id', 'x', '--key', 'k'], /not both/],
      [['inspect', '--procedure', 'p', '--key', 'k'], /inspect: pass the store: --redis URL .* or --database-url URL/],
      [['inspect', ...redisFlags, '--database-url', DATABASE_URL, '--id', 'x'], /--redis or --database-url, not both/],
      [
        ['stuck', ...redisFlags, '--older-than', '5 minutes'],
        /--older-than "5 minutes" is not a duration: pass 500ms, 30s, 5m, 2h/,
      ],
      [['stats', ...redisFlags, '--max', '0'], /--max "0" is not a whole number of at least 1/],
      [['migrate', ...redisFlags], /migrate is for the SQL databases .*: pass --database-url URL/],
      [['purge', '--database-url', DATABASE_URL, '--cluster'], /--cluster is for Redis/],
      [['initialize', '--database-url', DATABASE_URL], /initialize is for Redis: pass --redis URL/],
      [['inspect', '--redis', 'localhost:6379', '--id', 'x'], /is not a redis:\/\/ or rediss:\/\/ URL/],
      [['inspect', '--redis', 'redis://a:1,redis://b:2', '--id', 'x'], /add --cluster/],
      [['inspect', ...redisFlags, '--redis-client', 'jedis', '--id', 'x'], /pass ioredis or node-redis/],
      [['inspect', ...redisFlags, '--key'], /--key/],
    ];
    for (const [args, message] of cases) {
      const { code, stdout, stderr } = await cli.run(args);
      expect(code, args.join(' ')).toBe(2);
      expect(stderr, args.join(' ')).toMatch(message);
      expect(stdout).toBe('');
    }
  });

  it('an unreachable store: exit 1 within a few seconds, with the address and the cause', async () => {
    for (const args of [
      ['--redis', 'redis://127.0.0.1:1'],
      ['--redis', 'redis://127.0.0.1:1', '--redis-client', 'node-redis'],
      ['--redis', 'redis://127.0.0.1:1', '--cluster'],
      ['--redis', 'redis://:secret@127.0.0.1:1', '--cluster', '--redis-client', 'node-redis'],
      ['--database-url', 'postgres://postgres:secret@127.0.0.1:1/test'],
      ['--database-url', 'postgres://postgres@127.0.0.1:1/test?password=secret&sslmode=disable'],
    ]) {
      const { code, stderr, stdout, ms } = await cli.run(['stats', ...args, '--json']);
      expect(code, args.join(' ')).toBe(1);
      expect(stderr).toMatch(
        /^trpc-idempotency: cannot reach (Redis|the Redis Cluster|PostgreSQL) at .*127\.0\.0\.1:1.*(ECONNREFUSED|no seed node answered)/,
      );
      expect(stderr).not.toContain('secret');
      expect(stdout).toBe('');
      expect(ms).toBeLessThan(5_000);
    }
  });
});
