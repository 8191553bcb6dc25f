/* biome-ignore-all lint/suspicious/noExplicitAny: a Cluster's masters are reached through the clients' own objects
   (ioredis's `nodes()`, node-redis's `masters` and `nodeClient()`), described by what is called on them */

import { byCode, DONE_REPLY, SEEN_STATE_CODE, STATE_CODE } from '../../core/protocol/codes.js';
import { escapePart, nameOfRecordId } from '../../core/record-id.js';
import type {
  ForgetInput,
  InspectInput,
  ListInput,
  ListPage,
  RecordInfo,
  RecordSummary,
  StoreAdmin,
} from '../../core/store-admin.js';
import { EXPIRY_ROUNDING } from '../../core/store-admin.js';
import type { RedisClient, RedisCommand, RedisConnection } from './client.js';
import { scriptRunner } from './script-runner.js';
import { ADMIN } from './scripts.js';

// The Redis store's operator API: one script per record read or deleted (scripts.ts), and
// SCAN for listings, master by master on a Cluster.

const DEFAULT_LIMIT = 1_000;
const STATE_OF = byCode(STATE_CODE);

/** A Redis glob that matches `text` literally (SCAN's MATCH). */
export function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, (ch) => `\\${ch}`);
}

/** HMGET s f t c l w, as the scripts answer it. */
type Fields = [string | null, string | null, string | null, string | null, string | null, string | null];

/** A record's summary from its fields, TTL and outcome size, read at `time`. */
function summaryOf(id: string, time: number, fields: Fields, pttl: number, bytes: number): RecordSummary {
  const [s, f, t, c, l, w] = fields;
  const state = STATE_OF[s as string];
  if (state === undefined) throw new Error(`redisStore: unexpected record state ${String(s)} in ${id}.`);
  const out: RecordSummary = { id, state };
  if (f !== null) out.fingerprint = f;
  if (t !== null) out.token = t;
  if (c !== null) out.claimedAt = Number(c);
  if (pttl >= 0) out.expiresAt = time + pttl;
  if (state === 'in_progress') {
    if (l !== null) out.lockTtl = Number(l);
    out.waiting = w !== null;
  } else {
    out.bytes = bytes;
  }
  return out;
}

/** A master to SCAN: its address (how the masters are ordered) and how to send it a command. */
interface ScanNode {
  address: string;
  send(command: RedisCommand): Promise<unknown>;
}

/** The nodes a listing walks: the one Redis (a Sentinel's master), or each Cluster master sorted by address. */
async function scanNodes(client: RedisClient, connection: RedisConnection): Promise<ScanNode[]> {
  if (!connection.isCluster) return [{ address: '', send: (command) => connection.send(command, '') }];
  const c = client as any;
  let nodes: ScanNode[];
  if (connection.library === 'ioredis') {
    const masters = () => (c.nodes('master') as any[]) ?? [];
    // A Cluster client that has not connected yet knows no nodes: any command makes it connect.
    if (masters().length === 0) await connection.send(['TIME'], '');
    nodes = masters().map((node: any) => ({
      address: `${node.options.host}:${node.options.port}`,
      send: ([name, ...args]: RedisCommand) => node[name.toLowerCase()](...args),
    }));
  } else {
    nodes = ((c.masters as any[]) ?? []).map((master: any) => ({
      address: String(master.address),
      send: async (command: RedisCommand) => (await c.nodeClient(master)).sendCommand(command.map(String)),
    }));
  }
  if (nodes.length === 0) throw new Error('redisStore: the Cluster client knows no masters to list.');
  return nodes.sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
}

/** Where a listing is: the index of the master (0 off a Cluster) and SCAN's cursor on it. */
function parseCursor(cursor: string | undefined, cluster: boolean): { node: number; scan: string } {
  if (cursor === undefined) return { node: 0, scan: '0' };
  const match = (cluster ? /^(\d+):(\d+)$/ : /^()(\d+)$/).exec(cursor);
  if (match === null) throw new Error(`redisStore: ${JSON.stringify(cursor)} is not a cursor of this store's listing.`);
  return { node: Number(match[1] || 0), scan: match[2]! };
}

/** The admin's own view of the store (see redisStore). */
export interface RedisAdminOptions {
  client: RedisClient;
  connection: RedisConnection;
  prefix: string;
  /** The settled notifications' channel (a forgotten claim tells its waiters, as a release does). */
  channel: string;
}

/**
 * The Redis store's {@link StoreAdmin}. `inspect` and `forget` are one script
 * each (one round trip, on the record's node); a `list` page is one SCAN (with
 * TIME beside it) on one node, then one script per key found, sent together
 * (one write off a Cluster). None of them changes a record but `forget`, and
 * none touches the restart fence's marker.
 *
 * A page's `limit` is SCAN's COUNT: a listing walks the whole keyspace (every
 * key, the store's or not), about COUNT keys per call (at most 10 x COUNT
 * buckets of Redis's table), and Redis answers those that MATCH, so a filter
 * by name can answer few or none with a cursor to go on, and Redis can answer
 * a few more than COUNT. A record is answered at least once if it lives the whole listing,
 * and can be answered twice across pages if Redis resized its table meanwhile
 * (SCAN's guarantees); on a Cluster the masters are walked in the order of
 * their addresses, so a failover or a resharding during a listing can skip or
 * repeat records.
 */
export function redisAdmin({ client, connection, prefix, channel }: RedisAdminOptions): StoreAdmin {
  // Reads, and a delete an operator asks for: no WAIT for replicas.
  const run = scriptRunner(connection);
  const { SUMMARY, INSPECT, FORGET } = ADMIN;
  const keyOf = (id: string) => `${prefix}{${id}}`;
  // SCAN answers keys as Redis holds them (with ioredis's keyPrefix), and MATCH gets no keyPrefix added.
  const scanned = connection.keyPrefix + prefix;

  return {
    async inspect({ id, body = false }: InspectInput): Promise<RecordInfo> {
      const key = keyOf(id);
      const [time, record, steps, stepsTtl, outcome] = (await run(
        INSPECT,
        [2, key, `${key}:steps`],
        [body ? '1' : '0'],
      )) as [number, [Fields, number, number] | [], (string | number)[], number, string | null];
      const info: RecordInfo =
        record.length === 0
          ? { id, state: 'absent', time, steps: [] }
          : { ...summaryOf(id, time, record[0], record[1], record[2]), time, steps: [] };
      if (body && info.state !== 'absent' && info.state !== 'in_progress') info.body = outcome ?? '';
      for (let i = 0; i + 1 < steps.length; i += 2) {
        info.steps.push({ name: String(steps[i]), bytes: Number(steps[i + 1]) });
      }
      if (info.steps.length > 0 && stepsTtl >= 0) info.stepsExpireAt = time + stepsTtl;
      return info;
    },

    async list({ state, name, olderThan, cursor, limit = DEFAULT_LIMIT }: ListInput): Promise<ListPage> {
      const nodes = await scanNodes(client, connection);
      const at = parseCursor(cursor, connection.isCluster);
      // A cursor past the last master (a Cluster that lost one since): the listing is over.
      const node = nodes[at.node] ?? nodes[0]!;
      const over = at.node >= nodes.length;
      // `<prefix>{*}`: records only (a steps key ends in `}:steps`, a fence marker in `fence`).
      const match = `${globEscape(scanned)}{${name === undefined ? '*' : `*:${globEscape(escapePart(name))}:*`}}`;
      const count = Math.max(1, Math.floor(limit));
      const [clock, reply] = (await Promise.all([
        node.send(['TIME']),
        over ? ['0', []] : node.send(['SCAN', at.scan, 'MATCH', match, 'COUNT', count]),
      ])) as [[string, string], [string, string[]]];
      const time = Number(clock[0]) * 1000 + Math.floor(Number(clock[1]) / 1000);
      const [next, keys] = reply;

      // SCAN may answer a key twice: once is enough for a page.
      const ids = [...new Set(keys)]
        .filter((key) => key.startsWith(scanned) && key.endsWith('}'))
        .map((key) => key.slice(scanned.length + 1, -1));
      const read = await Promise.all(
        ids.map((id) =>
          run(SUMMARY, [1, keyOf(id)], []).then(
            (summary) => summary as [number, Fields, number, number] | [number],
            (error: unknown) => {
              // Not a record's hash (WRONGTYPE): a key of someone else's under the prefix.
              if (connection.isErrorReply(error) && /^WRONGTYPE/.test((error as Error).message)) return undefined;
              throw error;
            },
          ),
        ),
      );
      const records: RecordSummary[] = [];
      let examined = 0;
      for (let i = 0; i < ids.length; i++) {
        const summary = read[i];
        if (summary === undefined || summary.length === 1) continue; // gone since the SCAN
        const [now, fields, pttl, bytes] = summary;
        const record = summaryOf(ids[i]!, now, fields, pttl, bytes);
        if (state !== undefined && record.state !== state) continue;
        if (name !== undefined && nameOfRecordId(record.id) !== name) continue;
        examined++;
        // By the page's time, as it reports it (each record is read a little later, at `now`).
        if (olderThan !== undefined && record.claimedAt !== undefined && record.claimedAt > time - olderThan) continue;
        records.push(record);
      }

      const page: ListPage = { records, examined, time };
      if (String(next) !== '0') page.cursor = connection.isCluster ? `${at.node}:${next}` : String(next);
      else if (!over && at.node + 1 < nodes.length) page.cursor = `${at.node + 1}:0`;
      return page;
    },

    async forget({ id, state, token, steps = false, expiresAt }: ForgetInput): Promise<boolean> {
      const code: string | undefined = SEEN_STATE_CODE[state];
      if (code === undefined) throw new Error(`redisStore: cannot forget a record in state ${String(state)}.`);
      if (state !== 'absent' && token === undefined) return false;
      const key = keyOf(id);
      const keys: [number, ...string[]] = steps ? [2, key, `${key}:steps`] : [1, key];
      const latest = expiresAt === undefined ? '' : Math.floor(expiresAt) + EXPIRY_ROUNDING;
      return (await run(FORGET, keys, [code, token ?? '', channel, key, latest])) === DONE_REPLY.yes;
    },
  };
}
