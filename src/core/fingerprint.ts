import { base64Of, sha256Base64url as sha256 } from '#platform';
import { IdempotencyError } from './idempotency-error.js';

/** Inputs nested deeper than this are refused rather than risk the stack. */
export const MAX_FINGERPRINT_DEPTH = 512;

/**
 * The most characters that references to an object already encoded elsewhere
 * in the input may add to its canonical form. A transformer such as superjson
 * rebuilds one object under several keys (its `referentialEqualities`), and
 * such an input written out in full can be exponentially larger than its body:
 * past this bound it is refused with `input_unsupported`.
 */
export const MAX_FINGERPRINT_SHARED = 1_048_576;

/**
 * A Set's item or a Map's entry whose encoding is longer than this is sorted
 * and joined as its digest: each level of nested Sets then copies and hashes
 * a bounded text, not the whole encoding of what is below it.
 */
const MAX_ENTRY_CHARS = 64;

/**
 * An object whose encoding took at least this much work (each value, key and
 * key character, and each character of a string), or came out at least this
 * long, is remembered, by identity, for the rest of the walk: met again
 * through another reference, its encoding is reused instead of walking it
 * again. So an object walked again is a short one; small objects are not
 * remembered, as remembering one costs more than walking it again.
 */
const MEMO_WORK = 64;

/**
 * A canonical, type-tagged encoding of `value`: object keys sorted, fields
 * named in `exclude` dropped at any depth, and values JSON cannot represent
 * (Date, BigInt, Map, Set, undefined, binary) given distinct, stable forms,
 * so `{ a: 1n }` and `{ a: "1" }` never collide. An object reached through
 * several references is encoded as the value it is, once per reference, so
 * sharing never changes the encoding.
 *
 * Written by hand rather than with a stable-stringify package: none of them
 * handles Map, Set and BigInt, strips fields, bounds depth and shared
 * references in one pass, and this runs on every protected call.
 */
export function canonicalize(value: unknown, exclude?: ReadonlySet<string>): string {
  return new Walk(exclude !== undefined && exclude.size > 0 ? exclude : undefined).encode(value);
}

/**
 * SHA-256 (base64url) of the operation name and the canonical input, the
 * value compared when a key is reused.
 */
export function fingerprint(name: string, input: unknown, exclude?: ReadonlySet<string>): string {
  return sha256(`${name}\n${canonicalize(input, exclude)}`);
}

/**
 * One encoding: the work it did so far, the objects it is inside of, and the
 * encodings of large objects it finished (see MEMO_WORK).
 */
class Walk {
  work = 0;
  /** Characters that references to remembered objects added. */
  shared = 0;
  readonly ancestors: object[] = [];
  readonly memo = new Map<object, string>();

  constructor(readonly exclude: ReadonlySet<string> | undefined) {}

  encode(value: unknown): string {
    switch (typeof value) {
      case 'string':
        this.work += value.length;
        return quote(value);
      case 'number':
        this.work++;
        return `d${value}`;
      case 'boolean':
        this.work++;
        return value ? 't' : 'f';
      case 'undefined':
        this.work++;
        return 'u';
      case 'bigint': {
        const digits = String(value);
        this.work += digits.length;
        return `i${digits}`;
      }
      case 'object':
        if (value !== null) return this.object(value);
        this.work++;
        return 'n';
      default:
        throw new IdempotencyError(
          'input_unsupported',
          `The input contains a ${typeof value}, which cannot be fingerprinted. Send plain data (objects, arrays, strings, numbers).`,
        );
    }
  }

  object(value: object): string {
    const { ancestors, memo } = this;
    // Most walks remember nothing: skip the lookup then.
    const known = memo.size === 0 ? undefined : memo.get(value);
    if (known !== undefined) {
      this.shared += known.length;
      if (this.shared > MAX_FINGERPRINT_SHARED) throw tooShared();
      return known;
    }
    if (ancestors.length >= MAX_FINGERPRINT_DEPTH) {
      // A cycle recurses until here too: checked only at the depth limit.
      if (ancestors.includes(value)) {
        throw new IdempotencyError('input_unsupported', 'The input contains a cycle and cannot be fingerprinted.');
      }
      throw new IdempotencyError(
        'input_unsupported',
        `The input is nested more than ${MAX_FINGERPRINT_DEPTH} levels deep and cannot be fingerprinted. Flatten the payload.`,
      );
    }
    const before = ++this.work;
    ancestors.push(value);
    const out = this.kind(value);
    ancestors.pop();
    if (this.work - before >= MEMO_WORK || out.length >= MEMO_WORK) memo.set(value, out);
    return out;
  }

  /** The encoding of an object by its kind (its fields below this one's depth). */
  kind(value: object): string {
    // A plain object, the usual input: none of the checks below for other kinds can match it.
    const proto = Object.getPrototypeOf(value) as { constructor?: { name?: string } } | null;
    if (
      (proto === Object.prototype || proto === null) &&
      !Array.isArray(value) &&
      typeof (value as { toJSON?: unknown }).toJSON !== 'function'
    ) {
      return this.fields(value, '{');
    }
    if (Array.isArray(value)) {
      let out = '[';
      for (let i = 0; i < value.length; i++) {
        if (i > 0) out += ',';
        out += this.encode(value[i]);
      }
      return `${out}]`;
    }
    if (value instanceof Date) {
      const time = value.getTime();
      return Number.isNaN(time) ? 'DNaN' : `D${time}`;
    }
    if (ArrayBuffer.isView(value)) {
      this.work += value.byteLength;
      return `B${base64Of(value.buffer, value.byteOffset, value.byteLength)}`;
    }
    if (value instanceof ArrayBuffer) {
      this.work += value.byteLength;
      return `B${base64Of(value, 0, value.byteLength)}`;
    }
    const { exclude } = this;
    if (value instanceof Map) {
      const entries: string[] = [];
      for (const [k, v] of value) {
        if (exclude !== undefined && typeof k === 'string' && exclude.has(k)) continue;
        entries.push(entry(`${this.encode(k)}=>${this.encode(v)}`));
      }
      return `M{${entries.sort().join(',')}}`;
    }
    if (value instanceof Set) {
      const items: string[] = [];
      for (const item of value) items.push(entry(this.encode(item)));
      return `S[${items.sort().join(',')}]`;
    }
    if (value instanceof RegExp) return `R${JSON.stringify(String(value))}`;
    if (typeof (value as { toJSON?: unknown }).toJSON === 'function') {
      // Decimal, URL and similar value objects describe themselves.
      return `J${this.encode((value as { toJSON(): unknown }).toJSON())}`;
    }
    if (typeof FormData !== 'undefined' && value instanceof FormData) {
      const entries: string[] = [];
      for (const [k, v] of value) {
        if (exclude?.has(k)) continue;
        if (typeof v !== 'string') throw unsupported('a file inside FormData');
        this.work += k.length + v.length;
        entries.push(entry(`${JSON.stringify(k)}=${JSON.stringify(v)}`));
      }
      return `F[${entries.sort().join(',')}]`;
    }
    // A class instance: its own fields are its data, unless it has none
    // (Blob, File, a stream): then two different ones would look alike.
    const kind = proto?.constructor?.name || 'object';
    if (Object.keys(value).length === 0) throw unsupported(`a ${kind} (it has no fields to compare)`);
    return this.fields(value, `C${JSON.stringify(kind)}{`);
  }

  /** `open`, then the object's fields in key order, then `}`. */
  fields(value: object, open: string): string {
    const { exclude } = this;
    // Own enumerable keys only, read and never assigned: a key named
    // `__proto__` is data here, not a prototype.
    const keys = Object.keys(value).sort();
    let out = open;
    let first = true;
    for (const k of keys) {
      // Every key was sorted and is read, even one left out: it counts.
      this.work += 1 + k.length;
      if (exclude?.has(k)) continue;
      const v = (value as Record<string, unknown>)[k];
      // An undefined property is absent, as it is on the JSON wire.
      if (v === undefined) continue;
      if (!first) out += ',';
      first = false;
      out += `${quote(k)}:${this.encode(v)}`;
    }
    return `${out}}`;
  }
}

/**
 * A Set item or Map entry as it is sorted: its encoding when short, else `#`
 * and its digest (no encoding starts with `#`, and a digest has a fixed length).
 */
function entry(encoded: string): string {
  return encoded.length <= MAX_ENTRY_CHARS ? encoded : `#${sha256(encoded)}`;
}

/**
 * JSON.stringify of a string, whose output it is: a string of printable ASCII
 * other than `"` and `\\` is only wrapped in quotes, which this loop checks
 * faster than the builtin escapes.
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

function tooShared(): IdempotencyError {
  return new IdempotencyError(
    'input_unsupported',
    `The input refers to the same objects from so many places (shared references, as superjson rebuilds them) that, written out, ` +
      `they would add more than ${MAX_FINGERPRINT_SHARED} characters to it, so it cannot be fingerprinted. ` +
      'Send each value once, or accept a schema that copies them (a zod object rather than z.unknown()).',
  );
}
