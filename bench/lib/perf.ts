/**
 * Where a server's CPU goes, from Linux `perf` (where it can record): on-CPU samples of every
 * thread of the server process (the main thread, V8's compiler and GC helpers, libuv's pool),
 * kernel time included, JavaScript frames named through `node --perf-basic-prof`. V8's own
 * profiler (profile.ts, the fallback) samples the main thread's wall time, so a thread waiting in
 * a system call counts there as if it ran; perf counts only CPU time.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { ownerOf, type ProfileSummary, summaryOf } from './profile.js';

/** One sample per this much CPU time of a thread, in µs (`perf record -c` counts nanoseconds). */
const PERIOD_US = 250;

/** Whether `perf record` works here (installed, and allowed to sample a process: root, or a low perf_event_paranoid). */
export function perfWorks(): boolean {
  const probe = spawnSync('perf', ['record', '-q', '-e', 'cpu-clock', '-o', '/dev/null', '--', 'true'], {
    stdio: 'ignore',
  });
  return probe.status === 0;
}

/**
 * Node's flags for a server that perf profiles: a map of JIT code addresses to JavaScript functions
 * (in /tmp, see removePerfMap). The flag also turns on V8's own log, one file per isolate in the working
 * directory unless told otherwise: `log` is where it goes instead.
 */
export const perfNodeFlags = (log: string) => ['--perf-basic-prof', `--logfile=${log}`, '--no-logfile-per-isolate'];

export interface PerfRecording {
  /** Stops recording and waits until perf has written its file. */
  stop(): Promise<void>;
}

/** Starts recording every thread of `pid`, with call chains, into `file`. */
export function recordPerf(pid: number, file: string): PerfRecording {
  const child: ChildProcess = spawn(
    'perf',
    ['record', '-q', '-e', 'cpu-clock', '-c', String(PERIOD_US * 1_000), '-g', '-p', String(pid), '-o', file],
    { stdio: 'ignore' },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    async stop() {
      child.kill('SIGINT');
      await exited;
    },
  };
}

// A sample's leaf, when it is V8's own work rather than the function that called it.
const GC = /Scaveng|MarkCompact|Marking|Sweep|Heap::|Evacuat|MinorMC|GCTracer|Heap::CollectGarbage/;
const COMPILER = /compiler::|Maglev|Turbofan|OptimizedCompilationJob|BaselineBatchCompiler/;

/**
 * `JS:*name url:line:col` (perf-basic-prof marks optimised `*`, baseline `^` and interpreted `~` code);
 * a name may hold spaces (`get signal`), a URL does not.
 */
function jsFrame(symbol: string): { name: string; url: string } | undefined {
  const match = /^JS:[*^~+]?(.*) (\S*?)(?::\d+)*$/.exec(symbol);
  if (match === null) return undefined;
  return { name: match[1] || '(anonymous)', url: match[2]! };
}

const short = (url: string) =>
  url.replace(/^.*\/node_modules\//, '').replace(/^(file:\/\/)?\/.*\/(dist|bench)\//, '$2/');

/**
 * Summarises a perf recording of the server `pid` for the `requests` it served meanwhile: CPU per
 * request by owner, and the top frames. A sample in V8's builtins or runtime counts for the
 * JavaScript function that called it (as V8's profiler counts it), and a function V8 inlined for the
 * one it was inlined into (the address map names optimised code by its outer function); one in the kernel for "Linux
 * kernel", named by the function that made the system call; garbage collection and the optimising
 * compiler for themselves, on whichever thread they ran.
 */
export function summarisePerf(file: string, pid: number, requests: number, topN = 12): ProfileSummary {
  const script = execFileSync('perf', ['script', '-i', file, '-F', 'tid,ip,sym'], {
    maxBuffer: 1 << 30,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  return summarisePerfScript(script, pid, requests, topN);
}

/** As summarisePerf, from the text of `perf script -F tid,ip,sym` (one sample per block: its thread, then its frames, leaf first). */
export function summarisePerfScript(script: string, pid: number, requests: number, topN = 12): ProfileSummary {
  const owners: Record<string, number> = {};
  const frames = new Map<string, { owner: string; us: number }>();
  let busy = 0;
  const count = (owner: string, frame: string) => {
    busy += PERIOD_US;
    owners[owner] = (owners[owner] ?? 0) + PERIOD_US;
    const entry = frames.get(frame) ?? { owner, us: 0 };
    entry.us += PERIOD_US;
    frames.set(frame, entry);
  };
  for (const block of script.split('\n\n')) {
    const lines = block.split('\n').filter((line) => line.trim() !== '');
    if (lines.length === 0) continue;
    const tid = Number(lines[0]!.trim().split(/\s+/)[0]);
    // Each frame: `address symbol`; kernel addresses are the top half of the address space.
    const stack = lines.slice(1).map((line) => {
      const [address = '', ...rest] = line.trim().split(' ');
      return { kernel: address.length === 16 && address.startsWith('ffff'), symbol: rest.join(' ') };
    });
    const leaf = stack[0];
    if (leaf === undefined) continue;
    const js = stack.map((f) => jsFrame(f.symbol)).find((f) => f !== undefined);
    const jsName = js === undefined ? undefined : `${js.name} (${short(js.url)})`;
    if (GC.test(leaf.symbol)) count('GC', '(garbage collector)');
    else if (COMPILER.test(leaf.symbol) || (tid !== pid && stack.some((f) => COMPILER.test(f.symbol)))) {
      count('JIT compiler', '(optimising compiler)');
    } else if (leaf.kernel)
      count('Linux kernel', `kernel, from ${jsName ?? (tid === pid ? 'native code' : 'another thread')}`);
    else if (js !== undefined) count(ownerOf(js.url, js.name), jsName!);
    else count('V8 and native', tid === pid ? '(native, main thread)' : '(native, other threads)');
  }
  return summaryOf(owners, frames, busy, requests, topN);
}

/** Removes the map file `--perf-basic-prof` wrote for a server that has exited. */
export function removePerfMap(pid: number): void {
  rmSync(`/tmp/perf-${pid}.map`, { force: true });
}
