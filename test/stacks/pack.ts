import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

let packed: string | undefined;

/** Builds this checkout and packs it, once per test process: the tarball a user would install. */
export function packLibrary(): string {
  if (packed !== undefined) return packed;
  execFileSync('npm', ['run', 'build', '--silent'], { cwd: ROOT, stdio: 'inherit' });
  const dir = mkdtempSync(join(tmpdir(), 'trpc-idempotency-pack-'));
  execFileSync('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
  const tgz = readdirSync(dir).find((name) => name.endsWith('.tgz'));
  if (tgz === undefined) throw new Error(`npm pack wrote no tarball into ${dir}`);
  packed = join(dir, tgz);
  return packed;
}

/** `npm install` in `cwd`, without --legacy-peer-deps or --force: a peer conflict fails the test. */
export function npmInstall(cwd: string, args: readonly string[] = []): void {
  execFileSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', ...args], {
    cwd,
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, npm_config_legacy_peer_deps: 'false', npm_config_force: 'false' },
  });
}
