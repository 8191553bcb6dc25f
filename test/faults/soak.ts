/**
 * `npm run soak`: the 2-minute soak. Two app processes on Redis, clients with
 * 20% duplicate keys, one process killed with SIGKILL and started again every
 * 20 s. It first finds the client concurrency with the highest throughput on
 * this machine (a few seconds each, no kills), then soaks at it and prints the
 * counts. Exits non-zero if anything ran twice, was lost or got stuck.
 *
 * SOAK_MS and KILL_EVERY_MS override the duration and the kill period.
 */
import { runSoak, type SoakReport } from './helpers/soak.js';

const durationMs = Number(process.env.SOAK_MS ?? 120_000);
const killEveryMs = Number(process.env.KILL_EVERY_MS ?? 20_000);
const lockTtl = 2_000;
const log = (line: string) => console.log(`  ${new Date().toISOString().slice(11, 19)} ${line}`);

let best = { concurrency: 8, rate: 0 };
for (const concurrency of [8, 16, 32, 64]) {
  const probe = await runSoak({ durationMs: 5_000, killEveryMs: 1e9, concurrency, lockTtl });
  console.log(`calibration: ${concurrency} clients -> ${probe.operationsPerSecond} operations/s, ${probe.requestsPerSecond} requests/s`);
  if (probe.operationsPerSecond > best.rate * 1.05) best = { concurrency, rate: probe.operationsPerSecond };
}
console.log(`soaking ${durationMs / 1000} s with ${best.concurrency} clients, a process killed every ${killEveryMs / 1000} s`);
const report: SoakReport = await runSoak({ durationMs, killEveryMs, concurrency: best.concurrency, lockTtl, log });

console.log(`
soak: ${(report.durationMs / 1000).toFixed(1)} s, 2 app processes, ${report.processKills} killed with SIGKILL and restarted, lockTtl ${report.lockTtl} ms
  clients                    ${report.concurrency}
  operations                 ${report.operations} (${report.operationsPerSecond}/s), of which duplicates ${report.duplicates}
  HTTP requests              ${report.requests} (${report.requestsPerSecond}/s) ${JSON.stringify(report.byStatus)}
  replayed answers           ${report.replayed}
  keys                       ${report.keys}
  executions                 ${report.executions}
  re-runs after a crash      ${report.reRunsAfterCrash} (the process running it was killed; its claim expired; by design)
  earliest such re-run       ${report.minReRunDelayMs ?? '-'} ms after the kill
  double executions          ${report.doubleExecutions}
  conflicting results        ${report.conflictingResults}
  lost completed outcomes    ${report.lostOutcomes}
  stuck keys                 ${report.stuckKeys}
  longest wait for a key     ${report.maxBlockedMs} ms
  alert events               ${JSON.stringify(report.events)}`);
for (const example of report.examples) console.log(`  ! ${example}`);
const failed = report.doubleExecutions + report.conflictingResults + report.lostOutcomes + report.stuckKeys > 0 || report.maxBlockedMs > lockTtl + 3_000;
console.log(failed ? 'SOAK FAILED' : 'soak passed');
process.exit(failed ? 1 : 0);
