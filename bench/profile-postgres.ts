/**
 * Where the PostgreSQL store spends Node CPU: `node --import tsx bench/profile-postgres.ts`.
 *
 * Drives the engine (`createIdempotencyEngine` from dist/) on `drizzleStore` over
 * node-postgres (a pool of 10) with CONCURRENCY operations in flight: first
 * executions (a fresh key each) and replays (keys completed beforehand). Reports
 * this process's CPU time (process.cpuUsage: the engine, the store, Drizzle and
 * the driver, not PostgreSQL) per operation, and operations per second.
 *
 * A/B: LIBS="before=path/to/dist,after=dist" loads each build's drizzle.js (the
 * engine stays dist/'s) and interleaves them, in alternating order, ROUNDS times;
 * the report gives medians and min-max per build. PROFILE=dir adds one more round
 * per build under the V8 CPU profiler (the same sampler as `node --cpu-prof`,
 * started and stopped around each phase; not counted in the medians), writes
 * the .cpuprofile files to dir, and prints the top self-time frames per phase.
 *
 * Environment: DATABASE_URL, OPS (per phase, default 4000), CONCURRENCY (32),
 * ROUNDS (5), LIBS, PROFILE, TOP (frames listed, 25), POOL (connections, 10).
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { createIdempotencyEngine, type IdempotencyEngine } from '../dist/index.js';
import { median } from './lib/aggregate.js';
import { cpuMicros, createSchema } from './lib/services.js';
import { RESULT } from './lib/store-cost.js';

const OPS = Number(process.env.OPS ?? 4000);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 32);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const TOP = Number(process.env.TOP ?? 25);
const PROFILE = process.env.PROFILE;
const POOL = Number(process.env.POOL ?? 10);
const PAYLOAD = { amount: 4200, currency: 'eur' };

interface Build {
  label: string;
  engine: IdempotencyEngine;
  pool: pg.Pool;
  /** Keys completed beforehand, replayed in turn. */
  replayKeys: string[];
}

async function loadBuild(label: string, dir: string, url: string): Promise<Build> {
  const { drizzleStore } = (await import(
    pathToFileURL(`${resolvePath(dir)}/drizzle.js`).href
  )) as typeof import('../dist/drizzle.js');
  // Idle connections stay (idleTimeoutMillis 0), so the backends measured stay the same between phases.
  const pool = new pg.Pool({
    connectionString: url,
    max: POOL,
    application_name: `profile-${label}`,
    idleTimeoutMillis: 0,
  });
  const engine = createIdempotencyEngine({ store: drizzleStore({ db: drizzle(pool) }) });
  const replayKeys = Array.from({ length: 1000 }, () => `${label}-${randomUUID()}`);
  await runAll(replayKeys.length, (i) => engine.run({ key: replayKeys[i]!, name: 'pay', payload: PAYLOAD }, op));
  return { label, engine, pool, replayKeys };
}

const op = async () => RESULT;

/** Runs `count` operations, CONCURRENCY at a time. */
async function runAll(count: number, one: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) await one(next++);
    }),
  );
}

type Phase = 'first' | 'replay';

function phaseOp(build: Build, phase: Phase): (i: number) => Promise<unknown> {
  if (phase === 'first') {
    const prefix = `${build.label}-${randomUUID()}-`;
    return (i) => build.engine.run({ key: `${prefix}${i}`, name: 'pay', payload: PAYLOAD }, op);
  }
  const keys = build.replayKeys;
  return (i) =>
    build.engine.run({ key: keys[i % keys.length]!, name: 'pay', payload: PAYLOAD }, () => {
      throw new Error('a replay ran the operation');
    });
}

/** System CPU time of a process so far, in µs (Linux: field 15 of /proc/<pid>/stat, 100 Hz ticks). */
function systemMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[12]) * 10_000;
}

/** CPU time so far (total, system) of the PostgreSQL backends serving `build`'s pool (its connections), in µs. */
async function backendMicros(build: Build): Promise<Map<number, [number, number]>> {
  const { rows } = await build.pool.query<{ pid: number }>(
    'select pid from pg_stat_activity where application_name = $1',
    [`profile-${build.label}`],
  );
  return new Map(rows.map(({ pid }) => [pid, [cpuMicros(pid), systemMicros(pid)]]));
}

interface Sample {
  /** PostgreSQL backend CPU per operation (10 ms ticks summed over the run), and of it in the kernel. */
  pgUsPerOp: number;
  pgSysUsPerOp: number;
  cpuUsPerOp: number;
  /** Of which in the kernel (socket reads and writes). */
  sysUsPerOp: number;
  opsPerSec: number;
}

async function measure(build: Build, phase: Phase, session?: Session): Promise<Sample> {
  const one = phaseOp(build, phase);
  const backendsBefore = await backendMicros(build);
  if (session) await session.post('Profiler.start');
  const cpu = process.cpuUsage();
  const start = performance.now();
  await runAll(OPS, one);
  const elapsed = performance.now() - start;
  const used = process.cpuUsage(cpu);
  let backends = 0;
  let backendsSystem = 0;
  for (const [pid, [total, system]] of await backendMicros(build)) {
    const [totalBefore, systemBefore] = backendsBefore.get(pid) ?? [total, system];
    backends += total - totalBefore;
    backendsSystem += system - systemBefore;
  }
  if (session) {
    const { profile } = await session.post('Profiler.stop');
    const file = `${PROFILE}/${build.label}-${phase}.cpuprofile`;
    writeFileSync(file, JSON.stringify(profile));
    printTopFrames(`${build.label} ${phase}`, profile as unknown as CpuProfile);
  }
  return {
    cpuUsPerOp: (used.user + used.system) / OPS,
    sysUsPerOp: used.system / OPS,
    pgUsPerOp: backends / OPS,
    pgSysUsPerOp: backendsSystem / OPS,
    opsPerSec: (OPS / elapsed) * 1000,
  };
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a frame's code lives: a package, the library's core or stores, Node, or V8 (no file). */
function area(url: string): string {
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return 'node';
  const lib = /\/(core|stores|trpc)\/[^/]+$/.exec(url);
  if (lib) return `library ${lib[1]}`;
  return url === '' ? 'native' : 'other';
}

/** Self time summed by function and file (all the places a function is sampled), and by area. */
function printTopFrames(title: string, profile: CpuProfile): void {
  const byNode = new Map(profile.nodes.map((node) => [node.id, node.callFrame]));
  const self = new Map<string, number>();
  const areas = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const frame = byNode.get(id)!;
    const dt = profile.timeDeltas[i] ?? 0;
    if (frame.functionName === '(idle)') return;
    const url = frame.url.replace(/^file:\/\//, '').replace(/^.*\/node_modules\//, '');
    const key = `${frame.functionName || '(anonymous)'} ${url}${url ? `:${frame.lineNumber + 1}` : ''}`;
    self.set(key, (self.get(key) ?? 0) + dt);
    const where = area(frame.url);
    areas.set(where, (areas.get(where) ?? 0) + dt);
    busy += dt;
  });
  const perOp = (us: number) => (us / OPS).toFixed(1).padStart(7);
  const share = (us: number) => `${((us / busy) * 100).toFixed(1).padStart(5)}%`;
  console.log(`\n${title}: ${perOp(busy).trim()} µs per operation sampled busy (wall time, not idle)`);
  console.log(
    [...areas]
      .sort((a, b) => b[1] - a[1])
      .map(([name, us]) => `${name} ${perOp(us).trim()}`)
      .join(', '),
  );
  console.log(`top self time (µs per operation, % of busy samples):`);
  for (const [key, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
    console.log(`${perOp(us)}  ${share(us)}  ${key}`);
  }
}

async function main() {
  const libs = (process.env.LIBS ?? 'dist=dist').split(',').map((entry) => {
    const [label, dir] = entry.split('=') as [string, string];
    return { label, dir };
  });
  const schema = await createSchema('profile');
  try {
    const builds: Build[] = [];
    for (const { label, dir } of libs) builds.push(await loadBuild(label, dir, schema.url));
    // Warm-up: JIT and the pool's connections, both phases, each build.
    for (const build of builds) for (const phase of ['first', 'replay'] as const) await measure(build, phase);

    const samples = new Map<string, Sample[]>();
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? builds : [...builds].reverse();
      for (const phase of ['first', 'replay'] as const) {
        for (const build of order) {
          const key = `${build.label} ${phase}`;
          samples.set(key, [...(samples.get(key) ?? []), await measure(build, phase)]);
        }
      }
    }
    console.log(`\n${OPS} operations per phase, ${CONCURRENCY} in flight, ${ROUNDS} rounds (medians, min-max)`);
    for (const [key, list] of samples) {
      const cpu = list.map((s) => s.cpuUsPerOp);
      const sys = list.map((s) => s.sysUsPerOp);
      const backend = list.map((s) => s.pgUsPerOp);
      const backendSys = list.map((s) => s.pgSysUsPerOp);
      const rate = list.map((s) => s.opsPerSec);
      console.log(
        `${key.padEnd(20)} CPU ${median(cpu).toFixed(0).padStart(4)} µs/op (${Math.min(...cpu).toFixed(0)}-${Math.max(...cpu).toFixed(0)}), ` +
          `of which system ${median(sys).toFixed(0).padStart(3)};   PostgreSQL backends ${median(backend).toFixed(0).padStart(4)} µs/op (${Math.min(...backend).toFixed(0)}-${Math.max(...backend).toFixed(0)}), of which system ${median(backendSys).toFixed(0)}` +
          `   ${median(rate).toFixed(0).padStart(5)} ops/s (${Math.min(...rate).toFixed(0)}-${Math.max(...rate).toFixed(0)})`,
      );
    }

    if (PROFILE) {
      mkdirSync(PROFILE, { recursive: true });
      const session = new Session();
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.setSamplingInterval', { interval: 100 });
      for (const build of builds)
        for (const phase of ['first', 'replay'] as const) await measure(build, phase, session);
      session.disconnect();
    }
    for (const build of builds) await build.pool.end();
  } finally {
    await schema.drop();
  }
}

await main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
