/**
 * The network between one simulated process and the store: a real memory store underneath (no
 * mock of its logic), and for every call a fate chosen by the generator (a {@link Fault}). Each
 * call's arrival and each reply is a task of fast-check's scheduler, so calls in flight at once
 * reach the store, and their answers the process, in every order it picks.
 */
import type {
  ClaimInput,
  CompleteInput,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  SaveStepInput,
} from '../../src/core/store.js';
import type { MemoryStore } from '../../src/stores/memory/store.js';

/**
 * What happens to one store call. `delay`: ms on the way to the store (past storeTimeout, it is
 * applied after the engine gave up on it); `back`: ms on the way back.
 */
export type Fault =
  | { kind: 'ok'; delay: number; back: number }
  /** Never applied, never answered. */
  | { kind: 'lost' }
  /** Applied; the answer never comes back. */
  | { kind: 'reply_lost'; delay: number }
  /** Refused before it was applied (a connection reset): an error comes back. */
  | { kind: 'fail_before'; delay: number }
  /** Applied, and an error comes back instead of the answer. */
  | { kind: 'error_after'; delay: number; back: number }
  /** The calling process crashes as it sends this call: it never arrives. */
  | { kind: 'crash' };

export const OK: Fault = { kind: 'ok', delay: 0, back: 0 };

/** Whether the engine sees this call succeed within storeTimeout. */
export function confirmed(fault: Fault, storeTimeout: number): boolean {
  return fault.kind === 'ok' && fault.delay + fault.back < storeTimeout;
}

export function describeFault(fault: Fault): string {
  switch (fault.kind) {
    case 'ok':
      return fault.delay + fault.back === 0 ? '' : ` [delayed ${fault.delay}+${fault.back} ms]`;
    case 'lost':
    case 'crash':
      return ` [${fault.kind}]`;
    case 'error_after':
      return ` [applied, error reply after ${fault.delay}+${fault.back} ms]`;
    default:
      return ` [${fault.kind.replace('_', ' ')}${fault.delay > 0 ? ` after ${fault.delay} ms` : ''}]`;
  }
}

/** What the network needs of the simulated world. */
export interface Network {
  /** The store behind the network now (a restart replaces it). */
  readonly store: () => MemoryStore;
  /** The fate of the next store call (numbered from 0 across processes) of `process`. */
  fault(call: number, process: string): Fault;
  /** Calls `fn` after `ms` of virtual time; the call is on the wire, so it survives its sender's crash. */
  after(ms: number, fn: () => void): void;
  /** Resolves when the scheduler picks this task. */
  schedule(label: string): Promise<void>;
  trace(who: string, text: string): void;
  crash(process: string, why: string): void;
  crashed(process: string): boolean;
  /** Called when a call was applied to the store, with what it did. */
  applied(process: string, op: string, input: unknown, answer: unknown, fault: Fault, call: number): void;
  /** Called when a call is sent, with its fate. */
  sent(process: string, op: string, input: unknown, fault: Fault, call: number): void;
}

// A promise that never settles, made per call: one shared for ever would keep every reaction ever added to it.
const never = (): Promise<never> => new Promise<never>(() => {});
let calls = 0;

/** Resets the call numbering: each simulation numbers its calls from 0. */
export function resetCalls(): void {
  calls = 0;
}

class NetworkError extends Error {
  override name = 'NetworkError';
}

export function faultyStore(process: string, net: Network): IdempotencyStore {
  function call<I, O>(op: string, input: I, apply: (store: MemoryStore) => Promise<O>): Promise<O> {
    if (net.crashed(process)) return never();
    const n = calls++;
    const fault = net.fault(n, process);
    net.sent(process, op, input, fault, n);
    if (fault.kind === 'crash') {
      net.crash(process, `as it sent ${op} #${n}`);
      return never();
    }
    if (fault.kind === 'lost') return never();
    return new Promise<O>((resolve, reject) => {
      const reply = (back: number, settle: () => void) =>
        net.after(back, () => {
          void net.schedule(`${process} ← ${op} #${n}`).then(() => {
            if (!net.crashed(process)) settle();
          });
        });
      net.after(fault.delay, () => {
        void net.schedule(`${process} → ${op} #${n}`).then(async () => {
          if (fault.kind === 'fail_before') {
            net.trace(process, `${op} #${n} refused before applying`);
            return reply(0, () => reject(new NetworkError(`${op} #${n}: connection reset`)));
          }
          let answer: O;
          try {
            answer = await apply(net.store());
          } catch (error) {
            return reply(0, () => reject(error));
          }
          net.applied(process, op, input, answer, fault, n);
          if (fault.kind === 'reply_lost') return;
          if (fault.kind === 'error_after') {
            return reply(fault.back, () => reject(new NetworkError(`${op} #${n}: reply lost in an error`)));
          }
          reply(fault.kind === 'ok' ? fault.back : 0, () => resolve(answer));
        });
      });
    });
  }
  return {
    name: 'memory',
    claim: (input: ClaimInput) => call('claim', input, (s) => s.claim(input)),
    complete: (input: CompleteInput) => call('complete', input, (s) => s.complete(input)),
    release: (input: FencedInput) => call('release', input, (s) => s.release(input)),
    extend: (input: ExtendInput) => call('extend', input, (s) => s.extend(input)),
    saveStep: (input: SaveStepInput) => call('save_step', input, (s) => s.saveStep!(input)),
    // Notifications: a crashed process hears nothing; a restart forgets its listeners (as a new store would).
    onSettled: (id, listener) =>
      net.store().onSettled!(id, (notifying) => {
        if (!net.crashed(process)) listener(notifying);
      }),
  };
}
