import { describe, expect, it } from 'vitest';
import { createIdempotencyEngine, MAX_KEY_LENGTH, memoryStore, parseIdempotencyKey, recordId } from '../../src/core.js';
import { IdempotencyError } from '../../src/index.js';

describe('parseIdempotencyKey', () => {
  it('accepts 1 to 255 printable ASCII characters as they are', () => {
    expect(parseIdempotencyKey('a')).toBe('a');
    expect(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    const printable = Array.from({ length: 0x7e - 0x20 + 1 }, (_, i) => String.fromCharCode(0x20 + i)).join('');
    expect(parseIdempotencyKey(`x${printable}`)).toBe(`x${printable}`);
    expect(parseIdempotencyKey('k'.repeat(MAX_KEY_LENGTH))).toHaveLength(255);
  });

  it.each([
    ['', /is empty/],
    ['k'.repeat(256), /256 characters long; the limit is 255/],
    ['abc\x00', /code 0 at position 3/],
    ['a\nb', /code 10 at position 1/],
    ['\x7f', /code 127/],
    ['über', /code 252/],
    ['😀', /not printable ASCII/],
    ['"unterminated', /does not end with one/],
    ['"bad \\n escape"', /invalid escape/],
    ['"in"side"', /unescaped double quote/],
    // the escape takes the closing quote: the string never ends (found by the hostile-key property test)
    ['"\\"', /does not end with one/],
    ['"ab\\"', /does not end with one/],
    ['""', /is empty/],
  ])('refuses %j with a reason', (raw, message) => {
    let thrown: unknown;
    try {
      parseIdempotencyKey(raw);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(IdempotencyError);
    expect((thrown as IdempotencyError).reason).toBe('key_invalid');
    expect((thrown as Error).message).toMatch(message);
  });

  it('unquotes a Structured Field string with its escapes', () => {
    expect(parseIdempotencyKey('"abc"')).toBe('abc');
    expect(parseIdempotencyKey('"a\\"b\\\\c"')).toBe('a"b\\c');
    // the 255 limit applies to the key, not to its quoted form
    expect(parseIdempotencyKey(`"${'k'.repeat(255)}"`)).toHaveLength(255);
  });

  it('names the configured header in its messages', () => {
    expect(() => parseIdempotencyKey('', 'X-Request-Key')).toThrow(/^X-Request-Key is empty/);
  });
});

describe('recordId', () => {
  it('keeps scope, name and key apart, whatever characters they hold', () => {
    expect(recordId('a:b', 'c', 'k')).not.toBe(recordId('a', 'b:c', 'k'));
    expect(recordId('a', 'b', 'c:d')).not.toBe(recordId('a', 'b:c', 'd'));
    expect(recordId(undefined, 'pay', 'k')).toBe(':pay:k');
    expect(recordId('u1', 'pay', '{x}%')).toBe('u1:pay:%7Bx%7D%25');
    expect(recordId('u1', 'pay', '%7Bx%7D%25')).not.toBe(recordId('u1', 'pay', '{x}%'));
  });
});

describe('a record identity of another type than string (from JavaScript)', () => {
  // String(null) is 'null', String(7) is '7': turned into text, they would share the records of those strings.
  it.each([
    [
      'a null scope',
      { scope: null },
      /scope is null: pass a string \(a user or tenant id; String\(id\) for a number\), or no scope \(undefined\)/,
    ],
    ['a number scope', { scope: 7 }, /scope is the number 7: pass a string/],
    ['an object scope', { scope: { id: 'u1' } }, /scope is an object: pass a string/],
    ['a number key', { key: 42 }, /key is the number 42: pass the key as a string/],
    ['a null name', { name: null }, /operation name is null: pass a string \(the procedure path\)/],
  ])('the engine refuses %s before it reads the store', async (_, part, message) => {
    const store = memoryStore();
    const engine = createIdempotencyEngine({ store });
    let ran = 0;
    const input = { scope: 'u1', name: 'pay', key: 'k', payload: {}, ...part } as unknown as Parameters<
      typeof engine.run
    >[0];
    const refused = await engine.run(input, async () => ++ran).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IdempotencyError);
    expect(refused).toMatchObject({ reason: 'input_unsupported' });
    expect((refused as Error).message).toMatch(message);
    expect(ran).toBe(0);
    expect((await store.admin.list({})).records).toEqual([]);
  });

  it('undefined is no scope, apart from the empty scope and from the scope "null"', async () => {
    expect(recordId(undefined, 'pay', 'k')).toBe(':pay:k');
    expect(recordId('', 'pay', 'k')).not.toBe(recordId(undefined, 'pay', 'k'));
    expect(() => recordId(null as unknown as string, 'pay', 'k')).toThrow(IdempotencyError);
    const engine = createIdempotencyEngine({ store: memoryStore() });
    const run = (scope: string | undefined) =>
      engine.run({ scope, name: 'pay', key: 'k', payload: {} }, async () => scope ?? 'none');
    expect(await run(undefined)).toEqual({ value: 'none', replayed: false });
    expect(await run('null')).toEqual({ value: 'null', replayed: false });
    expect(await run(undefined)).toEqual({ value: 'none', replayed: true });
  });
});
