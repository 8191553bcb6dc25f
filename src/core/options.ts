import { IdempotencyConfigError } from './idempotency-error.js';

// Option checks shared by every factory (engine, policy, adapter, stores,
// client). Each runs when a factory is called, never per request, and throws
// an IdempotencyConfigError that names the option, what it takes and what it got.

/** The longest delay a Node.js timer keeps (2^31 - 1 ms, about 24.8 days); a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A header name as HTTP allows it here: letters, digits and dashes. */
const HEADER_NAME = /^[A-Za-z0-9-]+$/;

/** How a message names a value it refuses: `the string "yes"`, `the number 5`, `null`, `an object`... */
export function describeValue(value: unknown): string {
  if (typeof value === 'string')
    return `the string ${JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value)}`;
  if (typeof value === 'number' || typeof value === 'bigint') return `the number ${String(value)}`;
  if (value === null || value === undefined || typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return 'an array';
  const type = typeof value;
  return type === 'object' ? 'an object' : `a ${type}`;
}

/** `where: name must ..., got <value>.`: the shape of every option check's message. */
export function configError(where: string, message: string): IdempotencyConfigError {
  return new IdempotencyConfigError(`${where}: ${message}`);
}

export function checkFunction(
  value: unknown,
  name: string,
  where: string,
  what = 'a function',
): asserts value is (...args: never[]) => unknown {
  if (typeof value !== 'function') throw configError(where, `${name} must be ${what}, got ${describeValue(value)}.`);
}

export function checkBoolean(value: unknown, name: string, where: string): asserts value is boolean {
  if (typeof value !== 'boolean')
    throw configError(where, `${name} must be true or false, got ${describeValue(value)}.`);
}

export function checkOneOf<const T extends string>(
  value: unknown,
  name: string,
  where: string,
  allowed: readonly T[],
): asserts value is T {
  if (!allowed.includes(value as T)) {
    const list = allowed.map((a) => `'${a}'`).join(allowed.length === 2 ? ' or ' : ', ');
    throw configError(where, `${name} must be ${list}, got ${describeValue(value)}.`);
  }
}

/** A whole number from `min` (0 unless given) to `max` (Number.MAX_SAFE_INTEGER unless given), in `unit`. */
export function checkWholeNumber(
  value: unknown,
  name: string,
  where: string,
  { min = 0, max = Number.MAX_SAFE_INTEGER, unit = '' }: { min?: number; max?: number; unit?: string } = {},
): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
    throw configError(where, `${name} must be a whole number${unit} ${range}, got ${describeValue(value)}.`);
  }
}

/**
 * A number of milliseconds a Node.js timer can wait: above 0 (or from 0 with
 * `allowZero`) and at most {@link MAX_TIMER_MS}.
 */
export function checkTimerMs(
  value: unknown,
  name: string,
  where: string,
  { allowZero = false }: { allowZero?: boolean } = {},
): asserts value is number {
  if (typeof value !== 'number' || !(allowZero ? value >= 0 : value > 0) || !(value <= MAX_TIMER_MS)) {
    throw configError(
      where,
      `${name} must be a number of milliseconds ${allowZero ? 'from 0' : 'above 0'} to ${MAX_TIMER_MS} (a Node.js timer's limit, about 24.8 days), got ${describeValue(value)}.`,
    );
  }
}

/** A positive, finite number of milliseconds, not bound to a timer (a record's ttl). */
export function checkPositiveMs(value: unknown, name: string, where: string): asserts value is number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw configError(where, `${name} must be a positive number of milliseconds, got ${describeValue(value)}.`);
  }
}

/** A header name (letters, digits, dashes), as the server reads it and the client writes it. */
export function checkHeaderName(value: unknown, name: string, where: string, hint = ''): asserts value is string {
  if (typeof value !== 'string' || !HEADER_NAME.test(value)) {
    throw configError(
      where,
      `${name} must be a header name (letters, digits, dashes)${hint}, got ${describeValue(value)}.`,
    );
  }
}
