import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { deserializeFaithfully, serializeFaithfully } from '../../src/core/faithful-json.js';

function hasNegativeZero(value: unknown): boolean {
  if (Object.is(value, -0)) return true;
  return typeof value === 'object' && value !== null && Object.values(value).some(hasNegativeZero);
}

const roundTrip = (value: unknown) => deserializeFaithfully(serializeFaithfully(value));

describe('faithful JSON (results stored without a data transformer)', () => {
  it('property: any value of JSON, Dates, Maps, Sets, BigInts, undefined, holes, NaN, ±Infinity and -0 reads back as it was', () => {
    const value = fc.anything({
      withDate: true,
      withMap: true,
      withSet: true,
      withBigInt: true,
      withSparseArray: true,
      maxDepth: 4,
    });
    fc.assert(
      fc.property(value, (v) => {
        expect(roundTrip(v)).toStrictEqual(v);
      }),
      { numRuns: 500 },
    );
  });

  it('plain JSON is written as JSON.stringify writes it, and a body stored as plain JSON reads as JSON', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (v) => {
        // -0, the one number JSON.stringify does not give back, is written tagged
        if (!hasNegativeZero(v)) expect(serializeFaithfully(v)).toBe(JSON.stringify(v));
        expect(deserializeFaithfully(JSON.stringify(v))).toEqual(JSON.parse(JSON.stringify(v)));
      }),
    );
  });

  it('keeps Dates (valid and invalid), RegExps and a __proto__ field as data', () => {
    const value = JSON.parse('{"__proto__": {"polluted": true}}') as Record<string, unknown>;
    Object.defineProperty(value, 'when', { value: new Date(0), enumerable: true });
    const back = roundTrip({ value, invalid: new Date(Number.NaN), re: /a+b/giu }) as Record<string, unknown>;
    expect((back.value as Record<string, unknown>).when).toEqual(new Date(0));
    expect(Object.hasOwn(back.value as object, '__proto__')).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Number.isNaN((back.invalid as Date).getTime())).toBe(true);
    expect(back.re).toEqual(/a+b/giu);
  });

  it('as JSON.stringify: an own toJSON() comes first (a Map subclass, a Date with its own), and is not called on what it returned', () => {
    class Tally extends Map<string, number> {
      toJSON() {
        return Object.fromEntries(this);
      }
    }
    const late = new Date(0);
    Object.defineProperty(late, 'toJSON', { value: () => 'the epoch' });
    const twice = { toJSON: () => Object.create({ toJSON: () => 'again' }, { kept: { value: 1, enumerable: true } }) };
    for (const value of [new Tally([['a', 1]]), late, twice, Object.assign([1, 2], { toJSON: () => 'array' })]) {
      // what the client receives, and what a replay serializes to, are the same
      expect(JSON.stringify(roundTrip({ value }))).toBe(JSON.stringify({ value }));
    }
  });

  it('a stored body that names a prototype, or fields that are not its own, is refused, and pollutes nothing', () => {
    const tampered = [
      '~[{}, [[["constructor", "prototype", "polluted"], "undefined"]]]',
      '~[{}, [[["__proto__", "polluted"], "undefined"]]]',
      '~[{"a": {}}, [[["a", "toString"], "date"]]]',
      '~[{"a": 1}, [[["a"], "eval"]]]',
      '~[{"a": 1}, "tags"]',
      '~{"not": "a pair"}',
    ];
    for (const body of tampered) expect(() => deserializeFaithfully(body)).toThrow(/malformed/);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.hasOwn(Object.prototype, 'polluted')).toBe(false);
  });

  it('other objects are kept as JSON gives them (the client receives the same); functions, symbols and cycles throw', () => {
    class Money {
      constructor(readonly cents: number) {}
    }
    class Decimal {
      constructor(readonly text: string) {}
      toJSON() {
        return this.text;
      }
    }
    expect(roundTrip({ m: new Money(5), d: new Decimal('1.50'), at: new Date(5) })).toStrictEqual({
      m: { cents: 5 },
      d: '1.50',
      at: new Date(5),
    });
    expect(() => serializeFaithfully({ f: () => 1 })).toThrow(TypeError);
    expect(() => serializeFaithfully([Symbol('s')])).toThrow(TypeError);
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => serializeFaithfully(cyclic)).toThrow(TypeError);
  });
});
