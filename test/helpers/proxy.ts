import { type AddressInfo, connect, createServer, type Socket } from 'node:net';

/** One proxied connection: what the client sent and what the server answers pass through these. */
export interface PipeHooks {
  /** A chunk from the client; the hook forwards it (`upstream.write`) or not. */
  fromClient?(chunk: Buffer): void;
  /** A chunk from the server; the hook forwards it (`client.write`) or not. */
  fromServer?(chunk: Buffer): void;
}

export interface Pipe {
  port: number;
  /** Cuts every open connection, as a crashed server or network would. */
  cutAll(): void;
  close(): Promise<void>;
}

/**
 * The skeleton of the test proxies: a real TCP server on a free port that
 * pairs each client connection with one to the target, and lets `connection`
 * decide, per connection, what passes. Without hooks, everything passes.
 */
export async function startPipe(
  target: { port: number; host?: string },
  connection: (client: Socket, upstream: Socket) => PipeHooks = () => ({}),
): Promise<Pipe> {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(target.port, target.host ?? '127.0.0.1');
    // as Redis and its clients do: a small write (a replica's ACK, a GETACK) is not held back for the previous one's TCP ACK
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    sockets.add(client).add(upstream);
    const hooks = connection(client, upstream);
    client.on('data', hooks.fromClient ?? ((chunk) => upstream.write(chunk)));
    upstream.on('data', hooks.fromServer ?? ((chunk) => client.write(chunk)));
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
  const cutAll = () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
  };
  return {
    port: (server.address() as AddressInfo).port,
    cutAll,
    close: async () => {
      cutAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

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
  const pipe = await startPipe({ port: options.targetPort, host: options.targetHost }, (client) => {
    // Chunks keep their order even when the delay changes: each leaves no
    // earlier than the one before it.
    let lastDue = 0;
    return {
      fromServer(chunk) {
        const due = Math.max(Date.now() + delay, lastDue);
        lastDue = due;
        const wait = due - Date.now();
        if (wait <= 0) client.write(chunk);
        else setTimeout(() => client.writable && client.write(chunk), wait);
      },
    };
  });
  return {
    port: pipe.port,
    setDelay: (ms) => {
      delay = ms;
    },
    close: pipe.close,
  };
}
