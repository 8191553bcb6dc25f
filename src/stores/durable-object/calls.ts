/**
 * The calls the store sends a shard, and their answers: a POST to
 * `https://shard/<call>` with the input as JSON, answered as JSON. Plain
 * `fetch`, not Workers RPC: the object class needs no `cloudflare:workers`
 * import, and the store no RPC types.
 */
import type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  CompleteResult,
  ExtendInput,
  FencedInput,
  SaveStepInput,
  SaveStepResult,
} from '../../core/store.js';
import type { ForgetInput, InspectInput, ListInput, RecordInfo, RecordSummary } from '../../core/store-admin.js';

/** One shard's part of a listing: up to `limit` rows after `after`, in id order. */
export interface ShardListInput extends Omit<ListInput, 'cursor'> {
  after: string;
  limit: number;
}

export interface ShardListPage {
  records: RecordSummary[];
  examined: number;
  /** The rows read: fewer than `limit` once the shard has no more. */
  read: number;
  /** The id of the last row read (where the next page of this shard starts). */
  last?: string;
  time: number;
}

/** Each call's input and answer. */
export interface ShardCalls {
  claim: [ClaimInput, ClaimResult];
  complete: [CompleteInput, CompleteResult];
  release: [FencedInput, boolean];
  extend: [ExtendInput, boolean];
  saveStep: [SaveStepInput, SaveStepResult];
  inspect: [InspectInput, RecordInfo];
  list: [ShardListInput, ShardListPage];
  forget: [ForgetInput, boolean];
  /** The rows the shard keeps, expired ones not swept yet included. */
  rows: [Record<string, never>, number];
}

export type ShardCall = keyof ShardCalls;

export const SHARD_CALLS: readonly ShardCall[] = [
  'claim',
  'complete',
  'release',
  'extend',
  'saveStep',
  'inspect',
  'list',
  'forget',
  'rows',
];
