import { IdempotencyConfigError } from '../../core/idempotency-error.js';
import { checkWholeNumber } from '../../core/options.js';
import { currentRun } from '../../core/protected-run.js';
import type { SaveStepResult } from '../../core/store.js';

// What the Drizzle stores (PostgreSQL, MySQL/MariaDB, SQLite) do alike, whatever their SQL.

/** The transaction of the procedure in transactional mode that this call runs in (`store.transactionOf()`). */
export function currentTransaction<T>(): T {
  const tx = currentRun.getStore()?.transaction;
  if (tx === undefined) {
    throw new IdempotencyConfigError(
      'transactionOf(ctx): this call does not run in transactional mode. Set `transaction: true` in the procedure meta (idempotency) or the options.',
    );
  }
  return tx as T;
}

export interface PurgeOptions {
  /**
   * Rows deleted per statement: small batches keep locks (and PostgreSQL's WAL bursts) short.
   * @default 1_000
   */
  batchSize?: number;
  /**
   * Stop after this many batches (for a job with a time budget).
   * @default Infinity
   */
  maxBatches?: number;
}

/**
 * `purgeExpired`: each of `statements` (expired rows, then expired steps) run
 * in batches until one deletes fewer than `batchSize` rows, or `maxBatches`
 * ran; `deleted` runs one batch and says how many rows it deleted.
 */
export async function purgeInBatches<S>(
  statements: readonly S[],
  deleted: (statement: S, batchSize: number) => Promise<number>,
  { batchSize = 1_000, maxBatches = Number.POSITIVE_INFINITY }: PurgeOptions = {},
): Promise<number> {
  checkWholeNumber(batchSize, 'batchSize', 'purgeExpired', { min: 1 });
  let total = 0;
  for (const statement of statements) {
    for (let batch = 0; batch < maxBatches; batch++) {
      const n = await deleted(statement, batchSize);
      total += n;
      if (n < batchSize) break;
    }
  }
  return total;
}

/**
 * What a save of step `index` answers after its write saved nothing, from what
 * a read found: whether the token holds the claim, how many live steps, the
 * name at `index`; undefined when the steps changed between the two (`index`
 * is their count): read again.
 */
export function refusedStep(
  held: boolean,
  count: number,
  atName: string | undefined,
  { index, name }: { index: number; name: string },
): SaveStepResult | undefined {
  if (!held) return 'fenced';
  if (index < count) return atName === name ? 'stored' : 'conflict';
  return index > count ? 'conflict' : undefined;
}
