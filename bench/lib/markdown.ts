/** Markdown tables and the number formats of bench/RESULTS.md. */

export const fmt = (n: number) => n.toLocaleString('en-US');
export const ms = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1));
/** µs with as many decimals as a figure from 1 µs to 100 ms needs. */
export const us = (n: number) => (n < 10 ? n.toFixed(2) : n < 1000 ? n.toFixed(1) : fmt(Math.round(n)));
/** The lowest and highest of `xs`: rounded, with thousands separators, or with `digits` decimals. */
export const range = (xs: number[], digits = 0) => {
  const show = (n: number) => (digits === 0 ? fmt(Math.round(n)) : n.toFixed(digits));
  return `${show(Math.min(...xs))}-${show(Math.max(...xs))}`;
};
export const errors = (n: number) => (n > 0 ? ` ⚠ ${n} errors` : '');

/** A Markdown table; `align` has one letter per column, `l` or `r`. */
export function table(head: string[], align: string, rows: (string | number)[][]): string {
  const rule = [...align].map((a) => (a === 'r' ? '---:' : '---'));
  return [head, rule, ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}
