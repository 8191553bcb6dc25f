import { IdempotencyError } from './errors.js';

/** The longest key accepted, as in the IETF `Idempotency-Key` draft and Stripe. */
export const MAX_KEY_LENGTH = 255;

/**
 * Reads and validates a client key.
 *
 * The IETF draft defines the header as a Structured Field string, so a value
 * wrapped in double quotes is unquoted (`"abc"` is the key `abc`, with `\"`
 * and `\\` escapes); a bare value (what Stripe's clients send) is taken as is.
 * The key must then be 1 to 255 characters of printable ASCII (0x20-0x7E).
 *
 * @throws {IdempotencyError} with reason `key_invalid`, saying what is wrong.
 */
export function parseIdempotencyKey(raw: string, headerName = 'Idempotency-Key'): string {
  const key = raw.length >= 2 && raw.charCodeAt(0) === 0x22 ? unquote(raw, headerName) : raw;
  if (key.length === 0) {
    throw invalid(`${headerName} is empty. Send a unique value per operation, such as a UUID v4.`);
  }
  if (key.length > MAX_KEY_LENGTH) {
    throw invalid(
      `${headerName} is ${key.length} characters long; the limit is ${MAX_KEY_LENGTH}. Send a shorter key, such as a UUID v4.`,
    );
  }
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) {
      throw invalid(
        `${headerName} contains a character that is not printable ASCII (code ${c} at position ${i}). ` +
          'Use letters, digits and punctuation only, such as a UUID v4.',
      );
    }
  }
  return key;
}

function unquote(raw: string, headerName: string): string {
  if (raw.charCodeAt(raw.length - 1) !== 0x22) {
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
// Braces are escaped too so the Redis store can wrap the id in a hash tag.
const needsEscape = /[%:{}]/;
function escapePart(part: string): string {
  return needsEscape.test(part)
    ? part.replace(/[%:{}]/g, (ch) => `%${ch.charCodeAt(0).toString(16).toUpperCase()}`)
    : part;
}

/**
 * The identity of a record: scope, operation name (the procedure path) and
 * client key. Stores add their own prefix and layout around it.
 */
export function recordId(scope: string | undefined, name: string, key: string): string {
  return `${scope === undefined ? '' : escapePart(scope)}:${escapePart(name)}:${escapePart(key)}`;
}

/** The operation name inside a record id (for events about a record known only by its id). */
export function nameOfRecordId(id: string): string {
  const name = id.split(':')[1] ?? '';
  return name.includes('%')
    ? name.replace(/%([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)))
    : name;
}
