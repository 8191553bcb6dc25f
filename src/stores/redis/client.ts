/* biome-ignore-all lint/suspicious/noExplicitAny: the clients are described by what the store calls on them, so that
   neither ioredis's types nor node-redis's are needed to compile against this package */

// What the Redis store needs of a client, the same for ioredis and node-redis: the store's code above
// this file never sees which one it runs on.

import { keySlot } from './fence.js';

/** An ioredis `Redis` (single node, Sentinel) or `Cluster`, ioredis 5 or 6, by what the store uses of it. */
export interface IoRedisClient {
  evalsha(...args: any[]): Promise<unknown>;
  eval(...args: any[]): Promise<unknown>;
  pipeline(...args: any[]): any;
  duplicate(...args: any[]): any;
  set(...args: any[]): Promise<unknown>;
  readonly isCluster?: boolean;
  readonly options?: { readonly keyPrefix?: string | undefined } | object;
}

/**
 * A node-redis client (`createClient`, connected), cluster (`createCluster`) or
 * Sentinel (`createSentinel`), node-redis 5 or 6 (`redis` or `@redis/client`),
 * by what the store uses of it.
 */
export interface NodeRedisClient {
  sendCommand(...args: any[]): Promise<any>;
}

export type RedisClient = IoRedisClient | NodeRedisClient;

/** A command to one Redis: its name and arguments. */
export type RedisCommand = readonly [string, ...(string | number)[]];

/** Each command's own outcome, in the order sent. */
export type Settled = { ok: true; reply: unknown } | { ok: false; error: unknown };

export interface RedisConnection {
  readonly library: 'ioredis' | 'node-redis';
  readonly isCluster: boolean;
  /**
   * Whether a command sent right after another goes on the same connection, as `WAIT` must
   * (it counts the replicas that hold that connection's writes). Not on a node-redis Sentinel
   * client, which spreads commands over its pool.
   */
  readonly ordered: boolean;
  /** The client's own key prefix, which it adds to every key it sends (ioredis's `keyPrefix`). */
  readonly keyPrefix: string;
  /** One command; `route` is a key of the slot it belongs to (a Cluster sends it to that slot's master). */
  send(command: RedisCommand, route: string): Promise<unknown>;
  /** Commands in this order on one connection (a Cluster: that of `route`'s master), in one write where the client can. */
  pipeline(commands: RedisCommand[], route: string): Promise<Settled[]>;
  /**
   * A Cluster: the master that serves `route`'s slot now, by the client's own map, or undefined
   * when it does not know yet. '' on a single node or Sentinel (one connection).
   */
  nodeOf(route: string): string | undefined;
  /**
   * Commands of several slots of one Cluster master, in order on its connection, each keyed
   * command answered where it is (a slot served elsewhere answers MOVED or ASK, not followed);
   * `route` is a key of one of them. Elsewhere the same as {@link pipeline}.
   */
  pipelineOnNode(commands: RedisCommand[], route: string): Promise<Settled[]>;
  /**
   * Subscribes to `channel` on a connection of the store's own (opened on the first call); `onMessage` gets each
   * message. Where {@link watchesSubscriber}, `onLive(false)` says that connection was lost (and with it what is
   * published until it is back), `onLive(true)` that it is subscribed again.
   */
  subscribe(channel: string, onMessage: (message: string) => void, onLive: (live: boolean) => void): Promise<void>;
  /**
   * Whether {@link subscribe} reports its connection's losses: not on a Cluster nor a node-redis Sentinel client,
   * whose clients keep their pub/sub connections to themselves and resubscribe without telling.
   */
  readonly watchesSubscriber: boolean;
  /** Closes what `subscribe` opened, if anything. */
  closeSubscriber(): Promise<void>;
  /** An error Redis answered (not a failure to get an answer). */
  isErrorReply(error: unknown): boolean;
}

const isFunction = (value: unknown) => typeof value === 'function';

/** The connection of a client, or undefined if it is neither ioredis's nor node-redis's. */
export function connectionOf(client: unknown): RedisConnection | undefined {
  if (client === null || typeof client !== 'object') return undefined;
  const c = client as Record<string, unknown>;
  if (isFunction(c.evalsha) && isFunction(c.pipeline)) return ioredis(client as IoRedisClient);
  if (isFunction(c.sendCommand)) return nodeRedis(client as NodeRedisClient);
  return undefined;
}

function ioredis(client: IoRedisClient): RedisConnection {
  const isCluster = client.isCluster === true;
  let subscriber: any;
  const listeners = new Map<string, { onMessage: (message: string) => void; onLive: (live: boolean) => void }>();
  /** Reports the losses of `sub`, the subscriber of a single node or Sentinel, while it is the store's. */
  const watch = (sub: any) => {
    let isLive = true;
    const live = (up: boolean) => {
      if (up === isLive) return;
      isLive = up;
      if (sub === subscriber) for (const { onLive } of listeners.values()) onLive(up);
    };
    sub.on('close', () => live(false));
    sub.on('ready', () => {
      // ioredis subscribes again after this event, and tells nothing then: the answer to a SUBSCRIBE
      // of our own says that Redis has the connection subscribed, from which point nothing is lost.
      if (!isLive)
        sub.subscribe(...listeners.keys()).then(
          () => live(true),
          () => {},
        );
    });
  };
  const keyPrefix = ((client.options as { keyPrefix?: string } | undefined)?.keyPrefix ?? '') as string;
  const pipeline = async (commands: RedisCommand[]): Promise<Settled[]> => {
    const p = client.pipeline();
    for (const [name, ...args] of commands) p[name.toLowerCase()](...args);
    const replies = (await p.exec()) as [Error | null, unknown][] | null;
    return commands.map((_, i) => {
      const reply = replies?.[i];
      if (reply === undefined)
        return { ok: false, error: new Error('redisStore: Redis returned no reply to a pipelined command.') };
      return reply[0] === null ? { ok: true, reply: reply[1] } : { ok: false, error: reply[0] };
    });
  };
  return {
    library: 'ioredis',
    isCluster,
    ordered: true,
    keyPrefix,
    send([name, ...args]) {
      return (client as any)[name.toLowerCase()](...args);
    },
    // ioredis sends a Cluster pipeline of several slots to their master when one master serves
    // them all, and follows a redirection only when every command got the same one.
    nodeOf: (route) => (isCluster ? (client as any).slots?.[keySlot(keyPrefix + route)]?.[0] : ''),
    pipelineOnNode: pipeline,
    pipeline,
    watchesSubscriber: !isCluster,
    async subscribe(channel, onMessage, onLive) {
      listeners.set(channel, { onMessage, onLive });
      if (subscriber === undefined) {
        // A subscribed connection can run nothing else: the store opens its own.
        subscriber = client.duplicate();
        subscriber.on('error', () => {
          // Reconnection (and resubscription) is ioredis's job; waiters poll meanwhile.
        });
        subscriber.on('message', (from: string, message: string) => listeners.get(from)?.onMessage(message));
        if (!isCluster) watch(subscriber);
      }
      await subscriber.subscribe(channel);
    },
    async closeSubscriber() {
      const sub = subscriber;
      subscriber = undefined;
      if (sub !== undefined) await sub.quit().catch(() => sub.disconnect());
    },
    // ioredis rejects with a ReplyError when Redis answered with an error.
    isErrorReply: (error) => error instanceof Error && error.name === 'ReplyError',
  };
}

function nodeRedis(client: NodeRedisClient): RedisConnection {
  const c = client as any;
  const kind = isFunction(c.getSlotMaster)
    ? 'cluster'
    : isFunction(c.acquire) && isFunction(c.use)
      ? 'sentinel'
      : 'client';
  /** node-redis takes strings (or Buffers) only. */
  const argv = (command: RedisCommand) => command.map(String);
  const sendOn = (target: any, command: RedisCommand, route: string): Promise<unknown> =>
    kind === 'cluster'
      ? target.sendCommand(route, false, argv(command))
      : kind === 'sentinel'
        ? target.sendCommand(false, argv(command))
        : target.sendCommand(argv(command));
  /** Commands sent in one turn go out in one write, in order, on one connection: node-redis pipelines them itself. */
  const inOrder = (target: any, commands: RedisCommand[], route: string) =>
    Promise.all(
      commands.map((command) =>
        sendOn(target, command, route).then(
          (reply): Settled => ({ ok: true, reply }),
          (error: unknown): Settled => ({ ok: false, error }),
        ),
      ),
    );
  let subscriber: any;
  let subscribed: { channel: string; listener: (message: string) => void } | undefined;
  return {
    library: 'node-redis',
    isCluster: kind === 'cluster',
    ordered: kind !== 'sentinel',
    keyPrefix: '',
    send: (command, route) => sendOn(c, command, route),
    nodeOf: (route) => (kind === 'cluster' ? c.slots?.[keySlot(route)]?.master?.address : ''),
    // The master's own client: commands on it are not rerouted, so a redirection comes back as an answer.
    async pipelineOnNode(commands, route) {
      if (kind !== 'cluster') return inOrder(c, commands, route);
      const node = await c.nodeClient(c.getSlotMaster(keySlot(route)));
      return Promise.all(
        commands.map((command) =>
          node.sendCommand(argv(command)).then(
            (reply: unknown): Settled => ({ ok: true, reply }),
            (error: unknown): Settled => ({ ok: false, error }),
          ),
        ),
      );
    },
    pipeline: (commands, route) => inOrder(c, commands, route),
    watchesSubscriber: kind === 'client',
    async subscribe(channel, onMessage, onLive) {
      const listener = (message: string) => onMessage(message);
      if (kind === 'client') {
        // A subscribed connection can run nothing else: the store opens its own.
        if (subscriber === undefined) {
          const sub = c.duplicate();
          subscriber = sub;
          // Reconnection (and resubscription) is node-redis's job; waiters poll meanwhile. It tells
          // 'ready' once it has resubscribed.
          let isLive = true;
          const live = (up: boolean) => {
            if (up === isLive) return;
            isLive = up;
            if (sub === subscriber) onLive(up);
          };
          sub.on('error', () => {
            if (!sub.isReady) live(false);
          });
          sub.on('reconnecting', () => live(false));
          sub.on('end', () => live(false));
          sub.on('ready', () => live(true));
          await sub.connect();
        }
        await subscriber.subscribe(channel, listener);
      } else {
        // A cluster and a Sentinel client keep a pub/sub connection of their own.
        await c.subscribe(channel, listener);
      }
      subscribed = { channel, listener };
    },
    async closeSubscriber() {
      const sub = subscriber;
      const was = subscribed;
      subscriber = undefined;
      subscribed = undefined;
      if (sub !== undefined) await Promise.resolve(sub.close?.() ?? sub.quit()).catch(() => sub.destroy?.());
      else if (was !== undefined) await c.unsubscribe(was.channel, was.listener).catch(() => {});
    },
    // node-redis rejects with an ErrorReply (or a subclass) when Redis answered with an error.
    isErrorReply(error) {
      for (let proto = Object.getPrototypeOf(error); proto !== null; proto = Object.getPrototypeOf(proto)) {
        if (proto.constructor?.name === 'ErrorReply') return true;
      }
      return false;
    },
  };
}
