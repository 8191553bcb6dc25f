import { IdempotencyConfigError } from '../core/errors.js';
import type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  RecordState,
} from '../core/store.js';

export interface MemoryStoreOptions {
  /**
   * The most records kept. When full, expired records go first, then the
   * oldest finished ones. Live claims are never evicted (that would let a
   * duplicate run): a store full of them refuses new claims, which the engine
   * treats as a store failure.
   * @default 10_000
   */
  maxEntries?: number;
  /**
   * How often expired records are swept, in milliseconds (they are also
   * ignored the moment they expire).
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
  // Insertion order is age order: a record is re-inserted when it completes.
  const records = new Map<string, MemoryRecord>();
  const listeners = new Map<string, Set<() => void>>();

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

    async claim({ id, fingerprint, token, lockTtl }: ClaimInput): Promise<ClaimResult> {
      const t = now();
      const rec = live(id, t);
      if (rec === undefined) {
        makeRoom();
        records.set(id, { state: 'in_progress', fingerprint, token, body: undefined, expiresAt: t + lockTtl });
        expiring(t + lockTtl);
        return { state: 'acquired' };
      }
      if (rec.state === 'in_progress') return { state: 'in_progress', fingerprint: rec.fingerprint };
      return rec.fingerprint === fingerprint
        ? { state: rec.state, fingerprint: rec.fingerprint, body: rec.body }
        : { state: rec.state, fingerprint: rec.fingerprint };
    },

    async complete({ id, fingerprint, token, state, body, ttl }: CompleteInput): Promise<boolean> {
      const t = now();
      const rec = live(id, t);
      // Held by this token, or absent (expired, evicted): no one else holds or ran it.
      if (rec !== undefined && rec.token !== token) return false;
      // Already stored by this very claim: a completion sent twice.
      if (rec !== undefined && rec.state !== 'in_progress') return true;
      if (rec === undefined) makeRoom();
      records.delete(id);
      records.set(id, { state, fingerprint, token, body, expiresAt: t + ttl });
      expiring(t + ttl);
      notify(id);
      return true;
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

    close() {
      clearInterval(timer);
    },
  };
}
