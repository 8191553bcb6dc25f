/**
 * What the stacks suite shares: the packed library, and commands run the way
 * a user's machine runs them (no settings inherited from the npm that started
 * the tests, peer dependencies checked, nothing forced).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { blocksOf } from '../../scripts/check-docs.js';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));

export const NPM_FLAGS = ['--prefer-offline', '--no-audit', '--no-fund'];

/** The environment of every npm and next command: none of the caller's npm settings, no telemetry. */
export function commandEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    // an npm that started vitest passes its own settings down (npm_config_*): not for these projects;
    // and vitest's NODE_ENV=test would make next start serve a production build as a test one
    // (t3's timing middleware then adds its development delay)
    if (!name.toLowerCase().startsWith('npm_') && name !== 'NODE_ENV') env[name] = value;
  }
  return {
    ...env,
    // whatever an .npmrc says: peer dependencies are checked, nothing is forced
    npm_config_legacy_peer_deps: 'false',
    npm_config_force: 'false',
    npm_config_update_notifier: 'false',
    NEXT_TELEMETRY_DISABLED: '1',
    CI: '1',
    ...extra,
  };
}

export interface RunResult {
  output: string;
  ms: number;
}

/** Runs a command to its end; throws with its output unless it exits with 0. */
export function run(
  command: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv = commandEnv(),
): Promise<RunResult> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code, signal) => {
      const ms = Math.round(performance.now() - started);
      if (code === 0) resolve({ output, ms });
      else
        reject(
          new Error(`\`${command} ${args.join(' ')}\` in ${cwd} ended with ${code ?? signal}:\n${output.slice(-6000)}`),
        );
    });
  });
}

/** Builds the current checkout and packs it, as `npm install trpc-idempotency` would get it. */
export async function packLibrary(into: string): Promise<{ tgz: string; ms: number }> {
  const started = performance.now();
  // A build running at the same time in this checkout (`rm -rf dist && tsc`) can empty dist/ between
  // our build and our pack: the packed file list is checked, and the pair tried again.
  for (let attempt = 1; ; attempt++) {
    await run('npm', ['run', 'build', '--silent'], REPO);
    const { output } = await run('npm', ['pack', '--json', '--pack-destination', into], REPO);
    const [packed] = JSON.parse(output.slice(output.indexOf('['))) as Array<{
      filename: string;
      files: Array<{ path: string }>;
    }>;
    const tgz = join(into, packed!.filename);
    const files = new Set(packed!.files.map((f) => f.path));
    if (!existsSync(tgz)) throw new Error(`npm pack made no ${tgz}:\n${output}`);
    if (files.has('dist/index.js') && files.has('dist/client.js') && files.has('dist/cjs/index.js'))
      return { tgz, ms: Math.round(performance.now() - started) };
    if (attempt === 3)
      throw new Error(
        `npm pack packed no dist/ three times (is another build of this checkout running?):\n${[...files].join('\n')}`,
      );
  }
}

/** Writes `text` to `file` (a path relative to the project `dir`), making its folders. */
export function writeProjectFile(dir: string, file: string, text: string): void {
  mkdirSync(dirname(join(dir, file)), { recursive: true });
  writeFileSync(join(dir, file), text);
}

/** The code of the block named `title` of a docs page (`docs/….md`), as a file: it throws if there is none. */
export function docsBlock(page: string, title: string): string {
  const found = blocksOf(page, readFileSync(join(REPO, page), 'utf8')).find((b) => b.title === title);
  if (found === undefined) throw new Error(`${page} has no block named ${title}`);
  return `${found.code}\n`;
}
