/**
 * One simulated world: several processes, each with its own engine, on one memory store, on one
 * virtual timeline. Every store call crosses a faulty network (faulty-store.ts), every operation
 * step and every call's arrival and reply is a task of fast-check's scheduler, and every timer is
 * virtual (timeline.ts). {@link simulate} runs a {@link Scenario} to the end and returns what
 * happened, for invariants.ts to judge.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Scheduler } from 'fast-check';
import { createEngine } from '../../src/core/engine.js';
import { hashRecordId } from '../../src/core/events.js';
import type { IdempotencyEngine } from '../../src/core/types.js';
import { type MemoryStore, memoryStore } from '../../src/stores/memory/store.js';
import { behindFence, RestartFence } from '../model/restart-fence.js';
import { describeFault, type Fault, faultyStore, OK, resetCalls } from './faulty-store.js';
import { Timeline } from './timeline.js';
import {
  NAME,
  type Outcome,
  processName,
  type Run,
  recordIdOf,
  type Scenario,
  type StoreCall,
  stepsOf,
} from './world.js';

const LOST: Fault = { kind: 'lost' };
const STORE_ORIGIN = 1_800_000_000_000;

/** A small seeded PRNG (mulberry32): the engine's jitter is part of the replay. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** Which request an event belongs to: the engine emits in the context of the call it reports on. */
const requestContext = new AsyncLocalStorage<number>();
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));
// A promise that never settles, made per call: one shared for ever would keep every reaction ever added to it.
const never = (): Promise<never> => new Promise<never>(() => {});

export async function simulate(scenario: Scenario, s: Scheduler): Promise<Outcome> {
  const { lockTtl, storeTimeout } = scenario;
  // Timers of several owners due in the same ms fire in an order of the world's (its own seed, apart from the engine's jitter).
  const order = seeded(scenario.seed ^ 0x5bd1e995);
  const timeline = new Timeline((n) => Math.floor(order() * n));
  const trace: string[] = [];
  const log = (who: string, text: string) => trace.push(`${String(timeline.now).padStart(6)}  ${who}  ${text}`);
  const keyOfId = new Map<string, number>();
  const keyOfHash = new Map<string, number>();
  for (let key = 0; key < 2; key++) {
    keyOfId.set(recordIdOf(key), key);
    keyOfHash.set(hashRecordId(recordIdOf(key)), key);
  }
  const out: Outcome = {
    scenario,
    trace,
    runs: [],
    answers: [],
    sent: [],
    events: [],
    calls: [],
    stepRuns: [],
    crashedAt: new Map(),
    restartedAt: [],
    unhandled: [],
    steps: 0,
    end: 0,
  };
  // With the restart fence, the store loses its data as a fenced Redis does (test/model/restart-fence.ts).
  const storeNow = () => STORE_ORIGIN + timeline.now;
  const fence = scenario.fence ? new RestartFence() : undefined;
  const newStore = () => {
    const memory = memoryStore({ now: storeNow });
    return fence === undefined ? memory : behindFence(memory, fence, storeNow);
  };
  let store: MemoryStore = newStore();
  const faults = new Map<number, Fault>();
  for (const { call, fault } of scenario.faults) if (!faults.has(call)) faults.set(call, fault);
  const callOf = new Map<number, StoreCall>();
  const crash = (process: string, why: string) => {
    if (out.crashedAt.has(process)) return;
    out.crashedAt.set(process, timeline.now);
    timeline.cancelOwner(process);
    log(process, `CRASHES ${why}`);
  };
  resetCalls();

  const processes = scenario.skews.map((skew, i) => {
    const name = processName(i);
    const clock = timeline.clock(name, STORE_ORIGIN + skew);
    const engine: IdempotencyEngine = createEngine({
      store: faultyStore(name, {
        store: () => store,
        fault: (call, process) => {
          const cut = scenario.partitions.some(
            (c) => processName(c.process) === process && c.from <= timeline.now && timeline.now < c.to,
          );
          return cut ? LOST : (faults.get(call) ?? OK);
        },
        after: (ms, fn) => timeline.add(timeline.now + ms, fn, 'network'),
        schedule: (label) => s.schedule(Promise.resolve(), label),
        trace: log,
        crash,
        crashed: (p) => out.crashedAt.has(p),
        sent(process, op, input, fault, call) {
          const { token, id, name: step } = input as { token?: string; id?: string; name?: string };
          const rec: StoreCall = { process, op, call, sentAt: timeline.now, fault, token, id, step };
          out.calls.push(rec);
          callOf.set(call, rec);
          log(process, `${op} #${call} k${keyOfId.get(id ?? '') ?? '?'} sent${describeFault(fault)}`);
        },
        applied(process, op, _input, answer, _fault, call) {
          const rec = callOf.get(call)!;
          rec.appliedAt = timeline.now;
          rec.answer = answer;
          const shown = typeof answer === 'object' ? (answer as { state?: string }).state : String(answer);
          log(process, `${op} #${call} applied → ${shown}`);
        },
      }),
      clock,
      lockTtl,
      storeTimeout,
      ttl: 100 * lockTtl,
      onEvent(event) {
        const key = keyOfHash.get(event.keyHash ?? '') ?? -1;
        out.events.push({ process: name, at: timeline.now, key, request: requestContext.getStore(), event });
        const why = [event.reason, event.operation].filter((x) => x !== undefined).join(', ');
        log(name, `event ${event.result}${why === '' ? '' : ` (${why})`} k${key}`);
      },
    });
    const wait = engine.policy({ inFlight: 'wait', waitTimeout: lockTtl });
    return { name, engine, wait, clock };
  });

  /** The operation spends `ms` of its process's time, after the scheduler lets it go on. */
  const work = async (p: (typeof processes)[number], ms: number, label: string) => {
    await s.schedule(Promise.resolve(), `${p.name} ${label}`);
    if (out.crashedAt.has(p.name)) return never();
    if (ms > 0) await new Promise<void>((resolve) => p.clock.setTimeout(resolve, ms));
  };

  scenario.requests.forEach((r, index) => {
    timeline.add(
      r.at,
      () => {
        const p = processes[r.process]!;
        if (out.crashedAt.has(p.name)) return;
        out.sent.push({ request: index, at: timeline.now });
        log(p.name, `request r${index}: k${r.key} payload ${r.payload}${r.wait ? ', waits' : ''}`);
        const steps = stepsOf(r.key);
        requestContext
          .run(index, () =>
            p.engine.execute<string>({
              key: `k${r.key}`,
              name: NAME,
              payload: { amount: r.payload },
              ...(r.wait ? { policy: p.wait } : {}),
              run: async (claimed) => {
                // The claim's token, read from the run (a private field): which claim this run is under.
                const token = (Reflect.get(claimed, 'attempt') as { token: string }).token;
                const run: Run = { request: index, process: p.name, key: r.key, token, start: timeline.now };
                out.runs.push(run);
                log(p.name, `RUNS r${index}`);
                claimed.signal.addEventListener('abort', () => {
                  run.abortedAt = timeline.now;
                  log(p.name, `r${index}'s signal aborts`);
                });
                try {
                  for (let i = 0; i < steps; i++) {
                    await claimed.step(`s${i}`, async () => {
                      out.stepRuns.push({ key: r.key, name: `s${i}`, at: timeline.now, request: index });
                      log(p.name, `r${index} runs step s${i}`);
                      await work(p, r.durations[i]!, `r${index} step s${i}`);
                      return `r${index}/s${i}`;
                    });
                  }
                  await work(p, r.durations[2], `r${index} body`);
                  if (r.throws) throw new Error(`r${index} declined`);
                } catch (error) {
                  run.end = timeline.now;
                  run.threw = true;
                  log(p.name, `r${index} throws`);
                  throw error;
                }
                run.end = timeline.now;
                run.value = `r${index}`;
                log(p.name, `r${index} returns`);
                return `r${index}`;
              },
            }),
          )
          .then(
            (result) => {
              out.answers.push({ request: index, at: timeline.now, result });
              // An error answered is a key given back (a thrown error, a step_mismatch): a retry runs again.
              const run = out.runs.find((x) => x.request === index);
              if (!result.ok && run !== undefined) run.released = timeline.now;
              const what = result.ok ? `${result.replayed ? 'replay' : 'value'} ${result.value}` : 'its error';
              log(p.name, `answers r${index}: ${what}`);
            },
            (thrown: unknown) => {
              out.answers.push({ request: index, at: timeline.now, thrown });
              log(p.name, `answers r${index}: ${(thrown as { reason?: string }).reason ?? String(thrown)}`);
            },
          );
      },
      'world',
    );
  });
  for (const { process, from, to } of scenario.partitions) {
    timeline.add(from, () => log(processName(process), `cut off from the store until ${to}`), 'world');
  }
  for (const { process, at } of scenario.crashes) {
    timeline.add(at, () => crash(processName(process), 'now'), 'world');
  }
  for (const at of scenario.restarts) {
    timeline.add(
      at,
      () => {
        store.close();
        store = newStore();
        fence?.restart();
        out.restartedAt.push(timeline.now);
        log('store', `RESTARTS EMPTY${fence === undefined ? '' : ' (the restart fence is on)'}`);
      },
      'world',
    );
  }

  const onUnhandled = (reason: unknown) => out.unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  const random = Math.random;
  Math.random = seeded(scenario.seed);
  try {
    const horizon = 200 * lockTtl;
    for (;;) {
      await flush();
      if (s.count() > 0) {
        out.steps++;
        await s.waitOne();
        continue;
      }
      const timer = timeline.next();
      if (timer === undefined || timer.at > horizon) break;
      out.steps++;
      timer.fn();
    }
    await flush();
  } finally {
    Math.random = random;
    process.off('unhandledRejection', onUnhandled);
    store.close();
  }
  out.end = timeline.now;
  return out;
}
