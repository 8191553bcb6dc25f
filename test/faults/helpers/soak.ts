import { Redis } from 'ioredis';
import { fingerprint, recordId } from '../../../src/core.js';
import { redisStore } from '../../../src/redis.js';
import { amountOf } from '../../fixtures/pay-app.js';
import { type Pod, startPod } from '../../helpers/pods.js';
import { type ControlledRedis, startControlledRedis } from '../../helpers/redis-process.js';
import { startPrivateRedis } from '../../helpers/redis-server.js';
import { type Attempt, type KeyRecord, type LoadResult, runLoad } from './load.js';

export interface SoakOptions {
  durationMs: number;
  /** One app process is killed (SIGKILL) and started again every `killEveryMs` (at killEveryMs, 2 × killEveryMs, …). */
  killEveryMs: number;
  /** Clients sending at once. */
  concurrency: number;
  /** @default 2_000 */
  lockTtl?: number;
  /** @default 0.2 */
  duplicateRatio?: number;
  /**
   * The store's Redis is restarted (SIGKILL, then started again on the same
   * port) at these times, in ms from the start of the load.
   * @default []
   */
  redisRestartsAt?: number[];
  /**
   * How long the store's Redis stays down at a restart, between the SIGKILL
   * and starting it again: longer than the engine's storeTimeout (1 s), the
   * claims sent meanwhile wait in ioredis's offline queue past their
   * request's 503 and reach the new server late. One value for every
   * restart, or one per restart in order (the last one repeats).
   * @default 0 (started again at once)
   */
  redisDownMs?: number | number[];
  /** The store's Redis is paused (SIGSTOP, then SIGCONT `redisPauseMs` later) at these times, in ms from the start of the load. @default [] */
  redisPausesAt?: number[];
  /** How long each pause lasts; must be shorter than lockTtl. @default 1_500 */
  redisPauseMs?: number;
  /**
   * The store's Redis writes every command to its append-only file before
   * answering (`appendfsync always`): a restart must then lose nothing, and
   * nothing is excused by it. Without it (the default, as in many
   * deployments) a restart comes back empty.
   * @default false
   */
  redisPersist?: boolean;
  /**
   * The store's `restartFence` is on (its markers written once before the
   * load): a re-run of a key whose claim an empty restart wiped (`wipedClaims`)
   * is then a double execution the fence should have prevented, and must be 0.
   * @default false
   */
  restartFence?: boolean;
  /**
   * The share of keys sent to `payInSteps` (the charge in two recovery points,
   * see test/fixtures/pay-app.ts) rather than to `pay`, chosen by a hash of the key.
   * @default 0.3
   */
  stepsShare?: number;
  /** Progress lines. */
  log?: (line: string) => void;
}

/**
 * What the soak counted of `payInSteps`' steps. A step *re-run* is a run of a
 * step's work for a key whose work had already started for that key; each is
 * compared with the run before it:
 * - `byRedisRestart`: the later run holds its claim in a later Redis server
 *   process (without persistence only): the restart wiped the recorded steps;
 * - `killedInStep`: the process running the earlier one was killed before the
 *   later one started, inside the step's work (before it ended): by design,
 *   the step runs again, and the `stepKey` it sends downstream lets the
 *   downstream service deduplicate it;
 * - `killedWhileRecording`: killed after the step's work ended, before
 *   `step()` returned (its result was being recorded), as above;
 * - `unrecorded`: the earlier run's result could not be recorded (a store
 *   error on `save_step`, or its claim was lost): a 500 `step_unrecorded`
 *   released the key, and the retry ran the step again, as documented;
 * - `unexplained`: anything else, such as a step whose `step()` had returned
 *   (its result recorded) and that ran again: must be 0.
 * The pod logs that `step()` returned with a round trip after it did: a kill
 * in between would count a recorded step as killed while recording.
 */
export interface StepsReport {
  /** Keys sent to `payInSteps`. */
  keys: number;
  /** Runs of a step's work. */
  runs: number;
  /** Steps a retry got back from the store instead of running them again. */
  resumed: number;
  reRuns: {
    total: number;
    byRedisRestart: number;
    killedInStep: number;
    killedWhileRecording: number;
    unrecorded: number;
    unexplained: number;
  };
}

/** A restart of the store's Redis. Times are ms from the start of the load. */
export interface RedisRestartReport {
  /** When SIGKILL was sent. */
  killedAt: number;
  /** How long it was kept down before it was started again (`redisDownMs`). */
  downMs: number;
  /** When the new redis-server answered PING: the restart has settled (see {@link SoakReport.lastRestartSettledAt}). */
  upAt: number;
  /** Records (claims and outcomes) in the store just before the SIGKILL (DBSIZE). */
  recordsBefore: number;
  /** Records in the store when it answered PING again: 0 without persistence (unless an app process wrote already). */
  recordsAfter: number;
  /** When every app process live at the SIGKILL had its store connection ready again (undefined: one never was, e.g. it was killed). */
  podsReadyAt: number | undefined;
  /** Answers to the requests in flight at some moment between the SIGKILL and `podsReadyAt` (or `upAt`), by HTTP status (0: network failure). */
  answers: Record<string, number>;
}

/** A pause of the store's Redis. Times are ms from the start of the load. */
export interface RedisPauseReport {
  /** When SIGSTOP was sent. */
  pausedAt: number;
  /** When SIGCONT was sent. */
  resumedAt: number;
  /** Answers to the requests in flight at some moment of the pause (sent before SIGCONT, answered after SIGSTOP), by HTTP status. */
  answers: Record<string, number>;
  /** Of those, the ones refused with 503: the store did not answer within storeTimeout. */
  refused503: number;
}

/**
 * What the soak counted.
 *
 * Keys are classified by when they were created (first sent) relative to the
 * last restart of the store's Redis. The restart has *settled* at `upAt`: the
 * moment the harness's probe got PONG from the new redis-server (after it
 * loaded its append-only file, with persistence). A key first sent at or
 * after that moment is "after the last restart"; the app processes may still
 * be reconnecting then (ioredis backoff, commands held in its offline queue),
 * which is part of what is tested (the probe polls every 50 ms from the busy
 * harness process, so it may see PONG a little after they reconnected: the
 * split then errs towards "before", and every key is held to the rules below
 * anyway). Without any Redis restart, every key is
 * "after". Keys first sent before `upAt` (in flight or stored at the SIGKILL,
 * or sent while Redis was down) are "before".
 *
 * Runs of a key are compared in pairs (each run with the next one):
 * - a re-run caused by the empty restart (without persistence only): the
 *   later run holds its claim in a later Redis server process than the earlier
 *   run held its own, so the earlier claim (`wipedClaims`) or its stored
 *   outcome (`wipedOutcomes`, when the earlier run's `completed` event came
 *   from that older server process) was wiped by a restart. Each pod logs,
 *   with every run and event, when its store connection last became ready,
 *   which names the server process that answered the claim or the completion;
 * - a re-run after a crash: the app process running the earlier run was
 *   killed before the later one started (its claim expired: by design), and
 *   the earlier run had not stored its outcome where the later one claimed
 *   (a stored outcome does not die with its process);
 * - a re-run after an unrecorded step (`payInSteps` keys only): the earlier
 *   run stopped at a step whose result it could not record, and stored no
 *   outcome. That run logged why: the store failed to record it (`save_step`,
 *   a 500 `step_unrecorded` that releases the key), or the claim was lost
 *   (`lease_lost`, an `in_progress` error), or the release that follows
 *   either (`released`, or a failed `release` that leaves the claim to
 *   expire). The later run resumes after the recorded steps, by design;
 *   {@link StepsReport} checks that no recorded step runs again;
 * - anything else is a double execution, for any key. Nothing is excused by a
 *   pause: it is shorter than lockTtl. Redis expires keys by their absolute
 *   expiry time, so a SIGSTOP does not stop a TTL: after SIGCONT, a key whose
 *   TTL ran out during the pause is expired as soon as anything touches it.
 *   A claim can therefore only expire in a pause if it was taken more than
 *   lockTtl − pause before the pause and not renewed since; the soak's
 *   operations run 5–20 ms, so no live claim is that old. (An operation that
 *   runs for long renews every lockTtl / 3, so its claim may have as little as
 *   2/3 lockTtl left: a pause longer than that could expire it. Not tested here.)
 *
 * With persistence, nothing is excused by a restart either.
 */
export interface SoakReport {
  durationMs: number;
  concurrency: number;
  lockTtl: number;
  processKills: number;
  operations: number;
  duplicates: number;
  requests: number;
  requestsPerSecond: number;
  operationsPerSecond: number;
  byStatus: Record<string, number>;
  /** Answers other than 200, by status and reason: see {@link LoadResult.refusals}. */
  refusals: Record<string, number>;
  replayed: number;
  keys: number;
  executions: number;
  /** Whether the store's Redis had persistence (`appendfsync always`). */
  redisPersist: boolean;
  /** Whether the store's restart fence was on. */
  restartFence: boolean;
  redisRestarts: RedisRestartReport[];
  redisPauses: RedisPauseReport[];
  /** `upAt` of the last Redis restart, ms from the start of the load (undefined: no restart). */
  lastRestartSettledAt: number | undefined;
  /** Keys first sent at or after the last Redis restart settled (all keys without a restart). */
  keysAfterLastRestart: number;
  /** Keys first sent before the last Redis restart settled. */
  keysBeforeLastRestart: number;
  /** Runs of a key after the process running it was killed before storing its outcome: the claim expired and the retry ran (by design). */
  reRunsAfterCrash: number;
  /** The shortest time from a process's death to a re-run of a key it was running (its claim had to expire first). */
  minReRunDelayMs: number | undefined;
  /** Runs of a key whose claim (`wipedClaims`) or stored outcome (`wipedOutcomes`) an empty Redis restart wiped (without persistence only). */
  reRunsAfterRedisRestart: { wipedClaims: number; wipedOutcomes: number };
  /** Keys whose stored outcome existed before a Redis restart and was gone after it, so that a retry ran them again (without persistence only). */
  outcomesLostByRestart: number;
  /** Runs of a key while an earlier run of it was alive or had finished, not explained by a crash or an empty restart, for any key: must be 0. */
  doubleExecutions: number;
  /** Of those, runs of keys created after the last Redis restart settled: must be 0. */
  doubleExecutionsAfterLastRestart: number;
  /** Keys whose clients received two different results, not explained by an empty restart: must be 0. */
  conflictingResults: number;
  /** Of those, keys created after the last Redis restart settled: must be 0. */
  conflictingResultsAfterLastRestart: number;
  /** Keys whose clients received two different results because an empty restart made a retry run again (without persistence only). */
  conflictingResultsByRestart: number;
  /** Keys a client got a result for whose record is not that result, not explained by an empty restart: must be 0. */
  lostOutcomes: number;
  /** Of those, keys created after the last Redis restart settled: must be 0. */
  lostOutcomesAfterLastRestart: number;
  /**
   * Keys created before the last restart settled whose outcome is not stored at the end because it was only
   * ever stored in a Redis server process an empty restart wiped, or was replaced by a re-run the restart
   * caused (without persistence only).
   */
  outcomesWipedAtEnd: number;
  /** Keys that never succeeded (or got an unexpected answer): must be 0. */
  stuckKeys: number;
  /** The longest a client waited from its first refusal to its result. */
  maxBlockedMs: number;
  /** Alert-worthy events printed by the app processes. */
  events: Record<string, number>;
  /** A few examples of whatever went wrong, with the key's timeline, for the log. */
  examples: string[];
  /** A few examples of what an empty restart did (excused), with the key's timeline. */
  notes: string[];
  /** Runs of a `payInSteps` key after the earlier run stopped at a step it could not record (see above), by design. */
  reRunsAfterUnrecordedStep: number;
  /** The steps of `payInSteps`: see {@link StepsReport}. */
  steps: StepsReport;
}

const PREFIX = 'soak:';
const LOG_KEY = `${PREFIX}log`;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A command on a connection of its own, so that a restart or a pause of that Redis never leaves it half-connected. */
async function once<T>(url: string, command: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, retryStrategy: () => null });
  redis.on('error', () => {});
  try {
    return await command(redis);
  } finally {
    redis.disconnect();
  }
}

interface Run {
  pod: string;
  /** The HTTP request of `pod` the line came from (numbered per app process): a run and its own events share it. */
  request: string;
  at: number;
  /** Index of the store's redis-server process that held the claim. */
  server: number;
}

interface PodEvent extends Run {
  result: string;
  detail: string;
}

/** A line of a step of `payInSteps`: `step` (its work starts), `stepend` (its work ended), `stepok` (step() returned). */
interface StepLine extends Run {
  kind: 'step' | 'stepend' | 'stepok';
}

type Fault =
  | { kind: 'app-kill'; at: number; pod: string }
  | { kind: 'redis-restart'; at: number; report: RedisRestartReport }
  | { kind: 'redis-pause'; at: number; report: RedisPauseReport };

/**
 * The soak: two app processes on one private Redis (the store) behind a
 * client-side balancer, clients with 20% duplicate keys, one process killed
 * with SIGKILL and started again every `killEveryMs`, and the store's Redis
 * restarted and paused at the given times, one fault at a time. Executions
 * are logged by the processes themselves, before they run, in a second
 * private Redis that is never restarted, so runs on killed processes and runs
 * whose store was wiped count. See {@link SoakReport} for what is counted.
 */
export async function runSoak(options: SoakOptions): Promise<SoakReport> {
  const lockTtl = options.lockTtl ?? 2_000;
  const pauseMs = options.redisPauseMs ?? 1_500;
  const persist = options.redisPersist ?? false;
  const fence = options.restartFence ?? false;
  const downMs = [options.redisDownMs ?? 0].flat();
  const log = options.log ?? (() => {});
  const restartsAt = options.redisRestartsAt ?? [];
  const pausesAt = options.redisPausesAt ?? [];
  const stepsShare = options.stepsShare ?? 0.3;
  const pathOf = (key: string) => ((amountOf(key) % 1_000) / 1_000 < stepsShare ? 'payInSteps' : 'pay');
  if (pausesAt.length > 0 && !(pauseMs < lockTtl))
    throw new Error(`runSoak: a Redis pause (${pauseMs} ms) must be shorter than lockTtl (${lockTtl} ms).`);

  const store: ControlledRedis = await startControlledRedis({ persist });
  const logServer = await startPrivateRedis();
  const logUrl = `redis://127.0.0.1:${logServer.port}`;
  /** When each of the store's redis-server processes was spawned, in order (a restart spawns a new one; absolute ms). */
  const servers: number[] = [0];
  const events: Record<string, number> = {};
  const kills = new Map<string, number>();
  const readyTimes = new Map<string, number[]>();
  const podOfUrl = new Map<string, string>();
  const generation = { a: 0, b: 0 };
  const live = new Map<'a' | 'b', Pod>();
  const all: Pod[] = [];
  const attempts: Attempt[] = [];
  const faults: Fault[] = [];
  /** The app processes live at each Redis restart, whose reconnection it waits for. */
  const podsAtRestart = new Map<RedisRestartReport, string[]>();
  let paused = false;

  async function launch(slot: 'a' | 'b') {
    const name = `${slot}${++generation[slot]}`;
    readyTimes.set(name, []);
    const pod = await startPod(name, {
      REDIS_URL: store.url,
      LOG_URL: logUrl,
      PREFIX,
      LOG_KEY,
      LOCK_TTL: String(lockTtl),
      RESTART_FENCE: fence ? '1' : '0',
    });
    all.push(pod);
    podOfUrl.set(pod.url, name);
    let pending = '';
    pod.process.stdout!.on('data', (chunk: Buffer) => {
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop()!;
      for (const line of lines) {
        if (line.startsWith('event ')) events[line.slice(6)] = (events[line.slice(6)] ?? 0) + 1;
        else if (line.startsWith('ready ')) readyTimes.get(name)!.push(Number(line.slice(6)));
      }
    });
    live.set(slot, pod);
  }

  let t0 = Date.now();
  const rel = (at: number) => at - t0;

  try {
    if (fence) {
      // once, on the new Redis, as a deployment does: never again at a restart
      const admin = new Redis(store.url);
      await redisStore({ client: admin, prefix: PREFIX, restartFence: true }).initialize();
      admin.disconnect();
    }
    await Promise.all([launch('a'), launch('b')]);

    const plan: { at: number; kind: Fault['kind'] }[] = [];
    for (let at = options.killEveryMs; at < options.durationMs; at += options.killEveryMs)
      plan.push({ at, kind: 'app-kill' });
    for (const at of restartsAt) if (at < options.durationMs) plan.push({ at, kind: 'redis-restart' });
    for (const at of pausesAt) if (at < options.durationMs) plan.push({ at, kind: 'redis-pause' });
    plan.sort((x, y) => x.at - y.at);

    let done = false;
    let victim: 'a' | 'b' = 'a';
    t0 = Date.now();
    // One fault at a time, in order: a fault that runs late (a slow restart) delays the next, never overlaps it.
    const chaos = (async () => {
      for (const step of plan) {
        while (!done && Date.now() < t0 + step.at) await sleep(Math.min(100, t0 + step.at - Date.now()));
        if (done) return;
        const late = Date.now() - (t0 + step.at);
        if (late > 1_000) log(`(${step.kind} planned at ${step.at / 1000} s runs ${late} ms late)`);
        if (step.kind === 'app-kill') {
          const pod = live.get(victim)!;
          live.delete(victim);
          const at = Date.now();
          kills.set(pod.name, at);
          await pod.kill('SIGKILL');
          faults.push({ kind: 'app-kill', at: rel(at), pod: pod.name });
          log(`killed app process ${pod.name}`);
          await launch(victim);
          log(`started app process ${live.get(victim)!.name}`);
          victim = victim === 'a' ? 'b' : 'a';
        } else if (step.kind === 'redis-restart') {
          const recordsBefore = await once(store.url, (r) => r.dbsize());
          const podsAtKill = [...live.values()].map((p) => p.name);
          const killedAt = Date.now();
          await store.kill();
          const down = downMs[Math.min(servers.length - 1, downMs.length - 1)] ?? 0; // servers.length - 1 restarts came before this one
          if (down > 0) await sleep(down);
          // Anything a pod got from a connection that became ready after this moment came from the new server.
          servers.push(Date.now());
          await store.start();
          const upAt = Date.now();
          const recordsAfter = await once(store.url, (r) => r.dbsize());
          const report: RedisRestartReport = {
            killedAt: rel(killedAt),
            downMs: down,
            upAt: rel(upAt),
            recordsBefore,
            recordsAfter,
            podsReadyAt: undefined,
            answers: {},
          };
          faults.push({ kind: 'redis-restart', at: rel(killedAt), report });
          podsAtRestart.set(report, podsAtKill); // podsReadyAt is filled in at the end, from their output
          log(
            `Redis restarted (SIGKILL, ${persist ? 'with' : 'without'} persistence): ${recordsBefore} records before, ${recordsAfter} after; down ${upAt - killedAt} ms`,
          );
        } else {
          const pausedAt = Date.now();
          paused = true;
          store.pause();
          await sleep(pauseMs);
          store.resume();
          paused = false;
          const resumedAt = Date.now();
          faults.push({
            kind: 'redis-pause',
            at: rel(pausedAt),
            report: { pausedAt: rel(pausedAt), resumedAt: rel(resumedAt), answers: {}, refused503: 0 },
          });
          log(`Redis paused (SIGSTOP) for ${resumedAt - pausedAt} ms, then resumed (SIGCONT)`);
        }
      }
    })();
    let chaosError: unknown;
    chaos.catch((error: unknown) => {
      chaosError = error;
    });

    const result = await runLoad({
      targets: () => [...live.values()].map((p) => p.url),
      durationMs: options.durationMs,
      concurrency: options.concurrency,
      duplicateRatio: options.duplicateRatio ?? 0.2,
      holdMs: () => 5 + Math.floor(Math.random() * 15),
      path: pathOf,
      giveUpMs: 30_000,
      onAttempt: (attempt) => attempts.push(attempt),
    });
    done = true;
    await chaos.catch(() => {});
    if (chaosError !== undefined) throw chaosError;
    // Completions retried in the background after a store failure settle within lockTtl.
    if (faults.some((f) => f.kind !== 'app-kill')) await sleep(lockTtl + 500);
    return await verify(result);
  } finally {
    if (paused) store.resume();
    await Promise.all(all.map((p) => p.kill('SIGKILL')));
    await store.destroy();
    await logServer.stop();
  }

  async function verify(result: LoadResult): Promise<SoakReport> {
    const examples: string[] = [];
    const notes: string[] = [];
    const restarts = faults.flatMap((f) => (f.kind === 'redis-restart' ? [f.report] : []));
    const pauses = faults.flatMap((f) => (f.kind === 'redis-pause' ? [f.report] : []));
    const lastRestart = restarts.at(-1);
    const settledAt = lastRestart === undefined ? -Infinity : t0 + lastRestart.upAt;
    const isAfter = (key: string) => (result.keys.get(key)?.firstSentAt ?? Infinity) >= settledAt;
    const finalServer = servers.length - 1;
    const serverOf = (readyAt: number) => {
      let index = 0;
      for (let i = 0; i < servers.length; i++) if (servers[i]! <= readyAt) index = i;
      return index;
    };

    // executions and events, in order, per key
    const runs = new Map<string, Run[]>();
    const podEvents = new Map<string, PodEvent[]>();
    /** Lines of the steps of each key, by step name. */
    const stepLines = new Map<string, Map<string, StepLine[]>>();
    const lines = await once(logUrl, (r) => r.lrange(LOG_KEY, 0, -1));
    let executions = 0;
    for (const line of lines) {
      // kind, app process, key, time, store connection ready at, HTTP request, then the kind's own fields
      const [kind, pod = '', key = '', at, readyAt, request = '', ...rest] = line.split(' ');
      const base: Run = { pod, request, at: Number(at), server: serverOf(Number(readyAt)) };
      if (kind === 'run') {
        executions++;
        let list = runs.get(key);
        if (list === undefined) runs.set(key, (list = []));
        list.push(base);
      } else if (kind === 'ev') {
        const [result = '', detail = ''] = rest;
        let list = podEvents.get(key);
        if (list === undefined) podEvents.set(key, (list = []));
        list.push({ ...base, result, detail });
      } else if (kind === 'step' || kind === 'stepend' || kind === 'stepok') {
        const [name = ''] = rest;
        let byName = stepLines.get(key);
        if (byName === undefined) stepLines.set(key, (byName = new Map()));
        let list = byName.get(name);
        if (list === undefined) byName.set(name, (list = []));
        list.push({ ...base, kind });
      }
    }
    for (const list of podEvents.values()) list.sort((x, y) => x.at - y.at);
    const attemptsOf = new Map<string, Attempt[]>();
    for (const attempt of attempts) {
      let list = attemptsOf.get(attempt.key);
      if (list === undefined) attemptsOf.set(attempt.key, (list = []));
      list.push(attempt);
    }

    let reRunsAfterCrash = 0;
    let minReRunDelayMs: number | undefined;
    const reRunsAfterRedisRestart = { wipedClaims: 0, wipedOutcomes: 0 };
    const rerunByRestart = new Set<string>();
    const outcomeLostKeys = new Set<string>();
    let doubleExecutions = 0;
    let doubleExecutionsAfterLastRestart = 0;
    let reRunsAfterUnrecordedStep = 0;
    for (const [key, list] of runs) {
      list.sort((x, y) => x.at - y.at);
      let doubled = false;
      for (let i = 0; i + 1 < list.length; i++) {
        const earlier = list[i]!;
        const later = list[i + 1]!;
        const keyEvents = podEvents.get(key) ?? [];
        const killedAt = kills.get(earlier.pod);
        const storedBefore = () =>
          keyEvents.some((e) => e.result === 'completed' && e.at >= earlier.at && e.server < later.server);
        if (
          !persist &&
          later.server > earlier.server &&
          !storedBefore() &&
          pathOf(key) === 'payInSteps' &&
          stoppedAtUnrecordedStep(keyEvents, earlier, later)
        ) {
          // The earlier run gave the key back itself (a step it could not record: 500 step_unrecorded),
          // whatever the restart wiped: the retry resumes by design.
          reRunsAfterUnrecordedStep++;
        } else if (!persist && later.server > earlier.server) {
          // Its claim is in a later server process: the earlier claim, or the outcome, was wiped.
          rerunByRestart.add(key);
          const stored = storedBefore();
          if (stored) {
            reRunsAfterRedisRestart.wipedOutcomes++;
            outcomeLostKeys.add(key);
          } else {
            reRunsAfterRedisRestart.wipedClaims++;
          }
          if (
            notes.length < 3 &&
            (stored
              ? notes.every((n) => !n.includes('stored outcome'))
              : notes.every((n) => !n.includes('claim in flight')))
          ) {
            notes.push(
              `re-run by the empty Redis restart (${stored ? 'stored outcome' : 'claim in flight'} wiped): ${timeline(key)}`,
            );
          }
        } else if (
          killedAt !== undefined &&
          later.at >= killedAt &&
          // a stored outcome does not expire with its process: then the re-run is a double execution
          !keyEvents.some(
            (e) =>
              e.result === 'completed' &&
              ofRun(e, earlier) &&
              e.at <= later.at &&
              (persist || e.server === later.server),
          )
        ) {
          // A later run is allowed once the process running the earlier one was dead (its claim expired).
          reRunsAfterCrash++;
          minReRunDelayMs = Math.min(minReRunDelayMs ?? Infinity, later.at - killedAt);
        } else if (pathOf(key) === 'payInSteps' && stoppedAtUnrecordedStep(keyEvents, earlier, later)) {
          reRunsAfterUnrecordedStep++;
        } else {
          doubleExecutions++;
          if (isAfter(key)) doubleExecutionsAfterLastRestart++;
          doubled = true;
        }
      }
      if (doubled && examples.length < 10) examples.push(`double execution of ${timeline(key)}`);
    }

    // steps that ran again, and why
    const stepReRuns = {
      total: 0,
      byRedisRestart: 0,
      killedInStep: 0,
      killedWhileRecording: 0,
      unrecorded: 0,
      unexplained: 0,
    };
    let stepRuns = 0;
    let stepsResumed = 0;
    for (const list of podEvents.values()) stepsResumed += list.filter((e) => e.result === 'step').length;
    for (const [key, byName] of stepLines) {
      const keyEvents = podEvents.get(key) ?? [];
      let unexplained = false;
      for (const [name, list] of byName) {
        list.sort((x, y) => x.at - y.at);
        const starts = list.filter((l) => l.kind === 'step');
        stepRuns += starts.length;
        for (let i = 0; i + 1 < starts.length; i++) {
          const earlier = starts[i]!;
          const later = starts[i + 1]!;
          stepReRuns.total++;
          const between = (kind: StepLine['kind']) =>
            list.some((l) => l.kind === kind && ofRun(l, earlier) && l.at <= later.at);
          const killedAt = kills.get(earlier.pod);
          if (!persist && later.server > earlier.server) stepReRuns.byRedisRestart++;
          else if (killedAt !== undefined && later.at >= killedAt && !between('stepok')) {
            if (between('stepend')) stepReRuns.killedWhileRecording++;
            else stepReRuns.killedInStep++;
          } else if (
            !between('stepok') &&
            keyEvents.some(
              (e) =>
                ofRun(e, earlier) &&
                e.at <= later.at &&
                ((e.result === 'store_error' && e.detail === 'save_step') || e.result === 'lease_lost'),
            )
          ) {
            stepReRuns.unrecorded++;
          } else {
            stepReRuns.unexplained++;
            unexplained = true;
            if (examples.length < 10) examples.push(`step ${JSON.stringify(name)} ran again: ${timeline(key)}`);
          }
        }
      }
      if (unexplained && examples.length < 10) examples.push(`(steps of ${key}: ${stepStory(key)})`);
    }

    // every result a client received is the stored outcome of its key
    const succeeded = [...result.keys.values()].filter((r) => r.chargeIds.size > 0);
    let lostOutcomes = 0;
    let lostOutcomesAfterLastRestart = 0;
    let outcomesWipedAtEnd = 0;
    await once(store.url, async (redis) => {
      // What the store holds for each key, asked through the store: a claim that acquires (then given back) found nothing.
      const records = redisStore({ client: redis, prefix: PREFIX });
      const lookUp = async (key: string) => {
        const path = pathOf(key);
        const probe = { id: recordId(undefined, path, key), token: 'soak-probe' };
        const found = await records.claim({
          ...probe,
          fingerprint: fingerprint(path, { amount: amountOf(key) }),
          lockTtl: 60_000,
        });
        if (found.state !== 'acquired') return found;
        await records.release(probe);
        return undefined;
      };
      for (let i = 0; i < succeeded.length; i += 1_000) {
        const batch = succeeded.slice(i, i + 1_000);
        const replies = await Promise.all(batch.map((r) => lookUp(r.key)));
        batch.forEach((r, j) => {
          const found = replies[j];
          const state = found?.state ?? null;
          const body = found !== undefined && 'body' in found ? found.body : undefined;
          const stored =
            state === 'completed' && body !== undefined
              ? (JSON.parse(body) as { chargeId: string }).chargeId
              : undefined;
          if (stored !== undefined && r.chargeIds.has(stored)) return;
          const completedHere = (podEvents.get(r.key) ?? []).some(
            (e) => e.result === 'completed' && e.server === finalServer,
          );
          if (
            !persist &&
            !isAfter(r.key) &&
            ((state === null && !completedHere) || (state !== null && rerunByRestart.has(r.key)))
          ) {
            // Stored only in a server process a restart wiped, or replaced by a re-run the restart caused.
            outcomesWipedAtEnd++;
            return;
          }
          lostOutcomes++;
          if (isAfter(r.key)) lostOutcomesAfterLastRestart++;
          if (examples.length < 10)
            examples.push(
              `lost outcome (client saw ${[...r.chargeIds]}, store has ${state} ${body}) of ${timeline(r.key)}`,
            );
        });
      }
    });

    const conflicting = [...result.keys.values()].filter((r) => r.chargeIds.size > 1);
    const excusedConflicts = conflicting.filter((r) => !persist && rerunByRestart.has(r.key));
    const unexplained = conflicting.filter((r) => persist || !rerunByRestart.has(r.key));
    for (const r of unexplained.slice(0, 3))
      examples.push(`conflicting results (${[...r.chargeIds]}) for ${timeline(r.key)}`);
    const stuck = [...result.keys.values()].filter((r) => r.failed !== undefined);
    for (const r of stuck.slice(0, 3)) examples.push(`stuck (${r.failed}): ${timeline(r.key)}`);

    // what the Redis faults did to the requests in flight
    for (const restart of restarts) {
      const podsAtKill = podsAtRestart.get(restart) ?? [];
      const readies = podsAtKill.map((pod) => readyTimes.get(pod)?.find((at) => at >= t0 + restart.killedAt));
      restart.podsReadyAt =
        readies.every((at) => at !== undefined) && readies.length > 0 ? rel(Math.max(...readies)) : undefined;
      restart.answers = tally(restart.killedAt, Math.max(restart.upAt, restart.podsReadyAt ?? 0));
    }
    for (const pause of pauses) {
      pause.answers = tally(pause.pausedAt, pause.resumedAt);
      pause.refused503 = pause.answers['503'] ?? 0;
    }

    const seconds = result.elapsedMs / 1_000;
    const keysAfter = [...result.keys.keys()].filter(isAfter).length;
    return {
      durationMs: result.elapsedMs,
      concurrency: options.concurrency,
      lockTtl,
      processKills: kills.size,
      operations: result.operations,
      duplicates: result.duplicates,
      requests: result.requests,
      requestsPerSecond: Math.round(result.requests / seconds),
      operationsPerSecond: Math.round(result.operations / seconds),
      byStatus: result.byStatus,
      refusals: result.refusals,
      replayed: result.replayed,
      keys: result.keys.size,
      executions,
      redisPersist: persist,
      restartFence: fence,
      redisRestarts: restarts,
      redisPauses: pauses,
      lastRestartSettledAt: lastRestart?.upAt,
      keysAfterLastRestart: keysAfter,
      keysBeforeLastRestart: result.keys.size - keysAfter,
      reRunsAfterCrash,
      minReRunDelayMs,
      reRunsAfterRedisRestart,
      outcomesLostByRestart: outcomeLostKeys.size,
      doubleExecutions,
      doubleExecutionsAfterLastRestart,
      conflictingResults: unexplained.length,
      conflictingResultsAfterLastRestart: unexplained.filter((r) => isAfter(r.key)).length,
      conflictingResultsByRestart: excusedConflicts.length,
      lostOutcomes,
      lostOutcomesAfterLastRestart,
      outcomesWipedAtEnd,
      stuckKeys: stuck.length,
      // a loop, not Math.max(...spread): a soak has more keys than a call has room for arguments
      maxBlockedMs: [...result.keys.values()].reduce((max, r) => Math.max(max, r.blockedMs), 0),
      events,
      examples,
      notes,
      reRunsAfterUnrecordedStep,
      steps: {
        keys: [...result.keys.keys()].filter((key) => pathOf(key) === 'payInSteps').length,
        runs: stepRuns,
        resumed: stepsResumed,
        reRuns: stepReRuns,
      },
    };

    /**
     * A line of `run` itself: the same app process and HTTP request. (Times alone cannot tell: the next
     * run of a key on the same process can start, and even complete, within the same millisecond as
     * the last event of the one before.)
     */
    function ofRun(line: Run, run: Run): boolean {
      return line.pod === run.pod && line.request === run.request;
    }

    /**
     * The earlier run of a `payInSteps` key stopped at a step it could not record, before the later run:
     * its pod logged a failed `save_step`, a lost claim or a release, and no stored outcome.
     */
    function stoppedAtUnrecordedStep(keyEvents: PodEvent[], earlier: Run, later: Run): boolean {
      const between = keyEvents.filter((e) => ofRun(e, earlier) && e.at <= later.at);
      return (
        !between.some((e) => e.result === 'completed') &&
        between.some(
          (e) =>
            e.result === 'released' ||
            e.result === 'lease_lost' ||
            (e.result === 'store_error' && (e.detail === 'save_step' || e.detail === 'release')),
        )
      );
    }

    /** A key's step lines, in order, in seconds from the start of the load. */
    function stepStory(key: string): string {
      const all = [...(stepLines.get(key) ?? new Map<string, StepLine[]>())].flatMap(([name, list]) =>
        list.map((l) => ({ ...l, name })),
      );
      return all
        .sort((x, y) => x.at - y.at)
        .map(
          (l) => `${l.pod}#${l.request} ${l.kind} ${l.name} at +${(rel(l.at) / 1000).toFixed(3)} (Redis #${l.server})`,
        )
        .join('; ');
    }

    /** Answers, by status, to the requests in flight at some moment of [from, to] (ms from the start). */
    function tally(from: number, to: number): Record<string, number> {
      const answers: Record<string, number> = {};
      for (const a of attempts) {
        if (rel(a.sentAt) <= to && rel(a.answeredAt) >= from) answers[a.status] = (answers[a.status] ?? 0) + 1;
      }
      return answers;
    }

    /** A key's story: its runs, its pods' events, its requests and the faults around them, in seconds from the start of the load. */
    function timeline(key: string): string {
      const s = (at: number) => `+${(rel(at) / 1000).toFixed(3)}`;
      const record: KeyRecord | undefined = result.keys.get(key);
      const keyRuns = runs.get(key) ?? [];
      const keyEvents = podEvents.get(key) ?? [];
      const keyAttempts = attemptsOf.get(key) ?? [];
      const times = [...keyRuns.map((r) => r.at), ...keyAttempts.flatMap((a) => [a.sentAt, a.answeredAt])];
      const from = rel(Math.min(...times)) - 3_000;
      const to = rel(Math.max(...times)) + 1_000;
      const near = faults.filter((f) => f.at >= from && f.at <= to);
      const out = [
        `${key}, first sent ${record === undefined ? '?' : s(record.firstSentAt)} s (${isAfter(key) ? 'after' : 'before'} the last Redis restart settled${lastRestart === undefined ? '' : ` at +${(lastRestart.upAt / 1000).toFixed(3)}`})`,
        `runs: ${keyRuns.map((r) => `${r.pod}#${r.request} at ${s(r.at)} on Redis #${r.server}`).join('; ') || 'none logged'}`,
        `events: ${keyEvents.map((e) => `${e.pod}#${e.request} ${e.result}${e.detail === '-' ? '' : ` ${e.detail}`} at ${s(e.at)} (Redis #${e.server})`).join('; ') || 'none'}`,
        `requests: ${
          keyAttempts
            .slice(0, 16)
            .map(
              (a) =>
                `${(a.url && podOfUrl.get(a.url)) ?? '-'} ${s(a.sentAt)}..${s(a.answeredAt)} ${a.status}${a.chargeId ? ` ${a.chargeId.slice(0, 8)}${a.replayed ? ' replayed' : ''}` : ''}`,
            )
            .join('; ') + (keyAttempts.length > 16 ? `; … ${keyAttempts.length - 16} more` : '')
        }`,
        `faults around: ${
          near
            .map((f) =>
              f.kind === 'app-kill'
                ? `${f.pod} SIGKILLed at +${(f.at / 1000).toFixed(3)}`
                : f.kind === 'redis-restart'
                  ? `Redis SIGKILLed at +${(f.report.killedAt / 1000).toFixed(3)}, PONG at +${(f.report.upAt / 1000).toFixed(3)}`
                  : `Redis SIGSTOPed at +${(f.report.pausedAt / 1000).toFixed(3)}, SIGCONT at +${(f.report.resumedAt / 1000).toFixed(3)}`,
            )
            .join('; ') || 'none'
        }`,
      ];
      return out.join('\n      ');
    }
  }
}
