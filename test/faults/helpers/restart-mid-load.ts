/**
 * A SQL server restarted twice under load, a clean stop then a crash, and the
 * app's answers checked: the store recovers without restarting the app, and
 * nothing runs twice or is lost unless a completion failed and said so (an
 * event). Shared by the PostgreSQL and MariaDB restart tests.
 *
 * Each step waits for the load to show where it is (successes since the
 * server came back), not for a fixed time; only the outage itself is a
 * duration: longer than the store timeout, so that requests meet it.
 */
import { expect } from 'vitest';
import { hashRecordId } from '../../../src/core/events.js';
import { recordId } from '../../../src/core.js';
import type { PayApp } from '../../fixtures/pay-app.js';
import { sleep } from '../../helpers/redis.js';
import { conflictingResults, lostOutcomes, runLoad } from './load.js';

/** Operations that succeed after each restart before the next step: the app serves again. */
const SERVED = 50;
/** How long the server stays down: over the app's store timeout (1 s). */
const DOWN_MS = 1_200;

export interface RestartableServer {
  stop(kind: 'clean' | 'crash'): Promise<void>;
  start(): Promise<void>;
}

export async function restartTwiceUnderLoad(label: string, server: RestartableServer, app: PayApp): Promise<void> {
  const marks: Record<string, number> = {};
  let successes = 0;
  let stop = false;
  const load = runLoad({
    targets: () => [app.url],
    durationMs: 60_000,
    concurrency: 8,
    holdMs: () => 5,
    stop: () => stop,
    onAttempt: (attempt) => {
      if (attempt.status === 200) successes++;
    },
  });
  /** Until `n` more operations have succeeded. */
  const served = async (n: number) => {
    const from = successes;
    await expect.poll(() => successes - from, { timeout: 30_000, interval: 20 }).toBeGreaterThanOrEqual(n);
  };
  await served(SERVED);
  await server.stop('clean');
  marks.down1 = Date.now();
  await sleep(DOWN_MS);
  await server.start();
  marks.up1 = Date.now();
  await served(SERVED);
  await server.stop('crash');
  marks.down2 = Date.now();
  await sleep(DOWN_MS);
  await server.start();
  marks.up2 = Date.now();
  await served(SERVED);
  stop = true;
  const result = await load;

  const records = [...result.keys.values()];
  // the outages were felt: requests were refused with 503 while the server was away
  expect(result.byStatus[503] ?? 0).toBeGreaterThan(0);
  // and the app served again without a restart: operations begun after each restart succeeded
  expect(
    records.filter((r) => r.firstSentAt > marks.up1! && r.firstSentAt < marks.down2! && r.succeededAt !== undefined)
      .length,
  ).toBeGreaterThan(10);
  expect(records.filter((r) => r.firstSentAt > marks.up2! && r.succeededAt !== undefined).length).toBeGreaterThan(10);
  expect(records.filter((r) => r.failed !== undefined)).toEqual([]);

  // A second execution or a lost outcome is only possible for a key whose
  // completion failed (the server went away between the procedure and its
  // completion), and the engine reports each such failure as an event.
  const failedCompletions = new Set(
    app.events.filter((e) => e.result === 'store_error' && e.operation === 'complete').map((e) => e.keyHash),
  );
  const explained = (key: string) => failedCompletions.has(hashRecordId(recordId(undefined, 'pay', key)));
  const runsPerKey = new Map<string, number>();
  for (const e of app.executions) runsPerKey.set(e.key, (runsPerKey.get(e.key) ?? 0) + 1);
  const doubles = [...runsPerKey].filter(([, n]) => n > 1).map(([key]) => key);
  const conflicting = conflictingResults(result).map((r) => r.key);
  const lost = await lostOutcomes(result, () => app.url);
  expect(doubles.filter((key) => !explained(key))).toEqual([]);
  expect(conflicting.filter((key) => !explained(key))).toEqual([]);
  expect(lost.filter(({ key }) => !explained(key))).toEqual([]);

  const maxBlocked = Math.max(0, ...records.map((r) => r.blockedMs));
  console.info(
    `[${label}] ${result.operations} operations (${result.duplicates} duplicates), ${result.requests} requests ` +
      `${JSON.stringify(result.byStatus)}, ${records.length} keys, ${app.executions.length} executions, ` +
      `${failedCompletions.size} failed completions, ${doubles.length} double executions, ${lost.length} lost outcomes, ` +
      `longest wait ${maxBlocked} ms`,
  );
  const storeErrors: Record<string, number> = {};
  for (const e of app.events)
    if (e.result === 'store_error')
      storeErrors[`${e.operation}: ${e.error?.message}`] =
        (storeErrors[`${e.operation}: ${e.error?.message}`] ?? 0) + 1;
  console.info(`[${label}] store errors`, storeErrors);
}
