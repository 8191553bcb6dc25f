import { utf8Length } from '#platform';
/**
 * The operator's reads and deletes, as rules (see record.ts): what a record
 * shows of itself by state, which records a listing of stuck claims shows,
 * and when a forget deletes.
 */
import type { ForgetInput, InspectInput, RecordInfo, RecordSummary } from '../store-admin.js';
import { EXPIRY_ROUNDING } from '../store-admin.js';
import { type Kept, live, type StoredRecord, type StoredSteps, type Transition } from './record.js';

/** A record as a listing shows it: a claim's lease and waiter, or an outcome's size. */
export function summary(id: string, rec: StoredRecord<unknown>, waiting: (id: string) => boolean): RecordSummary {
  const out: RecordSummary = {
    id,
    state: rec.state,
    fingerprint: rec.fingerprint,
    token: rec.token,
    claimedAt: rec.claimedAt,
    expiresAt: rec.expiresAt,
  };
  if (rec.state === 'in_progress') {
    if (rec.lockTtl !== undefined) out.lockTtl = rec.lockTtl;
    out.waiting = waiting(id);
  } else {
    out.bytes = utf8Length(rec.body ?? '');
  }
  return out;
}

/** A record and its steps as `inspect` shows them at `now`: the outcome only once finished, and when asked. */
export function inspect(
  rec: StoredRecord<unknown> | undefined,
  steps: StoredSteps | undefined,
  { id, body = false }: InspectInput,
  now: number,
  waiting: (id: string) => boolean,
): RecordInfo {
  const found = live(rec, now);
  const recorded = live(steps, now);
  const info: RecordInfo =
    found === undefined
      ? { id, state: 'absent', time: now, steps: [] }
      : { ...summary(id, found, waiting), time: now, steps: [] };
  if (body && found !== undefined && found.state !== 'in_progress') info.body = found.body ?? '';
  if (recorded !== undefined) {
    info.steps = recorded.steps.map((step) => ({ name: step.name, bytes: utf8Length(step.body) }));
    info.stepsExpireAt = recorded.expiresAt;
  }
  return info;
}

/** Whether a listing of claims older than `olderThan` ms (if given) shows `rec`, claimed at its claim time. */
export const claimedBefore = (rec: StoredRecord<unknown>, olderThan: number | undefined, now: number): boolean =>
  olderThan === undefined || rec.claimedAt <= now - olderThan;

/**
 * What an operator's forget does to the record: deletes it (`delete`) if it is
 * still as the operator saw it (state, token, not renewed since); `keep`s it
 * otherwise, and then deletes nothing; `absent`, as seen: only the steps may go.
 */
export function forgetVerdict(
  rec: StoredRecord<unknown> | undefined,
  input: Pick<ForgetInput, 'state' | 'token' | 'expiresAt'>,
  now: number,
): 'delete' | 'keep' | 'absent' {
  const found = live(rec, now);
  if (input.state === 'absent') return found === undefined ? 'absent' : 'keep';
  if (found === undefined || found.state !== input.state || found.token !== input.token) return 'keep';
  if (input.expiresAt !== undefined && found.expiresAt > input.expiresAt + EXPIRY_ROUNDING) return 'keep';
  return 'delete';
}

/** An operator's forget: the record as seen, and the steps too when asked; the answer is whether anything went. */
export function forget(kept: Kept | undefined, input: ForgetInput, now: number): Transition<boolean> {
  const verdict = forgetVerdict(kept?.record, input, now);
  if (verdict === 'keep') return [kept, false];
  const record = verdict === 'delete' ? undefined : kept?.record;
  const dropSteps = input.steps === true && live(kept?.steps, now) !== undefined;
  const steps = dropSteps ? undefined : kept?.steps;
  const after = record === undefined && steps === undefined ? undefined : { record, steps };
  return [after, verdict === 'delete' || dropSteps];
}
