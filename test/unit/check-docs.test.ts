import { describe, expect, it } from 'vitest';
import {
  blocksOf,
  modesOf,
  QUICKSTART_STORE_LINE,
  quickstartStoreOf,
  quickstartWith,
  slugOf,
} from '../../scripts/check-docs.js';

const page = [
  '# A page',
  '',
  '```ts server.ts',
  'void main();',
  '```',
  '',
  '```ts esm.ts',
  '// Needs "type": "module" in package.json (npm pkg set type=module): top-level await.',
  'await main();',
  '```',
  '',
  '```ts fragment',
  'await x;',
  '```',
].join('\n');

describe('the docs check', () => {
  it('reads each block with its file name, its first line and whether it is a fragment', () => {
    const blocks = blocksOf('docs/page.md', page);
    expect(blocks.map((b) => [b.title, b.line, b.fragment])).toEqual([
      ['server.ts', 4, false],
      ['esm.ts', 8, false],
      [undefined, 13, true],
    ]);
  });

  it('compiles a block in a "type": "module" and a "type": "commonjs" project, or as ESM only when its first line says so', () => {
    const [both, esm] = blocksOf('docs/page.md', page);
    expect(modesOf(both!)).toEqual(['module', 'commonjs']);
    expect(modesOf(esm!)).toEqual(['module']);
    // the marker counts on the first line only
    expect(modesOf({ code: 'const a = 1;\n// Needs "type": "module"' })).toEqual(['module', 'commonjs']);
  });

  it("puts a quickstart-<store> block in place of the Quick start's store line, its trailing comment too", () => {
    const server = ['const a = 1;', `${QUICKSTART_STORE_LINE} // in memory`, 'const b = 2;'].join('\n');
    expect(quickstartStoreOf({ words: ['fragment', 'quickstart-redis'] })).toBe('redis');
    expect(quickstartStoreOf({ words: ['fragment'] })).toBeUndefined();
    expect(quickstartWith(server, 'import x from "x";\nconst y = x;')).toBe(
      'const a = 1;\nimport x from "x";\nconst y = x;\nconst b = 2;',
    );
    expect(() => quickstartWith('const a = 1;', '')).toThrow(/has 0 lines/);
  });

  it("makes GitHub's anchors", () => {
    expect(slugOf('Scope: whose key is it?')).toBe('scope-whose-key-is-it');
    expect(slugOf('Redis clients: `enableAutoPipelining`')).toBe('redis-clients-enableautopipelining');
  });
});
