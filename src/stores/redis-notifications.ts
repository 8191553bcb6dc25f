import type { Cluster, Redis } from 'ioredis';
import { KeyedListeners } from './listeners.js';

/**
 * Notifications that a record settled, for `inFlight: 'wait'`: one subscriber
 * connection (opened on the first wait), one channel, and the waiters of each record key.
 */
export function settledNotifications(client: Redis | Cluster, channel: string) {
  let subscriber: Redis | Cluster | undefined;
  let subscribed: Promise<void> | undefined;
  const waiters = new KeyedListeners();

  function subscribe(): Promise<void> {
    if (subscribed !== undefined) return subscribed;
    let sub = subscriber;
    if (sub === undefined) {
      // A subscribed connection can run nothing else: the store opens its own.
      sub = subscriber = (client.duplicate as (this: Redis | Cluster) => Redis | Cluster).call(client);
      sub.on('error', () => {
        // Reconnection (and resubscription) is ioredis's job; waiters poll meanwhile.
      });
      sub.on('message', (_channel: string, key: string) => waiters.notify(key));
    }
    const pending = sub.subscribe(channel).then(
      () => undefined,
      (error: unknown) => {
        subscribed = undefined;
        throw error;
      },
    );
    subscribed = pending;
    return pending;
  }

  return {
    /** Calls `listener` whenever `key` settles, from once the subscription is live; returns how to stop. */
    async listen(key: string, listener: () => void): Promise<() => void> {
      await subscribe();
      return waiters.add(key, listener);
    },

    /** Closes the subscriber connection, if one was opened. */
    async close(): Promise<void> {
      const sub = subscriber;
      subscriber = undefined;
      subscribed = undefined;
      if (sub !== undefined) await sub.quit().catch(() => sub.disconnect());
    },
  };
}
