/**
 * Instructions per HTTP request in the server process, counted by callgrind: the bench's servers
 * (bench/server.ts) under valgrind, each variant beside the bare baseline. Timings on a shared
 * 2-core machine move from one run to the next by 10 to 30 %; the instructions a server executes
 * per request do not (GC timing moves them by a few %), so these counts compare the work of the
 * layer, its peers and the floors without the noise. They leave out the kernel's work (system
 * calls, the loopback network): a store round trip costs more than its instructions here.
 *
 *   npm run bench:instructions [-- variant ...]     (about a minute per variant)
 *   DIST=<a build> node --import tsx bench/callgrind-http.ts [variant ...]   (another build than dist/,
 *   e.g. an older commit's, built in a worktree and copied out: two builds side by side; it must
 *   know the variants asked for: redis-fence needs a build with restartFence)
 *
 * Each server runs uninstrumented through a warm-up (WARMUP requests, default 6,000: the JIT
 * settles), then callgrind counts REQUESTS more (default 2,000); `node --single-threaded`, so no
 * compiler or GC thread runs beside it. Requests are sent CONCURRENCY at a time (default 4).
 * Redis and PostgreSQL are the bench's own (a private redis-server, a migrated schema).
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PAY_BODY } from './lib/app.js';
import { type Cleanups, exitOnInterrupt, runCleanups, startServer } from './lib/processes.js';
import { createSchema, startRedis } from './lib/services.js';

const repo = fileURLToPath(new URL('..', import.meta.url));
const WARMUP = Number(process.env.WARMUP ?? 6_000);
const REQUESTS = Number(process.env.REQUESTS ?? 2_000);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 4);
const REPLAY_KEYS = 500;
/** V8's garbage collector, by function name (see gcOf). */
const GC_FUNCTION =
  /v8::internal::(Scaveng|Mark|Sweep|Evacuat|Heap::|MinorMark|ConcurrentMarking|IncrementalMarking|BodyDescriptor|RememberedSet|SlotSet|PagedSpace|MemoryAllocator|GCTracer|ObjectStats)|heap::base::/;

/**
 * name → [server variant, keys, environment]: a fresh key per request, or completed keys reused in turn;
 * the *-node-redis variants run with node-redis as the application's client (BENCH_REDIS_CLIENT).
 */
const NODE_REDIS = { BENCH_REDIS_CLIENT: 'node-redis' };
const VARIANTS: Record<string, [string, 'fresh' | 'replay', Record<string, string>?]> = {
  baseline: ['baseline', 'fresh'],
  'baseline-node-redis': ['baseline', 'fresh', NODE_REDIS],
  'redis-node-redis-first': ['redis', 'fresh', NODE_REDIS],
  'redis-node-redis-replay': ['redis', 'replay', NODE_REDIS],
  'floor-2-redis-round-trips-node-redis': ['round-trips', 'fresh', NODE_REDIS],
  'node-idempotency-node-redis-first': ['node-idempotency', 'fresh', NODE_REDIS],
  'node-idempotency-node-redis-replay': ['node-idempotency', 'replay', NODE_REDIS],
  'powertools-node-redis-first': ['powertools', 'fresh', NODE_REDIS],
  'powertools-node-redis-replay': ['powertools', 'replay', NODE_REDIS],
  'floor-2-redis-round-trips': ['round-trips', 'fresh'],
  'floor-no-io-handler': ['no-io', 'fresh'],
  ...Object.fromEntries(
    ['memory', 'redis', 'redis-fence', 'postgres', 'node-idempotency', 'powertools'].flatMap((server) => [
      [`${server}-first`, [server, 'fresh']],
      [`${server}-replay`, [server, 'replay']],
    ]),
  ),
};

const chosen = process.argv.slice(2);
for (const name of chosen)
  if (!(name in VARIANTS)) throw new Error(`unknown variant ${name}: one of ${Object.keys(VARIANTS).join(', ')}`);
const names = chosen.length > 0 ? ['baseline', ...chosen.filter((n) => n !== 'baseline')] : Object.keys(VARIANTS);

// The server as plain JavaScript (no loader thread under valgrind), beside a copy of dist/ and the
// same node_modules it resolves from in bench/.
const out = mkdtempSync(join(tmpdir(), 'bench-callgrind-http-'));
const cleanups: Cleanups = [() => rmSync(out, { recursive: true, force: true })];
exitOnInterrupt(cleanups);

try {
  mkdirSync(join(out, 'bench'));
  cpSync(process.env.DIST ?? join(repo, 'dist'), join(out, 'dist'), { recursive: true });
  symlinkSync(join(repo, 'node_modules'), join(out, 'node_modules'));
  symlinkSync(join(repo, 'bench/node_modules'), join(out, 'bench/node_modules'));
  execFileSync(
    join(repo, 'node_modules/.bin/esbuild'),
    [
      join(repo, 'bench/server.ts'),
      '--bundle',
      '--platform=node',
      '--format=esm',
      '--packages=external',
      '--external:../dist/*',
      `--outfile=${join(out, 'bench/server.mjs')}`,
      '--log-level=warning',
    ],
    { stdio: 'inherit' },
  );
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  const schema = await createSchema('callgrind');
  cleanups.push(() => schema.drop());

  const counts: Record<string, { total: number; gc: number }> = {};
  const n = (x: number) => Math.round(x).toLocaleString('en-US');
  console.log(
    `instructions per request in the server, after ${n(WARMUP)} requests of warm-up, over ${n(REQUESTS)} (${CONCURRENCY} at a time)\n` +
      '| variant | instructions | x baseline | added | without GC | x baseline | added |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  );
  for (const name of names) {
    const [variant, keys, env] = VARIANTS[name]!;
    const c = await count(name, variant, keys, { REDIS_URL: redis.url, PG_URL: schema.url, ...env });
    counts[name] = c;
    const base = counts.baseline!;
    const own = c.total - c.gc;
    const baseOwn = base.total - base.gc;
    console.log(
      `| ${name} | ${n(c.total)} | ${(c.total / base.total).toFixed(2)} | ${n(c.total - base.total)} | ${n(own)} | ${(own / baseOwn).toFixed(2)} | ${n(own - baseOwn)} |`,
    );
  }
} finally {
  await runCleanups(cleanups);
}

/** Instructions per request of one server variant: warmed up uninstrumented, then counted. */
async function count(name: string, variant: string, keys: 'fresh' | 'replay', env: Record<string, string>) {
  const file = join(out, `${name}.callgrind`);
  const valgrindLog = join(out, `${name}.valgrind.log`);
  const server = await startServer(variant, env, cleanups, {
    prefix: [
      'valgrind',
      '--tool=callgrind',
      '--instr-atstart=no',
      `--callgrind-out-file=${file}`,
      `--log-file=${valgrindLog}`,
    ],
    script: ['--single-threaded', join(out, 'bench/server.mjs')],
  });
  const { child, url } = server;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const pool = Array.from({ length: REPLAY_KEYS }, (_, n) => `${name}-${n}`);
  let next = 0;
  const nextKey = keys === 'fresh' ? () => randomUUID() : () => pool[next++ % pool.length]!;
  if (keys === 'replay') await send(url, REPLAY_KEYS, () => pool[next++]!); // completes each key once
  await send(url, WARMUP, nextKey);
  execFileSync('callgrind_control', ['--instr=on', String(child.pid)], { stdio: 'ignore' });
  await send(url, REQUESTS, nextKey);
  execFileSync('callgrind_control', ['--dump', String(child.pid)], { stdio: 'ignore' });
  child.kill('SIGKILL');
  await exited;
  // The dump written on --dump: <file>.<n>; totals of the instrumented window only.
  const dumps = readdirSync(out).filter((f) => f.startsWith(`${name}.callgrind.`));
  if (dumps.length === 0) {
    throw new Error(`${name}: callgrind wrote no dump\n${readFileSync(valgrindLog, 'utf8').slice(-2000)}`);
  }
  const dump = join(out, dumps.sort().at(-1)!);
  // CALLGRIND_KEEP=<dir>: keep each dump there, for callgrind_annotate.
  if (process.env.CALLGRIND_KEEP) cpSync(dump, join(process.env.CALLGRIND_KEEP, `${name}.callgrind`));
  const text = readFileSync(dump, 'utf8');
  const total = Number(/^(?:summary|totals): (\d+)/m.exec(text)?.[1]);
  if (!Number.isFinite(total) || total === 0) throw new Error(`${name}: no totals in the callgrind dump`);
  return { total: total / REQUESTS, gc: gcOf(dump) / REQUESTS };
}

/**
 * The instructions of V8's garbage collector in a dump (its functions by name, from callgrind_annotate).
 * Under valgrind a request takes some 50 times longer, so more objects are alive at each collection
 * than in a server at full speed: the GC's share is the least representative part of the count.
 */
function gcOf(dump: string): number {
  const listing = execFileSync('callgrind_annotate', ['--threshold=100', dump], {
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
  });
  let gc = 0;
  for (const line of listing.split('\n')) {
    const match = /^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$/.exec(line);
    if (match && GC_FUNCTION.test(match[2]!)) gc += Number(match[1]!.replaceAll(',', ''));
  }
  return gc;
}

/** `n` requests, CONCURRENCY at a time; every one must answer 200. */
async function send(url: string, n: number, key: () => string): Promise<void> {
  let left = n;
  const worker = async () => {
    while (left > 0) {
      left--;
      const response = await fetch(`${url}/pay`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key() },
        body: PAY_BODY,
      });
      const body = await response.text();
      if (response.status !== 200) throw new Error(`${url}: ${response.status} ${body.slice(0, 300)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
}
