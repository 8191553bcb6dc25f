import * as crypto from 'node:crypto';
import { IdempotencyError } from './errors.js';

/** Inputs nested deeper than this are refused rather than risk the stack. */
export const MAX_FINGERPRINT_DEPTH = 512;

/**
 * A canonical, type-tagged encoding of `value`: object keys sorted, fields
 * named in `exclude` dropped at any depth, and values JSON cannot represent
 * (Date, BigInt, Map, Set, undefined, binary) given distinct, stable forms,
 * so `{ a: 1n }` and `{ a: "1" }` never collide.
 *
 * Written by hand rather than with a stable-stringify package: none of them
 * handles Map, Set and BigInt, strips fields and bounds depth in one pass,
 * and this runs on every protected call.
 */
export function canonicalize(value: unknown, exclude?: ReadonlySet<string>): string {
  return encode(value, exclude !== undefined && exclude.size > 0 ? exclude : undefined, []);
}

// crypto.hash (Node >= 20.12) hashes in one call, without a Hash object; a
// namespace import, since a named one would fail to link on older Node 20.
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: 'base64url') => string }).hash;

/**
 * SHA-256 (base64url) of the operation name and the canonical input, the
 * value compared when a key is reused.
 */
export function fingerprint(name: string, input: unknown, exclude?: ReadonlySet<string>): string {
  const text = `${name}\n${canonicalize(input, exclude)}`;
  return oneShot === undefined
    ? crypto.createHash('sha256').update(text).digest('base64url')
    : oneShot('sha256', text, 'base64url');
}

function encode(value: unknown, exclude: ReadonlySet<string> | undefined, ancestors: object[]): string {
  switch (typeof value) {
    case 'string':
      return quote(value);
    case 'number':
      return `d${value}`;
    case 'boolean':
      return value ? 't' : 'f';
    case 'undefined':
      return 'u';
    case 'bigint':
      return `i${value}`;
    case 'object':
      return value === null ? 'n' : encodeObject(value, exclude, ancestors);
    default:
      throw new IdempotencyError(
        'input_unsupported',
        `The input contains a ${typeof value}, which cannot be fingerprinted. Send plain data (objects, arrays, strings, numbers).`,
      );
  }
}

/**
 * JSON.stringify of a string, whose output it is: a string of printable ASCII
 * other than `"` and `\\` is only wrapped in quotes, and this loop is much
 * cheaper per character than the builtin's escaping one (Node 20).
 */
function quote(text: string): string {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return JSON.stringify(text);
  }
  return `"${text}"`;
}

function unsupported(what: string): IdempotencyError {
  return new IdempotencyError(
    'input_unsupported',
    `The input contains ${what}, which cannot be fingerprinted, so reuse of a key with another one could not be detected. ` +
      'Parse it into plain data (objects, arrays, strings, numbers) before the procedure, or protect it with getKey and a payload of your own.',
  );
}

function encodeObject(value: object, exclude: ReadonlySet<string> | undefined, ancestors: object[]): string {
  if (ancestors.length >= MAX_FINGERPRINT_DEPTH) {
    throw new IdempotencyError(
      'input_unsupported',
      `The input is nested more than ${MAX_FINGERPRINT_DEPTH} levels deep and cannot be fingerprinted. Flatten the payload.`,
    );
  }
  if (ancestors.includes(value)) {
    throw new IdempotencyError('input_unsupported', 'The input contains a cycle and cannot be fingerprinted.');
  }
  // A plain object, the usual input: none of the checks below for other kinds can match it.
  const proto = Object.getPrototypeOf(value) as { constructor?: { name?: string } } | null;
  if (
    (proto === Object.prototype || proto === null) &&
    !Array.isArray(value) &&
    !ArrayBuffer.isView(value) &&
    typeof (value as { toJSON?: unknown }).toJSON !== 'function'
  ) {
    ancestors.push(value);
    const out = encodeFields(value, '{', exclude, ancestors);
    ancestors.pop();
    return out;
  }
  if (value instanceof Date) {
    const time = value.getTime();
    return Number.isNaN(time) ? 'DNaN' : `D${time}`;
  }
  if (ArrayBuffer.isView(value)) {
    return `B${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64')}`;
  }
  if (value instanceof ArrayBuffer) {
    return `B${Buffer.from(value).toString('base64')}`;
  }
  ancestors.push(value);
  let out: string;
  if (Array.isArray(value)) {
    out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      out += encode(value[i], exclude, ancestors);
    }
    out += ']';
  } else if (value instanceof Map) {
    const entries: string[] = [];
    for (const [k, v] of value) {
      if (exclude !== undefined && typeof k === 'string' && exclude.has(k)) continue;
      entries.push(`${encode(k, exclude, ancestors)}=>${encode(v, exclude, ancestors)}`);
    }
    out = `M{${entries.sort().join(',')}}`;
  } else if (value instanceof Set) {
    const items: string[] = [];
    for (const item of value) items.push(encode(item, exclude, ancestors));
    out = `S[${items.sort().join(',')}]`;
  } else if (value instanceof RegExp) {
    out = `R${JSON.stringify(String(value))}`;
  } else if (typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    // Decimal, URL and similar value objects describe themselves.
    out = `J${encode((value as { toJSON(): unknown }).toJSON(), exclude, ancestors)}`;
  } else if (typeof FormData !== 'undefined' && value instanceof FormData) {
    const entries: string[] = [];
    for (const [k, v] of value) {
      if (exclude?.has(k)) continue;
      if (typeof v !== 'string') throw unsupported('a file inside FormData');
      entries.push(`${JSON.stringify(k)}=${JSON.stringify(v)}`);
    }
    out = `F[${entries.sort().join(',')}]`;
  } else {
    let open = '{';
    if (proto !== Object.prototype && proto !== null) {
      // A class instance: its own fields are its data, unless it has none
      // (Blob, File, a stream): then two different ones would look alike.
      const kind = proto.constructor?.name || 'object';
      if (Object.keys(value).length === 0) throw unsupported(`a ${kind} (it has no fields to compare)`);
      open = `C${JSON.stringify(kind)}{`;
    }
    out = encodeFields(value, open, exclude, ancestors);
  }
  ancestors.pop();
  return out;
}

/** `open`, then the object's fields in key order, then `}`. */
function encodeFields(value: object, open: string, exclude: ReadonlySet<string> | undefined, ancestors: object[]) {
  // Own enumerable keys only, read and never assigned: a key named
  // `__proto__` is data here, not a prototype.
  const keys = Object.keys(value).sort();
  let out = open;
  let first = true;
  for (const k of keys) {
    if (exclude?.has(k)) continue;
    const v = (value as Record<string, unknown>)[k];
    // An undefined property is absent, as it is on the JSON wire.
    if (v === undefined) continue;
    if (!first) out += ',';
    first = false;
    out += `${quote(k)}:${encode(v, exclude, ancestors)}`;
  }
  return `${out}}`;
}
