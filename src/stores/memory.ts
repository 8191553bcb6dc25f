import { scopeOfRecordId } from '../core/key.js';
import { checkFunction, checkTimerMs, checkWholeNumber } from '../core/options.js';
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
} from '../core/store.js';
import type { StoreAdmin } from '../core/store-admin.js';
import { KeyedListeners } from './listeners.js';
import { type AdminView, memoryAdmin } from './memory-admin.js';
import { ScopeShares, type ScopeUsage } from './memory-shares.js';

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

/** A record: what its admin reads (memory-admin.ts), and its accounting. */
interface MemoryRecord extends AdminView {
  bytes: number;
  scope: ScopeUsage<Entry>;
}

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

const recordBytes = (id: string, fingerprint: string, token: string | undefined, body: string | undefined) =>
  ENTRY_OVERHEAD + id.length + fingerprint.length + (token?.length ?? 0) + (body?.length ?? 0);

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

  // Usage, in total and per scope, and which entry goes first (memory-shares.ts).
  const shares = new ScopeShares<Entry>(maxEntries, maxBytes);

  function drop(id: string, rec: MemoryRecord) {
    records.delete(id);
    if (rec.state !== 'in_progress') shares.withdraw(rec.scope, rec);
    else if (stepsOf.size > 0) {
      // The claim is gone (released, expired, completed, deleted): no one holds the steps it left.
      const recorded = stepsOf.get(id);
      if (recorded !== undefined) shares.free(recorded.scope, recorded, id);
    }
    shares.account(rec.scope, -1, -rec.bytes);
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
      if (rec.expiresAt <= t) drop(id, rec);
      else if (rec.expiresAt < earliest) earliest = rec.expiresAt;
    }
    for (const [id, recorded] of stepsOf) {
      if (recorded.expiresAt <= t) dropSteps(id, recorded);
      else if (recorded.expiresAt < earliest) earliest = recorded.expiresAt;
    }
    nextExpiry = earliest;
  };
  const timer = setInterval(() => sweep(), sweepInterval);
  timer.unref();

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
    if (rec !== undefined && rec.expiresAt <= t) {
      drop(id, rec);
      return undefined;
    }
    return rec;
  }

  function held(id: string, token: string, t: number): MemoryRecord | undefined {
    const rec = live(id, t);
    return rec !== undefined && rec.state === 'in_progress' && rec.token === token ? rec : undefined;
  }

  const admin = memoryAdmin({
    now,
    records,
    live,
    liveSteps(id, t) {
      const recorded = stepsOf.get(id);
      if (recorded === undefined) return undefined;
      if (recorded.expiresAt > t) return recorded;
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

    async claim({ id, fingerprint, token, lockTtl, waiting, deadline }: ClaimInput): Promise<ClaimResult> {
      const time = now();
      const rec = live(id, time);
      if (rec !== undefined && !(rec.state === 'in_progress' && rec.token === token)) {
        if (rec.state === 'in_progress') {
          return waiting === true
            ? { state: 'in_progress', fingerprint: rec.fingerprint, expiresIn: rec.expiresAt - time }
            : { state: 'in_progress', fingerprint: rec.fingerprint };
        }
        return rec.fingerprint === fingerprint
          ? { state: rec.state, fingerprint: rec.fingerprint, body: rec.body }
          : { state: rec.state, fingerprint: rec.fingerprint };
      }
      // Absent, or this token's own live claim sent again: it is taken, unless the caller gave up.
      if (deadline !== undefined && time > deadline) return { state: 'late', time };
      if (rec === undefined) {
        // The steps a released or expired claim left are held by this claim now: the room it makes never takes them.
        const left = stepsOf.size > 0 ? stepsOf.get(id) : undefined;
        const resumes = left !== undefined && left.expiresAt > time;
        if (resumes) shares.withdraw(left.scope, left);
        const size = recordBytes(id, fingerprint, token, undefined);
        const name = scopeOfRecordId(id);
        if (!makeRoom(time, 1, size, shares.get(name))) {
          // Refused: evictable again, now the newest of their scope (their key was just asked for).
          if (resumes) shares.free(left.scope, left, id);
          throw full(1, size);
        }
        const scope = shares.usage(name);
        const expiresAt = time + lockTtl;
        records.set(id, {
          state: 'in_progress',
          fingerprint,
          token,
          body: undefined,
          expiresAt,
          claimedAt: time,
          lockTtl,
          bytes: size,
          scope,
        });
        shares.account(scope, 1, size);
      } else {
        rec.expiresAt = time + lockTtl;
        rec.lockTtl = lockTtl;
      }
      expiring(time + lockTtl);
      if (stepsOf.size > 0) {
        const recorded = stepsOf.get(id);
        if (recorded !== undefined && recorded.expiresAt > time) {
          return {
            state: 'acquired',
            time,
            steps: { fingerprint: recorded.fingerprint, steps: recorded.steps.map((step) => ({ ...step })) },
          };
        }
      }
      return { state: 'acquired', time };
    },

    async complete({ id, fingerprint, token, state, body, ttl, clearSteps }: CompleteInput): Promise<CompleteResult> {
      const t = now();
      const rec = live(id, t);
      // Held by this token, or absent (expired, evicted): no one else holds or ran it.
      if (rec !== undefined && rec.token !== token) return rec.state === 'in_progress' ? 'held' : 'finished';
      // Already stored by this very claim: a completion sent twice.
      if (rec !== undefined && rec.state !== 'in_progress') return 'stored';
      if (clearSteps === true) {
        const recorded = stepsOf.get(id);
        if (recorded !== undefined) dropSteps(id, recorded);
      }
      const size = recordBytes(id, fingerprint, token, body);
      const name = scopeOfRecordId(id);
      // Never refused for room: a retry would run the operation again. The rule decides what may go.
      makeRoom(t, rec === undefined ? 1 : 0, size - (rec?.bytes ?? 0), rec?.scope ?? shares.get(name));
      if (rec !== undefined) drop(id, rec);
      const done: MemoryRecord = {
        state,
        fingerprint,
        token,
        body,
        expiresAt: t + ttl,
        claimedAt: rec?.claimedAt ?? t,
        lockTtl: undefined,
        bytes: size,
        scope: shares.usage(name),
      };
      records.set(id, done);
      shares.account(done.scope, 1, size);
      shares.free(done.scope, done, id);
      expiring(t + ttl);
      listeners.notify(id);
      return 'stored';
    },

    async saveStep({ id, token, fingerprint, index, name, body, ttl }: SaveStepInput): Promise<SaveStepResult> {
      const t = now();
      const rec = held(id, token, t);
      if (rec === undefined) return 'fenced';
      let recorded = stepsOf.get(id);
      if (recorded !== undefined && recorded.expiresAt <= t) {
        dropSteps(id, recorded);
        recorded = undefined;
      }
      const count = recorded?.steps.length ?? 0;
      // Sent twice by its holder: the same name at the same place is already there.
      if (index < count) return recorded!.steps[index]!.name === name ? 'stored' : 'conflict';
      if (index > count) return 'conflict';
      // Never refused for room, as a completion: the step ran, and a retry would run it again.
      const size = STEP_OVERHEAD + name.length + body.length;
      if (recorded === undefined) {
        const listSize = ENTRY_OVERHEAD + id.length + fingerprint.length;
        makeRoom(t, 1, listSize + size, rec.scope);
        recorded = { fingerprint, steps: [], expiresAt: 0, bytes: listSize, scope: rec.scope };
        stepsOf.set(id, recorded);
        shares.account(rec.scope, 1, listSize);
      } else {
        makeRoom(t, 0, size, rec.scope);
      }
      const grown = size + fingerprint.length - recorded.fingerprint.length;
      recorded.fingerprint = fingerprint;
      recorded.steps.push({ name, body });
      recorded.expiresAt = t + ttl;
      recorded.bytes += grown;
      shares.account(recorded.scope, 0, grown);
      expiring(recorded.expiresAt);
      return 'stored';
    },

    async release({ id, token }: FencedInput): Promise<boolean> {
      const rec = held(id, token, now());
      if (rec === undefined) return false;
      drop(id, rec);
      listeners.notify(id);
      return true;
    },

    async extend({ id, token, lockTtl }: ExtendInput): Promise<boolean> {
      const t = now();
      const rec = held(id, token, t);
      if (rec === undefined) return false;
      rec.expiresAt = t + lockTtl;
      rec.lockTtl = lockTtl;
      expiring(rec.expiresAt);
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
      clearInterval(timer);
    },
  };
}
