import { startPipe } from './proxy.js';

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
  let armed: { pattern: Buffer; mode: TriggerMode; fire: () => void } | undefined;

  const pipe = await startPipe({ port: targetPort }, (client, upstream) => {
    let awaitingReply: (() => void) | undefined;
    let tail = Buffer.alloc(0); // the pattern may straddle two chunks
    return {
      fromClient(chunk) {
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
      },
      fromServer(chunk) {
        if (awaitingReply !== undefined) {
          const fire = awaitingReply;
          awaitingReply = undefined;
          client.pause();
          fire();
          return;
        }
        client.write(chunk);
      },
    };
  });

  return {
    port: pipe.port,
    arm(pattern, mode, onTrigger) {
      return new Promise<void>((resolve, reject) => {
        armed = {
          pattern: Buffer.from(pattern),
          mode,
          fire: () => {
            onTrigger().then(() => {
              pipe.cutAll();
              resolve();
            }, reject);
          },
        };
      });
    },
    close: async () => {
      armed = undefined;
      await pipe.close();
    },
  };
}
