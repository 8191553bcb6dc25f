/**
 * `npm run soak`: the 2-minute soak. Two app processes on Redis, clients with
 * 20% duplicate keys (30% of keys charged in two recovery points, `payInSteps`,
 * the others by `pay`), one process killed with SIGKILL and started again every
 * 20 s, and the store's Redis restarted twice (SIGKILL, then started again on
 * the same port, without persistence: it comes back empty; the first at once,
 * the second after 1.5 s down, longer than the 1 s store timeout, so that
 * claims wait in ioredis's offline queue past their request's 503 and reach
 * the new server late) and paused twice (SIGSTOP for 1.5 s, shorter than
 * lockTtl, then SIGCONT), between the kills.
 * It first finds the client concurrency with the highest throughput on this
 * machine (a few seconds each, no faults), then soaks at it and prints the
 * counts. Exits non-zero if anything ran twice without a crash or an empty
 * restart to explain it (a step whose result was recorded, included), was
 * lost, or got stuck.
 *
 * env:
 *   SOAK_MS           duration (default 120000)
 *   KILL_EVERY_MS     an app process is killed at every multiple of it (default 20000)
 *   REDIS_RESTART_AT  Redis restarts, comma-separated ms from the start of the load
 *                     (default 25% and 58% of SOAK_MS: 30 s and 70 s; empty: none)
 *   REDIS_DOWN_MS     how long Redis stays down at each restart, comma-separated, in
 *                     the order of the restarts, the last one repeating (default 0,1500)
 *   REDIS_PAUSE_AT    Redis pauses, the same way (default 42% and 75%: 50 s and 90 s)
 *   REDIS_PAUSE_MS    length of a pause (default 1500; must be below lockTtl, 2000)
 *   REDIS_PERSIST=1   Redis with `appendfsync always`: a restart must lose nothing
 *   REDIS_FENCE=0     the store without its restart fence (default on: a key in flight at an
 *                     empty restart must not run again; outcomes stored before it are still lost)
 */
import { runSoak, type SoakReport } from './helpers/soak.js';

const durationMs = Number(process.env.SOAK_MS ?? 120_000);
const killEveryMs = Number(process.env.KILL_EVERY_MS ?? 20_000);
const lockTtl = 2_000;
/** Comma-separated ms from the env, or `fallback`. */
function list(name: string, fallback: number[]): number[] {
  const value = process.env[name];
  if (value === undefined) return fallback;
  const values = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map(Number);
  for (const v of values) if (!Number.isFinite(v) || v < 0) throw new Error(`${name}: ${v} is not a time in ms`);
  return values;
}
/** Fractions of the duration, rounded to the second. */
const at = (...fractions: number[]) => fractions.map((f) => Math.round((f * durationMs) / 1000) * 1000);
const redisRestartsAt = list('REDIS_RESTART_AT', at(0.25, 0.58));
const redisDownMs = list('REDIS_DOWN_MS', [0, 1_500]);
const redisPausesAt = list('REDIS_PAUSE_AT', at(0.42, 0.75));
const redisPauseMs = Number(process.env.REDIS_PAUSE_MS ?? 1_500);
const redisPersist = process.env.REDIS_PERSIST === '1';
const restartFence = process.env.REDIS_FENCE !== '0';
const log = (line: string) => console.log(`  ${new Date().toISOString().slice(11, 19)} ${line}`);
const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

if (redisPausesAt.length > 0 && !(redisPauseMs < lockTtl))
  throw new Error(`REDIS_PAUSE_MS (${redisPauseMs}) must be below lockTtl (${lockTtl})`);
for (const t of [...redisRestartsAt, ...redisPausesAt]) {
  if (t >= durationMs) console.log(`note: a Redis fault at ${s(t)} is past the end of the soak and will not happen`);
  const kill = Math.round(t / killEveryMs) * killEveryMs;
  if (kill > 0 && kill < durationMs && Math.abs(kill - t) < 3_000)
    console.log(`note: the Redis fault at ${s(t)} is within 3 s of the app kill at ${s(kill)}`);
}

let best = { concurrency: 8, rate: 0 };
for (const concurrency of [8, 16, 32, 64]) {
  const probe = await runSoak({ durationMs: 5_000, killEveryMs: 1e9, concurrency, lockTtl });
  console.log(
    `calibration: ${concurrency} clients -> ${probe.operationsPerSecond} operations/s, ${probe.requestsPerSecond} requests/s`,
  );
  if (probe.operationsPerSecond > best.rate * 1.05) best = { concurrency, rate: probe.operationsPerSecond };
}
console.log(
  `soaking ${s(durationMs)} with ${best.concurrency} clients, a process killed every ${s(killEveryMs)}, ` +
    `Redis (${redisPersist ? 'appendfsync always' : 'no persistence'}) restarted at ${redisRestartsAt.map(s).join(', ') || 'never'} (down ${redisDownMs.join(', ')} ms), ` +
    `paused ${redisPauseMs} ms at ${redisPausesAt.map(s).join(', ') || 'never'}`,
);
const report: SoakReport = await runSoak({
  durationMs,
  killEveryMs,
  concurrency: best.concurrency,
  lockTtl,
  redisRestartsAt,
  redisDownMs,
  redisPausesAt,
  redisPauseMs,
  redisPersist,
  restartFence,
  log,
});

const lines: string[] = [
  `soak: ${(report.durationMs / 1000).toFixed(1)} s, 2 app processes, ${report.processKills} killed with SIGKILL and restarted, lockTtl ${report.lockTtl} ms`,
  `  store's Redis              ${report.redisPersist ? 'with persistence (appendfsync always): a restart must lose nothing' : 'without persistence: a restart comes back empty'}, restart fence ${report.restartFence ? 'on' : 'off'}; ` +
    `restarted ${report.redisRestarts.length}× (SIGKILL, then started on the same port), paused ${report.redisPauses.length}× (SIGSTOP ${redisPauseMs} ms, then SIGCONT)`,
];
const faultLines: [number, string][] = [];
for (const r of report.redisRestarts) {
  faultLines.push([
    r.killedAt,
    `  Redis restart at +${s(r.killedAt)}  kept down ${r.downMs} ms, answered PING again ${r.upAt - r.killedAt} ms after the SIGKILL, ` +
      `app processes reconnected ${r.podsReadyAt === undefined ? '(not seen)' : `${r.podsReadyAt - r.killedAt} ms after it`}; ` +
      `records ${r.recordsBefore} before, ${r.recordsAfter} after; answers to the requests in flight ${JSON.stringify(r.answers)}`,
  ]);
}
for (const p of report.redisPauses) {
  const inFlight = Object.values(p.answers).reduce((a, b) => a + b, 0);
  faultLines.push([
    p.pausedAt,
    `  Redis pause at +${s(p.pausedAt)}    ${p.resumedAt - p.pausedAt} ms; requests in flight during it: ${inFlight}, ` +
      `of which refused with 503 (store timeout): ${p.refused503} ${JSON.stringify(p.answers)}`,
  ]);
}
lines.push(...faultLines.sort((x, y) => x[0] - y[0]).map(([, line]) => line));
const after =
  report.lastRestartSettledAt === undefined
    ? 'no Redis restart'
    : `the last Redis restart settled (PONG) at +${s(report.lastRestartSettledAt)}`;
lines.push(
  `  clients                    ${report.concurrency}`,
  `  operations                 ${report.operations} (${report.operationsPerSecond}/s), of which duplicates ${report.duplicates}`,
  `  HTTP requests              ${report.requests} (${report.requestsPerSecond}/s) ${JSON.stringify(report.byStatus)}`,
  `  refusals, by status and reason ${JSON.stringify(report.refusals)}`,
  `  replayed answers           ${report.replayed}`,
  `  keys                       ${report.keys}: ${report.keysAfterLastRestart} created after ${after}, ${report.keysBeforeLastRestart} before`,
  `  executions                 ${report.executions}`,
  `  re-runs after a crash      ${report.reRunsAfterCrash} (the process running it was killed; its claim expired; by design)`,
  `  re-runs after an unrecorded step ${report.reRunsAfterUnrecordedStep} (payInSteps: the earlier run stopped at a step it could not record; the retry resumed; by design)`,
  `  earliest such re-run       ${report.minReRunDelayMs ?? '-'} ms after the kill`,
);
if (report.redisPersist) {
  lines.push(
    `  outcomes lost by the Redis restarts (persistence): none is excused; a loss would show below as a double execution or a lost outcome`,
  );
} else {
  const { wipedClaims, wipedOutcomes } = report.reRunsAfterRedisRestart;
  lines.push(
    `  re-runs caused by the empty Redis restarts: ${wipedClaims + wipedOutcomes} (claim in flight wiped: ${wipedClaims}${report.restartFence ? ', must be 0 with the restart fence' : ''}, stored outcome wiped: ${wipedOutcomes})`,
    `  outcomes lost by the Redis restart (no persistence): ${report.outcomesLostByRestart} — their retries ran again, as expected without persistence`,
    `  conflicting results caused by it: ${report.conflictingResultsByRestart} keys whose clients saw two different results, as expected without persistence`,
    `  outcomes no longer stored at the end: ${report.outcomesWipedAtEnd} (stored only before a restart wiped them; a retry now would run again)`,
  );
}
const st = report.steps;
lines.push(
  `  payInSteps (2 steps)       ${st.keys} keys, ${st.runs} step runs, ${st.resumed} steps resumed from the store by a retry (not run again)`,
  `  step re-runs               ${st.reRuns.total}: SIGKILL inside the step's work ${st.reRuns.killedInStep}, ` +
    `SIGKILL while its result was recorded ${st.reRuns.killedWhileRecording}, result not recorded (store error, 500 step_unrecorded) ${st.reRuns.unrecorded}, ` +
    `steps wiped by an empty Redis restart ${st.reRuns.byRedisRestart}`,
  `  completed steps run again, not explained by one of those: ${st.reRuns.unexplained}`,
  `  double executions of keys created after the last Redis restart: ${report.doubleExecutionsAfterLastRestart}`,
  `  double executions of any key, not explained by a crash or an empty restart: ${report.doubleExecutions}`,
  `  conflicting results        ${report.conflictingResults} not explained (of keys created after the last restart: ${report.conflictingResultsAfterLastRestart})`,
  `  lost completed outcomes    ${report.lostOutcomes} not explained (of keys created after the last restart: ${report.lostOutcomesAfterLastRestart})`,
  `  stuck keys                 ${report.stuckKeys}`,
  `  longest wait for a key     ${report.maxBlockedMs} ms`,
  `  alert events               ${JSON.stringify(report.events)}`,
);
console.log(`\n${lines.join('\n')}`);
for (const example of report.examples) console.log(`  ! ${example}`);
for (const note of report.notes) console.log(`  (for illustration) ${note}`);
const failed =
  report.doubleExecutions +
    report.conflictingResults +
    report.lostOutcomes +
    report.stuckKeys +
    report.steps.reRuns.unexplained +
    (report.restartFence ? report.reRunsAfterRedisRestart.wipedClaims : 0) >
    0 || report.maxBlockedMs > Math.max(0, ...redisDownMs) + lockTtl + 3_000;
console.log(failed ? 'SOAK FAILED' : 'soak passed');
process.exit(failed ? 1 : 0);
