import { KeyedListeners } from './listeners.js';
import type { RedisConnection } from './redis-client.js';

/**
 * Notifications that a record settled, for `inFlight: 'wait'`: one subscription
 * (made on the first wait, on a connection of the store's own), one channel,
 * and the waiters of each record key.
 */
export function settledNotifications(connection: RedisConnection, channel: string) {
  let subscribed: Promise<void> | undefined;
  const waiters = new KeyedListeners();

  function subscribe(): Promise<void> {
    if (subscribed !== undefined) return subscribed;
    const pending = connection
      .subscribe(channel, (key) => waiters.notify(key))
      .catch((error: unknown) => {
        subscribed = undefined;
        throw error;
      });
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
      subscribed = undefined;
      await connection.closeSubscriber();
    },
  };
}
