/**
 * docs/mysql.md and docs/sqlite.md followed as written, in a project that already has the packed library
 * installed (quickstart.test.ts's "type": "module" project): both pages' install lines in one npm install,
 * then each page's trpc.ts and db.ts verbatim, served over HTTP by a server of the test's own (check.ts,
 * which imports them): the first call runs, its retry replays, the key sent with another payload gets 422.
 * MariaDB: a database of its own on MYSQL_URL's server; SQLite: a file in a temporary directory.
 */
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blocksOf } from '../../scripts/check-docs.js';
import { commandEnv, NPM_FLAGS, REPO, run } from './pack.js';

const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

/** A page's install line and its trpc.ts and db.ts, as written. */
function pageOf(page: 'docs/mysql.md' | 'docs/sqlite.md') {
  const blocks = blocksOf(page, readFileSync(join(REPO, page), 'utf8'));
  const block = (test: (b: (typeof blocks)[number]) => boolean, what: string) => {
    const found = blocks.find(test);
    if (!found) throw new Error(`${page} has no ${what} block`);
    return found.code;
  };
  const install = block((b) => b.lang === 'sh' && b.code.trim().startsWith('npm install'), '```sh npm install');
  return {
    install: install.trim().split(/\s+/).slice(2),
    trpc: block((b) => b.title === 'trpc.ts', '```ts trpc.ts'),
    db: block((b) => b.title === 'db.ts', '```ts db.ts'),
  };
}

/** The test's server: the page's db.ts migrated, a `pay` mutation on its idempotentProcedure, three calls over HTTP. */
const CHECK = `import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { db, idempotentProcedure, migrate } from './db.js';
import { t } from './trpc.js';

let executions = 0;
const router = t.router({
  pay: idempotentProcedure
    .input((raw) => raw as { amount: number })
    .mutation(({ input }) => {
      executions++;
      return { chargeId: randomUUID(), amount: input.amount };
    }),
});
await migrate();
const server = createHTTPServer({ router, createContext: ({ req, res }) => ({ req, res }) }).listen(0, '127.0.0.1');
await once(server, 'listening');
const key = randomUUID();
const pay = async (amount: number) => {
  const response = await fetch(\`http://127.0.0.1:\${(server.address() as AddressInfo).port}/pay\`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ amount }),
  });
  return { status: response.status, replayed: response.headers.get('idempotent-replayed'), body: await response.json() };
};
const first = await pay(1000);
const retry = await pay(1000);
const other = await pay(2000);
console.log(JSON.stringify({ first, retry, other, executions }));
// Ends with nothing left open (the process exits by itself): the server and its kept-alive connections, the
// page's database client (a mysql2 pool, or a better-sqlite3 database).
server.close();
server.closeAllConnections();
const client = db.$client as { end?: () => Promise<void>; close?: () => void };
if (client.end !== undefined) await client.end();
else client.close?.();
`;

interface Checked {
  first: { status: number; replayed: string | null; body: unknown };
  retry: { status: number; replayed: string | null; body: unknown };
  other: { status: number; replayed: string | null; body: { error?: { message?: string } } };
  executions: number;
}

/** The page's trpc.ts and db.ts in a directory of the project (its node_modules found above), and check.ts run there. */
async function follow(project: string, page: ReturnType<typeof pageOf>, name: string, env: NodeJS.ProcessEnv) {
  const dir = join(project, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir);
  const files = { 'trpc.ts': page.trpc, 'db.ts': page.db, 'check.ts': CHECK };
  for (const [file, code] of Object.entries(files)) writeFileSync(join(dir, file), code);
  const { output, ms } = await run(join(project, 'node_modules/.bin/tsx'), ['check.ts'], dir, env);
  return { checked: JSON.parse(output.trim().split('\n').at(-1)!) as Checked, ms };
}

function expectIdempotent({ first, retry, other, executions }: Checked) {
  expect(first.status, JSON.stringify(first.body)).toBe(200);
  expect(first.replayed).toBeNull();
  expect(first.body).toMatchObject({ result: { data: { amount: 1000 } } });
  expect(retry.status).toBe(200);
  expect(retry.replayed, 'the retry is a replay').toBe('true');
  expect(retry.body, 'the same charge').toEqual(first.body);
  expect(other.status, JSON.stringify(other.body)).toBe(422);
  expect(executions, 'the mutation ran once').toBe(1);
}

export function dialectPages(project: () => string | undefined, tgz: () => string): void {
  describe("a Drizzle user on MySQL or SQLite follows the store's page, from the packed package", () => {
    const mysqlPage = pageOf('docs/mysql.md');
    const sqlitePage = pageOf('docs/sqlite.md');
    let dir: string;
    const cleanups: (() => unknown)[] = [];
    afterAll(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup();
    });

    beforeAll(async () => {
      const found = project();
      if (found === undefined) throw new Error('the Quick start\'s "type": "module" project was not installed');
      dir = found;
      // Both pages' install lines in one npm install, the packed tarball for the package itself. Without
      // install scripts: better-sqlite3's compiles its addon (its prebuilt binaries come from GitHub, out of
      // this machine's reach), about 30 s of CPU; the checkout's build of the same version is copied instead.
      const packages = [...new Set([...mysqlPage.install, ...sqlitePage.install])];
      const started = performance.now();
      await run(
        'npm',
        ['install', ...packages.map((p) => (p === 'trpc-idempotency' ? tgz() : p)), '--ignore-scripts', ...NPM_FLAGS],
        dir,
      );
      const version = (root: string) =>
        (
          JSON.parse(readFileSync(join(root, 'node_modules/better-sqlite3/package.json'), 'utf8')) as {
            version: string;
          }
        ).version;
      const addon = 'node_modules/better-sqlite3/build/Release/better_sqlite3.node';
      if (version(dir) === version(REPO)) {
        mkdirSync(join(dir, 'node_modules/better-sqlite3/build/Release'), { recursive: true });
        copyFileSync(join(REPO, addon), join(dir, addon));
      } else {
        await run('npm', ['rebuild', 'better-sqlite3'], dir);
      }
      console.log(`drizzle dialects: npm install ${packages.join(' ')}: ${Math.round(performance.now() - started)} ms`);
    });

    it('docs/mysql.md on MariaDB (a database of its own): the first call runs, the retry replays, another payload 422', async () => {
      const database = `stacks_mysql_page_${process.pid}`;
      const admin = await mysql.createConnection(MYSQL_URL);
      cleanups.push(async () => {
        await admin.query(`drop database if exists \`${database}\``);
        await admin.end();
      });
      await admin.query(`drop database if exists \`${database}\``);
      await admin.query(`create database \`${database}\``);
      const url = new URL(MYSQL_URL);
      url.pathname = `/${database}`;
      const { checked, ms } = await follow(dir, mysqlPage, 'mysql-page', commandEnv({ DATABASE_URL: url.toString() }));
      console.log(`drizzle dialects: docs/mysql.md's setup served its three calls in ${ms} ms`);
      expectIdempotent(checked);
      const [rows] = await admin.query<mysql.RowDataPacket[]>(
        `select count(*) as n from \`${database}\`.idempotency_keys where state = 'completed'`,
      );
      expect(rows[0]!.n, 'the record is in MariaDB').toBe(1);
    });

    it('docs/sqlite.md on a SQLite file: the first call runs, the retry replays, another payload 422', async () => {
      const files = mkdtempSync(join(tmpdir(), 'trpc-idempotency-sqlite-page-'));
      cleanups.push(() => rmSync(files, { recursive: true, force: true }));
      const path = join(files, 'app.db');
      const { checked, ms } = await follow(dir, sqlitePage, 'sqlite-page', commandEnv({ SQLITE_PATH: path }));
      console.log(`drizzle dialects: docs/sqlite.md's setup served its three calls in ${ms} ms`);
      expectIdempotent(checked);
      const { default: Database } = await import('better-sqlite3');
      const db = new Database(path, { readonly: true });
      try {
        expect(db.pragma('journal_mode', { simple: true }), 'the page sets WAL').toBe('wal');
        const { n } = db.prepare(`select count(*) as n from idempotency_keys where state = 'completed'`).get() as {
          n: number;
        };
        expect(n, 'the record is in the file').toBe(1);
      } finally {
        db.close();
      }
    });
  });
}
