import { type AddressInfo, connect, createServer, type Socket } from 'node:net';

export interface DropProxy {
  /** `http://127.0.0.1:<port>`: point the client here. */
  url: string;
  /** Responses dropped so far. */
  readonly dropped: number;
  /** Drops the next `count` responses too. */
  dropNext(count: number): void;
  close(): Promise<void>;
}

/**
 * A real TCP proxy in front of an HTTP server that drops responses: when the
 * first bytes of a response come back from the server (so the server has
 * finished the call), it resets both connections instead of passing them on.
 * The client sees a connection reset, exactly as if the network had failed
 * after the work was done. The first `drop` responses are dropped, then it
 * passes everything through.
 */
export async function startDropProxy(options: { targetUrl: string; drop?: number }): Promise<DropProxy> {
  const target = new URL(options.targetUrl);
  let toDrop = options.drop ?? 1;
  let dropped = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    client.on('data', (chunk) => upstream.write(chunk));
    upstream.on('data', (chunk) => {
      if (toDrop > 0) {
        toDrop--;
        dropped++;
        client.resetAndDestroy();
        upstream.destroy();
        return;
      }
      client.write(chunk);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get dropped() {
      return dropped;
    },
    dropNext(count) {
      toDrop += count;
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
