/**
 * What the Durable Object store needs of Cloudflare's runtime, by shape: the
 * package ships no `cloudflare:workers` import and no dependency on
 * `@cloudflare/workers-types`, whose `DurableObjectNamespace` and
 * `DurableObjectState` fit these interfaces.
 */

/** A value a SQLite column holds, as `ctx.storage.sql` answers it. */
export type SqlValue = string | number | null | ArrayBuffer;

/** `ctx.storage.sql` of a SQLite-backed Durable Object. */
export interface ShardSql {
  exec(query: string, ...bindings: unknown[]): { toArray(): Record<string, SqlValue>[] };
}

/** The `ctx` (`DurableObjectState`) a Durable Object class is constructed with. */
export interface ShardState {
  readonly storage: {
    /** Absent on an object whose class is not SQLite-backed (`new_sqlite_classes`). */
    readonly sql?: ShardSql;
    transactionSync<T>(fn: () => T): T;
    getAlarm(): Promise<number | null>;
    setAlarm(scheduledTime: number): Promise<void>;
  };
  blockConcurrencyWhile<T>(fn: () => Promise<T>): Promise<T>;
}

/** A stub of one object (`DurableObjectStub`): the store calls its `fetch`. */
export interface ShardStub {
  fetch(url: string, init: { method: 'POST'; body: string }): Promise<Response>;
}

/**
 * The binding of the object class (`env.IDEMPOTENCY`, a `DurableObjectNamespace`
 * in the types `wrangler types` writes).
 */
export interface ShardNamespace<Id = unknown> {
  idFromName(name: string): Id;
  get(id: Id): ShardStub;
}
