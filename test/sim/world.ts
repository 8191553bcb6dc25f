/**
 * What a simulated world is made of (scenario.ts generates it, simulation.ts runs it) and what it
 * leaves behind for invariants.ts to judge.
 */
import type { IdempotencyEvent } from '../../src/core/events.js';
import { boundedRecordId } from '../../src/core/record-id.js';
import type { ExecuteResult } from '../../src/core/types.js';
import type { Fault } from './faulty-store.js';

/** One client request, sent to one process. */
export interface Request {
  process: number;
  key: number;
  /** When it is sent (virtual ms). */
  at: number;
  /** Mostly 0: another value is the same key with another payload (422). */
  payload: number;
  /** `inFlight: 'wait'` rather than 409. */
  wait: boolean;
  /** How long each step runs ({@link stepsOf} the key), then how long the rest of the operation runs. */
  durations: [number, number, number];
  /** The operation returns its value, or throws (the key is released: a retry runs again). */
  throws: boolean;
}

export interface Scenario {
  lockTtl: number;
  storeTimeout: number;
  /** Each process's wall clock, ms off the store's. */
  skews: number[];
  requests: Request[];
  /** The fate of store call number `call` (numbered across processes); every other call is answered at once. */
  faults: { call: number; fault: Fault }[];
  /** A process's calls sent from `from` until `to` are lost (a partition between it and the store). */
  partitions: { process: number; from: number; to: number }[];
  /** A process crashes at `at`: its operations never return, its later calls never arrive. */
  crashes: { process: number; at: number }[];
  /** The store forgets everything at these times (an empty restart). */
  restarts: number[];
  /** The store has the Redis store's restart fence (test/model/restart-fence.ts). */
  fence: boolean;
  /** Seeds Math.random (the engine's polling jitter). */
  seed: number;
}

/** A run of the operation: a request's claim was acquired and its function called. */
export interface Run {
  request: number;
  process: string;
  key: number;
  token: string;
  start: number;
  /** When the operation returned or threw; undefined if it never did (its process crashed). */
  end?: number;
  threw?: boolean;
  value?: string;
  /** When its signal aborted (the claim was lost), if it did. */
  abortedAt?: number;
  /** When it was answered with an error: its key was given back (released) by then. */
  released?: number;
}

export interface Answer {
  request: number;
  at: number;
  result?: ExecuteResult<string>;
  thrown?: unknown;
}

export interface StoreCall {
  process: string;
  op: string;
  call: number;
  sentAt: number;
  fault: Fault;
  token?: string;
  id?: string;
  /** A save_step's step name. */
  step?: string;
  appliedAt?: number;
  answer?: unknown;
}

export interface Outcome {
  scenario: Scenario;
  trace: string[];
  runs: Run[];
  answers: Answer[];
  /** The requests sent (to a process still up), and when. */
  sent: { request: number; at: number }[];
  /** `request`: the request whose call emitted it; undefined for a lease's own timer (renewals run in no request's context). */
  events: { process: string; at: number; key: number; request: number | undefined; event: IdempotencyEvent }[];
  calls: StoreCall[];
  /** Each step function started: its key, name, when, by which request. */
  stepRuns: { key: number; name: string; at: number; request: number }[];
  crashedAt: Map<string, number>;
  restartedAt: number[];
  unhandled: unknown[];
  /** Scheduler steps and timers fired. */
  steps: number;
  end: number;
}

export const NAME = 'pay';
/** The operation's steps: key 0's operation has two (s0, s1), key 1's none; every request of a key runs the same code. */
export const stepsOf = (key: number): number => (key === 0 ? 2 : 0);
/** How long a request's operation runs, when nothing stops it. */
export const durationOf = (r: Request): number =>
  r.durations.slice(0, stepsOf(r.key)).reduce((a, b) => a + b, 0) + r.durations[2];
export const processName = (i: number): string => String.fromCharCode(65 + i);
export const recordIdOf = (key: number) => boundedRecordId(undefined, NAME, `k${key}`);
