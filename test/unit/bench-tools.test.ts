/**
 * The bench's own parts that a run's figures depend on, where a mistake would not show as a failure:
 * the reading of perf's samples, what the report carries from one record to the next, and what
 * Ctrl-C leaves behind.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { summarisePerfScript } from '../../bench/lib/perf.js';
import { type FingerprintCost, fingerprintSection, previousOf } from '../../bench/lib/report.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));

describe('summarisePerfScript (perf script -F tid,ip,sym)', () => {
  // Five samples of 250 µs of CPU each; the server's main thread is 100, 101 another of its threads.
  const script = [
    '  100 ',
    '\tffffffff816bb998 ksys_write',
    '\t          9dd4a6 node::StreamBase::Writev',
    '\t    7f52e73b8646 JS:*writevGeneric node:internal/stream_base_commons:123:23',
    '\t    7f52e73bb46d JS:^sendCommand /app/node_modules/ioredis/built/Redis.js:354:16',
    '',
    '  100 ',
    '\t         1508083 Builtins_LoadIC',
    '\t    7f52e7469bd9 JS:*runClaimed file:///app/dist/core/run-claimed.js:14:33',
    '\t    7f52e741ac2e JS:*execute file:///app/dist/core/engine.js:59:27',
    '',
    '  100 ',
    '\t          c4993d v8::internal::Scavenger::ScavengeObject<v8::internal::FullHeapObjectSlot>',
    '\t    7f52e7469bd9 JS:*runClaimed file:///app/dist/core/run-claimed.js:14:33',
    '',
    '  101 ',
    '\t          c7e636 v8::internal::compiler::GraphReducer::ReduceTop',
    '\t          c7e9cd v8::platform::DefaultJobWorker::Run',
    '',
    '  100 ',
    '\t    7f52e73f7fb4 JS:*get signal node:internal/abort_controller:152:7',
    '',
  ].join('\n');

  it('counts builtins for their JavaScript caller, the kernel and V8 apart, per request', () => {
    const summary = summarisePerfScript(script, 100, 5);
    expect(summary.busy_us_per_req).toBe(250);
    expect(summary.owners).toEqual({
      'Linux kernel': 50,
      'trpc-idempotency': 50,
      GC: 50,
      'JIT compiler': 50,
      Node: 50,
    });
    expect(summary.top.map((f) => [f.frame, f.owner])).toEqual(
      expect.arrayContaining([
        ['kernel, from writevGeneric (node:internal/stream_base_commons)', 'Linux kernel'],
        ['runClaimed (dist/core/run-claimed.js)', 'trpc-idempotency'],
        ['(garbage collector)', 'GC'],
        ['(optimising compiler)', 'JIT compiler'],
        ['get signal (node:internal/abort_controller)', 'Node'],
      ]),
    );
    expect(summary.top.every((f) => f.share === 0.2)).toBe(true);
  });
});

describe('previousOf (the last record, for the next one to compare with)', () => {
  const summary = (fields: object) =>
    `<!-- bench-summary ${JSON.stringify({ date: '2026-12-01T10:59:34.973Z', commit: 'cbf7f51', ratios: { 'redis-first': 0.889 }, overhead_us_per_call: 6.09, ...fields })} -->`;

  it("reads the baseline's range from the summary", () => {
    const previous = previousOf(`# Benchmark results\n\n${summary({ baseline_rps_range: [3298, 4325] })}\n`);
    expect(previous?.baseline_rps_range).toEqual([3298, 4325]);
    expect(previous?.ratios).toEqual({ 'redis-first': 0.889 });
  });

  it('reads it from the Steadiness line of a record whose summary does not give it', () => {
    const markdown = [
      '# Benchmark results',
      '',
      "**Steadiness.** The bare tRPC baseline's 42 saturation runs served 2,327-4,443 req/s, at 244-514 µs of server CPU per",
      "request: the same work, so the spread is the host's.",
      '',
      summary({}),
    ].join('\n');
    expect(previousOf(markdown)?.baseline_rps_range).toEqual([2327, 4443]);
    expect(previousOf(`# Benchmark results\n\n${summary({})}\n`)?.baseline_rps_range).toBeUndefined();
  });
});

describe('fingerprintSection (the fingerprint against its parse, in RESULTS.md)', () => {
  const row = { transport: 'superjson' as const, body_bytes: 1_011_439, copies: 5, ratios: [1.8, 2.1, 2.0] };
  const cost: FingerprintCost = {
    rounds: 3,
    batch_ms: 25,
    rows: [
      { ...row, shape: '500 nested Sets, 1 MB', parse_us: 2727.9, fingerprint_us: 5454.1, ratio: 2.0 },
      { ...row, shape: 'DAG', parse_us: 11.26, fingerprint_us: 268.4, ratio: 22.37, ratios: [22.37] },
      { ...row, shape: 'attack', parse_us: 31.1, fingerprint_us: 30.8, ratio: 0.99, refused: true },
    ],
  };

  it('says a record made before it has none, rather than failing', () => {
    expect(fingerprintSection(undefined)).toMatch(/^## Fingerprint cost .*\n\nNot measured in this run\.$/);
  });

  it('gives each shape its ratio, whether it meets the target, and marks a refusal', () => {
    const lines = fingerprintSection(cost).split('\n');
    expect(lines).toContain(
      '| 500 nested Sets, 1 MB | superjson | 1,011,439 | 2,728 | 5,454 | **2.00** (1.80-2.10) | yes |',
    );
    expect(lines).toContain('| DAG | superjson | 1,011,439 | 11.3 | 268.4 | **22.37** | **no** |');
    expect(lines.find((l) => l.startsWith('| attack |'))).toContain('30.8 (refusal)');
  });
});

describe('exitOnInterrupt (Ctrl-C in npm run bench)', () => {
  it('runs every cleanup, last registered first, before exiting with 130, whatever fails meanwhile', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-interrupt-'));
    const marker = join(dir, 'marker');
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/bench-interrupt.ts', marker], {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => {
          if (chunk.toString().includes('ready')) resolve();
        });
        child.once('exit', (code) => reject(new Error(`the fixture exited with ${code} before it was ready`)));
      });
      const exited = new Promise<number | string | null>((resolve) => {
        child.once('exit', (code) => resolve(code));
        setTimeout(() => resolve('still running 10 s after SIGINT'), 10_000).unref();
      });
      child.kill('SIGINT');
      expect(await exited).toBe(130);
      expect(readFileSync(marker, 'utf8')).toBe('last registered\nfirst registered\n');
    } finally {
      // A handler that does not exit must not leave the fixture running after the test.
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
