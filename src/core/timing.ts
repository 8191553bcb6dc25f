import { asyncScope, sharedTimers } from '#platform';
import { type EngineClock, realClock } from './clock.js';

/**
 * The async context the shared timers are armed in: this module's, not that of whichever request
 * armed one. A Node.js timer runs its callback in the context it was created in, and a queue's
 * timer serves every call of its delay and re-arms itself from its own callback: armed inside
 * request A, it would run request B's renewals (their events, their store calls) in A's context,
 * filing them under A's trace, and keep A's context alive as long as the queue is never empty.
 * So renewals run in no request's context.
 */
const detached = asyncScope('trpc-idempotency.TimerQueue');
/** An unref'd timer of `clock` armed in no request's context (see `detached`). */
export function detachedTimeout(fn: () => void, ms: number, clock: EngineClock = realClock): unknown {
  return detached.runInAsyncScope(clock.setTimeout, clock, fn, ms);
}

/** Something a {@link TimerQueue} calls back once its delay has passed; its list links are its own fields. */
export interface Timed {
  /** When it is due (the clock's `now()` time); set by {@link TimerQueue.add}. */
  due: number;
  prev: Timed | undefined;
  next: Timed | undefined;
  /** The queue it waits in, until it fires or is removed. */
  queue: TimerQueue | undefined;
  fire(): void;
}

/**
 * Callbacks due a fixed delay after they were added, behind one unref'd
 * Node.js timer. Every protected call sets store timeouts and a renewal timer
 * and removes them almost at once: here that is linking an entry in and out of
 * a list rather than creating and clearing a Node.js timer. The one timer stays
 * armed for the first entry due (entries of one delay are kept in the order they are due).
 */
export class TimerQueue {
  #head: Timed | undefined;
  #tail: Timed | undefined;
  #timer: unknown;
  /** The due time the armed timer was set for: entries due by then fire when it does. */
  #armedFor = 0;
  /** Entries due by then fire in the armed timer's turn of the event loop. */
  #limit = 0;
  /** The armed timer fired, and its entries fire after setImmediate. */
  #firing = false;

  constructor(
    readonly ms: number,
    readonly clock: EngineClock = realClock,
  ) {}

  /** Queues `entry` to fire `ms` after `now` (the clock's `now()` time, read by the caller once for all its uses). */
  add(entry: Timed, now: number): void {
    entry.due = now + this.ms;
    entry.queue = this;
    entry.next = undefined;
    entry.prev = this.#tail;
    if (this.#tail === undefined) this.#head = entry;
    else this.#tail.next = entry;
    this.#tail = entry;
    if (this.#timer === undefined) this.#arm(entry.due, this.ms);
  }

  /**
   * Queues `entry` to fire `ms` after `since`, a time that may have passed (a lease counts from when
   * its claim was sent, not from when the answer came): placed among the entries by its due time.
   */
  addSince(entry: Timed, since: number): void {
    const due = since + this.ms;
    entry.due = due;
    entry.queue = this;
    let prev = this.#tail;
    // Walks back over the entries added since `since` only.
    while (prev !== undefined && prev.due > due) prev = prev.prev;
    const next = prev === undefined ? this.#head : prev.next;
    entry.prev = prev;
    entry.next = next;
    if (prev === undefined) this.#head = entry;
    else prev.next = entry;
    if (next === undefined) this.#tail = entry;
    else next.prev = entry;
    if (this.#timer !== undefined) {
      // Firing now: the pass re-arms for the head when it ends.
      if (prev !== undefined || due >= this.#armedFor || this.#firing) return;
      this.clock.clearTimeout(this.#timer); // armed for a later entry: this one is due first
    }
    this.#arm(due, Math.max(Math.ceil(due - this.clock.now()), 1));
  }

  /** Unlinks `entry` if it is still waiting here. The timer stays armed: it fires once and finds nothing due. */
  remove(entry: Timed): void {
    if (entry.queue !== this) return;
    entry.queue = undefined;
    const { prev, next } = entry;
    if (prev === undefined) this.#head = next;
    else prev.next = next;
    if (next === undefined) this.#tail = prev;
    else next.prev = prev;
    entry.prev = entry.next = undefined;
  }

  #arm(due: number, ms: number): void {
    this.#armedFor = due;
    this.#timer = detachedTimeout(this.#run, ms, this.clock);
  }

  // Entries due by now fire, and at least those due by the armed time (as their own Node.js timers would:
  // the loop's clock may trail the monotonic clock). They fire after setImmediate: timers run before the I/O
  // poll, so after a busy loop a store answer that arrived in time would still sit unread and time out.
  #run = (): void => {
    this.#limit = Math.max(this.clock.now(), this.#armedFor);
    this.#firing = true;
    this.clock.setImmediate(this.#fireDue);
  };

  // Entries added by the callbacks (a renewal re-queued) wait for the timer armed at the end: one at a time.
  #fireDue = (): void => {
    try {
      for (let entry = this.#head; entry !== undefined && entry.due <= this.#limit; entry = this.#head) {
        this.remove(entry);
        entry.fire();
      }
    } finally {
      this.#firing = false;
      this.#timer = undefined;
      const head = this.#head;
      if (head !== undefined) this.#arm(head.due, Math.max(Math.ceil(head.due - this.clock.now()), 1));
    }
  };
}

/**
 * A {@link TimerQueue} whose entries each have a timer of their own, for runtimes where a timer belongs
 * to the request that set it (#platform's `sharedTimers` false: Cloudflare Workers). There one shared
 * timer, set by a request that has since ended, would not fire for the others, and a request whose only
 * pending event is another request's timer is cancelled as hung.
 */
export class EntryTimers extends TimerQueue {
  readonly #timers = new Map<Timed, unknown>();

  override add(entry: Timed, now: number): void {
    this.#set(entry, now + this.ms, this.ms);
  }

  override addSince(entry: Timed, since: number): void {
    const due = since + this.ms;
    this.#set(entry, due, Math.max(Math.ceil(due - this.clock.now()), 1));
  }

  override remove(entry: Timed): void {
    if (entry.queue !== this) return;
    entry.queue = undefined;
    const timer = this.#timers.get(entry);
    this.#timers.delete(entry);
    if (timer !== undefined) this.clock.clearTimeout(timer);
  }

  #set(entry: Timed, due: number, ms: number): void {
    entry.due = due;
    entry.queue = this;
    entry.prev = entry.next = undefined;
    const timer = this.clock.setTimeout(() => {
      if (this.#timers.get(entry) !== timer) return;
      this.#timers.delete(entry);
      entry.queue = undefined;
      entry.fire();
    }, ms);
    this.#timers.set(entry, timer);
  }
}

/** A set of queues on one clock, one per delay: `(ms) => the queue of that delay`. */
export function timerQueues(clock: EngineClock = realClock): (ms: number) => TimerQueue {
  const queues = new Map<number, TimerQueue>();
  return (ms) => {
    let queue = queues.get(ms);
    if (queue === undefined)
      queues.set(ms, (queue = sharedTimers ? new TimerQueue(ms, clock) : new EntryTimers(ms, clock)));
    return queue;
  };
}

/** The timers of one clock: its store calls' timeouts, and its leases' renewals in queues of their own. */
export interface ClockTimers {
  readonly clock: EngineClock;
  /** Store calls' timeouts. */
  readonly timeouts: (ms: number) => TimerQueue;
  /**
   * Leases' renewals, apart from the store calls' timeouts: a lease is placed by when its claim was
   * sent, walking back over the entries added since, and only other leases are added so often.
   */
  readonly leases: (ms: number) => TimerQueue;
}

const timersOfClock = new WeakMap<EngineClock, ClockTimers>();

/** The timers of `clock`, shared by every engine on it (the process's, on the real clock). */
export function timersOf(clock: EngineClock): ClockTimers {
  let timers = timersOfClock.get(clock);
  if (timers === undefined) {
    timers = { clock, timeouts: timerQueues(clock), leases: timerQueues(clock) };
    timersOfClock.set(clock, timers);
  }
  return timers;
}

/** The process's queue for one delay, in ms: store calls' timeouts on the real clock. */
export const timerQueue: (ms: number) => TimerQueue = timersOf(realClock).timeouts;

/** A store call's timeout: rejects the call's promise with `onTimeout()` when it fires. */
class Timeout implements Timed {
  due = 0;
  prev: Timed | undefined = undefined;
  next: Timed | undefined = undefined;
  queue: TimerQueue | undefined = undefined;
  constructor(
    private readonly reject: (error: unknown) => void,
    private readonly onTimeout: () => Error,
  ) {}
  fire(): void {
    this.reject(this.onTimeout());
  }
}

/**
 * Rejects with `onTimeout()` if `promise` has not settled within `ms` (from `now`, the time of the
 * clock behind `queues`).
 */
export function withTimeout<T>(
  promise: Promise<T>,
  ms: number,
  onTimeout: () => Error,
  now = realClock.now(),
  queues: (ms: number) => TimerQueue = timerQueue,
): Promise<T> {
  // It runs on every store call: one promise, rather than a second promise, Promise.race and a finally step.
  return new Promise<T>((resolve, reject) => {
    const queue = queues(ms);
    const timeout = new Timeout(reject, onTimeout);
    queue.add(timeout, now);
    promise.then(
      (value) => {
        queue.remove(timeout);
        resolve(value);
      },
      (error: unknown) => {
        queue.remove(timeout);
        reject(error);
      },
    );
  });
}

/**
 * Sleeps `ms`, or less if `wake` is called or `signal` aborts. Returns the
 * function that wakes it early.
 */
export function interruptibleSleep(
  ms: number,
  signal?: AbortSignal,
  clock: EngineClock = realClock,
): { promise: Promise<void>; wake: () => void } {
  let wake!: () => void;
  const promise = new Promise<void>((resolve) => {
    const timer = clock.setTimeout(done, ms);
    function done() {
      clock.clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    wake = done;
    signal?.addEventListener('abort', done, { once: true });
  });
  return { promise, wake };
}
