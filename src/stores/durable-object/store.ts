import { sha256Bytes } from '#platform';
import { checkWholeNumber, configError, describeValue } from '../../core/options.js';
import type { IdempotencyStore } from '../../core/store.js';
import type { ListInput, ListPage, RecordSummary, StoreAdmin } from '../../core/store-admin.js';
import type { ShardCall, ShardCalls } from './calls.js';
import type { ShardNamespace } from './runtime.js';

const DEFAULT_LIST_LIMIT = 1_000;
/** The most shards one page of a listing visits: each is a subrequest, and a Worker's request may make only so many. */
const SHARDS_PER_PAGE = 8;

export interface DurableObjectStoreOptions<Id = unknown> {
  /**
   * The binding of the {@link IdempotencyShard} class (`env.IDEMPOTENCY`), or
   * a function that returns it, called on each store call: a router made in
   * the Worker's global scope has no `env` yet (`() => env.IDEMPOTENCY`, with
   * `env` from `cloudflare:workers`).
   */
  namespace: ShardNamespace<Id> | (() => ShardNamespace<Id>);
  /**
   * How many objects the records are spread over, by a hash of their id: each
   * object runs one call at a time, so this sizes the throughput. Keep it once
   * records are written: with another count, a key's record is looked for in
   * another object, and a retry of a running or finished operation runs it
   * again. At most 1,024.
   * @default 64
   */
  shards?: number;
}

export interface DurableObjectStore extends IdempotencyStore {
  readonly name: 'durable-object';
  readonly admin: StoreAdmin;
  /** The rows every shard keeps (records and lists of steps), expired ones not swept yet included. */
  rows(): Promise<number>;
}

/**
 * The store on Cloudflare Durable Objects: the records of a key live in one of
 * `shards` objects of the class {@link IdempotencyShard}, which runs each call
 * as one transaction of its SQLite storage. Every isolate of every location
 * reaches the same object for a key, so a key runs once wherever its retries
 * land. No notifications: a request that waits for another polls.
 */
export function durableObjectStore<Id>(options: DurableObjectStoreOptions<Id>): DurableObjectStore {
  // initialized config
  const where = 'durableObjectStore';
  const { namespace, shards = 64 } = options ?? ({} as DurableObjectStoreOptions<Id>);
  if (typeof namespace !== 'function' && !isNamespace(namespace)) {
    throw configError(
      where,
      `namespace must be the Durable Object binding of the IdempotencyShard class (env.IDEMPOTENCY), or a function that returns it, got ${describeValue(namespace)}.`,
    );
  }
  checkWholeNumber(shards, 'shards', where, { min: 1, max: 1_024 });
  const bound = typeof namespace === 'function' ? namespace : () => namespace;

  /** The shard a record id lives in: the first 4 bytes of its SHA-256, modulo `shards`. */
  const shardOf = (id: string): number => {
    const digest = sha256Bytes(id);
    return (((digest[0]! << 24) | (digest[1]! << 16) | (digest[2]! << 8) | digest[3]!) >>> 0) % shards;
  };

  // initialized for each call
  async function call<C extends ShardCall>(shard: number, name: C, input: ShardCalls[C][0]): Promise<ShardCalls[C][1]> {
    const ns = bound();
    if (!isNamespace(ns)) {
      throw configError(where, `namespace() must return the IdempotencyShard binding, got ${describeValue(ns)}.`);
    }
    const response = await ns
      .get(ns.idFromName(`shard:${shard}`))
      .fetch(`https://shard/${name}`, { method: 'POST', body: JSON.stringify(input) });
    const text = await response.text();
    let reply: { answer?: ShardCalls[C][1]; error?: string };
    try {
      reply = JSON.parse(text) as typeof reply;
    } catch {
      reply = { error: text.slice(0, 200) };
    }
    if (!response.ok || reply.error !== undefined) {
      throw new Error(
        `durableObjectStore: shard ${shard} answered ${response.status} to ${name}: ${reply.error ?? 'no answer'}. Is the binding the IdempotencyShard class of this package's version?`,
      );
    }
    return reply.answer as ShardCalls[C][1];
  }
  const onRecord = <C extends ShardCall>(name: C) => {
    return (input: ShardCalls[C][0] & { id: string }) => call(shardOf(input.id), name, input);
  };

  const admin: StoreAdmin = {
    inspect: onRecord('inspect'),
    forget: onRecord('forget'),
    async list({ cursor, limit = DEFAULT_LIST_LIMIT, ...filters }: ListInput): Promise<ListPage> {
      checkWholeNumber(limit, 'limit', 'list', { min: 1 });
      let [shard, after] = parseCursor(cursor, shards);
      const records: RecordSummary[] = [];
      let examined = 0;
      let read = 0;
      let time: number | undefined;
      for (let visited = 0; visited < SHARDS_PER_PAGE && shard < shards; visited++) {
        const page = await call(shard, 'list', { ...filters, after, limit: limit - read });
        time ??= page.time;
        records.push(...page.records);
        examined += page.examined;
        read += page.read;
        if (read >= limit) return { records, examined, time, cursor: `${shard}:${page.last}` };
        shard++;
        after = '';
      }
      const done: ListPage = { records, examined, time: time ?? Date.now() };
      if (shard < shards) done.cursor = `${shard}:`;
      return done;
    },
  };

  return {
    name: 'durable-object',
    admin,
    claim: onRecord('claim'),
    complete: onRecord('complete'),
    release: onRecord('release'),
    extend: onRecord('extend'),
    saveStep: onRecord('saveStep'),
    async rows() {
      const counts = await Promise.all(Array.from({ length: shards }, (_, shard) => call(shard, 'rows', {})));
      return counts.reduce((sum, n) => sum + n, 0);
    },
  };
}

function isNamespace(value: unknown): value is ShardNamespace<unknown> {
  const ns = value as Partial<ShardNamespace<unknown>> | null;
  return typeof ns === 'object' && ns !== null && typeof ns.idFromName === 'function' && typeof ns.get === 'function';
}

/** A listing's cursor: `<shard>:<last id read there>`. */
function parseCursor(cursor: string | undefined, shards: number): [number, string] {
  if (cursor === undefined) return [0, ''];
  const colon = cursor.indexOf(':');
  const shard = Number(cursor.slice(0, colon));
  if (colon < 1 || !Number.isInteger(shard) || shard < 0 || shard >= shards) {
    throw configError(
      'list',
      `cursor must be the cursor of the previous page of this store's listing, got ${describeValue(cursor)}.`,
    );
  }
  return [shard, cursor.slice(colon + 1)];
}
