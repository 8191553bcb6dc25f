/**
 * The counted table (bench/INSTRUCTIONS.md): written by `npm run bench:instructions`, read back by its
 * cells (fixed headers, one row id per line) by bench/bars.ts and whatever else checks a figure. No
 * figure is read from prose.
 */

/** One row of the table: per request, each "added" figure over the row's own baseline. */
export interface CountedRow {
  row: string;
  baseline: string;
  /** The Node server's instructions per request, everything counted. */
  node: number;
  node_added: number;
  /** The same without V8's garbage collector (its functions by name). */
  node_no_gc: number;
  node_no_gc_added: number;
  /** The same without V8's compilers and deoptimizer too: one-off work, which tiering still does in the window. */
  node_no_jit: number;
  node_no_jit_added: number;
  /** The bench's redis-server's instructions per request, its idle work (timers) taken out. */
  redis: number;
  redis_added: number;
  /** CPU time of the PostgreSQL backends serving the row's server, µs per request (the baselines send PostgreSQL nothing). */
  postgres_cpu_us: number;
  /**
   * CPU time of the MariaDB connection threads serving the row's server, µs per request: in a table with a MySQL
   * row only (a table without the column reads as without it).
   */
  mariadb_cpu_us?: number;
}

/** The table's columns: the key in a {@link CountedRow} and its header, in order. */
export const COLUMNS: readonly (readonly [keyof CountedRow, string])[] = [
  ['row', 'row'],
  ['baseline', 'baseline'],
  ['node', 'node'],
  ['node_added', 'node added'],
  ['node_no_gc', 'node without GC'],
  ['node_no_gc_added', 'node without GC added'],
  ['node_no_jit', 'node without GC or compiler'],
  ['node_no_jit_added', 'node without GC or compiler added'],
  ['redis', 'redis-server'],
  ['redis_added', 'redis-server added'],
  ['postgres_cpu_us', 'PostgreSQL CPU µs added'],
  ['mariadb_cpu_us', 'MariaDB CPU µs added'],
];

/** The columns of a table: the MariaDB one only where a row has it. */
const columnsOf = (withMariadb: boolean) => COLUMNS.filter(([key]) => withMariadb || key !== 'mariadb_cpu_us');

const whole = (n: number) => Math.round(n).toLocaleString('en-US');

/** The table as Markdown: whole instructions with thousands separators, µs with one decimal. */
export function renderCounted(rows: CountedRow[]): string {
  const columns = columnsOf(rows.some((r) => r.mariadb_cpu_us !== undefined));
  const lines = [
    columns.map(([, head]) => head),
    columns.map(([key]) => (key === 'row' || key === 'baseline' ? '---' : '---:')),
  ];
  for (const r of rows) {
    lines.push(
      columns.map(([key]) => {
        const value = r[key] ?? 0;
        if (typeof value === 'string') return value;
        return key === 'postgres_cpu_us' || key === 'mariadb_cpu_us' ? value.toFixed(1) : whole(value);
      }),
    );
  }
  return lines.map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

/**
 * The rows of the first table in `markdown` whose header is {@link COLUMNS}'s (with or without the MariaDB
 * column), by row id. Throws if there is none, or a cell is not a number where one belongs.
 */
export function parseCounted(markdown: string): Map<string, CountedRow> {
  const lines = markdown.split('\n').map((line) => line.trim());
  const cellsOf = (line: string) =>
    line
      .slice(1, -1)
      .split('|')
      .map((cell) => cell.trim());
  const headers = [columnsOf(true), columnsOf(false)].map((columns) => columns.map(([, head]) => head).join('|'));
  const start = lines.findIndex((line) => line.startsWith('|') && headers.includes(cellsOf(line).join('|')));
  if (start === -1) throw new Error(`no counted table (a header of ${COLUMNS.map(([, h]) => h).join(', ')})`);
  const columns = columnsOf(cellsOf(lines[start]!).join('|') === headers[0]);
  const rows = new Map<string, CountedRow>();
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    const cells = cellsOf(line);
    const row = {} as Record<string, string | number>;
    columns.forEach(([key], i) => {
      const cell = cells[i] ?? '';
      if (key === 'row' || key === 'baseline') row[key] = cell;
      else {
        const value = Number(cell.replaceAll(',', ''));
        if (cell === '' || !Number.isFinite(value))
          throw new Error(`counted table, row ${cells[0]}: ${key} is "${cell}"`);
        row[key] = value;
      }
    });
    rows.set(row.row as string, row as unknown as CountedRow);
  }
  return rows;
}
