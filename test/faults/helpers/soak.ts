import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { recordId } from '../../../src/index.js';
import { redisStore } from '../../../src/redis.js';
import { type Pod, startProcess } from '../../helpers/pods.js';
import { startPrivateRedis } from '../../helpers/redis-server.js';
import { conflictingResults, type LoadResult, runLoad } from './load.js';

export interface SoakOptions {
  durationMs: number;
  /** One app process is killed (SIGKILL) and started again this often. */
  killEveryMs: number;
  /** Clients sending at once. */
  concurrency: number;
  /** @default 2_000 */
  lockTtl?: number;
  /** @default 0.2 */
  duplicateRatio?: number;
  /** Progress lines. */
  log?: (line: string) => void;
}

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
  replayed: number;
  keys: number;
  executions: number;
  /** Runs of a key after the process running it was killed: the claim expired and the retry ran (by design). */
  reRunsAfterCrash: number;
  /** The shortest time from a process's death to a re-run of a key it was running (its claim had to expire first). */
  minReRunDelayMs: number | undefined;
  /** Runs of a key while an earlier run of it was alive or had finished: must be 0. */
  doubleExecutions: number;
  /** Keys whose clients received two different results: must be 0. */
  conflictingResults: number;
  /** Keys a client got a result for whose record is not that result: must be 0. */
  lostOutcomes: number;
  /** Keys that never succeeded (or got an unexpected answer): must be 0. */
  stuckKeys: number;
  /** The longest a client waited from its first refusal to its result. */
  maxBlockedMs: number;
  /** Alert-worthy events printed by the app processes. */
  events: Record<string, number>;
  /** A few examples of whatever went wrong, for the log. */
  examples: string[];
}

const FIXTURE = fileURLToPath(new URL('../fixtures/soak-pod.ts', import.meta.url));
const PREFIX = 'soak:';

/**
 * The soak: two app processes on one private Redis behind a client-side
 * balancer, clients with 20% duplicate keys, and one process killed with
 * SIGKILL and started again every `killEveryMs`. Executions are logged in
 * Redis by the processes themselves, so runs on killed processes count.
 */
export async function runSoak(options: SoakOptions): Promise<SoakReport> {
  const lockTtl = options.lockTtl ?? 2_000;
  const log = options.log ?? (() => {});
  const redisServer = await startPrivateRedis();
  const redisUrl = `redis://127.0.0.1:${redisServer.port}`;
  const redis = new Redis(redisUrl);
  const events: Record<string, number> = {};
  const kills = new Map<string, number>();
  const generation = { a: 0, b: 0 };
  const live = new Map<'a' | 'b', Pod>();
  const all: Pod[] = [];

  async function launch(slot: 'a' | 'b') {
    const name = `${slot}${++generation[slot]}`;
    const pod = await startProcess(name, FIXTURE, { REDIS_URL: redisUrl, PREFIX, LOCK_TTL: String(lockTtl) });
    all.push(pod);
    let pending = '';
    pod.process.stdout!.on('data', (chunk: Buffer) => {
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop()!;
      for (const line of lines) if (line.startsWith('event ')) events[line.slice(6)] = (events[line.slice(6)] ?? 0) + 1;
    });
    live.set(slot, pod);
  }

  try {
    await Promise.all([launch('a'), launch('b')]);
    let done = false;
    let victim: 'a' | 'b' = 'a';
    const killer = (async () => {
      for (;;) {
        const wakeAt = Date.now() + options.killEveryMs;
        while (!done && Date.now() < wakeAt) await new Promise((resolve) => setTimeout(resolve, 100));
        if (done) return;
        const pod = live.get(victim)!;
        live.delete(victim);
        kills.set(pod.name, Date.now());
        await pod.kill('SIGKILL');
        log(`killed ${pod.name}`);
        await launch(victim);
        log(`started ${live.get(victim)!.name}`);
        victim = victim === 'a' ? 'b' : 'a';
      }
    })();

    const result = await runLoad({
      targets: () => [...live.values()].map((p) => p.url),
      durationMs: options.durationMs,
      concurrency: options.concurrency,
      duplicateRatio: options.duplicateRatio ?? 0.2,
      holdMs: () => 5 + Math.floor(Math.random() * 15),
      giveUpMs: 30_000,
    });
    done = true;
    await killer;
    return await verify(result);
  } finally {
    await Promise.all(all.map((p) => p.kill('SIGKILL')));
    redis.disconnect();
    await redisServer.stop();
  }

  async function verify(result: LoadResult): Promise<SoakReport> {
    const examples: string[] = [];
    // executions, in order, per key
    const runs = new Map<string, { instance: string; at: number }[]>();
    const lines = await redis.lrange(`${PREFIX}runs`, 0, -1);
    for (const line of lines) {
      const [instance, key, at] = line.split(' ') as [string, string, string];
      let list = runs.get(key);
      if (list === undefined) runs.set(key, (list = []));
      list.push({ instance, at: Number(at) });
    }
    let reRunsAfterCrash = 0;
    let minReRunDelayMs: number | undefined;
    let doubleExecutions = 0;
    for (const [key, list] of runs) {
      list.sort((x, y) => x.at - y.at);
      for (let i = 0; i + 1 < list.length; i++) {
        const killedAt = kills.get(list[i]!.instance);
        // A later run is allowed only once the process running the earlier one was dead.
        if (killedAt !== undefined && list[i + 1]!.at >= killedAt) {
          reRunsAfterCrash++;
          minReRunDelayMs = Math.min(minReRunDelayMs ?? Infinity, list[i + 1]!.at - killedAt);
        } else {
          doubleExecutions++;
          if (examples.length < 10) examples.push(`double execution of ${key}: ${JSON.stringify(list)}`);
        }
      }
    }

    // every result a client received is the stored outcome of its key
    const store = redisStore({ client: redis, prefix: PREFIX });
    const succeeded = [...result.keys.values()].filter((r) => r.chargeIds.size > 0);
    let lostOutcomes = 0;
    for (let i = 0; i < succeeded.length; i += 1_000) {
      const batch = succeeded.slice(i, i + 1_000);
      const pipeline = redis.pipeline();
      for (const r of batch) pipeline.hmget(store.keyOf(recordId(undefined, 'pay', r.key)), 's', 'b');
      const replies = (await pipeline.exec()) ?? [];
      batch.forEach((r, j) => {
        const [state, body] = (replies[j]?.[1] ?? []) as [string | null, string | null];
        const stored = state === 'c' && body !== null ? (JSON.parse(body) as { chargeId: string }).chargeId : undefined;
        if (stored === undefined || !r.chargeIds.has(stored)) {
          lostOutcomes++;
          if (examples.length < 10) examples.push(`lost outcome of ${r.key}: client saw ${[...r.chargeIds]}, store has ${state} ${body}`);
        }
      });
    }

    const conflicting = conflictingResults(result);
    for (const r of conflicting.slice(0, 3)) examples.push(`conflicting results for ${r.key}: ${[...r.chargeIds]}`);
    const stuck = [...result.keys.values()].filter((r) => r.failed !== undefined);
    for (const r of stuck.slice(0, 3)) examples.push(`stuck ${r.key}: ${r.failed}`);
    const seconds = result.elapsedMs / 1_000;
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
      replayed: result.replayed,
      keys: result.keys.size,
      executions: lines.length,
      reRunsAfterCrash,
      minReRunDelayMs,
      doubleExecutions,
      conflictingResults: conflicting.length,
      lostOutcomes,
      stuckKeys: stuck.length,
      maxBlockedMs: Math.max(0, ...[...result.keys.values()].map((r) => r.blockedMs)),
      events,
      examples,
    };
  }
}
