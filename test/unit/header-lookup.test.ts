/**
 * Reading a header from the request behind a tRPC context: names are
 * case-insensitive on every header shape (a fetch `Headers`, Node's headers
 * object, a plain object such as an API Gateway event's), and a header sent
 * more than once is refused, whatever shape carries the repetition.
 */
import { describe, expect, it } from 'vitest';
import { readHeader, readKeyHeader } from '../../src/trpc/http.js';

const KEY = 'idempotency-key';
const LABEL = 'Idempotency-Key';

function refusal(read: () => unknown): { reason?: string; message?: string } | undefined {
  try {
    read();
  } catch (error) {
    return error as { reason?: string; message?: string };
  }
  return undefined;
}

describe('readHeader on a plain headers object', () => {
  it.each(['idempotency-key', 'Idempotency-Key', 'IDEMPOTENCY-KEY', 'idempotency-KEY'])(
    'finds the header written %s',
    (name) => {
      expect(readHeader({ headers: { host: 'x', [name]: 'k1' } }, KEY, LABEL)).toBe('k1');
      expect(readHeader({ req: { headers: { [name]: 'k1' } } }, KEY, LABEL)).toBe('k1');
      expect(readHeader({ request: { headers: { [name]: ['k1'] } } }, KEY, LABEL)).toBe('k1');
    },
  );

  it('answers undefined when no spelling holds a value', () => {
    expect(readHeader({ headers: {} }, KEY, LABEL)).toBeUndefined();
    expect(readHeader({ headers: { 'idempotency-keys': 'k', 'x-idempotency-key': 'k' } }, KEY, LABEL)).toBeUndefined();
    expect(readHeader({ headers: { 'Idempotency-Key': undefined } }, KEY, LABEL)).toBeUndefined();
    expect(readHeader({ headers: { 'Idempotency-Key': [] } }, KEY, LABEL)).toBeUndefined();
  });

  it('takes the one spelling that holds a value (API Gateway types allow undefined values)', () => {
    expect(readHeader({ headers: { 'idempotency-key': undefined, 'Idempotency-Key': 'k1' } }, KEY, LABEL)).toBe('k1');
    expect(readHeader({ headers: { 'Idempotency-Key': 'k1', 'IDEMPOTENCY-KEY': undefined } }, KEY, LABEL)).toBe('k1');
  });

  it('folds ASCII letters only: header names are ASCII (U+212A KELVIN SIGN lower-cases to k)', () => {
    expect(readHeader({ headers: { 'Idempotency-\u212Aey': 'k1' } }, KEY, LABEL)).toBeUndefined();
    expect(readHeader({ headers: { 'Idempotency-\u212Aey': 'k1', 'Idempotency-Key': 'k2' } }, KEY, LABEL)).toBe('k2');
  });

  it('counts a spelling with an empty list as absent', () => {
    expect(readHeader({ headers: { 'idempotency-key': [], 'Idempotency-Key': ['k1'] } }, KEY, LABEL)).toBe('k1');
    expect(readHeader({ headers: { 'idempotency-key': 'k1', 'Idempotency-Key': [] } }, KEY, LABEL)).toBe('k1');
  });

  it('does not read what the object inherits', () => {
    const headers = Object.create({ 'idempotency-key': 'inherited', 'Idempotency-Key': 'inherited' }) as object;
    expect(readHeader({ headers }, KEY, LABEL)).toBeUndefined();
  });

  it.each([
    ['two values in an array', { 'idempotency-key': ['a', 'b'] }, 2],
    ['two values in an array, under another spelling', { 'Idempotency-Key': ['a', 'a'] }, 2],
    ['two spellings', { 'idempotency-key': 'a', 'Idempotency-Key': 'b' }, 2],
    ['two spellings of the same key', { 'Idempotency-Key': 'a', 'IDEMPOTENCY-KEY': 'a' }, 2],
    ['two spellings, one an array', { 'Idempotency-Key': ['a'], 'idempotency-key': 'b' }, 2],
    ['three values over two spellings', { 'Idempotency-Key': ['a', 'b'], 'idempotency-Key': ['c'] }, 3],
  ])('refuses a header sent more than once (%s) with key_invalid', (_label, headers, times) => {
    expect(refusal(() => readHeader({ headers }, KEY, LABEL))).toMatchObject({
      reason: 'key_invalid',
      message: `The Idempotency-Key header was sent ${times} times; send it once per call.`,
    });
  });

  it.each(['a,b', 'a, b'])('refuses a comma-joined value %j (API Gateway payload 2.0 joins repeats with ",")', (v) => {
    for (const headers of [{ 'idempotency-key': v }, { 'Idempotency-Key': v }, { 'Idempotency-Key': [v] }]) {
      expect(refusal(() => readHeader({ headers }, KEY, LABEL))).toMatchObject({
        reason: 'key_invalid',
        message: expect.stringMatching(/holds more than one value/),
      });
    }
  });

  it('keeps a quoted value with a comma for the key parser', () => {
    expect(readHeader({ headers: { 'Idempotency-Key': '"a,b"' } }, KEY, LABEL)).toBe('"a,b"');
  });
});

describe('readHeader on the other shapes', () => {
  it('a fetch Headers: any spelling, repeats joined and refused', () => {
    expect(readHeader({ req: { headers: new Headers({ 'IDEMPOTENCY-KEY': 'k1' }) } }, KEY, LABEL)).toBe('k1');
    const twice = new Headers([
      ['Idempotency-Key', 'a'],
      ['idempotency-key', 'b'],
    ]);
    expect(refusal(() => readHeader({ headers: twice }, KEY, LABEL))).toMatchObject({ reason: 'key_invalid' });
  });

  it("Node's IncomingMessage (lower-case names; headersDistinct tells a repeat from a comma)", () => {
    const once = { rawHeaders: ['Idempotency-Key', 'k1'], headers: { 'idempotency-key': 'k1' } };
    expect(readHeader({ req: once }, KEY, LABEL)).toBe('k1');
    const twice = {
      rawHeaders: ['Idempotency-Key', 'a', 'idempotency-key', 'b'],
      headers: { 'idempotency-key': 'a, b' },
      headersDistinct: { 'idempotency-key': ['a', 'b'] },
    };
    expect(refusal(() => readHeader({ req: twice }, KEY, LABEL))).toMatchObject({
      reason: 'key_invalid',
      message: 'The Idempotency-Key header was sent 2 times; send it once per call.',
    });
  });

  it('no headers at all', () => {
    expect(readHeader({}, KEY, LABEL)).toBeUndefined();
    expect(readHeader(undefined, KEY, LABEL)).toBeUndefined();
  });
});

describe('readKeyHeader on a plain headers object', () => {
  it('finds the indexed header of a batch call under any spelling', () => {
    const ctx = { headers: { 'Idempotency-Key-0': 'k0', 'IDEMPOTENCY-KEY-1': 'k1' }, info: { isBatchCall: true } };
    expect(readKeyHeader(ctx, KEY, 0, LABEL)).toBe('k0');
    expect(readKeyHeader(ctx, KEY, 1, LABEL)).toBe('k1');
  });

  it('refuses call 0 with two different keys, whatever their spelling', () => {
    const ctx = { headers: { 'Idempotency-Key-0': 'a', 'Idempotency-Key': 'b' } };
    expect(refusal(() => readKeyHeader(ctx, KEY, 0, LABEL))).toMatchObject({ reason: 'key_invalid' });
  });

  it('reads only the plain header on a request known not to be a batch', () => {
    const ctx = { headers: { 'Idempotency-Key-0': 'crafted', 'Idempotency-Key': 'k' }, info: { isBatchCall: false } };
    expect(readKeyHeader(ctx, KEY, 0, LABEL)).toBe('k');
  });
});
