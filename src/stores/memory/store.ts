import { checkFunction, checkTimerMs, checkWholeNumber } from '../../core/options.js';
import {
  acquiredAnswer,
  claimed,
  claimVerdict,
  clearsSteps,
  completed,
  completeVerdict,
  expired,
  finishedAnswer,
  heldAnswer,
  holds,
  lateAnswer,
  renewed,
  type StoredRecord,
  saveStepVerdict,
  until,
} from '../../core/protocol/record.js';
import { scopeOfRecordId } from '../../core/record-id.js';
import type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  CompleteResult,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  RecordedStep,
  SaveStepInput,
  SaveStepResult,
} from '../../core/store.js';
import type { StoreAdmin } from '../../core/store-admin.js';
import { KeyedListeners } from '../listeners.js';
import { memoryAdmin } from './admin.js';
import { ScopeShares, type ScopeUsage } from './shares.js';

// What an entry and a step count besides their characters (see maxBytes): roughly the heap taken by
// the objects, Map slots and string headers around them.
const ENTRY_OVERHEAD = 512;
const STEP_OVERHEAD = 100;

export interface MemoryStoreOptions {
  /**
   * The most entries kept: records (running claims and finished outcomes)
   * and lists of recorded steps. Size it to the keys written per `ttl`.
   * @default 10_000
   */
  maxEntries?: number;
  /**
   * The most bytes kept, counted as an approximation of heap bytes: a record
   * counts the characters of its id, fingerprint, token and body, plus 512;
   * a list of steps the characters of its id and fingerprint, plus 512, and
   * each step those of its name and body, plus 100. (V8 keeps a character in
   * 1 byte for Latin-1 text and in 2 otherwise.) At least 65,536.
   * @default 67_108_864 (64 MiB)
   */
  maxBytes?: number;
  /**
   * How often expired records are swept, in milliseconds (they are also
   * ignored the moment they expire). At most 2^31 - 1.
   * @default 60_000
   */
  sweepInterval?: number;
  /**
   * The clock, injectable so expiry can be tested without sleeping.
   * @default Date.now
   */
  now?: () => number;
}

/** A record, as the protocol writes it (core/protocol/record.ts), with its scope's usage beside it. */
interface MemoryRecord extends StoredRecord<ScopeUsage<Entry>> {}

/** The steps recorded under an id, apart from its record: they outlive a released or expired claim. */
interface MemorySteps {
  fingerprint: string;
  steps: RecordedStep[];
  expiresAt: number;
  bytes: number;
  scope: ScopeUsage<Entry>;
}

/** What `maxEntries` counts, and what may be evicted once no claim holds it. */
type Entry = MemoryRecord | MemorySteps;

export interface MemoryStore extends IdempotencyStore {
  readonly name: 'memory';
  readonly admin: StoreAdmin;
  /** Live entries, what `maxEntries` bounds: records and lists of steps (expired ones are not counted). */
  readonly size: number;
  /** The bytes of the live entries, as `maxBytes` counts them. */
  readonly bytes: number;
  /** Stops the sweep timer. The store keeps working; expired records are then dropped on access. */
  close(): void;
}

const recordBytes = (id: string, fingerprint: string, token: string, body: string | undefined) =>
  ENTRY_OVERHEAD + id.length + fingerprint.length + token.length + (body?.length ?? 0);
/** The sweep's interval, which keeps no process alive (unref'd where timers can be); undefined if none may be set. */
function sweepTimer(fn: () => void, ms: number): ReturnType<typeof setInterval> | undefined {
  try {
    const timer = setInterval(fn, ms);
    (timer as { unref?: () => void }).unref?.();
    return timer;
  } catch {
    // Cloudflare Workers: "Disallowed operation called within global scope"
    return undefined;
  }
}

/** A record's bytes, counted from its fields (never changed once written), so it keeps no count of its own. */
const bytesOf = (id: string, rec: MemoryRecord) => recordBytes(id, rec.fingerprint, rec.token, rec.body);

/**
 * The embedded store: one process, nothing to run. It keeps the same
 * guarantees as the shared stores within that process, and none across
 * processes; use the Redis or PostgreSQL store when more than one instance
 * serves the same keys.
 *
 * Room is shared between scopes (the part of a record id before its first
 * `:`). When either limit is reached, expired records go first; then finished
 * records and the steps of released or expired claims, oldest first, of the
 * scope with the largest share (each an `evicted` event), so a scope that
 * fills the store evicts only its own. Running claims and their steps are
 * never evicted. A new claim that finds no room is refused (the engine
 * answers 503); a completion or step of a held claim never is (a retry would
 * run it again), so the store may exceed its limits by the outcomes and steps
 * of the claims still running.
 */
export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  // initialized config
  const { maxEntries = 10_000, maxBytes = 67_108_864, sweepInterval = 60_000, now = Date.now } = options;
  const where = 'memoryStore';
  checkWholeNumber(maxEntries, 'maxEntries', where, { min: 1 });
  checkWholeNumber(maxBytes, 'maxBytes', where, { min: 65_536, unit: ' of bytes' });
  checkTimerMs(sweepInterval, 'sweepInterval', where);
  checkFunction(now, 'now', where, 'a function that returns the time in ms');
  const records = new Map<string, MemoryRecord>();
  // The steps of records, apart from them: they outlive a released or expired claim.
  const stepsOf = new Map<string, MemorySteps>();
  const listeners = new KeyedListeners();
  const evictionListeners = new Set<(id: string, what: 'outcome' | 'steps') => void>();

  // Usage, in total and per scope, and which entry goes first (shares.ts).
  const shares = new ScopeShares<Entry>(maxEntries, maxBytes);

  function drop(id: string, rec: MemoryRecord) {
    records.delete(id);
    if (rec.state !== 'in_progress') shares.withdraw(rec.meta, rec);
    else if (stepsOf.size > 0) {
      // The claim is gone (released, expired, completed, deleted): no one holds the steps it left.
      const recorded = stepsOf.get(id);
      if (recorded !== undefined) shares.free(recorded.scope, recorded, id);
    }
    shares.account(rec.meta, -1, -bytesOf(id, rec));
  }

  function dropSteps(id: string, recorded: MemorySteps) {
    stepsOf.delete(id);
    shares.withdraw(recorded.scope, recorded);
    shares.account(recorded.scope, -1, -recorded.bytes);
  }

  // No record expires before this (a lower bound, kept on every write): until
  // then a sweep would find nothing, so a full store does not scan all its
  // records on every claim.
  let nextExpiry = Number.POSITIVE_INFINITY;
  const expiring = (expiresAt: number) => {
    if (expiresAt < nextExpiry) nextExpiry = expiresAt;
  };
  const sweep = (t = now()) => {
    if (t < nextExpiry) return;
    let earliest = Number.POSITIVE_INFINITY;
    for (const [id, rec] of records) {
      if (expired(rec, t)) drop(id, rec);
      else if (rec.expiresAt < earliest) earliest = rec.expiresAt;
    }
    for (const [id, recorded] of stepsOf) {
      if (expired(recorded, t)) dropSteps(id, recorded);
      else if (recorded.expiresAt < earliest) earliest = recorded.expiresAt;
    }
    nextExpiry = earliest;
  };
  // Undefined where no timer may be set here: a Cloudflare Worker's global scope, where a router and its
  // store are made. Expired records are then dropped when read, and swept when the store is full.
  const timer = sweepTimer(() => sweep(), sweepInterval);

  /**
   * Makes room, at time `t`, for `more` entries and `moreBytes` bytes of the scope `owner` (absent:
   * one that holds nothing yet): expired records first, then what the shares allow
   * (ScopeShares.victim). False when that is not enough.
   */
  function makeRoom(t: number, more: number, moreBytes: number, owner: ScopeUsage<Entry> | undefined): boolean {
    if (shares.entries + more <= maxEntries && shares.bytes + moreBytes <= maxBytes) return true;
    sweep(t);
    while (shares.entries + more > maxEntries || shares.bytes + moreBytes > maxBytes) {
      const victim = shares.victim(owner, more, moreBytes);
      if (victim === undefined) return false;
      const [entry, id] = victim;
      const what = 'steps' in entry ? 'steps' : 'outcome';
      if ('steps' in entry) dropSteps(id, entry);
      else drop(id, entry);
      for (const listener of evictionListeners) listener(id, what);
    }
    return true;
  }

  function full(more: number, moreBytes: number): Error {
    const [taken, option] =
      shares.entries + more > maxEntries
        ? [`${shares.entries} of ${maxEntries} entries`, 'maxEntries']
        : [`${shares.bytes} bytes of ${maxBytes}, and the claim needs ${moreBytes}`, 'maxBytes'];
    return new Error(
      `memoryStore is full: ${taken}, and nothing may be evicted for this claim (running claims and their steps never ` +
        'are, nor the finished records and left steps of a scope holding a smaller share of the store than the ' +
        "claim's scope, nor the steps this claim would resume after). " +
        `Raise ${option}, or use the Redis or PostgreSQL store.`,
    );
  }

  function live(id: string, t: number): MemoryRecord | undefined {
    const rec = records.get(id);
    if (rec !== undefined && expired(rec, t)) {
      drop(id, rec);
      return undefined;
    }
    return rec;
  }

  const admin = memoryAdmin({
    now,
    records,
    live,
    liveSteps(id, t) {
      const recorded = stepsOf.get(id);
      if (recorded === undefined) return undefined;
      if (!expired(recorded, t)) return recorded;
      dropSteps(id, recorded);
      return undefined;
    },
    drop,
    dropSteps(id) {
      const recorded = stepsOf.get(id);
      if (recorded !== undefined) dropSteps(id, recorded);
    },
    waiting: (id) => listeners.has(id),
    notify: (id) => listeners.notify(id),
  });

  return {
    name: 'memory',
    admin,
    get size() {
      sweep();
      return shares.entries;
    },
    get bytes() {
      sweep();
      return shares.bytes;
    },

    async claim(input: ClaimInput): Promise<ClaimResult> {
      const { id } = input;
      const time = now();
      const rec = live(id, time);
      const verdict = claimVerdict(rec, input, time);
      if (verdict === 'finished') return finishedAnswer(rec!, input);
      if (verdict === 'held') return heldAnswer(rec!, input, time);
      if (verdict === 'late') return lateAnswer(time);
      if (verdict === 'take') {
        // The steps a released or expired claim left are held by this claim now: the room it makes never takes them.
        const left = stepsOf.size > 0 ? stepsOf.get(id) : undefined;
        const resumes = left !== undefined && !expired(left, time);
        if (resumes) shares.withdraw(left.scope, left);
        const size = recordBytes(id, input.fingerprint, input.token, undefined);
        const name = scopeOfRecordId(id);
        if (!makeRoom(time, 1, size, shares.get(name))) {
          // Refused: evictable again, now the newest of their scope (their key was just asked for).
          if (resumes) shares.free(left.scope, left, id);
          throw full(1, size);
        }
        const scope = shares.usage(name);
        const taken = claimed(undefined, input, time, scope);
        records.set(id, taken);
        shares.account(scope, 1, size);
        expiring(taken.expiresAt);
      } else {
        // This token's own live claim sent again: the same fields, so the same bytes.
        const taken = claimed(rec, input, time, rec!.meta);
        records.set(id, taken);
        expiring(taken.expiresAt);
      }
      return acquiredAnswer(stepsOf.size > 0 ? stepsOf.get(id) : undefined, time);
    },

    async complete(input: CompleteInput): Promise<CompleteResult> {
      const { id } = input;
      const t = now();
      const rec = live(id, t);
      const verdict = completeVerdict(rec, input, t);
      if (verdict !== 'write') return verdict;
      if (clearsSteps(input)) {
        const recorded = stepsOf.get(id);
        if (recorded !== undefined) dropSteps(id, recorded);
      }
      const size = recordBytes(id, input.fingerprint, input.token, input.body);
      const name = scopeOfRecordId(id);
      // Never refused for room: a retry would run the operation again. The rule decides what may go.
      if (rec === undefined) makeRoom(t, 1, size, shares.get(name));
      else makeRoom(t, 0, size - bytesOf(id, rec), rec.meta);
      if (rec !== undefined) drop(id, rec);
      const done = completed(rec, input, t, shares.usage(name));
      records.set(id, done);
      shares.account(done.meta, 1, size);
      shares.free(done.meta, done, id);
      expiring(done.expiresAt);
      listeners.notify(id);
      return 'stored';
    },

    async saveStep(input: SaveStepInput): Promise<SaveStepResult> {
      const { id, fingerprint, name, body, ttl } = input;
      const t = now();
      const rec = live(id, t);
      let recorded = stepsOf.get(id);
      const verdict = saveStepVerdict(rec, recorded, input, t);
      if (verdict !== 'append') return verdict;
      // The protocol's `appended`, in place: a save stays one push, however many steps came before.
      const scope = rec!.meta;
      if (recorded !== undefined && expired(recorded, t)) {
        dropSteps(id, recorded);
        recorded = undefined;
      }
      // Never refused for room, as a completion: the step ran, and a retry would run it again.
      const size = STEP_OVERHEAD + name.length + body.length;
      if (recorded === undefined) {
        const listSize = ENTRY_OVERHEAD + id.length + fingerprint.length;
        makeRoom(t, 1, listSize + size, scope);
        recorded = { fingerprint, steps: [], expiresAt: 0, bytes: listSize, scope };
        stepsOf.set(id, recorded);
        shares.account(scope, 1, listSize);
      } else {
        makeRoom(t, 0, size, scope);
      }
      const grown = size + fingerprint.length - recorded.fingerprint.length;
      recorded.fingerprint = fingerprint;
      recorded.steps.push({ name, body });
      recorded.expiresAt = until(t, ttl);
      recorded.bytes += grown;
      shares.account(recorded.scope, 0, grown);
      expiring(recorded.expiresAt);
      return 'stored';
    },

    async release(input: FencedInput): Promise<boolean> {
      const { id } = input;
      const t = now();
      const rec = live(id, t);
      if (!holds(rec, input.token, t)) return false;
      drop(id, rec!);
      listeners.notify(id);
      return true;
    },

    async extend(input: ExtendInput): Promise<boolean> {
      const { id } = input;
      const t = now();
      const rec = live(id, t);
      if (!holds(rec, input.token, t)) return false;
      const renewal = renewed(rec!, input.lockTtl, t);
      records.set(id, renewal);
      expiring(renewal.expiresAt);
      return true;
    },

    async onSettled(id: string, listener: (notifying?: boolean) => void) {
      return listeners.add(id, listener);
    },

    onEvicted(listener: (id: string, what?: 'outcome' | 'steps') => void) {
      evictionListeners.add(listener);
      return () => void evictionListeners.delete(listener);
    },

    close() {
      if (timer !== undefined) clearInterval(timer);
    },
  };
}
