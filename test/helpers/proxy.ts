import { createServer, type AddressInfo, type Socket, connect } from 'node:net';

export interface ProxyOptions {
  targetPort: number;
  targetHost?: string;
  /** Holds every chunk from the target this long before passing it on. */
  delayMs?: number;
}

export interface TcpProxy {
  port: number;
  /** Changes the delay for chunks that arrive from now on. */
  setDelay(ms: number): void;
  close(): Promise<void>;
}

/** A real TCP proxy in front of a server, to slow its answers down as a congested network would. */
export async function startTcpProxy(options: ProxyOptions): Promise<TcpProxy> {
  let delay = options.delayMs ?? 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(options.targetPort, options.targetHost ?? '127.0.0.1');
    sockets.add(client).add(upstream);
    client.on('data', (chunk) => upstream.write(chunk));
    // Chunks keep their order even when the delay changes: each leaves no
    // earlier than the one before it.
    let lastDue = 0;
    upstream.on('data', (chunk) => {
      const due = Math.max(Date.now() + delay, lastDue);
      lastDue = due;
      const wait = due - Date.now();
      if (wait <= 0) client.write(chunk);
      else setTimeout(() => client.writable && client.write(chunk), wait);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    setDelay: (ms) => {
      delay = ms;
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
