import { hexOf, sha256Bytes } from '#platform';
import { IdempotencyError } from './idempotency-error.js';
import { describeValue } from './options.js';
import { hasLoneSurrogate } from './record-id.js';

// A step's name and the key it derives for its downstream call.

/** The key a step's downstream call sends: a name-based UUID (version 8, RFC 9562) over SHA-256. */
export function deriveStepKey(id: string, name: string): string {
  const hash = sha256Bytes(`trpc-idempotency:step\u0000${id}\u0000${name}`);
  hash[6] = (hash[6]! & 0x0f) | 0x80; // version 8
  hash[8] = (hash[8]! & 0x3f) | 0x80; // variant 10
  const hex = hexOf(hash, 16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

export function checkStepName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || name === '') {
    throw stepMisuse(`A step needs a name, a non-empty string (such as 'charge'); got ${describeValue(name)}.`);
  }
  // Hashed as UTF-8, a lone surrogate becomes U+FFFD: two such names would derive one downstream key.
  if (hasLoneSurrogate(name)) {
    throw stepMisuse(
      `The step name ${describeValue(name)} is not well-formed Unicode (it holds a lone surrogate). Name the step in plain text.`,
    );
  }
}

/** `stepKey` of the record `id`: the name checked, then the key derived. */
export function stepKeyOf(id: string): (name: string) => string {
  return (name) => {
    checkStepName(name);
    return deriveStepKey(id, name);
  };
}

export function stepMisuse(message: string): IdempotencyError {
  return new IdempotencyError('step_misuse', message);
}
