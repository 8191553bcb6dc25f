/**
 * docs/workers.md's worker.ts inside workerd, Cloudflare's Workers runtime (the `workerd` binary from
 * the npm registry), with the packed library: the HTTP scenario of adapters.test.ts (first call,
 * replay, 422, 409, no key, a batch of 3 and its replay, the key header twice) on the memory store
 * of the isolate, in two Workers of one workerd process:
 *
 * - `compat`: a compatibility date past 2026-08-04, where nodejs_compat is the default:
 *   `process.getBuiltinModule` gives #platform AsyncLocalStorage;
 * - `web`: an older date without nodejs_compat: no `process`, no `node:` module, Web standards only.
 *
 * The worker is bundled as `wrangler deploy` bundles it: esbuild with the `workerd`, `worker` and
 * `browser` conditions, ESM, every import resolved (platform neutral: a `node:` import would fail the
 * build). wrangler itself needs Node.js 22 and this suite runs on 20, so the bundle is served by
 * workerd directly, from a config with a socket per Worker.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { durableObjectStore } from '../../src/durable-object.js';
import { describeStoreContract } from '../contract/store-contract.js';
import { sleep } from '../helpers/redis.js';
import { modelTest } from '../model/model-run.js';
import { STEPS, scenario, stats } from './http-scenario.js';
import { commandEnv, docsBlock, NPM_FLAGS, REPO, run, writeProjectFile } from './pack.js';
import { forwardingStore } from './workers/forwarding-store.js';

/** What the project installs beside the packed library. */
const DEPENDENCIES = {
  '@trpc/server': '11.25.2',
  zod: '^4.1.0',
  workerd: '1.20261123.1',
  esbuild: '0.28.2',
};

/** The two Workers: their compatibility dates, and what each must find of Node's modules. */
const WORKERS = [
  { name: 'compat', date: '2026-11-01', nodeModules: true },
  { name: 'web', date: '2025-01-01', nodeModules: false },
] as const;

/**
 * The Workers that serve store-worker.ts: storeA holds the shards' namespace, storeB binds it; storeKv holds one of
 * its own, with workerd's key-value storage instead of SQLite.
 */
const STORE_WORKERS = ['storeA', 'storeB', 'storeKv'] as const;
/** The two Workers that serve docs/workers.md's durable-worker.ts, in the same way. */
const DURABLE_WORKERS = ['durableA', 'durableB'] as const;

const timings: Record<string, number> = {};
const rows: string[] = [];
let dir: string;
let workerd: ChildProcess | undefined;
let output = '';
const bases: Record<string, string> = {};
let bundled: { inputs: string[]; bytes: number; storeBytes: number } | undefined;

const writeFile = (file: string, text: string) => writeProjectFile(dir, file, text);
const snippet = docsBlock;

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

/** Resolves once `url` answers (any status: the Worker behind it serves). */
async function serving(url: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (workerd?.exitCode !== null || workerd.signalCode !== null)
      throw new Error(`workerd exited with ${workerd?.exitCode ?? workerd?.signalCode}:\n${output}`);
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      await response.arrayBuffer();
      return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${url} did not answer within 30 s:\n${output}`);
}

beforeAll(async () => {
  const tgz = inject('tgz');
  dir = mkdtempSync(join(tmpdir(), 'trpc-idempotency-workers-'));
  writeFile(
    'package.json',
    `${JSON.stringify(
      {
        name: 'workers',
        private: true,
        type: 'module',
        dependencies: { ...DEPENDENCIES, 'trpc-idempotency': `file:${tgz}` },
      },
      null,
      2,
    )}\n`,
  );
  timings['npm install'] = (await run('npm', ['install', ...NPM_FLAGS], dir)).ms;

  // docs/workers.md's worker.ts, beside the router this test serves
  writeFile('src/worker.ts', snippet('docs/workers.md', 'worker.ts'));
  writeFile('src/router.ts', readFileSync(join(REPO, 'test/stacks/workers/router.ts'), 'utf8'));
  writeFile('src/durable-worker.ts', snippet('docs/workers.md', 'durable-worker.ts'));
  writeFile('src/store-worker.ts', readFileSync(join(REPO, 'test/stacks/workers/store-worker.ts'), 'utf8'));
  writeFile(
    'bundle.mjs',
    `import { build } from 'esbuild';
const result = await build({
  entryPoints: ['src/worker.ts', 'src/store-worker.ts', 'src/durable-worker.ts'],
  outdir: 'out',
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  target: 'es2022',
  conditions: ['workerd', 'worker', 'browser'],
  mainFields: ['browser', 'module', 'main'],
  metafile: true,
  logLevel: 'error',
});
const out = result.metafile.outputs['out/worker.js'];
console.log(JSON.stringify({ inputs: Object.keys(out.inputs), bytes: out.bytes, storeBytes: result.metafile.outputs['out/store-worker.js'].bytes }));
`,
  );
  const bundle = await run(process.execPath, ['bundle.mjs'], dir);
  timings.esbuild = bundle.ms;
  bundled = JSON.parse(bundle.output.trim().split('\n').at(-1)!) as typeof bundled;

  // The two Workers of the scenario, and the two of the store contract: storeA holds the shards' namespace
  // (SQLite-backed, in a directory of the test's), storeB binds the same one (another isolate, the same objects).
  mkdirSync(join(dir, 'objects'));
  const names = [...WORKERS.map((w) => w.name), ...STORE_WORKERS, ...DURABLE_WORKERS];
  const ports = await Promise.all(names.map(() => freePort()));
  const worker = (w: (typeof WORKERS)[number]) =>
    `const ${w.name}Worker :Workerd.Worker = (\n  modules = [ (name = "worker.js", esModule = embed "out/worker.js") ],\n  compatibilityDate = "${w.date}",\n);\n`;
  /** A Worker of `file` whose binding IDEMPOTENCY is the namespace of `className`: its own (`owner` absent), or owner's. */
  const boundWorker = (name: string, file: string, className: string, owner?: string, sql = true) =>
    [
      `const ${name}Worker :Workerd.Worker = (`,
      `  modules = [ (name = "worker.js", esModule = embed "out/${file}") ],`,
      '  compatibilityDate = "2026-11-01",',
      ...(owner === undefined
        ? [
            `  durableObjectNamespaces = [ (className = "${className}", uniqueKey = "${name}", enableSql = ${sql}) ],`,
            // SQLite-backed objects need a disk: workerd's in-memory storage has no SQL API
            '  durableObjectStorage = (localDisk = "objects"),',
            `  bindings = [ (name = "IDEMPOTENCY", durableObjectNamespace = "${className}") ],`,
          ]
        : [
            `  bindings = [ (name = "IDEMPOTENCY", durableObjectNamespace = (className = "${className}", serviceName = "${owner}")) ],`,
          ]),
      ');',
      '',
    ].join('\n');
  writeFile(
    'config.capnp',
    [
      'using Workerd = import "/workerd/workerd.capnp";',
      '',
      'const config :Workerd.Config = (',
      `  services = [ ${names.map((name) => `(name = "${name}", worker = .${name}Worker)`).join(', ')}, (name = "objects", disk = (path = "${join(dir, 'objects')}", writable = true)) ],`,
      `  sockets = [ ${names.map((name, i) => `(name = "${name}", address = "127.0.0.1:${ports[i]}", http = (), service = "${name}")`).join(', ')} ],`,
      ');',
      '',
      ...WORKERS.map(worker),
      boundWorker('storeA', 'store-worker.js', 'TestShard'),
      boundWorker('storeB', 'store-worker.js', 'TestShard', 'storeA'),
      boundWorker('storeKv', 'store-worker.js', 'TestShard', undefined, false),
      ...DURABLE_WORKERS.map((name, i) =>
        boundWorker(name, 'durable-worker.js', 'IdempotencyShard', i === 0 ? undefined : DURABLE_WORKERS[0]),
      ),
    ].join('\n'),
  );
  WORKERS.forEach((w, i) => {
    bases[w.name] = `http://127.0.0.1:${ports[i]}/trpc`;
  });
  STORE_WORKERS.forEach((name, i) => {
    bases[name] = `http://127.0.0.1:${ports[WORKERS.length + i]}`;
  });
  DURABLE_WORKERS.forEach((name, i) => {
    bases[name] = `http://127.0.0.1:${ports[WORKERS.length + STORE_WORKERS.length + i]}/trpc`;
  });

  const started = performance.now();
  workerd = spawn(join(dir, 'node_modules/.bin/workerd'), ['serve', 'config.capnp'], {
    cwd: dir,
    env: commandEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  workerd.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  workerd.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await Promise.all([
    ...WORKERS.map((w) => serving(`${bases[w.name]}/stats`)),
    ...[...STORE_WORKERS, ...DURABLE_WORKERS].map((name) => serving(bases[name]!)),
  ]);
  timings['workerd started'] = Math.round(performance.now() - started);
}, 300_000);

afterAll(async () => {
  if (workerd !== undefined && workerd.exitCode === null && workerd.signalCode === null) {
    const exited = new Promise((resolve) => workerd!.once('exit', resolve));
    workerd.kill('SIGTERM');
    await exited;
  }
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  console.log(
    [
      `[workers] ${Object.entries(timings)
        .map(([what, ms]) => `${what} ${s(ms)}`)
        .join(', ')}; bundle ${bundled?.bytes ?? '?'} bytes`,
      `[workers] ${['worker', ...STEPS, 'time'].join(' | ')}`,
      ...rows,
    ].join('\n'),
  );
  if (dir !== undefined && process.env.KEEP_STACKS !== '1') rmSync(dir, { recursive: true, force: true });
}, 30_000);

describe('docs/workers.md inside workerd, with the packed library', () => {
  it("bundles #platform's Web standards (web.js), not Node's, and no node: module", () => {
    const inputs = bundled!.inputs;
    expect(inputs).toContain('node_modules/trpc-idempotency/dist/core/platform/web.js');
    expect(inputs.filter((file) => file.includes('platform/node.js'))).toEqual([]);
    expect(inputs.some((file) => file.startsWith('node_modules/@noble/hashes/'))).toBe(true);
    expect(readFileSync(join(dir, 'out/worker.js'), 'utf8')).not.toMatch(/\bfrom\s*["']node:|require\(["']node:/);
  });

  for (const w of WORKERS) {
    it(`${w.name} (compatibility date ${w.date}): ${w.nodeModules ? 'AsyncLocalStorage' : 'no AsyncLocalStorage, transactional mode refused'}; first call, replay, 422, 409, no key, batch of 3 and its replay, the key header twice`, async () => {
      const base = bases[w.name]!;
      const found = (await stats(base)) as Awaited<ReturnType<typeof stats>> & {
        nodeModules: boolean;
        asyncLocalStorage: boolean;
      };
      expect({ nodeModules: found.nodeModules, asyncLocalStorage: found.asyncLocalStorage }).toEqual({
        nodeModules: w.nodeModules,
        asyncLocalStorage: w.nodeModules,
      });
      // transactional mode: refused without AsyncLocalStorage, at the engine's creation
      const transactional = (await (await fetch(`${base}/transactional`)).json()) as {
        result: { data: { refused: string | null } };
      };
      if (w.nodeModules) expect(transactional.result.data.refused).toBeNull();
      else
        expect(transactional.result.data.refused).toMatch(
          /^IdempotencyConfigError: idempotency options: transaction: true needs AsyncLocalStorage.*nodejs_compat/,
        );
      const started = performance.now();
      const outcomes = await scenario(base);
      const ms = Math.round(performance.now() - started);
      rows.push(
        `[workers] ${[w.name, ...STEPS.map((step) => (outcomes[step].ok ? '' : 'FAILED ') + outcomes[step].seen), `${ms} ms`].join(' | ')}`,
      );
      const failed = STEPS.filter((step) => !outcomes[step].ok);
      expect(
        failed,
        `${w.name}: ${failed.map((step) => `${step}: ${outcomes[step].seen}`).join('; ')}\n${output}`,
      ).toEqual([]);
      // the held request stayed alive on its claim's own renewal timer: workerd cancelled nothing as hung
      expect(output).not.toMatch(/hung and would never generate a response/);
    });
  }
});

/** One call of `pay` with `key`: its status, whether it was replayed, and its result. */
async function pay(base: string, key: string) {
  const response = await fetch(`${base}/pay`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ amount: 100 }),
  });
  const body = (await response.json()) as { result?: { data?: { chargeId: string } } };
  return { status: response.status, replayed: response.headers.get('idempotent-replayed'), data: body.result?.data };
}

describe('a key retried through another isolate', () => {
  it("the memory store of one isolate is not another's: one key paid through the two Workers of worker.ts runs twice", async () => {
    const key = randomUUID();
    const [first, second] = [await pay(bases.compat!, key), await pay(bases.web!, key)];
    expect([first, second].map((answer) => [answer.status, answer.replayed])).toEqual([
      [200, null],
      [200, null],
    ]);
    expect(second.data!.chargeId).not.toBe(first.data!.chargeId);
  });

  it('durable-worker.ts in two Workers bound to one namespace: a key paid through one is replayed by the other, run once', async () => {
    const key = randomUUID();
    const first = await pay(bases.durableA!, key);
    const again = await pay(bases.durableB!, key);
    expect(first).toMatchObject({ status: 200, replayed: null, data: { chargeId: expect.any(String) } });
    expect(again).toEqual({ ...first, replayed: 'true' });
  });
});

describe('the Durable Object store inside workerd (test/stacks/workers/store-worker.ts, from the packed library)', () => {
  it('two Workers bound to one namespace (two isolates) share the records: one of many claims of a key wins, wherever each lands', async () => {
    const [a, b] = [forwardingStore(bases.storeA!), forwardingStore(bases.storeB!)];
    const id = `scope:isolates.op:${randomUUID()}`;
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 === 0 ? a! : b!).claim({ id, fingerprint: 'fp', token: `t${i}`, lockTtl: 10_000 }),
      ),
    );
    expect(results.filter((r) => r.state === 'acquired')).toHaveLength(1);
    const winner = results.findIndex((r) => r.state === 'acquired');
    expect(
      await (winner % 2 === 0 ? b! : a!).complete({
        id,
        fingerprint: 'fp',
        token: `t${winner}`,
        state: 'completed',
        body: 'once',
        ttl: 60_000,
      }),
    ).toBe('stored');
    expect(await a!.claim({ id, fingerprint: 'fp', token: 'again', lockTtl: 1_000 })).toMatchObject({
      state: 'completed',
      body: 'once',
    });
  });

  it('a shard class bound without SQLite storage answers every call with what to declare (new_sqlite_classes)', async () => {
    const store = forwardingStore(bases.storeKv!);
    await expect(
      store.claim({ id: `scope:kv.op:${randomUUID()}`, fingerprint: 'fp', token: 'a', lockTtl: 1_000 }),
    ).rejects.toThrow(/new_sqlite_classes/); // workerd's own message, thrown by the shard's first SQL statement
  });

  it('durableObjectStore refuses a namespace, a shard count or a cursor it cannot use, saying what to pass', async () => {
    // options are checked where the store is made, in any runtime: here, in Node, on an object shaped as a binding
    const namespace = {
      idFromName: (name: string) => name,
      get: () => ({ fetch: () => Promise.reject(new Error('not called')) }),
    };
    expect(() => durableObjectStore({ namespace: 'IDEMPOTENCY' } as never)).toThrow(
      'durableObjectStore: namespace must be the Durable Object binding of the IdempotencyShard class (env.IDEMPOTENCY), or a function that returns it, got the string "IDEMPOTENCY".',
    );
    expect(() => durableObjectStore({ namespace, shards: 0 })).toThrow(
      'durableObjectStore: shards must be a whole number from 1 to 1024, got the number 0.',
    );
    const store = durableObjectStore({ namespace, shards: 4 });
    await expect(store.admin.list({ cursor: '9:x' })).rejects.toThrow(
      `list: cursor must be the cursor of the previous page of this store's listing, got the string "9:x".`,
    );
    await expect(
      durableObjectStore({ namespace: () => undefined as never }).claim({
        id: 'a:b:c',
        fingerprint: 'fp',
        token: 't',
        lockTtl: 1,
      }),
    ).rejects.toThrow('durableObjectStore: namespace() must return the IdempotencyShard binding, got undefined.');
  });

  it("the shard's alarm deletes the rows that expired (reads ignore them from the moment they expire)", async () => {
    const store = forwardingStore(bases.storeA!);
    const before = await store.rows();
    const ids = Array.from({ length: 5 }, () => `scope:alarm.op:${randomUUID()}`);
    for (const id of ids)
      expect((await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 200 })).state).toBe('acquired');
    expect(await store.rows()).toBeGreaterThanOrEqual(before + ids.length);
    // TestShard sweeps at each expiry (sweepInterval 0): the rows go without any call reading them
    await expect.poll(() => store.rows(), { timeout: 5_000, interval: 100 }).toBeLessThanOrEqual(before);
  });
});

describeStoreContract('durable-object (workerd)', () => ({ store: forwardingStore(bases.storeA!), advance: sleep }), {
  notifies: false,
});

// The model-based contract (test/model): random sequences against the oracle, timed on this machine's clock, which
// workerd's objects read too. 20 sequences here (about 3 s); npm run test:workers:model runs MODEL_RUNS of them (1,000 unless set).
describe('durable-object (workerd), model', () => {
  modelTest(
    'durable-object (workerd)',
    () => ({ store: forwardingStore(bases.storeA!), clock: Date.now, advance: sleep, slack: 2 }),
    20,
  );
});
