/**
 * What the fingerprint costs beside the parse that made its input: for each shape, the body as a
 * client sends it (JSON, or superjson's text), then per round N copies parsed (timed: the parse) and
 * the same N copies fingerprinted (timed: fingerprint('pay', copy), canonical form and SHA-256),
 * median over the rounds. Every copy is fingerprinted once: a second walk of one object finds V8's
 * identity hashes and shapes warm, which a request's freshly parsed input never has.
 * The last shape is the attack the shared-reference bound refuses: the time to refuse it.
 * Prints one JSON line. Run by run.ts in a process of its own; argument: rounds (7).
 */
import superjson, { SuperJSON } from 'superjson';
import { fingerprint, IdempotencyError } from '../dist/core.js';

const ROUNDS = Number(process.argv[2] ?? 7);
/** Wall time each timed batch aims at: long enough for the timer, short enough for a shared machine. */
const BATCH_MS = 25;

interface Shape {
  name: string;
  transport: 'JSON' | 'superjson' | 'superjson, dedupe';
  body: string;
  parse: (body: string) => unknown;
  /** The fingerprint must refuse it with input_unsupported. */
  refused?: boolean;
}

const json = (name: string, value: unknown): Shape => ({
  name,
  transport: 'JSON',
  body: JSON.stringify(value),
  parse: JSON.parse,
});
// A superjson client writes a shared object out in full at every reference; with dedupe it writes it
// once, which is how a DAG fits a small body. superjson.parse rebuilds the sharing either way.
const deduped = new SuperJSON({ dedupe: true });
const sj = (name: string, value: unknown, dedupe = false): Shape => ({
  name,
  transport: dedupe ? 'superjson, dedupe' : 'superjson',
  body: (dedupe ? deduped : superjson).stringify(value),
  parse: (body) => superjson.parse(body),
});

const payment = {
  amount: 4999,
  currency: 'eur',
  customer: 'cus_9s6XKzkNRiz8i3',
  description: 'Order 10293 (2 items)',
  receiptEmail: 'jane.doe@example.com',
  capture: true,
  metadata: { orderId: 'ord_10293', channel: 'web', campaign: 'spring-sale' },
  items: [
    { sku: 'SKU-1029', quantity: 1, unitAmount: 2999 },
    { sku: 'SKU-2231', quantity: 2, unitAmount: 1000 },
  ],
};
const customer = {
  id: 'cus_9s6XKzkNRiz8i3',
  name: 'Jane Doe',
  email: 'jane.doe@example.com',
  phone: '+33 1 23 45 67 89',
  address: { line1: '12 rue de la Paix', line2: 'Bâtiment B', city: 'Paris', postcode: '75002', country: 'FR' },
  tags: ['vip', 'newsletter', 'b2c'],
  createdAt: new Date(Date.UTC(2026, 0, 15)),
};
function orders() {
  return { orders: Array.from({ length: 1_000 }, (_, i) => ({ id: `ord_${i}`, amount: 1000 + i, customer })) };
}
/** Each level's object referred to by both fields of the level above: 2^depth paths to the leaf. */
function dag(depth: number): unknown {
  let node: object = { v: 'leaf' };
  for (let i = 0; i < depth; i++) node = { a: node, b: node };
  return node;
}
/** Sets nested `levels` deep, each of a string and the Set below. */
function nestedSets(levels: number, item: (i: number) => string): Set<unknown> {
  let set = new Set<unknown>(['leaf']);
  for (let i = 0; i < levels; i++) set = new Set([item(i), set]);
  return set;
}
function deep(levels: number): unknown {
  let node: object = { level: 0 };
  for (let i = 1; i < levels; i++) node = { level: i, child: node };
  return node;
}

const shapes: Shape[] = [
  json('plain payment', payment),
  json('array of 10,000 small objects', {
    lines: Array.from({ length: 10_000 }, (_, i) => ({ id: i, sku: `SKU-${i}`, qty: (i % 5) + 1, price: 100 + i })),
  }),
  json('wide object, 100,000 keys', Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, i]))),
  json('deep nesting, 500 levels', deep(500)),
  sj('1,000 orders sharing one customer', orders()),
  sj('1,000 orders sharing one customer', orders(), true),
  sj('DAG of depth 12, each level shared twice', dag(12)),
  sj('DAG of depth 12, each level shared twice', dag(12), true),
  sj(
    '500 nested two-element Sets',
    nestedSets(500, (i) => `item-${i}`),
  ),
  sj(
    'Map of 2,000 three-entry Maps, each with a Set',
    new Map(
      Array.from({ length: 2_000 }, (_, i) => [
        `sku-${i}`,
        new Map<string, unknown>([
          ['qty', i],
          ['warehouse', `wh-${i % 7}`],
          ['tags', new Set(['a', `t${i % 13}`])],
        ]),
      ]),
    ),
  ),
  // The issue's case: 333-346 ms before the fingerprint was made linear, 37-39× superjson.parse.
  sj(
    '500 nested two-element Sets, 1 MB',
    nestedSets(500, (i) => `${i}-${'x'.repeat(2_000)}`),
  ),
  { ...sj('attack: DAG of depth 23, refused', dag(23), true), refused: true },
];

// superjson.parse must rebuild the sharing, and the sharing must not change the fingerprint: else the
// DAG rows would measure a tree of nulls, or another encoding than the plain value's.
if (fingerprint('pay', superjson.parse(deduped.stringify(dag(12)))) !== fingerprint('pay', dag(12))) {
  throw new Error('the parsed DAG does not fingerprint as the DAG it was made from');
}

let sink = '';
function fingerprintOf(shape: Shape, value: unknown) {
  try {
    sink = fingerprint('pay', value);
  } catch (error) {
    if (shape.refused && error instanceof IdempotencyError && error.reason === 'input_unsupported') return;
    throw error;
  }
  if (shape.refused) throw new Error(`${shape.name}: fingerprinted, not refused`);
}

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
const round = (n: number, digits: number) => Number(n.toFixed(digits));

const rows = shapes.map((shape) => {
  // Warm-up (the JIT, on fresh copies too), which also tells how many copies fill a batch.
  const warmStart = performance.now();
  let warm = 0;
  while (warm < 3 || performance.now() - warmStart < 150) {
    fingerprintOf(shape, shape.parse(shape.body));
    warm++;
  }
  const perCopy = (performance.now() - warmStart) / warm;
  const copies = Math.max(3, Math.min(5_000, Math.round(BATCH_MS / perCopy)));
  const parseUs: number[] = [];
  const fingerprintUs: number[] = [];
  const ratios: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const parsed: unknown[] = new Array(copies);
    let start = performance.now();
    for (let i = 0; i < copies; i++) parsed[i] = shape.parse(shape.body);
    const parse = ((performance.now() - start) * 1000) / copies;
    start = performance.now();
    for (let i = 0; i < copies; i++) fingerprintOf(shape, parsed[i]);
    const fp = ((performance.now() - start) * 1000) / copies;
    parseUs.push(parse);
    fingerprintUs.push(fp);
    ratios.push(fp / parse);
  }
  const row = {
    shape: shape.name,
    transport: shape.transport,
    body_bytes: Buffer.byteLength(shape.body),
    copies,
    parse_us: round(median(parseUs), 2),
    fingerprint_us: round(median(fingerprintUs), 2),
    ratio: round(median(ratios), 2),
    ratios: ratios.map((x) => round(x, 2)),
    ...(shape.refused ? { refused: true } : {}),
  };
  process.stderr.write(
    `${`${shape.name}, ${shape.transport}`.padEnd(60)} ${String(row.body_bytes).padStart(8)} B  parse ${row.parse_us} µs  fingerprint ${row.fingerprint_us} µs  ${row.ratio}×\n`,
  );
  return row;
});

if (sink.length === 0) throw new Error('nothing was fingerprinted');
process.stdout.write(`${JSON.stringify({ rounds: ROUNDS, batch_ms: BATCH_MS, rows })}\n`);
