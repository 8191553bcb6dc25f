/**
 * The SQLite store of `trpc-idempotency/drizzle` on Cloudflare D1 (drizzle-orm/d1), inside workerd: the
 * shared store contract and the model-based one, from Node, through d1-worker.ts. D1 comes from miniflare
 * 3, the last line that runs on Node.js 20 (miniflare 4 and wrangler need 22): it brings its own workerd
 * (1.20250718) and gives D1 on a local SQLite database, as `wrangler dev` does. The bundle is made as
 * wrangler makes it with nodejs_compat: `node:` imports left to the runtime (the Drizzle entry point
 * imports drizzle-orm's migrator, which imports node:fs and node:crypto).
 *
 * In the stacks run; alone: npm run test:workers:d1.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { describeStoreContract } from '../contract/store-contract.js';
import { sleep } from '../helpers/redis.js';
import { modelTest } from '../model/model-run.js';
import { docsBlock, NPM_FLAGS, REPO, run, writeProjectFile } from './pack.js';
import { forwardingStore } from './workers/forwarding-store.js';

const DEPENDENCIES = {
  miniflare: '3.20250718.3',
  'drizzle-orm': '0.45.4',
  esbuild: '0.28.2',
  '@trpc/server': '11.25.2',
  zod: '^4.1.0',
};

interface Miniflare {
  ready: Promise<URL>;
  getWorker(name: string): Promise<{ fetch(url: string, init: RequestInit): Promise<Response> }>;
  getD1Database(name: string): Promise<{ prepare(sql: string): { run(): Promise<unknown> } }>;
  dispose(): Promise<void>;
}

let dir: string;
let mf: Miniflare | undefined;
let base = '';
const timings: Record<string, number> = {};

const writeFile = (file: string, text: string) => writeProjectFile(dir, file, text);
const snippet = docsBlock;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'trpc-idempotency-d1-'));
  const dependencies = { ...DEPENDENCIES, 'trpc-idempotency': `file:${inject('tgz')}` };
  writeFile(
    'package.json',
    `${JSON.stringify({ name: 'd1', private: true, type: 'module', dependencies }, null, 2)}\n`,
  );
  timings['npm install'] = (await run('npm', ['install', ...NPM_FLAGS], dir)).ms;
  writeFile('src/d1-worker.ts', readFileSync(join(REPO, 'test/stacks/workers/d1-worker.ts'), 'utf8'));
  writeFile('src/docs-worker.ts', snippet('docs/workers.md', 'd1-worker.ts'));
  writeFile(
    'bundle.mjs',
    `import { build } from 'esbuild';
await build({
  entryPoints: ['src/d1-worker.ts', 'src/docs-worker.ts'],
  outdir: 'out',
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  target: 'es2022',
  conditions: ['workerd', 'worker', 'browser'],
  mainFields: ['browser', 'module', 'main'],
  external: ['node:*'],
  logLevel: 'error',
});
`,
  );
  timings.esbuild = (await run(process.execPath, ['bundle.mjs'], dir)).ms;

  const started = performance.now();
  const { Miniflare } = createRequire(join(dir, 'package.json'))('miniflare') as {
    Miniflare: new (options: object) => Miniflare;
  };
  // The store's Worker (the entry: mf.ready's address) and docs/workers.md's d1-worker.ts, on one database
  const worker = (name: string) => ({
    name,
    modules: true,
    modulesRoot: dir,
    scriptPath: join(dir, `out/${name}.js`),
    compatibilityDate: '2025-07-01',
    compatibilityFlags: ['nodejs_compat'],
    d1Databases: { DB: 'idempotency' },
  });
  mf = new Miniflare({ workers: [worker('d1-worker'), worker('docs-worker')] });
  // The tables, from the SQL migration the package ships (drizzle/sqlite), as `wrangler d1 migrations apply` would
  const db = await mf.getD1Database('DB');
  const migration = readFileSync(
    join(dir, 'node_modules/trpc-idempotency/drizzle/sqlite/0000_idempotency_keys.sql'),
    'utf8',
  );
  for (const statement of migration.split('--> statement-breakpoint')) {
    if (statement.trim() !== '') await db.prepare(statement.trim()).run();
  }
  base = (await mf.ready).href.replace(/\/$/, '');
  timings['miniflare started'] = Math.round(performance.now() - started);
}, 300_000);

afterAll(async () => {
  await mf?.dispose();
  console.log(
    `[d1] ${Object.entries(timings)
      .map(([what, ms]) => `${what} ${(ms / 1000).toFixed(1)} s`)
      .join(', ')}`,
  );
  if (dir !== undefined && process.env.KEEP_STACKS !== '1') rmSync(dir, { recursive: true, force: true });
}, 30_000);

describe('the SQLite store on D1 (drizzle-orm/d1, miniflare 3)', () => {
  it('transactional mode is not available: D1 has no interactive transaction (the BEGIN is refused)', async () => {
    const response = await fetch(`${base}/store/transaction`, { method: 'POST', body: '{}' });
    expect(response.status).toBe(500);
    expect(((await response.json()) as { error: string }).error).toMatch(/Failed query: begin/);
  });

  it("docs/workers.md's d1-worker.ts: a key paid twice runs once, and the retry is replayed", async () => {
    const docs = await mf!.getWorker('docs-worker');
    const key = crypto.randomUUID();
    const pay = async () => {
      const response = await docs.fetch('http://docs/trpc/pay', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ amount: 100 }),
      });
      return {
        status: response.status,
        replayed: response.headers.get('idempotent-replayed'),
        body: await response.json(),
      };
    };
    const first = await pay();
    expect(first).toMatchObject({ status: 200, replayed: null, body: { result: { data: { amount: 100 } } } });
    expect(await pay()).toEqual({ ...first, replayed: 'true' });
  });

  it('purgeExpired deletes the expired rows and counts them', async () => {
    const store = forwardingStore(base, 'sqlite');
    await store.purgeExpired();
    for (let i = 0; i < 3; i++) {
      const id = `scope:purge.op:${crypto.randomUUID()}`;
      expect((await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 50 })).state).toBe('acquired');
    }
    // Each purge deletes what has expired by D1's clock, and counts it: three, once the 50 ms leases have run out.
    let purged = 0;
    await expect.poll(async () => (purged += await store.purgeExpired()), { timeout: 5_000, interval: 25 }).toBe(3);
  });
});

describeStoreContract(
  'sqlite on D1 (miniflare 3)',
  () => ({ store: forwardingStore(base, 'sqlite'), advance: sleep }),
  {
    notifies: false,
  },
);

describe('sqlite on D1 (miniflare 3), model', () => {
  modelTest(
    'sqlite on D1 (miniflare 3)',
    () => ({ store: forwardingStore(base, 'sqlite'), clock: Date.now, advance: sleep, slack: 2 }),
    50,
  );
});
