import { nameOfRecordId } from '../core/key.js';
import type { RecordedStep, RecordState } from '../core/store.js';
import type {
  ForgetInput,
  InspectInput,
  ListInput,
  ListPage,
  RecordInfo,
  RecordSummary,
  StoreAdmin,
} from '../core/store-admin.js';
import { EXPIRY_ROUNDING } from '../core/store-admin.js';

/** What the memory store keeps of a record that its admin reads. */
export interface AdminView {
  state: RecordState;
  fingerprint: string;
  token: string | undefined;
  body: string | undefined;
  expiresAt: number;
  /** When the claim that holds (or finished) the record took it. */
  claimedAt: number;
  /** While in progress: the lease of the claim or its last renewal. */
  lockTtl: number | undefined;
}

/** The memory store's internals its admin needs: live reads (which drop what expired) and deletes. */
export interface MemoryInternals<R extends AdminView> {
  now(): number;
  records: ReadonlyMap<string, R>;
  live(id: string, t: number): R | undefined;
  liveSteps(id: string, t: number): { steps: RecordedStep[]; expiresAt: number } | undefined;
  drop(id: string, rec: R): void;
  dropSteps(id: string): void;
  waiting(id: string): boolean;
  notify(id: string): void;
}

const DEFAULT_LIMIT = 1_000;

/** The memory store's {@link StoreAdmin}: pages of ids in sorted order, the cursor being the last id read. */
export function memoryAdmin<R extends AdminView>(internals: MemoryInternals<R>): StoreAdmin {
  const { now, records, live, liveSteps, drop, dropSteps, waiting, notify } = internals;

  function summary(id: string, rec: R): RecordSummary {
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
      out.bytes = Buffer.byteLength(rec.body ?? '');
    }
    return out;
  }

  return {
    async inspect({ id, body = false }: InspectInput): Promise<RecordInfo> {
      const time = now();
      const rec = live(id, time);
      const recorded = liveSteps(id, time);
      const info: RecordInfo =
        rec === undefined ? { id, state: 'absent', time, steps: [] } : { ...summary(id, rec), time, steps: [] };
      if (body && rec !== undefined && rec.state !== 'in_progress') info.body = rec.body ?? '';
      if (recorded !== undefined) {
        info.steps = recorded.steps.map((step) => ({ name: step.name, bytes: Buffer.byteLength(step.body) }));
        info.stepsExpireAt = recorded.expiresAt;
      }
      return info;
    },

    async list({ state, name, olderThan, cursor, limit = DEFAULT_LIMIT }: ListInput): Promise<ListPage> {
      const time = now();
      const ids = [...records.keys()].filter((id) => cursor === undefined || id > cursor).sort();
      const page = ids.slice(0, limit);
      const found: RecordSummary[] = [];
      let examined = 0;
      for (const id of page) {
        const rec = live(id, time);
        if (rec === undefined) continue;
        if (state !== undefined && rec.state !== state) continue;
        if (name !== undefined && nameOfRecordId(id) !== name) continue;
        examined++;
        if (olderThan !== undefined && rec.claimedAt > time - olderThan) continue;
        found.push(summary(id, rec));
      }
      const result: ListPage = { records: found, examined, time };
      if (ids.length > page.length) result.cursor = page[page.length - 1]!;
      return result;
    },

    async forget({ id, state, token, steps = false, expiresAt }: ForgetInput): Promise<boolean> {
      const time = now();
      const rec = live(id, time);
      let deleted = false;
      if (state === 'absent') {
        if (rec !== undefined) return false;
      } else {
        if (rec === undefined || rec.state !== state || rec.token !== token) return false;
        if (expiresAt !== undefined && rec.expiresAt > expiresAt + EXPIRY_ROUNDING) return false;
        drop(id, rec);
        deleted = true;
      }
      if (steps && liveSteps(id, time) !== undefined) {
        dropSteps(id);
        deleted = true;
      }
      if (deleted) notify(id);
      return deleted;
    },
  };
}
