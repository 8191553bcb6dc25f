/**
 * The README as a new user follows it, in a fresh `npm init -y` project
 * (CommonJS, npm's default) and in one with "type": "module": its install
 * block, then its Quick start server.ts and client.ts copied verbatim, print
 * the same charge twice. Then docs/stores.md's "Move the Quick start to Redis
 * or PostgreSQL", done as written (its commands run, its lines in place of the
 * store line), prints the same charge twice on each. In the same projects every entry of the packed
 * package loads (`require` or `import`) and typechecks with `module: node16`,
 * and the PostgreSQL migrations shipped in the package are found from either build.
 * Last, in the "type": "module" project, docs/mysql.md's and docs/sqlite.md's setup (their install
 * lines, their trpc.ts and db.ts verbatim) runs on MariaDB and on a SQLite file: drizzle-dialects.ts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { blocksOf, quickstartStoreOf, quickstartWith } from '../../scripts/check-docs.js';
import { dialectPages } from './drizzle-dialects.js';
import { commandEnv, NPM_FLAGS, REPO, run } from './pack.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
/** A logical database of the suite's Redis that no other test uses: the keys the Quick start writes are deleted after. */
const REDIS_URL = `${(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379').replace(/\/\d*$/, '')}/11`;
const README = readFileSync(join(REPO, 'README.md'), 'utf8');
const blocks = blocksOf('README.md', README);
const block = (test: (b: (typeof blocks)[number]) => boolean, what: string) => {
  const found = blocks.find(test);
  if (!found) throw new Error(`README.md has no ${what} block`);
  return found.code;
};
const INSTALL = block((b) => b.lang === 'sh' && b.words.includes('install'), '```sh install');
const SERVER = block((b) => b.title === 'server.ts', '```ts server.ts');
const CLIENT = block((b) => b.title === 'client.ts', '```ts client.ts');

/** docs/stores.md's way from the Quick start to a store: the commands to run, and the lines to put in server.ts. */
const STORES = blocksOf('docs/stores.md', readFileSync(join(REPO, 'docs/stores.md'), 'utf8'));
function moveTo(store: 'redis' | 'postgres') {
  const of = (lang: string) => {
    const found = STORES.find((b) => b.lang === lang && quickstartStoreOf(b) === store);
    if (!found) throw new Error(`docs/stores.md has no \`\`\`${lang} quickstart-${store} block`);
    return found.code;
  };
  return {
    commands: of('sh')
      .split('\n')
      .filter((l) => l.trim() !== ''),
    server: quickstartWith(SERVER, of('ts')),
  };
}

let tgz: string;
const dirs: string[] = [];
/** Each project's directory, once its install block has run. */
const projects: Partial<Record<'commonjs' | 'module', string>> = {};
const children: ChildProcess[] = [];
/** npx starts tsx, which starts node: the whole group goes. */
const stop = (child: ChildProcess) => {
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    // already gone
  }
};

beforeAll(() => {
  tgz = inject('tgz');
});

afterAll(() => {
  for (const child of children) stop(child);
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });
}

/** Port 3000 held by the server of the test before (killed, and gone a moment later) is let go first. */
async function waitForPort3000(): Promise<void> {
  for (let tries = 0; tries < 50 && !(await portIsFree(3000)); tries++) await new Promise((r) => setTimeout(r, 100));
  expect(await portIsFree(3000), 'the Quick start listens on port 3000, which something else holds').toBe(true);
}

/** Starts `npx tsx server.ts` and resolves once it prints its first line. */
function startServer(dir: string, env = commandEnv()): Promise<{ child: ChildProcess; firstLine: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('npx', ['tsx', 'server.ts'], {
      cwd: dir,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // a group of its own, so stop() ends npx, tsx and node together
    });
    children.push(child);
    let output = '';
    const timer = setTimeout(() => reject(new Error(`server.ts printed nothing in 30 s:\n${output}`)), 30_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('\n')) {
        clearTimeout(timer);
        resolve({ child, firstLine: output.split('\n')[0]! });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`server.ts exited with ${code}:\n${output}`)));
  });
}

/** A documented shell line, as a user types it (npm's lines quiet and offline-first, as the install block's). */
async function runDocumented(command: string, dir: string, env: NodeJS.ProcessEnv): Promise<void> {
  const line = command.trim().startsWith('npm install') ? `${command.trim()} ${NPM_FLAGS.join(' ')}` : command;
  await run('bash', ['-c', line], dir, env);
}

/** Starts the project's server.ts, runs its client.ts: the two lines print the same charge. */
async function payTwice(dir: string, env: NodeJS.ProcessEnv): Promise<void> {
  await waitForPort3000();
  const { child, firstLine } = await startServer(dir, env);
  expect(firstLine).toBe('Listening on http://localhost:3000');
  try {
    const { output } = await run('npx', ['tsx', 'client.ts'], dir, env);
    const lines = output.trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^\{ chargeId: '[0-9a-f-]{36}', amount: 1000 \}$/);
    expect(lines[1]).toBe(lines[0]);
  } finally {
    stop(child);
  }
}

describe.each(['commonjs', 'module'] as const)('a fresh npm init -y project (%s)', (type) => {
  let dir: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), `trpc-idempotency-quickstart-${type}-`));
    dirs.push(dir);
    await run('npm', ['init', '-y'], dir);
    if (type === 'module') await run('npm', ['pkg', 'set', 'type=module'], dir);
    // The install block, line by line, with the packed tarball for the package itself.
    for (const line of INSTALL.split('\n').filter((l) => l.trim() !== '')) {
      const args = line.trim().split(/\s+/);
      expect(args[0], `install block line: ${line}`).toBe('npm');
      await run('npm', [...args.slice(1).map((arg) => (arg === 'trpc-idempotency' ? tgz : arg)), ...NPM_FLAGS], dir);
    }
    projects[type] = dir;
  });

  it('runs the Quick start verbatim: the server says where it listens, the client prints the same charge twice', async () => {
    writeFileSync(join(dir, 'server.ts'), SERVER);
    writeFileSync(join(dir, 'client.ts'), CLIENT);
    await payTwice(dir, commandEnv());
  });

  it('moves to Redis as docs/stores.md says: its install, its lines for the store line; the same charge twice', async () => {
    const { commands, server } = moveTo('redis');
    const env = commandEnv({ REDIS_URL });
    const redis = new Redis(REDIS_URL);
    try {
      for (const command of commands) await runDocumented(command, dir, env);
      writeFileSync(join(dir, 'server.ts'), server);
      await payTwice(dir, env);
      expect((await redis.keys('idem:*')).length, 'the records are in Redis').toBeGreaterThan(0);
    } finally {
      const keys = await redis.keys('idem:*');
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
    }
  });

  it('moves to PostgreSQL as docs/stores.md says: its install, its migrate command, its lines; the same charge twice', async () => {
    const { commands, server } = moveTo('postgres');
    // A database of its own, as a new user's: the table made by the documented command, nothing else
    const database = `quickstart_${type}_${process.pid}`;
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    const url = new URL(DATABASE_URL);
    url.pathname = `/${database}`;
    const env = commandEnv({ DATABASE_URL: url.toString() });
    try {
      await admin.query(`drop database if exists ${database} with (force)`);
      await admin.query(`create database ${database}`);
      for (const command of commands) await runDocumented(command, dir, env);
      writeFileSync(join(dir, 'server.ts'), server);
      await payTwice(dir, env);
      const db = new pg.Client({ connectionString: url.toString() });
      await db.connect();
      const { rows } = await db.query(`select count(*)::int as n from idempotency_keys where state = 'completed'`);
      await db.end();
      expect(rows[0].n, 'the record is in PostgreSQL').toBe(1);
    } finally {
      await admin.query(`drop database if exists ${database} with (force)`);
      await admin.end();
    }
  });

  it('loads every entry and typechecks with module node16; the shipped migrations are found', async () => {
    await run('npm', ['install', 'ioredis', 'drizzle-orm', 'pg', '@opentelemetry/api', ...NPM_FLAGS], dir);
    const schema = `quickstart_${type}_${process.pid}`;
    // What each entry exports, through this project's own module system, and the migrations run.
    writeFileSync(
      join(dir, 'entries.ts'),
      `import { withIdempotency, IdempotencyError } from 'trpc-idempotency';
import { idempotencyLink, createIdempotencyKey } from 'trpc-idempotency/client';
import { createIdempotencyEngine, DEFAULT_POLICY } from 'trpc-idempotency/core';
import { redisStore } from 'trpc-idempotency/redis';
import { drizzleStore, migrateIdempotencyKeys } from 'trpc-idempotency/drizzle';
import { openTelemetry } from 'trpc-idempotency/otel';
import { initTRPC } from '@trpc/server';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';

const t = initTRPC.create();
const procedure = withIdempotency(t.procedure, { scope: 'global' });
const router = t.router({ pay: procedure.mutation(() => 'paid') });
const loaded: Record<string, string> = {
  withIdempotency: typeof withIdempotency,
  IdempotencyError: typeof IdempotencyError,
  idempotencyLink: typeof idempotencyLink,
  createIdempotencyKey: typeof createIdempotencyKey,
  createIdempotencyEngine: typeof createIdempotencyEngine,
  redisStore: typeof redisStore,
  drizzleStore: typeof drizzleStore,
  openTelemetry: typeof openTelemetry,
  ttl: typeof DEFAULT_POLICY.ttl,
  router: typeof router.createCaller,
};
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, options: '-c search_path=${schema}' });
migrateIdempotencyKeys(drizzle(pool), { migrationsSchema: '${schema}' })
  .then(({ applied }) => console.log(JSON.stringify({ loaded, applied, format: typeof require === 'function' ? 'commonjs' : 'module' })))
  .finally(() => pool.end());
`,
    );
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'node16',
          moduleResolution: 'node16',
          target: 'ES2022',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ['node'],
          typeRoots: [join(REPO, 'node_modules/@types')],
        },
        files: ['entries.ts', 'server.ts', 'client.ts'],
      }),
    );
    // skipLibCheck is off so that this package's declarations are checked as a user's tsc reads them;
    // errors inside other packages' declarations (drizzle-orm's under TypeScript 7) are theirs.
    const typecheck = await run(join(REPO, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], dir).then(
      () => '',
      (error: Error) => error.message,
    );
    const ours = typecheck
      .split('\n')
      .filter((line) => /error TS\d+/.test(line))
      .filter((line) => !line.startsWith('node_modules/') || line.startsWith('node_modules/trpc-idempotency/'));
    expect(ours).toEqual([]);

    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    try {
      await admin.query(`drop schema if exists ${schema} cascade`);
      await admin.query(`create schema ${schema}`);
      const { output } = await run('npx', ['tsx', 'entries.ts'], dir, commandEnv({ DATABASE_URL }));
      const result = JSON.parse(output.trim().split('\n').at(-1)!);
      expect(result.format).toBe(type);
      for (const [name, kind] of Object.entries(result.loaded)) {
        expect(kind, name).toBe(name === 'ttl' ? 'number' : 'function');
      }
      expect(result.applied).toBeGreaterThan(0);
      const { rows } = await admin.query(
        `select count(*)::int as n from information_schema.tables where table_schema = $1 and table_name = 'idempotency_keys'`,
        [schema],
      );
      expect(rows[0].n).toBe(1);
    } finally {
      await admin.query(`drop schema if exists ${schema} cascade`);
      await admin.end();
    }
  });
});

// The Quick start's "type": "module" project, installed above: one more npm install, not another project.
dialectPages(
  () => projects.module,
  () => tgz,
);
