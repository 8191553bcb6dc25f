/**
 * A genuine create-t3-app app, generated at test time by its CLI, changed as
 * docs/create-t3-app.md says (test/stacks/t3/changes.ts), built with
 * `next build` and served by `next start`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { commandEnv, NPM_FLAGS, REPO, run } from '../pack.js';
import { applyEdit, type Variant } from './changes.js';

export const CREATE_T3_APP = 'create-t3-app@7.40.0';
const OVERLAYS = join(REPO, 'example-app/t3');
const FONT_MOCK = fileURLToPath(new URL('./google-fonts-mock.cjs', import.meta.url));

export interface Timings {
  generate: number;
  install: number;
  installLibrary: number;
  build: number;
  start: number;
  test?: number;
}

export interface T3App {
  dir: string;
  url: string;
  timings: Timings;
  /** The versions npm installed, read from node_modules. */
  versions: Record<string, string>;
  /** What `npm install <tgz>` printed. */
  libraryInstallOutput: string;
  stop(): Promise<void>;
}

/** Files under `dir`, relative to it. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => statSync(join(dir, f)).isFile());
}

/** Generates the app, applies the documented changes, installs, builds and starts it. */
export async function createT3App(
  variant: Variant,
  workDir: string,
  tgz: string,
  log: (line: string) => void,
): Promise<T3App> {
  const dir = join(workDir, `t3-${variant.name}`);
  const timings: Partial<Timings> = {};

  // 1. generate: App Router and tRPC, nothing this test does not need (no auth, no database, no styling kit, no linter)
  {
    const { ms } = await run(
      'npx',
      [
        '-y',
        CREATE_T3_APP,
        `t3-${variant.name}`,
        '--CI',
        '--trpc',
        '--appRouter',
        '--tailwind',
        'false',
        '--nextAuth',
        'false',
        '--betterAuth',
        'false',
        '--prisma',
        'false',
        '--drizzle',
        'false',
        '--eslint',
        'false',
        '--biome',
        'false',
        '--noGit',
        '--noInstall',
      ],
      workDir,
    );
    timings.generate = ms;
    log(`generated with ${CREATE_T3_APP} in ${ms} ms`);
  }

  // 2. the documented changes
  const pkgFile = join(dir, 'package.json');
  const pkg = JSON.parse(readFileSync(pkgFile, 'utf8')) as { dependencies: Record<string, string> };
  for (const name of variant.removeDependencies) {
    if (!(name in pkg.dependencies)) throw new Error(`create-t3-app's package.json has no ${name} to remove`);
    delete pkg.dependencies[name];
  }
  Object.assign(pkg.dependencies, variant.dependencies);
  writeFileSync(pkgFile, `${JSON.stringify(pkg, null, 2)}\n`);
  for (const file of variant.deletes) {
    if (!existsSync(join(dir, file))) throw new Error(`create-t3-app made no ${file} to delete`);
    rmSync(join(dir, file));
  }
  for (const overlay of variant.overlays) {
    const from = join(OVERLAYS, overlay);
    for (const file of filesUnder(from)) {
      const to = join(dir, file);
      const replaced = existsSync(to);
      if (replaced !== variant.replaces.includes(file)) {
        throw new Error(
          replaced ? `example-app/t3/${overlay}/${file} would overwrite t3's ${file}` : `t3 has no ${file} to replace`,
        );
      }
      mkdirSync(join(to, '..'), { recursive: true });
      cpSync(join(from, file), to);
    }
  }
  for (const edit of variant.edits) {
    const file = join(dir, edit.file);
    writeFileSync(file, applyEdit(readFileSync(file, 'utf8'), edit));
  }

  // 3. install t3's dependencies with tRPC pinned, then the packed library on its own, as a user adds it
  {
    const { ms } = await run('npm', ['install', ...NPM_FLAGS], dir);
    timings.install = ms;
    log(`npm install in ${ms} ms`);
  }
  const libraryInstall = await run('npm', ['install', tgz, ...NPM_FLAGS], dir);
  timings.installLibrary = libraryInstall.ms;
  log(`npm install <trpc-idempotency tgz> in ${libraryInstall.ms} ms`);
  const versions: Record<string, string> = {};
  for (const name of [
    ...Object.keys(variant.dependencies),
    'trpc-idempotency',
    'next',
    'react',
    '@tanstack/react-query',
    'superjson',
  ]) {
    const file = join(dir, 'node_modules', name, 'package.json');
    versions[name] = existsSync(file)
      ? (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version
      : 'missing';
  }
  log(
    `installed ${Object.entries(versions)
      .map(([n, v]) => `${n}@${v}`)
      .join(' ')}`,
  );

  // 4. next build: it type-checks the app, so the documented snippets compile against this tRPC.
  // No network here: next/font/google reads Next's own mock of Google Fonts instead (the font file is a placeholder).
  {
    const { ms } = await run(
      process.execPath,
      [join(dir, 'node_modules/next/dist/bin/next'), 'build'],
      dir,
      commandEnv({ NEXT_FONT_GOOGLE_MOCKED_RESPONSES: FONT_MOCK }),
    );
    timings.build = ms;
    log(`next build in ${ms} ms`);
  }

  // 5. next start on a free port
  const started = performance.now();
  const port = await freePort();
  const server = spawn(
    process.execPath,
    [join(dir, 'node_modules/next/dist/bin/next'), 'start', '-p', String(port), '-H', '127.0.0.1'],
    {
      cwd: dir,
      env: commandEnv({ PORT: String(port) }),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group, so that stop() ends whatever next start runs
    },
  );
  let serverOutput = '';
  server.stdout!.on('data', (chunk: Buffer) => (serverOutput += chunk.toString()));
  server.stderr!.on('data', (chunk: Buffer) => (serverOutput += chunk.toString()));
  writeFileSync(join(dir, 'next-start.pid'), String(server.pid));
  const url = `http://127.0.0.1:${port}`;
  const stop = () => stopGroup(server);
  try {
    await waitUntilServing(`${url}/api/trpc/payment.stats`, server, () => serverOutput);
  } catch (error) {
    await stop();
    throw error;
  }
  timings.start = Math.round(performance.now() - started);
  log(`next start ready on ${url} in ${timings.start} ms`);

  return {
    dir,
    url,
    timings: timings as Timings,
    versions,
    libraryInstallOutput: libraryInstall.output,
    stop: async () => {
      await stop();
      if (serverOutput.trim() !== '') writeFileSync(join(dir, 'next-start.log'), serverOutput);
    },
  };
}

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

async function waitUntilServing(url: string, server: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (server.exitCode !== null || server.signalCode !== null) {
      throw new Error(`next start exited with ${server.exitCode ?? server.signalCode}:\n${output()}`);
    }
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`next start did not answer ${url} within 60 s:\n${output()}`);
}

/** Ends the process group of `child` (started detached): SIGTERM, then SIGKILL after 5 s. */
function stopGroup(child: ChildProcess): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const pid = child.pid;
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, 5_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    try {
      process.kill(-pid, 'SIGTERM');
    } catch {
      clearTimeout(timer);
      resolve();
    }
  });
}
