import { claimedBefore, forgetVerdict, inspect, summary } from '../../core/protocol/reads.js';
import type { StoredRecord, StoredSteps } from '../../core/protocol/record.js';
import { nameOfRecordId } from '../../core/record-id.js';
import type {
  ForgetInput,
  InspectInput,
  ListInput,
  ListPage,
  RecordInfo,
  RecordSummary,
  StoreAdmin,
} from '../../core/store-admin.js';

/** The memory store's internals its admin needs: live reads (which drop what expired) and deletes. */
export interface MemoryInternals<R extends StoredRecord<unknown>> {
  now(): number;
  records: ReadonlyMap<string, R>;
  live(id: string, t: number): R | undefined;
  liveSteps(id: string, t: number): StoredSteps | undefined;
  drop(id: string, rec: R): void;
  dropSteps(id: string): void;
  waiting(id: string): boolean;
  notify(id: string): void;
}

const DEFAULT_LIMIT = 1_000;

/** The memory store's {@link StoreAdmin}: pages of ids in sorted order, the cursor being the last id read. */
export function memoryAdmin<R extends StoredRecord<unknown>>(internals: MemoryInternals<R>): StoreAdmin {
  const { now, records, live, liveSteps, drop, dropSteps, waiting, notify } = internals;

  return {
    async inspect(input: InspectInput): Promise<RecordInfo> {
      const time = now();
      return inspect(live(input.id, time), liveSteps(input.id, time), input, time, waiting);
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
        if (!claimedBefore(rec, olderThan, time)) continue;
        found.push(summary(id, rec, waiting));
      }
      const result: ListPage = { records: found, examined, time };
      if (ids.length > page.length) result.cursor = page[page.length - 1]!;
      return result;
    },

    async forget(input: ForgetInput): Promise<boolean> {
      const { id, steps = false } = input;
      const time = now();
      const rec = live(id, time);
      const verdict = forgetVerdict(rec, input, time);
      if (verdict === 'keep') return false;
      let deleted = false;
      if (verdict === 'delete') {
        drop(id, rec!);
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
