import { IdempotencyError } from './idempotency-error.js';
import { describeValue } from './options.js';
import { utf8Length, utf8LengthExceeds } from './utf8.js';

/** The longest key accepted, as in the IETF `Idempotency-Key` draft and Stripe. */
export const MAX_KEY_LENGTH = 255;

/**
 * Reads and validates a client key.
 *
 * The IETF draft defines the header as a Structured Field string, so a value
 * wrapped in double quotes is unquoted (`"abc"` is the key `abc`, with `\"`
 * and `\\` escapes); a bare value (what Stripe's clients send) is taken as is.
 * The key must then pass {@link keyProblem}.
 *
 * @throws {IdempotencyError} with reason `key_invalid`, saying what is wrong.
 */
export function parseIdempotencyKey(raw: string, headerName = 'Idempotency-Key'): string {
  const key = raw.length >= 2 && raw.charCodeAt(0) === 0x22 ? unquote(raw, headerName) : raw;
  const problem = keyProblem(key);
  if (problem !== undefined) {
    throw invalid(
      `${headerName} ${problem}. Send a unique key of 1 to ${MAX_KEY_LENGTH} printable ASCII characters, such as a UUID v4.`,
    );
  }
  return key;
}

/**
 * Why `key` is refused, or undefined for a valid one: a key is 1 to 255
 * characters of printable ASCII (0x20-0x7E). The rule the server applies
 * and the client checks before sending. The reason reads after the key's
 * name: "is empty".
 */
export function keyProblem(key: string): string | undefined {
  if (key.length === 0) return 'is empty';
  if (key.length > MAX_KEY_LENGTH) return `is ${key.length} characters long; the limit is ${MAX_KEY_LENGTH}`;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return `contains a character that is not printable ASCII (code ${c} at position ${i})`;
  }
  return undefined;
}

function unquote(raw: string, headerName: string): string {
  // The last quote closes the string only if no backslash escapes it (`"ab\"` never ends).
  let escapes = 0;
  for (let i = raw.length - 2; i > 0 && raw[i] === '\\'; i--) escapes++;
  if (raw.charCodeAt(raw.length - 1) !== 0x22 || escapes % 2 === 1) {
    throw invalid(
      `${headerName} starts with a double quote but does not end with one. Send the key bare or as a quoted string.`,
    );
  }
  let out = '';
  for (let i = 1; i < raw.length - 1; i++) {
    const ch = raw[i]!;
    if (ch === '\\') {
      const next = raw[++i];
      if (next !== '"' && next !== '\\') {
        throw invalid(`${headerName} has an invalid escape in its quoted string; only \\" and \\\\ are allowed.`);
      }
      out += next;
    } else if (ch === '"') {
      throw invalid(`${headerName} has an unescaped double quote inside its quoted string.`);
    } else {
      out += ch;
    }
  }
  return out;
}

function invalid(message: string): IdempotencyError {
  return new IdempotencyError('key_invalid', message);
}

// Escaping keeps the parts of a record id unambiguous: a scope `a:b` and a
// path `c` can never produce the same id as a scope `a` and a path `b:c`.
// Braces are escaped so the Redis store can wrap the id in a hash tag; NUL,
// which a PostgreSQL text column cannot hold; and lone surrogates (as %uD800),
// since stores and SHA-256 encode ids as UTF-8, which turns every one of
// them into U+FFFD, so `team-\uD800` and `team-\uFFFD` would share a record.
const LONE_SURROGATE = '[\\uD800-\\uDBFF](?![\\uDC00-\\uDFFF])|(?<![\\uD800-\\uDBFF])[\\uDC00-\\uDFFF]';
const loneSurrogate = new RegExp(LONE_SURROGATE);
const needsEscape = new RegExp(`[%:{}\\0]|${LONE_SURROGATE}`);
const toEscape = new RegExp(needsEscape.source, 'g');

/** True when `text` is not well-formed Unicode: UTF-8 would turn its lone surrogates into U+FFFD. */
export function hasLoneSurrogate(text: string): boolean {
  return loneSurrogate.test(text);
}
/** One part of a record id (scope, name or key) as the id holds it: escaped, with no `:` in it. */
export function escapePart(part: string): string {
  return needsEscape.test(part)
    ? part.replace(toEscape, (ch) => {
        const code = ch.charCodeAt(0);
        return code > 0xff
          ? `%u${code.toString(16).toUpperCase()}`
          : `%${code.toString(16).toUpperCase().padStart(2, '0')}`;
      })
    : part;
}

/**
 * The identity of a record: scope, operation name (the procedure path) and
 * client key. Stores add their own prefix and layout around it. Distinct
 * triples always give distinct ids (`undefined`, no scope, is not `''`), and
 * an id is well-formed Unicode without NUL, so every store keeps it as it is.
 * @throws {IdempotencyError} `input_unsupported` for a part that is not a string (a scope may be undefined).
 */
export function recordId(scope: string | undefined, name: string, key: string): string {
  // From JavaScript, another type would be turned into text: scope null would share the records of 'null'.
  if ((typeof scope !== 'string' && scope !== undefined) || typeof name !== 'string' || typeof key !== 'string') {
    throw offType(scope, name, key);
  }
  // No escaped part ends in a bare '%': it stands for the empty scope.
  const scopePart = scope === undefined ? '' : scope === '' ? '%' : escapePart(scope);
  return `${scopePart}:${escapePart(name)}:${escapePart(key)}`;
}

/** The refusal of a record identity part that is not a string, saying what to pass instead. */
function offType(scope: unknown, name: unknown, key: unknown): IdempotencyError {
  const [part, value, what] =
    typeof scope !== 'string' && scope !== undefined
      ? ['scope', scope, 'a string (a user or tenant id; String(id) for a number), or no scope (undefined)']
      : typeof name !== 'string'
        ? ['operation name', name, 'a string (the procedure path)']
        : ['key', key, 'the key as a string (parseIdempotencyKey reads it from a header)'];
  return new IdempotencyError('input_unsupported', `The idempotency ${part} is ${describeValue(value)}: pass ${what}.`);
}

/**
 * The longest record id, in UTF-8 bytes: a PostgreSQL btree index entry holds
 * at most about 2,700, and an id is the store's primary key.
 */
export const MAX_RECORD_ID_BYTES = 2_048;

/**
 * {@link recordId}, refused with `input_unsupported` when it is too long for
 * every store to keep it as its primary key (a scope that is not an id).
 */
export function boundedRecordId(scope: string | undefined, name: string, key: string): string {
  const id = recordId(scope, name, key);
  if (utf8LengthExceeds(id, MAX_RECORD_ID_BYTES)) {
    throw new IdempotencyError(
      'input_unsupported',
      `The record's identity (scope, operation name and key, escaped) takes ${utf8Length(id)} bytes, more than the ${MAX_RECORD_ID_BYTES} a store keeps as a key. ` +
        'Use a shorter scope (a user or tenant id, not a token or an object) or a shorter key.',
    );
  }
  return id;
}

/** The scope part of a record id, as escaped (`''` for no scope): what the memory store shares room by. */
export function scopeOfRecordId(id: string): string {
  return id.slice(0, id.indexOf(':'));
}

/** The operation name inside a record id (for events about a record known only by its id). */
export function nameOfRecordId(id: string): string {
  const name = id.split(':')[1] ?? '';
  return name.includes('%')
    ? name.replace(/%u([0-9A-F]{4})|%([0-9A-F]{2})/g, (_, wide: string | undefined, hex: string | undefined) =>
        String.fromCharCode(Number.parseInt(wide ?? hex!, 16)),
      )
    : name;
}
