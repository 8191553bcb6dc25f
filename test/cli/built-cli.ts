/**
 * The CLI as it ships: src/ compiled by the package's own tsconfig into a
 * directory of this test file's own (dist-cli-test-*, ignored by git like
 * every dist-*), then run as a child process. Not dist/ itself: `npm run
 * build` empties dist/ first, and another suite or engineer may build while
 * these tests run. The directory sits at the repository's root, so the
 * package's `"type": "module"` and node_modules (the drivers) apply as they
 * do to dist/.
 */
import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Wall time from spawn to exit, in ms. */
  ms: number;
}

export interface RunOptions {
  timeout?: number;
  /**
   * Environment variables of the run, over this process's own; the CLI's store URLs
   * (TRPC_IDEMPOTENCY_REDIS_URL, TRPC_IDEMPOTENCY_DATABASE_URL) only when given here.
   */
  env?: Record<string, string>;
}

export interface BuiltCli {
  /** The compiled entry (`<dir>/cli.js`). */
  entry: string;
  run(args: string[], options?: RunOptions): Promise<CliRun>;
  /** Parses stdout as the one JSON document `--json` prints. */
  json<T = Record<string, unknown>>(args: string[], options?: RunOptions): Promise<CliRun & { doc: T }>;
  remove(): void;
}

/** Compiles src/ (with src/cli.ts) into a directory of its own. */
export async function buildCli(): Promise<BuiltCli> {
  const dir = join(REPO, `dist-cli-test-${randomUUID().slice(0, 8)}`);
  await promisify(execFile)(
    join(REPO, 'node_modules/.bin/tsc'),
    [
      '-p',
      'tsconfig.json',
      '--outDir',
      dir,
      '--declaration',
      'false',
      '--declarationMap',
      'false',
      '--sourceMap',
      'false',
    ],
    { cwd: REPO },
  );
  const entry = join(dir, 'cli.js');
  const run = (args: string[], { timeout = 20_000, env = {} }: RunOptions = {}) =>
    new Promise<CliRun>((resolve, reject) => {
      const started = performance.now();
      const {
        TRPC_IDEMPOTENCY_REDIS_URL: _redis,
        TRPC_IDEMPOTENCY_DATABASE_URL: _database,
        ...inherited
      } = process.env;
      const child = spawn(process.execPath, [entry, ...args], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...inherited, ...env },
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`trpc-idempotency ${args.join(' ')} did not end within ${timeout} ms:\n${stdout}\n${stderr}`));
      }, timeout);
      child.once('error', reject);
      child.once('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr, ms: performance.now() - started });
      });
    });
  return {
    entry,
    run,
    async json<T>(args: string[], options?: RunOptions) {
      const result = await run([...args, '--json'], options);
      let doc: T;
      try {
        doc = JSON.parse(result.stdout) as T;
      } catch {
        throw new Error(`stdout is not one JSON document (exit ${result.code}):\n${result.stdout}\n${result.stderr}`);
      }
      return { ...result, doc };
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
