/**
 * The codes the stores' scripts reply with, named once. The Redis scripts
 * interpolate them into their Lua (stores/redis/scripts.ts) and the store and
 * its admin (stores/redis/store.ts, admin.ts) decode the replies through the same tables, so the Lua and
 * the TypeScript cannot disagree on a letter. (The PostgreSQL statements keep
 * the states by their names, `RecordState`, and answer in named columns.)
 */
import type { CompleteResult, SaveStepResult } from '../store.js';
import type { RecordState } from '../store-admin.js';

/** A record's state as Redis keeps it (the record hash's field `s`), and as a claim that finds it replies. */
export const STATE_CODE = { in_progress: 'p', completed: 'c', failed: 'f' } as const satisfies Record<
  RecordState,
  string
>;

/** The first element of a claim's reply: the state of the record it found, or what it did. */
export const CLAIM_REPLY = {
  ...STATE_CODE,
  /** The claim took the record (or it is this token's own claim, sent again). */
  acquired: 'a',
  /** The record was free, but the claim's deadline had passed: nothing changed. */
  late: 'l',
  /** The restart fence refused to take an absent record (Redis with `restartFence` only). */
  fenced: 'r',
} as const;

/** A completion's reply. */
export const COMPLETE_REPLY = { finished: 0, stored: 1, held: 2 } as const satisfies Record<CompleteResult, number>;

/** A step's save's reply. */
export const SAVE_STEP_REPLY = { fenced: 0, stored: 1, conflict: 2 } as const satisfies Record<SaveStepResult, number>;

/** The reply of a release, a renewal and an operator's forget: whether it was done. */
export const DONE_REPLY = { no: 0, yes: 1 } as const;

/** The state an operator saw, as a forget sends it: a record's, or `absent`. */
export const SEEN_STATE_CODE = { absent: 'a', ...STATE_CODE } as const;

type Codes = Readonly<Record<string, string | number>>;

/** A table's names by code, to decode replies: undefined for a code it does not have. */
export function byCode<T extends Codes>(table: T): Readonly<Record<string | number, (keyof T & string) | undefined>> {
  const names = Object.create(null) as Record<string | number, keyof T & string>;
  for (const [name, code] of Object.entries(table)) names[code] = name;
  return names;
}
