/**
 * Every client link tRPC ships, against a create-t3-app-shaped server (fetch
 * adapter, a `{ headers }` context, superjson, an error formatter of its own),
 * on each tRPC 11 version of the supported range's matrix: the one
 * create-t3-app resolves today (11.19.0, pinned by @trpc/react-query), the
 * newest with a React package (11.22.1, @trpc/tanstack-react-query) and the
 * latest. Each version is installed into a temporary project together with
 * the packed library, without --legacy-peer-deps; the scenario is type-checked
 * against that version and run there (./links/scenario.ts).
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { NPM_FLAGS, REPO, run } from './pack.js';

const TRPC_VERSIONS = ['11.19.0', '11.22.1', '11.25.2'] as const;

const dirs: string[] = [];
let tgz: string;
beforeAll(() => {
  tgz = inject('tgz');
});
afterAll(() => {
  if (process.env.KEEP_STACKS !== '1') for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

interface Report {
  results: {
    link: string;
    formatter: 't3' | 'library';
    runs: Record<string, number>;
    first: string[];
    again: string[];
    batchRequests: number;
    double: unknown[];
    dropped: unknown;
    mixed: unknown[];
    replayedHeaders: number;
    ticks: number[];
  }[];
  leftOut: string;
}

async function runScenario(version: string): Promise<Report> {
  const dir = mkdtempSync(join(tmpdir(), `trpc-idempotency-links-${version}-`));
  dirs.push(dir);
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({
      name: 'links-scenario',
      private: true,
      type: 'module',
      dependencies: {
        '@trpc/client': version,
        '@trpc/server': version,
        superjson: '^2.2.1',
        zod: '^3.24.2',
        '@types/node': '^20.19.0',
        eventsource: '^4.1.1',
        'trpc-idempotency': `file:${tgz}`,
      },
    }),
  );
  await run('npm', ['install', ...NPM_FLAGS], dir);
  mkdirSync(join(dir, 'src'));
  copyFileSync(join(REPO, 'test/stacks/links/scenario.ts'), join(dir, 'src/scenario.ts'));
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'es2022',
        module: 'nodenext',
        moduleResolution: 'nodenext',
        strict: true,
        skipLibCheck: false,
        types: ['node'],
        lib: ['es2023', 'esnext.disposable', 'dom', 'dom.iterable'],
        outDir: 'out',
        rootDir: 'src',
      },
      include: ['src'],
    }),
  );
  // Type-checked against this tRPC version's declarations, ours included (skipLibCheck off). Errors
  // inside tRPC's own declarations (11.19's adapters/ws wants the 'ws' types) are tRPC's, not ours.
  const tsc = spawnSync(join(REPO, 'node_modules/.bin/tsc'), ['-p', dir], { cwd: dir, encoding: 'utf8' });
  const errors = tsc.stdout
    .split('\n')
    .filter((line) => /error TS\d+/.test(line) && !line.startsWith('node_modules/@trpc/'));
  expect(errors, `tsc against tRPC ${version}`).toEqual([]);
  const { output } = await run(process.execPath, [join(dir, 'out/scenario.js')], dir);
  return JSON.parse(output.trim().split('\n').at(-1)!) as Report;
}

describe.each(TRPC_VERSIONS)('tRPC %s, create-t3-app-shaped server', (version) => {
  let report: Report;
  it('installs with the packed library without peer flags, type-checks, and runs', async () => {
    report = await runScenario(version);
    expect(report.results).toHaveLength(8);
  });

  it('without the transformer option: read from the builder from 11.22, refused at creation before', () => {
    if (version === '11.19.0') {
      expect(report.leftOut).toMatch(
        /^refused: .*does not tell a procedure builder which data transformer.*transformer: superjson/,
      );
    } else {
      expect(report.leftOut).toBe('accepted');
    }
  });

  for (const link of ['httpLink', 'httpBatchLink', 'httpBatchStreamLink', 'splitLink+httpSubscriptionLink']) {
    for (const formatter of ['t3', 'library'] as const) {
      it(`${link}, ${formatter === 't3' ? "the app's own error formatter" : 'idempotencyErrorFormatter'}`, () => {
        const r = report.results.find((x) => x.link === link && x.formatter === formatter)!;
        // Every operation ran once: a batch, its replay, a double click, a dropped answer, a mixed batch.
        expect(r.runs).toEqual({ a: 1, b: 1, c: 1, double: 1, dropped: 1, fresh: 1 });
        // Replays come back through superjson: a Date and a BigInt, and the first call's charge ids.
        for (const charge of r.first) expect(charge).toMatch(/^\d+:Date:bigint$/);
        expect(r.again).toEqual(r.first);
        expect(r.batchRequests).toBe(link === 'httpLink' ? 3 : 1);
        // The double click: the second call met 409 in flight, was retried with the same key and got the first call's result.
        expect(r.double[0]).toMatch(/^\d+:Date:bigint$/);
        expect(r.double[1]).toEqual(r.double[0]);
        expect(r.dropped).toMatch(/^\d+:Date:bigint$/);
        // The mixed batch: a replay, a fresh run, and the key reused with another payload refused with 422.
        expect(r.mixed[0]).toBe(r.first[0]);
        expect(r.mixed[1]).toMatch(/^\d+:Date:bigint$/);
        expect(r.mixed[2]).toEqual({
          status: 422,
          reason: formatter === 'library' ? 'payload_mismatch' : null,
          isClientError: true,
        });
        // A `{ headers }` context gives no way to set response headers: no replay marker, on any link.
        expect(r.replayedHeaders).toBe(0);
        if (link.startsWith('splitLink')) expect(r.ticks).toEqual([1, 2, 3]);
      });
    }
  }
});
