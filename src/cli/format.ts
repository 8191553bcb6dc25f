/**
 * The CLI's human output: records, releases, listings and counts as readable
 * lines, with times relative to the store's clock ("claimed 4m 12s ago") and
 * sizes. `--json` prints the results as they are instead (see commands.ts).
 */
import type { InspectedRecord, ReleaseResult, StatsResult, StuckResult } from '../core/admin.js';
import type { RecordState } from '../core/store-admin.js';

/** A duration as people read it: 850ms, 20.1s, 4m 12s, 2h 5m, 3d 4h. */
export function duration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1_000) return `${Math.round(abs)}ms`;
  if (abs < 60_000) return `${(Math.floor(abs / 100) / 10).toFixed(1)}s`;
  const s = Math.floor(abs / 1_000);
  if (s < 3_600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)}h ${Math.floor((s % 3_600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3_600)}h`;
}

/** A size in bytes: 512 B, 1.2 KiB, 3.4 MiB. */
export function size(bytes: number): string {
  if (bytes < 1_024) return `${bytes} B`;
  if (bytes < 1_048_576) return `${(bytes / 1_024).toFixed(1)} KiB`;
  return `${(bytes / 1_048_576).toFixed(1)} MiB`;
}

const iso = (t: number) => new Date(t).toISOString();

const STATE_TEXT: Record<'absent' | RecordState, string> = {
  absent:
    'absent: no record under this key (never claimed, expired, released or forgotten); a request with it runs the operation',
  in_progress: 'in_progress: a request holds the key; a retry with it gets 409 (or waits) until it finishes',
  completed: 'completed: a stored result; a retry with this key replays it',
  failed: 'failed: a stored error; a retry with this key replays the error',
};

const MARKER_TEXT: Record<'unreplayable' | 'response_too_large', string> = {
  unreplayable:
    'failed (marker: unreplayable): the operation RAN, and its result could not be stored; a retry with this key gets outcome_unreplayable rather than running it again',
  response_too_large:
    'failed (marker: response_too_large): the operation RAN, and its result was over maxResponseBytes; a retry with this key gets response_too_large rather than running it again',
};

/** What the lease of a claim says of its holder. */
export function leaseText(
  rec: { expiresAt?: number; lockTtl?: number; renewedAt?: number; live?: boolean },
  time: number,
): string {
  const left = rec.expiresAt === undefined ? '' : `${duration(rec.expiresAt - time)} left`;
  if (rec.renewedAt === undefined || rec.lockTtl === undefined) {
    return `${left}${left ? ', ' : ''}the store does not say when it was last renewed: its holder may be alive`;
  }
  const renewed = `renewed ${duration(time - rec.renewedAt)} ago (lockTtl ${duration(rec.lockTtl)}, renewed every ${duration(rec.lockTtl / 3)} while its holder runs)`;
  return rec.live
    ? `${left}, ${renewed}: its holder is alive`
    : `${left}, ${renewed}: its holder stopped renewing it (gone or stalled); it expires by itself`;
}

/** How the operator named a record (see commands.ts's recordRef): `global` for `--scope global`. */
export interface Named {
  scope?: string;
  key?: string;
  global?: boolean;
}

/** Where a record was looked up: the store's address (with its prefix or schema), and its kind. */
export interface Lookup {
  where: string;
  store: 'redis' | 'postgresql' | 'mysql' | 'sqlite';
}

/** Why a record can be absent from the store that was read: another prefix, schema, database or file. */
const ELSEWHERE: Record<Lookup['store'], string> = {
  redis: "A record under another --prefix is another record (an ioredis client's keyPrefix goes in front of it).",
  postgresql: 'A record in another --schema is another record.',
  mysql: "A record in another database (the URL's /db) is another record.",
  sqlite: 'A record in another file is another record.',
};

/**
 * Why a record the operator expected may read absent: it was looked up under
 * another scope, prefix or schema than the application's. Undefined when its
 * steps show the name is right.
 */
export function absentHint(rec: InspectedRecord, named: Named | undefined, lookup: Lookup): string | undefined {
  if (rec.state !== 'absent' || rec.steps.length > 0) return undefined;
  const store = ELSEWHERE[lookup.store];
  if (named?.key === undefined) return store;
  const scope =
    named.scope === undefined
      ? named.global
        ? "Read with no scope (--scope global): a procedure whose scope returns a user or tenant id keeps its records under it: pass --scope with that id; for a tenant whose id is the word global, pass --id ('global:<procedure>:<key>')."
        : 'Read with no scope: a procedure whose scope returns a user or tenant id keeps its records under it: pass --scope.'
      : `Read under scope ${named.scope}: a procedure with scope: 'global' (or whose scope returned null) keeps its records under no scope: leave --scope out.`;
  return `${scope} ${store}`;
}

/** A record as `inspect` prints it, one fact a line; for an absent one, where it was looked up, with `lookup`. */
export function recordLines(rec: InspectedRecord, named?: Named, lookup?: Lookup): string[] {
  const lines: [string, string][] = [['record', rec.id]];
  const scope = named?.global
    ? "scope 'global' (no scope)"
    : named?.scope === undefined
      ? 'no scope'
      : `scope ${named.scope}`;
  const about = named?.key === undefined ? '' : ` (${scope}, key ${named.key})`;
  lines.push(['procedure', `${rec.procedure}${about}`]);
  lines.push(['keyHash', `${rec.keyHash} (the events of this key carry it)`]);
  lines.push(['state', rec.marker === undefined ? STATE_TEXT[rec.state] : MARKER_TEXT[rec.marker]]);
  if (rec.state === 'absent' && lookup !== undefined) {
    lines.push(['read', `${rec.id} at ${lookup.where}`]);
    const hint = absentHint(rec, named, lookup);
    if (hint !== undefined) lines.push(['', hint]);
  }
  if (rec.state !== 'absent') {
    const attempt = rec.token === undefined ? '' : ` by attempt ${rec.token}`;
    lines.push([
      'claimed',
      rec.claimedAt === undefined
        ? `at a time the store does not know${attempt}`
        : `${duration(rec.time - rec.claimedAt)} ago (${iso(rec.claimedAt)})${attempt}`,
    ]);
  }
  if (rec.state === 'in_progress') {
    lines.push(['lease', leaseText(rec, rec.time)]);
    if (rec.waiting === true) lines.push(['waiting', 'a request waits for it to finish']);
  } else if (rec.state !== 'absent') {
    if (rec.expiresAt !== undefined)
      lines.push(['expires', `in ${duration(rec.expiresAt - rec.time)} (${iso(rec.expiresAt)})`]);
    if (rec.bytes !== undefined) lines.push(['outcome', size(rec.bytes)]);
  }
  if (rec.fingerprint !== undefined) lines.push(['fingerprint', rec.fingerprint]);
  if (rec.steps.length > 0) {
    const expiry = rec.stepsExpireAt === undefined ? '' : `, expire in ${duration(rec.stepsExpireAt - rec.time)}`;
    lines.push([
      'steps',
      `${rec.steps.length} recorded${expiry}: ${rec.steps.map((s) => `${s.name} (${size(s.bytes)})`).join(', ')}`,
    ]);
  } else {
    lines.push(['steps', 'none recorded']);
  }
  if (rec.body !== undefined) lines.push(['body', rec.body]);
  return lines.map(([label, text]) => `${label.padEnd(12)} ${text}`);
}

/** What a release of this record deletes, and what follows. */
function consequence(rec: InspectedRecord, steps: boolean): { act: string; risk: string } {
  const stepsToo = steps && rec.steps.length > 0 ? ` and its ${rec.steps.length} recorded step(s)` : '';
  switch (rec.state) {
    case 'in_progress':
      return {
        act: `release the claim of attempt ${rec.token ?? '(unknown)'}${stepsToo}`,
        risk: 'The next retry with this key then runs the operation; if its holder is still running, the operation runs twice.',
      };
    case 'completed':
    case 'failed':
      return {
        act: `forget the stored ${rec.state === 'completed' ? 'result' : 'error'} (${size(rec.bytes ?? 0)})${stepsToo}`,
        risk: 'The next retry with this key then runs the operation again instead of replaying it.',
      };
    default:
      return {
        act: `delete the ${rec.steps.length} recorded step(s)`,
        risk: 'The next attempt with this key then runs every step again.',
      };
  }
}

/** The outcome of `release`, after the record's lines. */
export function releaseLines(result: ReleaseResult, steps: boolean): string[] {
  const rec = result.record;
  const { act, risk } = consequence(rec, steps);
  if (result.done) {
    const forced =
      rec.state === 'in_progress' && rec.live !== false
        ? ' Its holder looked alive: if it still runs, it may run the operation a second time.'
        : '';
    return [`Done: did ${act}. ${risk}${forced}`];
  }
  switch (result.reason) {
    case 'absent':
      return [
        rec.steps.length > 0
          ? `No record under this key, but ${rec.steps.length} recorded step(s): --steps deletes them.`
          : 'No record is held or stored under this key: there is nothing to release.',
      ];
    case 'unconfirmed':
      return [
        `Dry run, nothing was deleted: this would ${act}. ${risk}`,
        `Run it again with --confirm${rec.state === 'completed' || rec.state === 'failed' ? ' --outcome' : ''}${rec.token === undefined ? '' : ` --token ${rec.token}`} to do it (--token: only if the same attempt still holds it).`,
      ];
    case 'outcome':
      return [
        `Refused, nothing was deleted: this would ${act}.${rec.marker === undefined ? '' : ' The operation ran: its result could not be kept, and retries get that error instead of running it again.'} ${risk}`,
        'If that is what you want, run it again with --outcome.',
      ];
    case 'live': {
      const why =
        rec.live === true
          ? `its holder renewed it ${duration(rec.time - rec.renewedAt!)} ago (lockTtl ${duration(rec.lockTtl!)}): it is most likely still running`
          : 'the store does not say when it was last renewed, so its holder may be alive';
      return [
        `Refused, nothing was deleted: ${why}. ${risk}`,
        'If you know its holder hangs or is gone, run it again with --force.',
      ];
    }
    case 'changed':
      return [
        'Nothing was deleted: the record changed between the read and the delete (it completed, was released or taken over). Inspect it again.',
      ];
  }
}

/** `stuck`'s listing. */
export function stuckLines(result: StuckResult & { olderThan: number }, time: number): string[] {
  const n = result.records.length;
  const lines = [
    `${n} claim${n === 1 ? '' : 's'} in progress taken at least ${duration(result.olderThan)} ago (${result.examined} claim${result.examined === 1 ? '' : 's'} in progress examined${result.complete ? '' : '; stopped at --max: not every record was read'})${n > 0 ? ', oldest first:' : '.'}`,
  ];
  for (const rec of result.records) {
    const claimed =
      rec.claimedAt === undefined ? 'claimed at an unknown time' : `claimed ${duration(time - rec.claimedAt)} ago`;
    lines.push(`  ${rec.id}`);
    lines.push(
      `      ${rec.procedure}: ${claimed}, ${leaseText(rec, time)}${rec.waiting === true ? '; a request waits for it' : ''}`,
    );
  }
  if (n > 0) {
    lines.push(
      'An old claim that is still renewed has a holder that hangs (or runs that long): `release --id ID --force` frees its key, and a retry may then run the operation while it still runs. One no longer renewed expires by itself.',
    );
  }
  return lines;
}

/** `stats`' counts. */
export function statsLines(result: StatsResult): string[] {
  const counts = (c: Record<RecordState, number>) =>
    `${c.in_progress} in progress, ${c.completed} completed, ${c.failed} failed`;
  const lines = [
    `${counts(result.byState)} (${result.examined} live record${result.examined === 1 ? '' : 's'} examined${result.complete ? '' : '; stopped at --max: not every record was read, the counts are partial'})`,
  ];
  const procedures = Object.keys(result.byProcedure).sort();
  if (procedures.length > 0) {
    const width = Math.max(...procedures.map((p) => p.length));
    lines.push('by procedure:');
    for (const p of procedures) lines.push(`  ${p.padEnd(width)}  ${counts(result.byProcedure[p]!)}`);
  }
  return lines;
}
