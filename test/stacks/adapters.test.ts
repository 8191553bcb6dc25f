/**
 * docs/adapters.md's adapter snippets, as the page shows them, served on each
 * adapter from one temporary project where the packed library is installed
 * beside Express 5, Express 4 (as `express4`, npm:express@4), Fastify 5 and
 * Next.js, with a plain `npm install` (no peer flags):
 *
 * - standalone.ts, express.ts (run on Express 5, and on Express 4 through a
 *   resolve hook that maps `express` to `express4`) and fastify.ts, compiled
 *   with the project's TypeScript and run with node;
 * - fetch.ts's `handler` behind Node's http server (./adapters/fetch-bridge.ts);
 * - the App Router route and the Pages Router API route in one Next.js app,
 *   type-checked and built by `next build`, served by `next start`;
 * - docs/lambda.md's context.ts and handler.ts, fed the events of a REST API,
 *   an HTTP API and a function URL built from real HTTP requests
 *   (./adapters/lambda-bridge.ts).
 *
 * - bun.ts and deno.ts, the page's Bun.serve and Deno.serve of fetch.ts's
 *   `handler`, run by Bun and Deno installed from the npm registry into the
 *   project, each on every store: memory, Redis through ioredis and through
 *   node-redis, PostgreSQL through pg (./adapters/runtimes/router.ts makes
 *   the store, as docs/stores.md does).
 *
 * The snippets import `./router.js`; here that is ./adapters/router.ts: the
 * page's `pay`, a mutation held until released (for the 409) and a count of
 * executions. On each adapter the same scenario runs over HTTP, and one line
 * per adapter is printed.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { blocksOf } from '../../scripts/check-docs.js';
import { STEPS, scenario } from './http-scenario.js';
import { commandEnv, NPM_FLAGS, REPO, run } from './pack.js';

const FIXTURES = join(REPO, 'test/stacks/adapters');

/** What the project installs beside the packed library. */
const DEPENDENCIES = {
  '@trpc/server': '11.25.2',
  express: '^5.1.0',
  express4: 'npm:express@^4.21.2',
  fastify: '^5.4.0',
  next: '^16.0.0',
  react: '^19.2.0',
  'react-dom': '^19.2.0',
  zod: '^4.1.0',
  // next build type-checks with the project's TypeScript; the node servers are compiled with it too
  typescript: '^5.9.3',
  '@types/node': '^20.19.0',
  '@types/react': '^19.2.0',
  '@types/express': '^5.0.3',
  // the runtimes, and the stores' clients they run
  bun: '1.4.5',
  deno: '2.9.6',
  ioredis: '^6.0.0',
  redis: '^6.3.1',
  pg: '^8.23.1',
  'drizzle-orm': '^0.45.4',
  '@types/pg': '^8.23.1',
};

/** The runtimes fetch.ts is served on, and the stores each runs. */
const RUNTIMES = ['Bun', 'Deno'] as const;
const RUNTIME_STORES = ['memory', 'redis', 'node-redis', 'postgres'] as const;
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
/** The schema of the runtimes' PostgreSQL store, made and dropped here. */
const PG_SCHEMA = `stacks_runtimes_${process.pid}`;

/** Each block of a page, by its file name. */
function snippet(page: string, title: string): string {
  const found = blocksOf(page, readFileSync(join(REPO, page), 'utf8')).find((b) => b.title === title);
  if (found === undefined) throw new Error(`${page} has no block named ${title}`);
  return `${found.code}\n`;
}

/** docs/adapters.md's snippets and where each goes in the project (the Pages route beside the App route's path). */
const SERVER_SNIPPETS: Array<[title: string, file: string]> = [
  ['standalone.ts', 'standalone.ts'],
  ['fetch.ts', 'fetch.ts'],
  ['express.ts', 'express.ts'],
  ['fastify.ts', 'fastify.ts'],
  ['app/api/trpc/[trpc]/route.ts', 'app/api/trpc/[trpc]/route.ts'],
  // same depth, so its `../../../router` import holds; /api/trpc is the App Router's
  ['pages/api/trpc/[trpc].ts', 'pages/api/pages-trpc/[trpc].ts'],
];

interface Adapter {
  name: string;
  /** Where the router is served: `${base}/pay`. */
  base: string;
  server: Server;
}

interface Server {
  child: ChildProcess;
  output: () => string;
}

const timings: Record<string, number> = {};
const versions: Record<string, string> = {};
const rows: string[] = [];
let dir: string;
let installOutput = '';
const servers: Server[] = [];

function writeFile(file: string, text: string) {
  mkdirSync(dirname(join(dir, file)), { recursive: true });
  writeFileSync(join(dir, file), text);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** Starts a server (node, unless `command` names another) in a process group of its own (next start runs children). */
function start(args: string[], env: Record<string, string>, command = process.execPath): Server {
  const child = spawn(command, args, {
    cwd: dir,
    env: commandEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const server = { child, output: () => output };
  servers.push(server);
  return server;
}

function stop(server: Server): Promise<void> {
  const { child } = server;
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const pid = child.pid;
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, 5_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    try {
      process.kill(-pid, 'SIGTERM');
    } catch {
      clearTimeout(timer);
      resolve();
    }
  });
}

/** Resolves once `${base}/stats` answers 200. */
async function serving(adapter: Adapter): Promise<void> {
  const deadline = Date.now() + 60_000;
  const { child, output } = adapter.server;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`${adapter.name}: the server exited with ${child.exitCode ?? child.signalCode}:\n${output()}`);
    try {
      const response = await fetch(`${adapter.base}/stats`, { signal: AbortSignal.timeout(2_000) });
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${adapter.name}: ${adapter.base}/stats did not answer within 60 s:\n${output()}`);
}

const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** A line of the results table: the adapter, then a cell per step. */
const WIDTHS = [21, 6, 18, 21, 30, 16, 12, 28, 16];
const row = (...cells: (string | string[])[]) =>
  `[adapters] ${cells
    .flat()
    .map((cell, i) => cell.padEnd(WIDTHS[i] ?? 0))
    .join(' ')
    .trimEnd()}`;

beforeAll(async () => {
  const tgz = inject('tgz');
  dir = mkdtempSync(join(tmpdir(), 'trpc-idempotency-adapters-'));

  // 1. one install: the adapters' frameworks and the packed library, as a user's npm resolves them
  writeFile(
    'package.json',
    `${JSON.stringify(
      {
        name: 'adapters',
        private: true,
        type: 'module',
        dependencies: { ...DEPENDENCIES, 'trpc-idempotency': `file:${tgz}` },
      },
      null,
      2,
    )}\n`,
  );
  const install = await run('npm', ['install', ...NPM_FLAGS], dir);
  timings['npm install'] = install.ms;
  installOutput = install.output;
  for (const name of ['trpc-idempotency', ...Object.keys(DEPENDENCIES)]) {
    versions[name] = (
      JSON.parse(readFileSync(join(dir, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }
    ).version;
  }

  // 2. the sources: the pages' snippets, the router they import, the bridges
  for (const [title, file] of SERVER_SNIPPETS) writeFile(file, snippet('docs/adapters.md', title));
  for (const title of ['context.ts', 'handler.ts']) writeFile(`lambda/${title}`, snippet('docs/lambda.md', title));
  copyFileSync(join(FIXTURES, 'router.ts'), join(dir, 'router.ts'));
  copyFileSync(join(FIXTURES, 'lambda/server.ts'), join(dir, 'lambda/server.ts'));
  for (const file of ['fetch-bridge.ts', 'lambda-bridge.ts', 'express4-alias.mjs'])
    copyFileSync(join(FIXTURES, file), join(dir, file));
  // the runtimes' project folder: fetch.ts as the page shows it, beside a router that makes each store
  for (const title of ['fetch.ts', 'bun.ts', 'deno.ts']) writeFile(`rt/${title}`, snippet('docs/adapters.md', title));
  copyFileSync(join(FIXTURES, 'runtimes/router.ts'), join(dir, 'rt/router.ts'));
  writeFile('next.config.mjs', 'export default {};\n');
  writeFile(
    'tsconfig.json',
    `${JSON.stringify(
      {
        compilerOptions: {
          target: 'ES2022',
          lib: ['dom', 'dom.iterable', 'esnext'],
          module: 'esnext',
          moduleResolution: 'bundler',
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          isolatedModules: true,
          jsx: 'react-jsx',
          plugins: [{ name: 'next' }],
        },
        include: ['next-env.d.ts', 'app/**/*.ts', 'pages/**/*.ts'],
        exclude: ['node_modules'],
      },
      null,
      2,
    )}\n`,
  );
  writeFile(
    'tsconfig.node.json',
    `${JSON.stringify(
      {
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2023', 'DOM', 'DOM.Iterable'],
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          types: ['node'],
          strict: true,
          skipLibCheck: true,
          outDir: 'out',
          rootDir: '.',
        },
        // bun.ts and deno.ts use their runtime's globals, which @types/node does not declare
        include: ['*.ts', 'lambda/*.ts', 'rt/router.ts'],
      },
      null,
      2,
    )}\n`,
  );

  // 3. compiled: the node servers by tsc, the Next.js app by next build (which type-checks it)
  timings.tsc = (await run(join(dir, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.node.json'], dir)).ms;
  timings['next build'] = (
    await run(process.execPath, [join(dir, 'node_modules/next/dist/bin/next'), 'build'], dir)
  ).ms;
}, 600_000);

afterAll(async () => {
  await Promise.all(servers.map(stop));
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`drop schema if exists ${PG_SCHEMA} cascade`);
  await admin.end();
  const summary = [
    `[adapters] ${Object.entries(timings)
      .map(([what, ms]) => `${what} ${s(ms)}`)
      .join(', ')}`,
    `[adapters] ${Object.entries(versions)
      .map(([name, version]) => `${name}@${version}`)
      .join(' ')}`,
    row('adapter', [...STEPS], 'time'),
    ...rows,
  ];
  console.log(summary.join('\n'));
  if (dir !== undefined && process.env.KEEP_STACKS !== '1') rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('docs/adapters.md and docs/lambda.md on each adapter, with the packed library', () => {
  const adapters: Adapter[] = [];

  beforeAll(async () => {
    const started = performance.now();
    const node = async (name: string, path: string, args: string[], env: Record<string, string> = {}) => {
      const port = await freePort();
      const server = start(args, { PORT: String(port), ...env });
      adapters.push({
        name,
        base: `http://${name === 'Fastify 5' ? 'localhost' : '127.0.0.1'}:${port}${path}`,
        server,
      });
    };
    await node('standalone', '', ['out/standalone.js']);
    await node('fetch', '/trpc', ['out/fetch-bridge.js']);
    await node('Express 5', '/trpc', ['out/express.js']);
    await node('Express 4', '/trpc', ['--import', './express4-alias.mjs', 'out/express.js']);
    await node('Fastify 5', '/trpc', ['out/fastify.js']);
    const nextPort = await freePort();
    const next = start(
      [join(dir, 'node_modules/next/dist/bin/next'), 'start', '-p', String(nextPort), '-H', '127.0.0.1'],
      {
        PORT: String(nextPort),
      },
    );
    adapters.push({ name: 'Next.js App Router', base: `http://127.0.0.1:${nextPort}/api/trpc`, server: next });
    adapters.push({ name: 'Next.js Pages Router', base: `http://127.0.0.1:${nextPort}/api/pages-trpc`, server: next });
    for (const source of ['rest-api', 'http-api', 'function-url'])
      await node(`Lambda ${source}`, '/trpc', ['out/lambda-bridge.js'], { LAMBDA_SOURCE: source });
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    await admin.query(`drop schema if exists ${PG_SCHEMA} cascade`);
    await admin.query(`create schema ${PG_SCHEMA}`);
    await admin.end();
    for (const runtime of RUNTIMES) {
      for (const store of RUNTIME_STORES) {
        const port = await freePort();
        const env = { PORT: String(port), STORE: store, REDIS_URL, DATABASE_URL, PG_SCHEMA };
        const server =
          runtime === 'Bun'
            ? start(['run', 'rt/bun.ts'], env, join(dir, 'node_modules/.bin/bun'))
            : // as docs/adapters.md runs it
              start(
                [
                  'run',
                  '--allow-net',
                  '--allow-env',
                  '--allow-read',
                  '--allow-sys',
                  '--unstable-sloppy-imports',
                  'rt/deno.ts',
                ],
                env,
                join(dir, 'node_modules/.bin/deno'),
              );
        adapters.push({ name: `${runtime}, ${store}`, base: `http://127.0.0.1:${port}/trpc`, server });
      }
    }
    await Promise.all(adapters.map(serving));
    timings['servers started'] = Math.round(performance.now() - started);
  }, 120_000);

  it('installs next to Express 4 and 5, Fastify 5 and Next.js without --legacy-peer-deps or --force', () => {
    expect(versions['trpc-idempotency']).toBe(JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')).version);
    expect(versions.express).toMatch(/^5\./);
    expect(versions.express4).toMatch(/^4\./);
    expect(versions.fastify).toMatch(/^5\./);
    expect(installOutput).not.toMatch(/ERESOLVE|overriding peer dependency|Conflicting peer dependency/i);
  });

  it('Express 4 is the Express that served express.ts under the resolve hook', () => {
    const express4 = adapters.find((a) => a.name === 'Express 4')!;
    expect(express4.server.output()).toMatch(/express -> .*\/node_modules\/express4\//);
  });

  const NAMES = [
    'standalone',
    'fetch',
    'Express 5',
    'Express 4',
    'Fastify 5',
    'Next.js App Router',
    'Next.js Pages Router',
    'Lambda rest-api',
    'Lambda http-api',
    'Lambda function-url',
    ...RUNTIMES.flatMap((runtime) => RUNTIME_STORES.map((store) => `${runtime}, ${store}`)),
  ];
  for (const name of NAMES) {
    it(`${name}: first call, replay, 422, 409, no key, batch of 3 and its replay, the key header twice`, async () => {
      const adapter = adapters.find((a) => a.name === name)!;
      const started = performance.now();
      const outcomes = await scenario(adapter.base);
      const ms = Math.round(performance.now() - started);
      rows.push(
        row(
          name,
          STEPS.map((step) => (outcomes[step].ok ? '' : 'FAILED ') + outcomes[step].seen),
          `${ms} ms`,
        ),
      );
      const failed = STEPS.filter((step) => !outcomes[step].ok).map((step) => `${step}: ${outcomes[step].seen}`);
      expect(failed, adapter.server.output().slice(-3000)).toEqual([]);
    });
  }
});
