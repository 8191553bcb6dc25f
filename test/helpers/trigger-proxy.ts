import { type AddressInfo, connect, createServer, type Socket } from 'node:net';

export type TriggerMode =
  /** The matching request never reaches the server. */
  | 'before-forward'
  /** The matching request reaches the server, which answers; the answer never reaches the client. */
  | 'after-reply';

export interface TriggerProxy {
  port: number;
  /**
   * The next client chunk that contains `pattern` fires `onTrigger` (once),
   * at the point `mode` names; then every open connection is cut, as a
   * crashed server cuts them. The returned promise resolves when it fired.
   */
  arm(pattern: string, mode: TriggerMode, onTrigger: () => Promise<void>): Promise<void>;
  close(): Promise<void>;
}

/**
 * A TCP proxy in front of a server (Redis here) that lets a test act at an
 * exact point of the protocol: when a given command goes by, before the
 * server sees it or after it has answered it. Everything else passes through.
 */
export async function startTriggerProxy(targetPort: number): Promise<TriggerProxy> {
  const sockets = new Set<Socket>();
  let armed: { pattern: Buffer; mode: TriggerMode; fire: () => void } | undefined;

  const cutAll = () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
  };

  const server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    let awaitingReply: (() => void) | undefined;
    let tail = Buffer.alloc(0); // the pattern may straddle two chunks

    client.on('data', (chunk) => {
      const seen = Buffer.concat([tail, chunk]);
      tail = seen.subarray(Math.max(0, seen.length - 64));
      const trigger = armed;
      if (trigger !== undefined && seen.includes(trigger.pattern)) {
        armed = undefined;
        if (trigger.mode === 'before-forward') {
          client.pause();
          trigger.fire();
          return;
        }
        awaitingReply = trigger.fire;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (awaitingReply !== undefined) {
        const fire = awaitingReply;
        awaitingReply = undefined;
        client.pause();
        fire();
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
    port: (server.address() as AddressInfo).port,
    arm(pattern, mode, onTrigger) {
      return new Promise<void>((resolve, reject) => {
        armed = {
          pattern: Buffer.from(pattern),
          mode,
          fire: () => {
            onTrigger().then(() => {
              cutAll();
              resolve();
            }, reject);
          },
        };
      });
    },
    close: async () => {
      armed = undefined;
      cutAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
