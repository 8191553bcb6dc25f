// npm run build: dist/ (ESM, as the source is) and dist/cjs/ (CommonJS), each with declarations.
// Both are plain `tsc`; this script runs them and makes dist/cjs a CommonJS package scope.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const tsc = join('node_modules', '.bin', 'tsc');
rmSync('dist', { recursive: true, force: true });
execFileSync(tsc, ['-p', 'tsconfig.json'], { stdio: 'inherit' });
execFileSync(tsc, ['-p', 'tsconfig.cjs.json'], { stdio: 'inherit' });

// Node and TypeScript read dist/cjs/**/*.js and *.d.ts as CommonJS (the root package.json says "module").
writeFileSync('dist/cjs/package.json', `${JSON.stringify({ type: 'commonjs' }, null, 2)}\n`);

// `import.meta.url` is the one ESM-only expression in src (drizzle-migrate.ts finds the package's
// migrations from it); in CommonJS the module's URL comes from __filename.
let replaced = 0;
for (const entry of readdirSync('dist/cjs', { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith('.js')) continue;
  const file = join(entry.parentPath, entry.name);
  const text = readFileSync(file, 'utf8');
  if (!text.includes('import.meta')) continue;
  const next = text.replaceAll('import.meta.url', "require('node:url').pathToFileURL(__filename).href");
  if (next.includes('import.meta')) throw new Error(`${file}: import.meta other than import.meta.url`);
  replaced += text.split('import.meta.url').length - 1;
  writeFileSync(file, next);
}
if (replaced !== 1) throw new Error(`expected one import.meta.url in the CommonJS build, found ${replaced}`);
