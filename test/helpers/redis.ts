import { randomUUID } from 'node:crypto';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { Redis } from 'ioredis';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A client on the shared test Redis. */
export function connectRedis(): Redis {
  return new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
}

/** A client on a port where nothing listens: every command fails or hangs until it gives up. */
export function deadRedis(): Redis {
  const client = new Redis({
    host: '127.0.0.1',
    port: 1,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => 50,
  });
  client.on('error', () => {});
  return client;
}

/**
 * A client on a real TCP server that accepts connections and never answers:
 * a hung Redis. Commands wait until the caller gives up.
 */
export async function hungRedis(): Promise<{ client: Redis; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const client = new Redis({ host: '127.0.0.1', port, connectTimeout: 60_000 });
  client.on('error', () => {});
  return {
    client,
    close: async () => {
      client.disconnect();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A key prefix of its own per test, so files run in parallel without meeting. */
export function uniquePrefix(label = 'test'): string {
  return `idem-test:${label}:${randomUUID().slice(0, 8)}:`;
}

/** Deletes every key under `prefix`. */
export async function deleteByPrefix(redis: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    if (keys.length > 0) await redis.del(...keys);
    cursor = next;
  } while (cursor !== '0');
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
