import { IdempotencyConfigError } from '../core/errors.js';
import type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  CompleteResult,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  RecordedStep,
  RecordState,
  SaveStepInput,
  SaveStepResult,
} from '../core/store.js';

export interface MemoryStoreOptions {
  /**
   * The most records kept. When full, expired records go first, then the
   * oldest finished ones, before their ttl (each eviction is an `evicted`
   * event: a retry of that key would run again). Live claims are never evicted
   * (that would let a duplicate run): a store full of them refuses new claims,
   * which the engine answers with 503. Size it to the keys written per `ttl`.
   * @default 10_000
   */
  maxEntries?: number;
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

interface MemoryRecord {
  state: RecordState;
  fingerprint: string;
  token: string | undefined;
  body: string | undefined;
  expiresAt: number;
}

interface MemorySteps {
  fingerprint: string;
  steps: RecordedStep[];
  expiresAt: number;
}

export interface MemoryStore extends IdempotencyStore {
  readonly name: 'memory';
  /** Live records (expired ones are not counted). */
  readonly size: number;
  /** Stops the sweep timer. The store keeps working; expired records are then dropped on access. */
  close(): void;
}

/**
 * The embedded store: one process, nothing to run. It keeps the same
 * guarantees as the shared stores within that process, and none across
 * processes; use the Redis or PostgreSQL store when more than one instance
 * serves the same keys.
 */
export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  // initialized config
  const { maxEntries = 10_000, sweepInterval = 60_000, now = Date.now } = options;
  if (!Number.isInteger(maxEntries) || maxEntries < 1) {
    throw new IdempotencyConfigError(`memoryStore: maxEntries must be a positive integer, got ${String(maxEntries)}.`);
  }
  if (typeof sweepInterval !== 'number' || !(sweepInterval > 0) || sweepInterval > 2 ** 31 - 1) {
    throw new IdempotencyConfigError(
      `memoryStore: sweepInterval must be a number of ms from 1 to ${2 ** 31 - 1} (a Node.js timer's limit), got ${String(sweepInterval)}.`,
    );
  }
  if (typeof now !== 'function') {
    throw new IdempotencyConfigError(
      `memoryStore: now must be a function that returns the time in ms, got ${typeof now}.`,
    );
  }
  // Insertion order is age order: a record is re-inserted when it completes.
  const records = new Map<string, MemoryRecord>();
  // The steps of records, apart from them: they outlive a released or expired claim. Bounded by
  // maxEntries too (records that use steps have at most one entry here), and swept with the records.
  const stepsOf = new Map<string, MemorySteps>();
  const listeners = new Map<string, Set<() => void>>();
  const evictionListeners = new Set<(id: string) => void>();

  // No record expires before this (a lower bound, kept on every write): until
  // then a sweep would find nothing, so a full store does not scan all its
  // records on every claim.
  let nextExpiry = Number.POSITIVE_INFINITY;
  const expiring = (expiresAt: number) => {
    if (expiresAt < nextExpiry) nextExpiry = expiresAt;
  };
  const sweep = () => {
    const t = now();
    if (t < nextExpiry) return;
    let earliest = Number.POSITIVE_INFINITY;
    for (const [id, rec] of records) {
      if (rec.expiresAt <= t) records.delete(id);
      else if (rec.expiresAt < earliest) earliest = rec.expiresAt;
    }
    for (const [id, rec] of stepsOf) {
      if (rec.expiresAt <= t) stepsOf.delete(id);
      else if (rec.expiresAt < earliest) earliest = rec.expiresAt;
    }
    nextExpiry = earliest;
  };
  const timer = setInterval(sweep, sweepInterval);
  timer.unref();

  function live(id: string, t: number): MemoryRecord | undefined {
    const rec = records.get(id);
    if (rec !== undefined && rec.expiresAt <= t) {
      records.delete(id);
      return undefined;
    }
    return rec;
  }

  function held(id: string, token: string, t: number): MemoryRecord | undefined {
    const rec = live(id, t);
    return rec !== undefined && rec.state === 'in_progress' && rec.token === token ? rec : undefined;
  }

  // Where the search for the oldest finished record resumes. Every record
  // before it is a running claim (a claim that finishes is re-inserted at the
  // end), and restarting from the first entry each time would step over every
  // deleted slot the Map keeps at its head until it rehashes.
  let evictFrom: MapIterator<[string, MemoryRecord]> | undefined;

  function makeRoom() {
    if (records.size < maxEntries) return;
    sweep();
    if (records.size < maxEntries) return;
    for (let pass = 0; pass < 2; pass++) {
      evictFrom ??= records.entries();
      for (let next = evictFrom.next(); next.done !== true; next = evictFrom.next()) {
        const [id, rec] = next.value;
        if (rec.state !== 'in_progress') {
          records.delete(id);
          for (const listener of evictionListeners) listener(id);
          return;
        }
      }
      evictFrom = undefined;
    }
    throw new Error(`memoryStore is full: all ${maxEntries} entries are running claims. Raise maxEntries.`);
  }

  function notify(id: string) {
    const set = listeners.get(id);
    if (set !== undefined) for (const listener of set) listener();
  }

  return {
    name: 'memory',
    get size() {
      sweep();
      return records.size;
    },

    async claim({ id, fingerprint, token, lockTtl, deadline }: ClaimInput): Promise<ClaimResult> {
      const time = now();
      const rec = live(id, time);
      if (rec !== undefined && !(rec.state === 'in_progress' && rec.token === token)) {
        if (rec.state === 'in_progress') return { state: 'in_progress', fingerprint: rec.fingerprint };
        return rec.fingerprint === fingerprint
          ? { state: rec.state, fingerprint: rec.fingerprint, body: rec.body }
          : { state: rec.state, fingerprint: rec.fingerprint };
      }
      // Absent, or this token's own live claim sent again: it is taken, unless the caller gave up.
      if (deadline !== undefined && time > deadline) return { state: 'late', time };
      if (rec === undefined) {
        makeRoom();
        records.set(id, { state: 'in_progress', fingerprint, token, body: undefined, expiresAt: time + lockTtl });
      } else {
        rec.expiresAt = time + lockTtl;
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
      if (rec === undefined) makeRoom();
      records.delete(id);
      // The claim's own record, updated rather than replaced: one object less for the GC to move.
      const done = rec ?? { state, fingerprint, token, body, expiresAt: t + ttl };
      done.state = state;
      done.fingerprint = fingerprint;
      done.body = body;
      done.expiresAt = t + ttl;
      records.set(id, done);
      expiring(t + ttl);
      if (clearSteps === true) stepsOf.delete(id);
      notify(id);
      return 'stored';
    },

    async saveStep({ id, token, fingerprint, index, name, body, ttl }: SaveStepInput): Promise<SaveStepResult> {
      const t = now();
      if (held(id, token, t) === undefined) return 'fenced';
      let recorded = stepsOf.get(id);
      if (recorded !== undefined && recorded.expiresAt <= t) {
        stepsOf.delete(id);
        recorded = undefined;
      }
      const count = recorded?.steps.length ?? 0;
      // Sent twice by its holder: the same name at the same place is already there.
      if (index < count) return recorded!.steps[index]!.name === name ? 'stored' : 'conflict';
      if (index > count) return 'conflict';
      if (recorded === undefined) {
        if (stepsOf.size >= maxEntries) {
          sweep();
          if (stepsOf.size >= maxEntries) {
            throw new Error(`memoryStore is full: ${maxEntries} records keep steps. Raise maxEntries.`);
          }
        }
        stepsOf.set(id, (recorded = { fingerprint, steps: [], expiresAt: 0 }));
      }
      recorded.fingerprint = fingerprint;
      recorded.steps.push({ name, body });
      recorded.expiresAt = t + ttl;
      expiring(recorded.expiresAt);
      return 'stored';
    },

    async release({ id, token }: FencedInput): Promise<boolean> {
      if (held(id, token, now()) === undefined) return false;
      records.delete(id);
      notify(id);
      return true;
    },

    async extend({ id, token, lockTtl }: ExtendInput): Promise<boolean> {
      const t = now();
      const rec = held(id, token, t);
      if (rec === undefined) return false;
      rec.expiresAt = t + lockTtl;
      expiring(rec.expiresAt);
      return true;
    },

    async onSettled(id: string, listener: () => void) {
      let set = listeners.get(id);
      if (set === undefined) listeners.set(id, (set = new Set()));
      set.add(listener);
      return () => {
        set.delete(listener);
        if (set.size === 0 && listeners.get(id) === set) listeners.delete(id);
      };
    },

    onEvicted(listener: (id: string) => void) {
      evictionListeners.add(listener);
      return () => void evictionListeners.delete(listener);
    },

    close() {
      clearInterval(timer);
    },
  };
}
