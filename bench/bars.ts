/**
 * Issue 37's bars, checked against the counted table's cells (bench/INSTRUCTIONS.md, written by
 * `npm run bench:instructions`): prints each bar, met or not and by how much; exits 1 if any is not met.
 *
 *   npm run bench:bars [-- <a file holding the table>]
 *
 * Node figures are the server's instructions per request without V8's garbage collector and compilers
 * (NODE: the steady-state work; the with-GC and without-GC columns move more from run to run), Redis
 * figures the redis-server's, each added over the row's own baseline.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type CountedRow, parseCounted } from './lib/counted.js';

/** The column the Node bars read. */
const NODE = 'node_no_jit_added' satisfies keyof CountedRow;

export interface BarResult {
  bar: string;
  met: boolean;
  measured: string;
}

const n = (x: number) => Math.round(x).toLocaleString('en-US');

/** Every bar, on the table's rows; a row the table lacks fails its bar with the row named. */
export function checkBars(rows: Map<string, CountedRow>): BarResult[] {
  const out: BarResult[] = [];
  const get = (id: string) => {
    const row = rows.get(id);
    if (row === undefined) throw new Error(`the counted table has no row ${id}`);
    return row;
  };
  const bar = (text: string, check: () => { met: boolean; measured: string }) => {
    try {
      out.push({ bar: text, ...check() });
    } catch (error) {
      out.push({ bar: text, met: false, measured: (error as Error).message });
    }
  };
  for (const [suffix, client] of [
    ['', 'ioredis'],
    ['-node-redis', 'node-redis'],
  ] as const) {
    bar(`Redis first execution (${client}): Node instructions added ≤ the lowest peer's`, () => {
      const ours = get(`redis${suffix}-first`)[NODE];
      const ni = get(`node-idempotency${suffix}-first`)[NODE];
      const pt = get(`powertools${suffix}-first`)[NODE];
      const limit = Math.min(ni, pt);
      return {
        met: ours <= limit,
        measured: `${n(ours)}; @node-idempotency ${n(ni)}, Powertools ${n(pt)}${over(ours, limit)}`,
      };
    });
    bar(`Redis first execution (${client}): redis-server instructions added ≤ 2 × the lower peer's`, () => {
      const ours = get(`redis${suffix}-first`).redis_added;
      const ni = get(`node-idempotency${suffix}-first`).redis_added;
      const pt = get(`powertools${suffix}-first`).redis_added;
      const limit = 2 * Math.min(ni, pt);
      return {
        met: ours <= limit,
        measured: `${n(ours)}; @node-idempotency ${n(ni)}, Powertools ${n(pt)}${over(ours, limit)}`,
      };
    });
    bar(`Redis replay (${client}): Node instructions added ≤ 2 × @node-idempotency's and < Powertools'`, () => {
      const ours = get(`redis${suffix}-replay`)[NODE];
      const ni = get(`node-idempotency${suffix}-replay`)[NODE];
      const pt = get(`powertools${suffix}-replay`)[NODE];
      const limit = Math.min(2 * ni, pt - 1);
      return {
        met: ours <= limit,
        measured: `${n(ours)}; @node-idempotency ${n(ni)}, Powertools ${n(pt)}${over(ours, limit)}`,
      };
    });
  }
  bar("Memory replay: Node instructions added ≤ 40,000 and < a memory first execution's", () => {
    const replay = get('memory-replay')[NODE];
    const first = get('memory-first')[NODE];
    const limit = Math.min(40_000, first - 1);
    return { met: replay <= limit, measured: `${n(replay)}; first execution ${n(first)}${over(replay, limit)}` };
  });
  return out;
}

const over = (value: number, limit: number) => (value <= limit ? '' : `: ${n(value - limit)} over`);

/** The bars as a Markdown table. */
export function renderBars(results: BarResult[]): string {
  return ['| bar | met | measured |', '| --- | --- | --- |']
    .concat(results.map((r) => `| ${r.bar} | ${r.met ? 'yes' : '**no**'} | ${r.measured} |`))
    .join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const file = process.argv[2] ?? fileURLToPath(new URL('./INSTRUCTIONS.md', import.meta.url));
  const results = checkBars(parseCounted(readFileSync(file, 'utf8')));
  console.log(renderBars(results));
  process.exitCode = results.every((r) => r.met) ? 0 : 1;
}
