import { KeyedListeners, type SettledListener } from '../listeners.js';
import type { RedisConnection } from './client.js';

/**
 * Where the client does not report its subscriber connection's losses (a Cluster, a node-redis Sentinel
 * client), every waiter is told to check this often: a message lost to a reconnection there goes untold.
 */
const UNWATCHED_CHECK_MS = 5_000;

/**
 * Notifications that a record settled, for `inFlight: 'wait'`: one subscription
 * (made on the first wait, on a connection of the store's own), one channel,
 * and the waiters of each record key. While that connection is lost, its
 * waiters are told so (they poll), and told to check once it is back.
 */
export function settledNotifications(connection: RedisConnection, channel: string) {
  let subscribed: Promise<void> | undefined;
  /** False from the loss of the subscriber connection until it is subscribed again. */
  let live = true;
  let unwatchedChecks: NodeJS.Timeout | undefined;
  const waiters = new KeyedListeners();

  function subscribe(): Promise<void> {
    if (subscribed !== undefined) return subscribed;
    const pending = connection
      .subscribe(
        channel,
        (key) => waiters.notify(key),
        (up) => {
          live = up;
          waiters.notifyAll(up);
        },
      )
      .catch((error: unknown) => {
        subscribed = undefined;
        throw error;
      });
    subscribed = pending;
    return pending;
  }

  function stopChecks() {
    clearInterval(unwatchedChecks);
    unwatchedChecks = undefined;
  }

  return {
    /**
     * Calls `listener()` whenever `key` settles, from once the subscription is live, `listener(false)` when
     * the subscriber connection is lost (at once if it is) and `listener()` once it is back; returns how to stop.
     */
    async listen(key: string, listener: SettledListener): Promise<() => void> {
      await subscribe();
      const remove = waiters.add(key, listener);
      if (!live) listener(false);
      if (!connection.watchesSubscriber && unwatchedChecks === undefined) {
        unwatchedChecks = setInterval(() => waiters.notifyAll(true), UNWATCHED_CHECK_MS);
        unwatchedChecks.unref();
      }
      return () => {
        remove();
        if (waiters.size === 0) stopChecks();
      };
    },

    /** Closes the subscriber connection, if one was opened. */
    async close(): Promise<void> {
      subscribed = undefined;
      live = true;
      stopChecks();
      await connection.closeSubscriber();
    },
  };
}
