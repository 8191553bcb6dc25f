import { describe, expect, it } from 'vitest';
import {
  canonicalize,
  fingerprint,
  MAX_FINGERPRINT_DEPTH,
  MAX_FINGERPRINT_SHARED,
} from '../../src/core/fingerprint.js';
import { IdempotencyError } from '../../src/index.js';

describe('fingerprint', () => {
  it('is a SHA-256 in base64url, independent of key order at any depth', () => {
    const a = fingerprint('pay', { x: 1, y: { b: [1, { d: 1, c: 2 }], a: 'z' } });
    const b = fingerprint('pay', { y: { a: 'z', b: [1, { c: 2, d: 1 }] }, x: 1 });
    expect(a).toBe(b);
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  it('depends on the procedure path and on array order', () => {
    expect(fingerprint('pay', { a: 1 })).not.toBe(fingerprint('refund', { a: 1 }));
    expect(fingerprint('pay', [1, 2])).not.toBe(fingerprint('pay', [2, 1]));
  });

  it('removes excluded fields at any depth, in objects, arrays and maps', () => {
    const exclude = new Set(['ts', 'nonce']);
    const one = {
      amount: 1,
      ts: 1,
      items: [{ id: 'a', nonce: 'x' }],
      meta: new Map([
        ['ts', 1],
        ['k', 2],
      ]),
    };
    const two = {
      amount: 1,
      ts: 2,
      items: [{ id: 'a', nonce: 'y' }],
      meta: new Map([
        ['ts', 9],
        ['k', 2],
      ]),
    };
    expect(fingerprint('p', one, exclude)).toBe(fingerprint('p', two, exclude));
    expect(fingerprint('p', one)).not.toBe(fingerprint('p', two));
    expect(fingerprint('p', { ...one, amount: 2 }, exclude)).not.toBe(fingerprint('p', one, exclude));
  });

  it('encodes values JSON cannot represent, deterministically and distinctly', () => {
    const distinct = [
      1,
      '1',
      1n,
      true,
      'true',
      null,
      undefined,
      'null',
      new Date(0),
      0,
      new Date(Number.NaN),
      new Map([['a', 1]]),
      { a: 1 },
      new Set([1]),
      [1],
      new Uint8Array([1, 2]),
      [1, 2],
      Number.NaN,
      Number.POSITIVE_INFINITY,
      /re/g,
    ];
    const encoded = distinct.map((v) => canonicalize(v));
    expect(new Set(encoded).size).toBe(distinct.length);
    expect(canonicalize(new Set([3, 1, 2]))).toBe(canonicalize(new Set([2, 3, 1])));
    expect(
      canonicalize(
        new Map([
          ['b', 1],
          ['a', 2],
        ]),
      ),
    ).toBe(
      canonicalize(
        new Map([
          ['a', 2],
          ['b', 1],
        ]),
      ),
    );
    expect(canonicalize(new Date('2026-01-01T00:00:00Z'))).toBe(canonicalize(new Date(1767225600000)));
    // an undefined property is absent, as on the JSON wire
    expect(canonicalize({ a: 1, b: undefined })).toBe(canonicalize({ a: 1 }));
    expect(canonicalize([undefined])).not.toBe(canonicalize([null]));
  });

  it('treats __proto__, constructor and prototype as plain data and pollutes nothing', () => {
    const hostile = JSON.parse('{"__proto__": {"polluted": true}, "constructor": {"prototype": {"polluted": true}}}');
    const exclude = new Set(['__proto__', 'prototype']);
    const withExcluded = canonicalize(hostile, exclude);
    expect(withExcluded).toBe('{"constructor":{}}');
    expect(canonicalize(hostile)).toContain('"__proto__":{"polluted":t}');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.hasOwn(Object.prototype, 'polluted')).toBe(false);
  });

  it('refuses cycles and excessive depth with a clear error instead of overflowing the stack', () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    expect(() => fingerprint('p', cyclic)).toThrow(IdempotencyError);
    expect(() => fingerprint('p', cyclic)).toThrow(/contains a cycle/);

    let deep: unknown = 'leaf';
    for (let i = 0; i < 50_000; i++) deep = [deep];
    expect(() => fingerprint('p', deep)).toThrow(new RegExp(`nested more than ${MAX_FINGERPRINT_DEPTH} levels`));

    // the same object twice, side by side, is not a cycle
    const shared = { v: 1 };
    expect(() => fingerprint('p', { a: shared, b: shared })).not.toThrow();
  });

  it('refuses functions and symbols', () => {
    expect(() => canonicalize({ f: () => 1 })).toThrow(/contains a function/);
    expect(() => canonicalize([Symbol('s')])).toThrow(/contains a symbol/);
  });
});

/** An object shared by both fields of the level above, `depth` times: 2^depth paths to the leaf, as superjson's referentialEqualities rebuild. */
function sharedTwice(depth: number): unknown {
  let node: unknown = { leaf: 'x'.repeat(8) };
  for (let i = 0; i < depth; i++) node = { left: node, right: node };
  return node;
}

describe('fingerprint of shared references and nested Sets', () => {
  it('an object shared by every level (2^64 paths) is refused with input_unsupported, not walked path by path', () => {
    // Walked path by path, this would not finish: the refusal comes after each object is encoded once.
    for (const depth of [24, 64, 400]) {
      expect(() => fingerprint('op', { data: sharedTwice(depth) })).toThrow(
        new RegExp(`shared references.*more than ${MAX_FINGERPRINT_SHARED} characters`),
      );
      expect(() => fingerprint('op', { data: sharedTwice(depth) })).toThrow(IdempotencyError);
    }
  });

  it('a shared object whose encoding is long but cheap to count (an array of numbers, one long key) is walked once, and its references are bounded', () => {
    const numbers = Array.from({ length: 100_000 }, () => 0);
    const longKey = { ['k'.repeat(500_000)]: 0 };
    for (const shared of [numbers, longKey]) {
      const references = Array.from({ length: 50_000 }, () => shared);
      // Walked again at each reference, these would build gigabytes of text; they are refused after a few.
      expect(() => fingerprint('op', { references })).toThrow(/shared references/);
      expect(fingerprint('op', { references: references.slice(0, 3) })).toBe(
        fingerprint('op', { references: JSON.parse(JSON.stringify(references.slice(0, 3))) }),
      );
    }
    // Keys left out are counted too: a shared object of 100,000 excluded keys is sorted once, not at each reference.
    const excluded = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`nonce${i}`, i]));
    const exclude = new Set(Object.keys(excluded));
    const many = Array.from({ length: 10_000 }, () => excluded);
    expect(fingerprint('op', { many }, exclude)).toBe(
      fingerprint('op', { many: Array.from({ length: 10_000 }, () => ({})) }, exclude),
    );
  });

  it('sharing never changes a fingerprint: a shared object fingerprints as its copies do', () => {
    const dag = { data: sharedTwice(12) };
    const tree: unknown = JSON.parse(JSON.stringify(dag));
    expect(fingerprint('op', dag)).toBe(fingerprint('op', tree));
    const customer = { id: 'cus_1', address: { city: 'Paris', lines: ['1 rue de la Paix', 'x'.repeat(300)] } };
    const orders = Array.from({ length: 50 }, (_, i) => ({ i, customer }));
    expect(fingerprint('op', orders)).toBe(fingerprint('op', JSON.parse(JSON.stringify(orders))));
    const changed = JSON.parse(JSON.stringify(orders)) as typeof orders;
    changed[49]!.customer.address.city = 'Lyon';
    expect(fingerprint('op', changed)).not.toBe(fingerprint('op', orders));
  });

  it('nested Sets and Maps sort and join digests of large items: each level is a bounded text, however deep', () => {
    const nest = (depth: number, innermost: string) => {
      let value: unknown = innermost;
      for (let i = 0; i < depth; i++) {
        value = i % 2 === 0 ? new Set([value, `level ${i} ${'y'.repeat(100)}`]) : new Map([[`k${i}`, value]]);
      }
      return value;
    };
    const deep = nest(500, 'z'.repeat(10_000));
    expect(canonicalize(deep).length).toBeLessThan(200);
    expect(fingerprint('op', nest(500, 'z'.repeat(10_000)))).toBe(fingerprint('op', deep));
    expect(fingerprint('op', nest(500, `${'z'.repeat(9_999)}!`))).not.toBe(fingerprint('op', deep));
    // small items are sorted as they are, so a Set's fingerprint does not depend on its order
    expect(canonicalize(new Set([3, 1, 2]))).toBe('S[d1,d2,d3]');
    const big = (n: number) => ({ n, pad: 'p'.repeat(100) });
    expect(canonicalize(new Set([big(1), big(2)]))).toBe(canonicalize(new Set([big(2), big(1)])));
    expect(canonicalize(new Set([big(1), big(2)]))).not.toBe(canonicalize(new Set([big(1), big(3)])));
  });
});

describe('fingerprint of opaque and class values', () => {
  it('encodes FormData by its entries, and refuses files inside it', () => {
    const a = new FormData();
    a.append('amount', '10');
    a.append('note', 'x');
    const b = new FormData();
    b.append('note', 'x');
    b.append('amount', '10');
    const c = new FormData();
    c.append('amount', '99');
    expect(canonicalize(a)).toBe(canonicalize(b));
    expect(canonicalize(a)).not.toBe(canonicalize(c));
    const otherNote = new FormData();
    otherNote.append('amount', '10');
    otherNote.append('note', 'changed between retries');
    expect(canonicalize(a, new Set(['note']))).toBe(canonicalize(otherNote, new Set(['note'])));
    const withFile = new FormData();
    withFile.append('doc', new Blob(['%PDF']), 'a.pdf');
    expect(() => canonicalize(withFile)).toThrow(/a file inside FormData/);
  });

  it('refuses a Blob (nothing to compare) rather than fingerprint every Blob alike', () => {
    expect(() => canonicalize({ upload: new Blob(['one']) })).toThrow(IdempotencyError);
    expect(() => canonicalize({ upload: new Blob(['one']) })).toThrow(/contains a Blob/);
  });

  it('tags class instances with their class and compares their fields', () => {
    class Money {
      constructor(
        public cents: number,
        public currency: string,
      ) {}
    }
    expect(canonicalize(new Money(1, 'EUR'))).toBe(canonicalize(new Money(1, 'EUR')));
    expect(canonicalize(new Money(1, 'EUR'))).not.toBe(canonicalize(new Money(2, 'EUR')));
    expect(canonicalize(new Money(1, 'EUR'))).not.toBe(canonicalize({ cents: 1, currency: 'EUR' }));
    expect(canonicalize(Object.assign(Object.create(null), { a: 1 }))).toBe(canonicalize({ a: 1 }));
  });
});
