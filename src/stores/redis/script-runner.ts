import { AsyncResource } from 'node:async_hooks';
import { storeFailure } from '../../core/idempotency-error.js';
import type { RedisCommand, RedisConnection, Settled } from './client.js';
import type { RedisScript } from './scripts.js';

// How the Redis store sends its scripts (EVALSHA, batched), and reads a client's error as an outage or a fault.

/**
 * Error replies that mean the server cannot serve now rather than a fault of
 * the command: loading its data, a cluster or replica not ready, a script
 * still running, a replica promoted or demoted.
 */
const OUTAGE_REPLIES = /^(LOADING|CLUSTERDOWN|MASTERDOWN|TRYAGAIN|BUSY|READONLY|NOREPLICAS)\b/;

const isNoScript = (error: unknown) => error instanceof Error && error.message.startsWith('NOSCRIPT');

/** A Cluster's answer that the slot is served elsewhere (moved for good, or being migrated). */
const isRedirect = (error: unknown) => error instanceof Error && /^(MOVED|ASK) /.test(error.message);

/**
 * The scope the batched scripts are sent from. A callback runs in the async
 * context it was scheduled in: scheduled by the first request of a turn, the
 * write (and a tracer's span for it) would belong to that request, though it
 * carries the scripts of every request of the turn. So it is sent from no
 * request's context, as the claim renewals run (core/timing.ts).
 */
const detached = new AsyncResource('trpc-idempotency.RedisScriptBatch');

export type ScriptKeys = [number, ...string[]];
export type ScriptArgs = (string | number)[];

/** How many replicas must acknowledge a write, within how many milliseconds (Redis's `WAIT`). */
export interface ReplicaAcks {
  replicas: number;
  timeout: number;
}

/**
 * A write the primary made but fewer replicas than asked acknowledged in
 * time: a failover now could lose it. Not an outage (the primary answered),
 * so it fails closed whatever `onStoreError` says. `reply` is the script's own.
 */
export class ReplicaAckError extends Error {
  override readonly name = 'ReplicaAckError';
  constructor(
    readonly reply: unknown,
    acknowledged: number | undefined,
    wanted: ReplicaAcks,
    cause?: unknown,
  ) {
    super(
      acknowledged === undefined
        ? `redisStore: WAIT failed after a write, so it is not known to be on ${wanted.replicas} replica(s).`
        : `redisStore: ${acknowledged} replica(s) acknowledged a write within ${wanted.timeout} ms; waitForReplicas asks for ${wanted.replicas}.`,
      cause === undefined ? undefined : { cause },
    );
  }
}

interface QueuedScript {
  script: RedisScript;
  keys: ScriptKeys;
  args: ScriptArgs;
  /** A write that waits for the replicas (only with `waitForReplicas`). */
  acked: boolean;
  /** Its batch met an empty script cache: it was put back in the queue once. */
  requeued?: boolean;
  resolve(reply: unknown): void;
  reject(error: unknown): void;
}

type Call = Omit<QueuedScript, 'resolve' | 'reject'>;

const evalsha = ({ script, keys, args }: Call): RedisCommand => ['EVALSHA', script.sha, ...keys, ...args];
const evalSource = ({ script, keys, args }: Call): RedisCommand => ['EVAL', script.source, ...keys, ...args];
const waitFor = (acks: ReplicaAcks): RedisCommand => ['WAIT', acks.replicas, acks.timeout];
/** The record key: on a Cluster, the script goes to its slot's master. */
const routeOf = (call: Call) => call.keys[1] as string;

/**
 * Runs scripts on a Redis connection: `run(script, keys, args, acked)` answers
 * the script's reply, or a store failure. With `acks`, a script run with
 * `acked` is followed by `WAIT` on the same connection (a Cluster: the
 * script's own node), and answers only once enough replicas hold what it wrote.
 */
export function scriptRunner(connection: RedisConnection, acks?: ReplicaAcks) {
  /** A client's error: an outage (no answer, or a reply saying the server cannot serve now), or a fault of the command. */
  function asStoreFailure(error: unknown): unknown {
    const reply = connection.isErrorReply(error);
    return !reply || OUTAGE_REPLIES.test((error as Error).message) ? storeFailure('unavailable', error) : error;
  }

  /** Sends a script as EVALSHA, and its source once if Redis lacks it (its cache is empty after a restart or failover). */
  function evaluate(call: Call): Promise<unknown> {
    let sent: Promise<unknown>;
    try {
      sent = connection.send(evalsha(call), routeOf(call));
    } catch (error) {
      return Promise.reject(error);
    }
    return sent.catch((error: unknown) => {
      if (isNoScript(error)) return connection.send(evalSource(call), routeOf(call));
      throw error;
    });
  }

  /** The script's reply once `WAIT` says the replicas hold it, else a {@link ReplicaAckError} carrying it. */
  function afterWait(reply: unknown, wait: Settled | undefined, wanted: ReplicaAcks): unknown {
    if (wait === undefined || !wait.ok) throw new ReplicaAckError(reply, undefined, wanted, wait?.error);
    const acknowledged = Number(wait.reply);
    if (!(acknowledged >= wanted.replicas)) throw new ReplicaAckError(reply, acknowledged, wanted);
    return reply;
  }

  /** {@link evaluate}, then `WAIT`, in one write (one pipeline, so both reach the script's node). */
  async function evaluateAcked(call: Call, wanted: ReplicaAcks): Promise<unknown> {
    for (const command of [evalsha(call), evalSource(call)]) {
      const [reply, wait] = await connection.pipeline([command, waitFor(wanted)], routeOf(call));
      if (!reply!.ok) {
        if (command[0] === 'EVALSHA' && isNoScript(reply!.error)) continue;
        if (isRedirect(reply!.error)) return afterWait(await evaluate(call), await waitOnOwner(call, wanted), wanted);
        throw reply!.error;
      }
      return afterWait(reply!.reply, wait, wanted);
    }
    throw new Error('redisStore: Redis did not take the script sent as source.');
  }

  /**
   * `WAIT` on the node that holds the record now, after a script that a Cluster redirected (a
   * failover or a resharding moved its slot): the WAIT sent beside it went to the node that
   * refused it. A read of the record leads it, so that it goes where the record is: a node that
   * answers that read with a redirection too has not got the write, and the WAIT fails.
   */
  async function waitOnOwner(call: Call, wanted: ReplicaAcks): Promise<Settled | undefined> {
    const [read, wait] = await connection.pipeline([['EXISTS', routeOf(call)], waitFor(wanted)], routeOf(call));
    return read!.ok ? wait : read;
  }

  /** Runs one script on its own: with `WAIT` after it if it is a write to acknowledge. */
  const single = (call: Call) => (acks !== undefined && call.acked ? evaluateAcked(call, acks) : evaluate(call));

  // The scripts called in one turn of the event loop (every request whose
  // claim or completion became due in it), sent in one write. Redis answers
  // them in order; each call still gets its own reply or error. On a Cluster a
  // write goes to one master and records spread over all of them, so without
  // waitForReplicas each script is sent on its own there.
  //
  // With waitForReplicas a WAIT holds its connection until the replicas
  // answer: what is sent after it waits behind it. So while a batch with a
  // WAIT is out, the scripts called meanwhile are held back and go out
  // together when it is answered, under one WAIT (a group commit): a
  // connection serves one batch per replication round trip however many
  // requests there are. Per connection: the one connection of a single node
  // or Sentinel, each master's on a Cluster.
  //
  // A script cache is empty on a new Redis, after a restart, and on a replica
  // just promoted. The scripts of a batch that answer NOSCRIPT go back to the
  // head of the queue, and the next batch sends each such script once as
  // source (EVAL, which caches it) before the EVALSHAs of the others: they
  // stay in the group commit. Sent again each on its own, each would carry a
  // WAIT of its own, and the WAITs of one connection are answered one
  // replication round trip apart.
  interface Batch {
    queued: QueuedScript[];
    /** A batch with a WAIT is out on this connection. */
    waiting: boolean;
    /** Scripts this connection answered NOSCRIPT for: the next batch sends each once as source. */
    unloaded: Set<RedisScript>;
  }
  const batches = new Map<string, Batch>();
  const batching = !connection.isCluster || acks !== undefined;

  function schedule(batch: Batch) {
    if (!batch.waiting) detached.runInAsyncScope(setImmediate, undefined, flush, batch);
  }

  function flush(batch: Batch) {
    const calls = batch.queued;
    // Scheduled before a batch with a WAIT went out: that batch's answer schedules the next.
    if (calls.length === 0 || batch.waiting) return;
    batch.queued = [];
    // With waitForReplicas, one WAIT after the batch's scripts covers every write among them.
    const wanted = acks !== undefined && calls.some((call) => call.acked) ? acks : undefined;
    let out = wanted !== undefined;
    /** The batch is answered (or given up on): the scripts held back meanwhile go out. */
    const answered = () => {
      if (!out) return;
      out = false;
      batch.waiting = false;
      schedule(batch);
    };
    if (out) {
      batch.waiting = true;
      // A connection that never answers must not hold the next batches back for ever: they are
      // refused by their own store timeouts meanwhile.
      setTimeout(answered, wanted!.timeout + 100).unref();
    }
    if (calls.length === 1 && !batch.unloaded.has(calls[0]!.script)) {
      const call = calls[0]!;
      const sent = single(call);
      sent.then(call.resolve, call.reject);
      if (out) sent.then(answered, answered);
      return;
    }
    const loading = new Set<RedisScript>();
    const commands = calls.map((call) => {
      if (!batch.unloaded.has(call.script) || loading.has(call.script)) return evalsha(call);
      loading.add(call.script);
      return evalSource(call);
    });
    for (const script of loading) batch.unloaded.delete(script);
    if (wanted !== undefined) commands.push(waitFor(wanted));
    let sent: Promise<Settled[]>;
    try {
      sent = connection.pipelineOnNode(commands, routeOf(calls[0]!));
    } catch (error) {
      for (const call of calls) call.reject(error);
      answered();
      return;
    }
    sent.then(
      (replies) => {
        try {
          answer(replies);
        } finally {
          answered();
        }
      },
      (error: unknown) => {
        for (const call of calls) call.reject(error);
        answered();
      },
    );

    /** Each call its own reply; those that met an empty script cache go back to the head of the queue. */
    function answer(replies: Settled[]) {
      const wait = wanted === undefined ? undefined : replies[calls.length];
      const again: QueuedScript[] = [];
      for (let i = 0; i < calls.length; i++) {
        const call = calls[i]!;
        const reply = replies[i];
        if (reply === undefined) call.reject(new Error('redisStore: Redis returned no reply to a pipelined script.'));
        else if (reply.ok) {
          if (wanted === undefined || !call.acked) call.resolve(reply.reply);
          else {
            try {
              call.resolve(afterWait(reply.reply, wait, wanted));
            } catch (error) {
              call.reject(error);
            }
          }
        } else if (isNoScript(reply.error) && !call.requeued) {
          // The script cache is empty: into the next batch, which sends the script as source.
          call.requeued = true;
          batch.unloaded.add(call.script);
          again.push(call);
          // Its slot moved (the batch's WAIT was not on the node that ran it), or its script met NOSCRIPT
          // twice (a source sent before it failed): it goes again on its own.
        } else if (isNoScript(reply.error) || isRedirect(reply.error)) single(call).then(call.resolve, call.reject);
        else call.reject(reply.error);
      }
      if (again.length > 0) {
        const wasEmpty = batch.queued.length === 0;
        batch.queued.unshift(...again);
        // With a WAIT out, answered() schedules them.
        if (wasEmpty && !out) schedule(batch);
      }
    }
  }

  /**
   * Runs a script on its keys (a record key, its steps key, the fence marker: same slot).
   * `acked`: a write that, with `waitForReplicas`, must reach the replicas before it answers.
   */
  return async function run(s: RedisScript, keys: ScriptKeys, args: ScriptArgs, acked = false): Promise<unknown> {
    try {
      const node = batching ? connection.nodeOf(keys[1] as string) : undefined;
      // A Cluster whose slot map is not known yet: on its own, which the client routes.
      if (node === undefined) return await single({ script: s, keys, args, acked });
      let batch = batches.get(node);
      if (batch === undefined) batches.set(node, (batch = { queued: [], waiting: false, unloaded: new Set() }));
      const to = batch;
      return await new Promise((resolve, reject) => {
        if (to.queued.push({ script: s, keys, args, acked, resolve, reject }) === 1) schedule(to);
      });
    } catch (error) {
      throw error instanceof ReplicaAckError ? error : asStoreFailure(error);
    }
  };
}
