/**
 * Typechecks every TypeScript block of README.md and docs/ (its subfolders
 * too) against the built package (run `npm run build` first).
 *
 * A block's info string names the file it is (```ts server.ts); the blocks of
 * one page are written into one folder, so client.ts can import './server.js'.
 * A block marked ```ts fragment is skipped and counted, unless it is also
 * marked quickstart-<store> (docs/stores.md): those lines replace the store
 * line of the README's Quick start server.ts, and the resulting file is
 * compiled (test/stacks/quickstart.test.ts runs it). A page whose first
 * lines say `<!-- snippets: checked by test/… -->` is checked by that test
 * instead (the create-t3-app page, whose blocks are files of a generated app).
 *
 * Each block is compiled twice, as a user pastes it: in a project whose
 * package.json says "type": "module" and in one that says "type": "commonjs"
 * (npm init's default). `module: NodeNext` takes the module kind from that, so
 * top-level await, for one, fails in the CommonJS project. A block whose first
 * line begins `// Needs "type": "module"` says so to its reader and is
 * compiled as ESM only.
 *
 * Every relative link must name a file that exists, and a heading that exists
 * when it has an #anchor (GitHub's slugs).
 *
 * Each project has node_modules/trpc-idempotency linked to this package, so
 * `import … from 'trpc-idempotency'` resolves through package.json's
 * `exports` to dist/ (`import` or `require` condition), as in a user's project.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(ROOT, '.docs-check');
const LANGS = new Set(['ts', 'tsx', 'typescript']);
/** The first line of a block that needs an ES module (top-level await, say), and says how to get one. */
export const ESM_ONLY = /^\/\/ Needs "type": "module"/;

/** The package.json "type" of the two projects each block is compiled in. */
export type Mode = 'module' | 'commonjs';

/** The projects a block is compiled in: both, or ESM only when its first line says it needs it. */
export function modesOf(block: Pick<Block, 'code'>): Mode[] {
  return ESM_ONLY.test(block.code.split('\n')[0] ?? '') ? ['module'] : ['module', 'commonjs'];
}

export interface Block {
  page: string;
  /** 1-based line of the block's first code line in the page. */
  line: number;
  lang: string;
  /** The info string's words after the language. */
  words: string[];
  title?: string;
  fragment: boolean;
  code: string;
}

/** The fenced blocks of a Markdown page, with their info strings parsed. */
export function blocksOf(page: string, text: string): Block[] {
  const blocks: Block[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, info] = open as unknown as [string, string, string, string];
    const closing = new RegExp(`^\\s*\\${fence[0]}{${fence.length},}\\s*$`);
    const end = lines.findIndex((l, j) => j > i && closing.test(l));
    if (end === -1) throw new Error(`${page}:${i + 1}: a code fence that is never closed`);
    const [lang = '', ...words] = info.trim().split(/\s+/);
    const code = lines
      .slice(i + 1, end)
      .map((l) => (l.startsWith(indent!) ? l.slice(indent!.length) : l))
      .join('\n');
    const title = words.find((w) => /\.(ts|tsx|mts|cts)$/.test(w));
    blocks.push({ page, line: i + 2, lang, words, title, fragment: words.includes('fragment'), code });
    i = end;
  }
  return blocks;
}

/** The line of the README's Quick start server.ts that docs/stores.md replaces to move it to Redis or PostgreSQL. */
export const QUICKSTART_STORE_LINE = "const idempotentProcedure = withIdempotency(t.procedure, { scope: 'global' });";

/** The store a block is written for (`quickstart-redis` in its info string: 'redis'), or undefined. */
export function quickstartStoreOf(block: Pick<Block, 'words'>): string | undefined {
  return block.words.find((w) => w.startsWith('quickstart-'))?.slice('quickstart-'.length);
}

/** The Quick start's server.ts with its store line (the whole line, its comment too) replaced by `lines`. */
export function quickstartWith(server: string, lines: string): string {
  const serverLines = server.split('\n');
  const at = serverLines.flatMap((line, i) => (line.startsWith(QUICKSTART_STORE_LINE) ? [i] : []));
  if (at.length !== 1) {
    throw new Error(
      `the Quick start server.ts has ${at.length} lines beginning ${QUICKSTART_STORE_LINE}: it needs one`,
    );
  }
  return [...serverLines.slice(0, at[0]), ...lines.split('\n'), ...serverLines.slice(at[0]! + 1)].join('\n');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
export function slugOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}_\- ]/gu, '')
    .replace(/ /g, '-');
}

/** Relative links to missing files or headings, as problems. */
function linkProblems(all: string[]): string[] {
  const prose = (page: string) => readFileSync(join(ROOT, page), 'utf8').replace(/```[\s\S]*?```/g, '');
  const anchors = new Map(
    all.map((page) => [page, new Set([...prose(page).matchAll(/^#+\s+(.*)$/gm)].map((m) => slugOf(m[1]!)))]),
  );
  const problems: string[] = [];
  for (const page of all) {
    for (const [, link] of prose(page).matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(link!)) continue;
      const [path = '', anchor] = link!.split('#');
      const target = path === '' ? page : relative(ROOT, join(ROOT, dirname(page), path));
      if (!existsSync(join(ROOT, target))) problems.push(`${page}: a link to ${link}, which does not exist`);
      else if (anchor && target.endsWith('.md') && !anchors.get(target)?.has(anchor)) {
        problems.push(`${page}: a link to ${link}, whose page has no heading #${anchor}`);
      }
    }
  }
  return problems;
}

function pages(): string[] {
  const docs = (readdirSync(join(ROOT, 'docs'), { recursive: true }) as string[])
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f.split('\\').join('/')}`)
    .sort();
  return ['README.md', ...docs];
}

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    lib: ['ES2023', 'DOM', 'DOM.Iterable'],
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    moduleDetection: 'force',
    jsx: 'react-jsx',
    types: ['node'],
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    noUnusedLocals: false,
  },
  include: ['**/*.ts', '**/*.tsx'],
  exclude: ['node_modules'],
};

/** Runs tsc on one project; resolves to its diagnostics ('' when there are none). */
function tsc(project: string): Promise<string> {
  return new Promise((resolve) => {
    execFile(
      join(ROOT, 'node_modules/.bin/tsc'),
      ['-p', join(project, 'tsconfig.json'), '--pretty', 'false'],
      { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => resolve(error ? `${stdout}${stderr}` || String(error) : ''),
    );
  });
}

async function main() {
  if (!existsSync(join(ROOT, 'dist/index.d.ts'))) {
    console.error('dist/ is missing: run `npm run build` first (the snippets are checked against the built package).');
    process.exit(2);
  }
  rmSync(OUT, { recursive: true, force: true });
  const modes: Mode[] = ['module', 'commonjs'];
  for (const mode of modes) {
    const project = join(OUT, mode);
    mkdirSync(join(project, 'node_modules'), { recursive: true });
    writeFileSync(join(project, 'package.json'), `${JSON.stringify({ private: true, type: mode }, null, 2)}\n`);
    writeFileSync(join(project, 'tsconfig.json'), `${JSON.stringify(TSCONFIG, null, 2)}\n`);
    // as `npm install trpc-idempotency` would put it; its exports map picks import or require
    symlinkSync(ROOT, join(project, 'node_modules/trpc-idempotency'), 'dir');
  }
  const problems: string[] = linkProblems(pages());
  const written = new Map<string, Block>(); // path under a project → block
  const composed = new Set<string>(); // the Quick start's server.ts with a quickstart block in place
  let fragments = 0;
  let elsewhere = 0;
  let checked = 0;
  let esmOnly = 0;
  const pagesChecked: string[] = [];

  const quickstartServer = blocksOf('README.md', readFileSync(join(ROOT, 'README.md'), 'utf8')).find(
    (b) => b.title === 'server.ts',
  );
  for (const page of pages()) {
    const text = readFileSync(join(ROOT, page), 'utf8');
    const blocks = blocksOf(page, text).filter((b) => LANGS.has(b.lang));
    const delegated = /<!--\s*snippets:\s*checked by (\S+)\s*-->/.exec(text.split('\n').slice(0, 5).join('\n'));
    if (delegated) {
      const test = delegated[1]!;
      if (!existsSync(join(ROOT, test)) || !readFileSync(join(ROOT, test), 'utf8').includes(page)) {
        problems.push(
          `${page}:1: says its snippets are checked by ${test}, which does not exist or never names ${page}`,
        );
      }
      elsewhere += blocks.length;
      continue;
    }
    const slug = page.replace(/\.md$/, '').replace(/[^a-zA-Z0-9]+/g, '-');
    const titles = new Set<string>();
    for (const block of blocks) {
      const store = quickstartStoreOf(block);
      if (store !== undefined) {
        // Lines that replace the Quick start's store line: the resulting server.ts is what gets compiled.
        const prose = text.replace(/```[\s\S]*?```/g, '');
        if (quickstartServer === undefined)
          problems.push(`${page}:${block.line - 1}: README.md has no \`\`\`ts server.ts block`);
        else if (!prose.includes(`\`${QUICKSTART_STORE_LINE}\``)) {
          problems.push(
            `${page}:${block.line - 1}: a quickstart block on a page that never quotes the line it replaces, \`${QUICKSTART_STORE_LINE}\``,
          );
        } else {
          let code: string;
          try {
            code = quickstartWith(quickstartServer.code, block.code);
          } catch (error) {
            problems.push(`${page}:${block.line - 1}: ${(error as Error).message}`);
            continue;
          }
          for (const mode of modes) {
            const file = join(OUT, mode, slug, `quickstart-${store}`, 'server.ts');
            mkdirSync(dirname(file), { recursive: true });
            writeFileSync(file, `${code}\n`);
            written.set(relative(ROOT, file), block);
            composed.add(relative(ROOT, file));
          }
          checked++;
        }
        continue;
      }
      if (block.fragment) {
        fragments++;
        continue;
      }
      if (block.title === undefined) {
        problems.push(
          `${page}:${block.line - 1}: a \`\`\`${block.lang} block without a file name: write \`\`\`${block.lang} server.ts (the file it is) or \`\`\`${block.lang} fragment (not compiled)`,
        );
        continue;
      }
      if (titles.has(block.title)) {
        problems.push(
          `${page}:${block.line - 1}: a second block named ${block.title} on this page: give it another name`,
        );
        continue;
      }
      titles.add(block.title);
      const blockModes = modesOf(block);
      if (blockModes.length === 1) esmOnly++;
      for (const mode of blockModes) {
        const file = join(OUT, mode, slug, block.title);
        mkdirSync(dirname(file), { recursive: true });
        writeFileSync(file, `${block.code}\n`);
        written.set(relative(ROOT, file), block);
      }
      checked++;
    }
    if (titles.size > 0) pagesChecked.push(page);
  }

  if (checked > 0) {
    const outputs = await Promise.all(modes.map((mode) => tsc(join(OUT, mode))));
    modes.forEach((mode, i) => {
      for (const line of outputs[i]!.split('\n').filter(Boolean)) {
        const at = /^(.+?)\((\d+),(\d+)\): (.*)$/.exec(line);
        const block = at ? written.get(relative(ROOT, join(ROOT, at[1]!))) : undefined;
        if (at && block) {
          const hint =
            mode === 'commonjs' && /\bTS1309\b|\bTS1378\b|\bTS1375\b|top-level 'await'/i.test(at[4]!)
              ? ' (write an async main, or make the block\'s first line say `// Needs "type": "module" in package.json (npm pkg set type=module): top-level await.`)'
              : '';
          const where = composed.has(relative(ROOT, join(ROOT, at[1]!)))
            ? `${block.page}:${block.line - 1} (the README's Quick start server.ts with this block in place, line ${at[2]}`
            : `${block.page}:${block.line + Number(at[2]) - 1}:${at[3]} (${block.title}`;
          problems.push(`${where}, "type": "${mode}"): ${at[4]}${hint}`);
        } else if (/error/i.test(line)) problems.push(`("type": "${mode}") ${line}`);
      }
    });
  }

  const summary = `${checked} blocks typechecked in ${pagesChecked.length} pages, as ESM and as CommonJS (${esmOnly} as ESM only: they say so), ${fragments} fragments skipped, ${elsewhere} checked by other tests`;
  if (problems.length > 0) {
    console.error(problems.join('\n'));
    console.error(`\n${problems.length} problems; ${summary}`);
    process.exit(1);
  }
  console.log(summary);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
