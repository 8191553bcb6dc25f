/**
 * Records set up straight through a store, as a holder would leave them, for tests of what reads
 * or deletes them (the operator's admin, the CLI, a store's own bookkeeping).
 */
import { expect } from 'vitest';
import type { IdempotencyStore } from '../../src/index.js';

export interface ClaimWithStepsOptions {
  /** The holder's token. @default 'a' */
  token?: string;
  /** The claim's lifetime, in ms. @default 10_000 */
  lockTtl?: number;
  /** How long the steps are kept, in ms. @default 60_000 */
  ttl?: number;
  /** The steps recorded, in order (indexes from 0); none: the claim alone. @default one step, `s`, body `1` */
  steps?: { name: string; body: string }[];
}

/**
 * Claims `id` (fingerprint `fp`) and records `steps` under that claim; fails the test unless the
 * claim was acquired and each step stored.
 */
export async function claimWithSteps(
  store: IdempotencyStore,
  id: string,
  { token = 'a', lockTtl = 10_000, ttl = 60_000, steps = [{ name: 's', body: '1' }] }: ClaimWithStepsOptions = {},
): Promise<void> {
  expect((await store.claim({ id, fingerprint: 'fp', token, lockTtl })).state, `the claim of ${id}`).toBe('acquired');
  if (steps.length > 0) expect(store.saveStep, `${store.name ?? 'the store'} records steps`).toBeDefined();
  for (const [index, { name, body }] of steps.entries()) {
    const saved = await store.saveStep!({ id, token, fingerprint: 'fp', index, name, body, ttl, lockTtl });
    expect(saved, `step ${index} (${name}) of ${id}`).toBe('stored');
  }
}
