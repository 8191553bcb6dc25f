/**
 * A loop of the overhead.ts callers, to profile the middleware in process:
 *   node --cpu-prof --import tsx bench/profile-inprocess.ts first 200000
 *   node --import tsx bench/profile-inprocess.ts top <file.cpuprofile>  (self time of src/ frames)
 * Modes: `base` (no idempotency), `first` (a fresh key per call), `replay` (one completed key),
 * `minimal` (a fresh key per call through the least an idempotency layer does: lib/inprocess.ts);
 * `redis-first`, `redis-replay` the same on the Redis store over ioredis, `node-redis-first`,
 * `node-redis-replay` over node-redis (REDIS_URL, default redis://127.0.0.1:6379; keys under a
 * prefix of their own, deleted at the end), and `redis-base`, `node-redis-base` the mutation without
 * idempotency beside a connected client (the caller's cost, to subtract).
 * An optional third argument is a number of warm-up calls made first (default 20,000: the memory
 * store is then full, as in a long run, and every first execution evicts a record).
 * With `valgrind --tool=callgrind`, two call counts give instructions per call by difference.
 */
import { readFileSync } from 'node:fs';
import { callerFor, INPUT, type InProcessCtx, redisCallerFor } from './lib/inprocess.js';

const [mode = 'first', arg = '200000', warmup = '20000'] = process.argv.slice(2);

if (mode === 'top') {
  printTop(arg);
} else {
  await loop(mode, Number(arg), Number(warmup));
}

async function loop(mode: string, calls: number, warm: number) {
  const ctx: InProcessCtx = { key: 'replayed' };
  const redis = /^(node-)?redis-/.test(mode)
    ? await redisCallerFor(mode.startsWith('node-') ? 'node-redis' : 'ioredis', ctx)
    : undefined;
  const caller = redis?.caller ?? callerFor(ctx);
  const variant = mode.replace(/^(node-)?redis-/, '');
  const input = INPUT;
  await caller.idempotent(input);
  let started = performance.now();
  for (let n = -warm; n < calls; n++) {
    if (n === 0) started = performance.now();
    if (variant === 'base') {
      ctx.key = `k${n}`;
      await caller.plain(input);
    } else if (variant === 'first') {
      ctx.key = `k${n}`;
      await caller.idempotent(input);
    } else if (variant === 'minimal') {
      ctx.key = `k${n}`;
      await caller.minimal(input);
    } else {
      ctx.key = 'replayed';
      await caller.idempotent(input);
    }
  }
  const us = ((performance.now() - started) * 1000) / calls;
  process.stderr.write(`${mode}: ${calls} calls, ${us.toFixed(2)} µs per call\n`);
  await redis?.close();
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

/** Self time per function, from the samples: the top frames overall and those of src/ (dist/) code. */
function printTop(file: string) {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: ProfileNode[];
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    const short = url.replace(/^.*\/node_modules\//, '').replace(/^file:\/\/.*?\/(dist|bench)\//, '$1/');
    const where = url === '' ? '' : `${short}:${lineNumber + 1}`;
    const name = `${functionName || '(anonymous)'} ${where}`.trim();
    const dt = profile.timeDeltas[i] ?? 0;
    self.set(name, (self.get(name) ?? 0) + dt);
    total += dt;
  });
  const rows = [...self].sort((a, b) => b[1] - a[1]);
  const show = (title: string, list: [string, number][]) => {
    process.stdout.write(`\n${title}\n`);
    for (const [name, us] of list)
      process.stdout.write(
        `${((100 * us) / total).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(0).padStart(6)} ms  ${name}\n`,
      );
  };
  show(`top 25 self time, all frames (total ${(total / 1000).toFixed(0)} ms)`, rows.slice(0, 25));
  show('top 25 self time, library frames (dist/)', rows.filter(([name]) => / dist\//.test(name)).slice(0, 25));
}
