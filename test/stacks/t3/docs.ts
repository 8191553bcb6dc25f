/**
 * docs/create-t3-app.md's code blocks, checked against the app the test built:
 * a block whose info string names a file (```ts src/server/api/trpc.ts) must
 * be in that file of the generated app, line for line (a block may be
 * indented less than the file, and a line `// ...` or `{/* ... *\/}` stands
 * for lines left out). A block that also names a variant (`tanstack`,
 * `react-query`) is checked in that variant only. So each snippet is text the
 * test applied and `next build` compiled.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { VariantName } from './changes.js';

export const DOC = 'docs/create-t3-app.md';
const VARIANT_NAMES: VariantName[] = ['react-query', 'tanstack'];

export interface Snippet {
  /** 1-based line of the opening fence. */
  line: number;
  lang: string;
  file: string | undefined;
  variants: VariantName[];
  code: string;
}

export function snippets(repo: string): Snippet[] {
  const lines = readFileSync(join(repo, DOC), 'utf8').split('\n');
  const out: Snippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*(.*)$/.exec(lines[i]!);
    if (open === null) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && lines[i] !== '```'; i++) body.push(lines[i]!);
    if (i === lines.length) throw new Error(`${DOC}:${start + 1}: a code block is not closed`);
    const words = open[2]!.split(/\s+/).filter(Boolean);
    const variants = words.filter((w): w is VariantName => (VARIANT_NAMES as string[]).includes(w));
    const file = words.find((w) => !(VARIANT_NAMES as string[]).includes(w));
    out.push({
      line: start + 1,
      lang: open[1]!,
      file,
      variants: variants.length > 0 ? variants : VARIANT_NAMES,
      code: body.join('\n'),
    });
  }
  return out;
}

const ELISION = /^\s*(\/\/ \.\.\.|\{\/\* \.\.\. \*\/\})\s*$/;

/** Undefined when `snippet` is in `text` as described above, else why not. */
export function findSnippet(text: string, code: string): string | undefined {
  const fileLines = text.split('\n');
  const chunks: string[][] = [[]];
  for (const line of code.split('\n')) {
    if (ELISION.test(line)) chunks.push([]);
    else chunks.at(-1)!.push(line);
  }
  let from = 0;
  for (const raw of chunks) {
    const chunk = trimBlankLines(raw);
    if (chunk.length === 0) continue;
    const at = findChunk(fileLines, chunk, from);
    if (at === -1) return `not found (after line ${from + 1} of the file):\n${chunk.join('\n')}`;
    from = at + chunk.length;
  }
  return undefined;
}

function trimBlankLines(lines: string[]): string[] {
  let start = 0;
  let end = lines.length;
  while (start < end && lines[start]!.trim() === '') start++;
  while (end > start && lines[end - 1]!.trim() === '') end--;
  return lines.slice(start, end);
}

function findChunk(fileLines: string[], chunk: string[], from: number): number {
  const first = chunk[0]!;
  for (let i = from; i + chunk.length <= fileLines.length; i++) {
    const line = fileLines[i]!;
    if (!line.endsWith(first)) continue;
    const indent = line.slice(0, line.length - first.length);
    if (indent.trim() !== '') continue;
    if (chunk.every((c, j) => (c.trim() === '' ? fileLines[i + j]!.trim() === '' : fileLines[i + j] === indent + c)))
      return i;
  }
  return -1;
}

export function checkSnippets(repo: string, appDir: string, variant: VariantName): string[] {
  const problems: string[] = [];
  for (const s of snippets(repo)) {
    if (s.file === undefined) {
      if (!['sh', 'bash', 'text', ''].includes(s.lang))
        problems.push(`${DOC}:${s.line}: a ${s.lang} block names no file`);
      continue;
    }
    if (!s.variants.includes(variant)) continue;
    let text: string;
    try {
      text = readFileSync(join(appDir, s.file), 'utf8');
    } catch {
      problems.push(`${DOC}:${s.line}: the ${variant} app has no ${s.file}`);
      continue;
    }
    const why = findSnippet(text, s.code);
    if (why !== undefined) problems.push(`${DOC}:${s.line}: ${s.file} (${variant}): ${why}`);
  }
  return problems;
}
