/**
 * Timers that all last the same time share one native timer: they expire in
 * the order they start, so a linked list in start order is all it takes, and
 * starting or stopping one links or unlinks a small node with no native call.
 * Every protected call starts a store timeout per store call and a renewal
 * timer for its claim; a setTimeout/clearTimeout pair each cost several
 * microseconds on a busy server. The native timer is unref'd, as theirs were.
 */

/** A started timer. */
export interface TimerHandle {
  stop(): void;
}

class TimerNode implements TimerHandle {
  prev: TimerNode | undefined;
  next: TimerNode | undefined;

  constructor(
    private readonly list: TimerList,
    readonly deadline: number,
    public fn: (() => void) | undefined,
  ) {}

  stop(): void {
    if (this.fn === undefined) return;
    this.fn = undefined;
    this.list.unlink(this);
  }
}

// Longer delays than this make setTimeout fire after 1 ms: keep Node's own
// behaviour for them by not sharing.
const TIMEOUT_MAX = 2 ** 31 - 1;

class TimerList {
  private head: TimerNode | undefined;
  private tail: TimerNode | undefined;
  private armed = false;

  constructor(private readonly ms: number) {}

  start(fn: () => void): TimerHandle {
    const node = new TimerNode(this, performance.now() + this.ms, fn);
    node.prev = this.tail;
    if (this.tail === undefined) this.head = node;
    else this.tail.next = node;
    this.tail = node;
    if (!this.armed) this.arm(this.ms);
    return node;
  }

  unlink(node: TimerNode): void {
    if (node.prev === undefined) this.head = node.next;
    else node.prev.next = node.next;
    if (node.next === undefined) this.tail = node.prev;
    else node.next.prev = node.prev;
    node.prev = node.next = undefined;
  }

  private arm(delay: number) {
    this.armed = true;
    setTimeout(this.fire, Math.max(delay, 1)).unref();
  }

  private readonly fire = () => {
    this.armed = false;
    const now = performance.now();
    try {
      for (let node = this.head; node !== undefined && node.deadline <= now; node = this.head) {
        const fn = node.fn!;
        node.fn = undefined;
        this.unlink(node);
        fn();
      }
    } finally {
      // Stopped timers were unlinked: whatever is left is still running.
      if (this.head !== undefined && !this.armed) this.arm(this.head.deadline - now);
    }
  };
}

const lists = new Map<number, TimerList>();

/** Calls `fn` once after `ms` milliseconds, unless stopped. */
export function after(ms: number, fn: () => void): TimerHandle {
  if (!(ms >= 1 && ms <= TIMEOUT_MAX)) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return { stop: () => clearTimeout(timer) };
  }
  let list = lists.get(ms);
  if (list === undefined) lists.set(ms, (list = new TimerList(ms)));
  return list.start(fn);
}

/** Calls `fn` every `ms` milliseconds until stopped, like an unref'd setInterval. */
export function every(ms: number, fn: () => void): TimerHandle {
  let current: TimerHandle | undefined;
  let stopped = false;
  const tick = () => {
    fn();
    if (!stopped) current = after(ms, tick);
  };
  current = after(ms, tick);
  return {
    stop() {
      stopped = true;
      current?.stop();
    },
  };
}
