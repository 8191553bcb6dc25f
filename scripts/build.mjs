// npm run build: dist/ (ESM, as the source is) and dist/cjs/ (CommonJS), each with declarations.
// Both are plain `tsc`; this script runs them and makes dist/cjs a CommonJS package scope.
import { execFileSync } from 'node:child_process';
import { chmodSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const tsc = join('node_modules', '.bin', 'tsc');
rmSync('dist', { recursive: true, force: true });
execFileSync(tsc, ['-p', 'tsconfig.json'], { stdio: 'inherit' });
execFileSync(tsc, ['-p', 'tsconfig.cjs.json'], { stdio: 'inherit' });

// Node and TypeScript read dist/cjs/**/*.js and *.d.ts as CommonJS (the root package.json says "module").
writeFileSync('dist/cjs/package.json', `${JSON.stringify({ type: 'commonjs' }, null, 2)}\n`);

// #platform (package.json "imports") picks Node's primitives or Web standards' by condition, for the ESM build:
// the one Workers, browsers and edge bundlers take. A nested package.json's "imports" is not the package's, so
// the CommonJS build, which is Node's (and Bun's and Deno's), requires Node's primitives by a relative path.
for (const entry of readdirSync('dist/cjs', { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith('.js')) continue;
  const file = join(entry.parentPath, entry.name);
  const text = readFileSync(file, 'utf8');
  if (!text.includes('require("#platform")')) continue;
  let target = relative(entry.parentPath, 'dist/cjs/core/platform/node.js');
  if (!target.startsWith('.')) target = `./${target}`;
  writeFileSync(file, text.replaceAll('require("#platform")', `require(${JSON.stringify(target)})`));
}

// src has no ESM-only expression (stores/drizzle/migrate.ts carries the package's migrations in its code rather than
// finding drizzle/ from import.meta.url): `import.meta` in the CommonJS build would be a syntax error there.
for (const entry of readdirSync('dist/cjs', { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith('.js')) continue;
  const file = join(entry.parentPath, entry.name);
  if (readFileSync(file, 'utf8').includes('import.meta')) throw new Error(`${file}: import.meta in the CommonJS build`);
}

// The package's bin (`npx trpc-idempotency`): run by its shebang, so executable here too (npm makes it so on install).
const bin = 'dist/cli.js';
if (!readFileSync(bin, 'utf8').startsWith('#!/usr/bin/env node\n')) throw new Error(`${bin}: the shebang is missing`);
chmodSync(bin, 0o755);
