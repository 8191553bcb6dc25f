/**
 * The model-based store contract (issue 36): random sequences of store
 * operations, run against a store and against the oracle (the memory store on
 * a virtual clock, oracle.ts), every answer and every `admin.inspect` compared.
 *
 * Time. Redis and PostgreSQL expire records on their own clocks, and nothing
 * here sleeps to let a ttl pass but the `advance` command (a few ms, or to
 * just around the oracle's next expiry, at most 100 ms). The oracle's virtual
 * clock follows the store's instead: the servers run on this machine and read
 * its wall clock, so a call read `before` and `after` it on `Date.now()` ran
 * at a store time within [before - slack, after + slack] (slack: the 1 ms
 * rounding of the store's clocks, and PostgreSQL's microseconds). The oracle
 * runs the same operation at a time of that window, never earlier than its
 * last operation on the same record (oracle.ts):
 * - the window is narrowed by what the store says of its own time: a claim's
 *   `time`; after a write, an `admin.inspect` of the record (itself compared
 *   with the oracle's) whose `expiresAt` (or `stepsExpireAt`) minus the ttl asked
 *   for is when the write ran. A store time outside the window is a failure;
 * - the answer can only change at an expiry of the record or of its steps: when
 *   one falls inside the window, the oracle tries the operation on each side of
 *   it (on a copy) and keeps the side whose answer is the store's, a write
 *   together with the inspect after it. Only when no side gives the store's
 *   answers do they disagree;
 * - times in answers (`expiresIn`, `expiresAt`...) are compared within the
 *   window's width and rounding.
 * The wall clock of a virtual machine can step (test/helpers/steady-clock.ts): a
 * step forward is followed like any time passing; a step back makes the rest of
 * the sequence undecidable, and its commands are skipped (and counted).
 *
 * The memory store itself runs on the same virtual clock as the oracle, with no
 * window at all, checked by the same comparison and by the invariants
 * (invariants.ts), which also check the oracle in every run on every store.
 *
 * A failure prints fast-check's seed and path, and the shrunk sequence as a
 * trace: one line per command, with the store's answer and the oracle's.
 * MODEL_RUNS sets the number of sequences per store; MODEL_SEED, MODEL_PATH
 * and MODEL_REPLAY_PATH replay a failure's commands (a real store's timing,
 * and so an answer at an expiry, may differ from one run to the next).
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import fc from 'fast-check';
import { it } from 'vitest';
import { recordId } from '../../src/core/record-id.js';
import type { ClaimResult, IdempotencyStore } from '../../src/core/store.js';
import {
  EXPIRY_ROUNDING,
  type ListInput,
  type ListPage,
  type RecordInfo,
  type RecordSummary,
} from '../../src/core/store-admin.js';
import { wallLead } from '../helpers/steady-clock.js';
import {
  aimed,
  IDS,
  type Names,
  opOf,
  type Spec,
  showSpec,
  specArbitrary,
  specWithRestartArbitrary,
  TOKENS,
} from './commands.js';
import { agrees, type Context, show, summaryAgrees } from './compare.js';
import { Invariants } from './invariants.js';
import { exec, type Op, Oracle, type Replica } from './oracle.js';

export interface ModelHarness {
  store: IdempotencyStore;
  /** The store's clock as read here: `Date.now` for a server on this machine, the memory store's virtual clock. */
  clock(): number;
  /** Lets `ms` pass for the store. */
  advance(ms: number): Promise<void>;
  /** How far (ms) the store's time may be outside a call's bracket on `clock`: its rounding. 0 for a virtual clock. */
  slack: number;
  /**
   * The store keeps a record through the millisecond it expires at, as Redis does (a key expires when the time is
   * greater than its expiry: db.c, keyIsExpired); the memory store drops it at that millisecond.
   */
  inclusiveExpiry?: boolean;
  /**
   * The store can lose everything, as an empty restart of its server does: sequences then include `restart`
   * commands. `fence`: the store has the restart fence (the oracle runs behind restart-fence.ts).
   */
  restart?: {
    fence: boolean;
    /** The marker a record's scripts read, when there are several (a Redis Cluster keeps one per slot). */
    markerOf?: (id: string) => string;
    /** Deletes everything the store holds (the fence's marker too). */
    wipe(): Promise<void>;
    /** Makes the store new again (its marker written, as `initialize()` does): before a sequence, after a wipe. */
    rearm(): Promise<void>;
  };
}

/** What a test of many sequences counts. */
interface Stats {
  sequences: number;
  commands: number;
  /** Sequences cut short because the wall clock stepped back. */
  undecidable: number;
  restarts: number;
  /** Claims the restart fence refused, and claims it recreated (by a renewal or a step save). */
  fenced: number;
  recreated: number;
  /** The store must be made new before the next sequence (see ModelHarness.restart). */
  rearm: boolean;
}

/** One call to the store: its answer and the window of store time in which it ran. */
interface Call {
  op: Op;
  answer: unknown;
  lo: number;
  hi: number;
}

class ModelFailure extends Error {
  override name = 'ModelFailure';
}

/** One sequence: its records, the oracle, the trace. */
class Run {
  readonly names: Names;
  readonly oracle: Oracle;
  readonly invariants: Invariants;
  readonly trace: string[] = [];
  readonly start: number;
  undecidable: string | undefined;
  /** Records whose outcome was stored by a completion that found no claim of its token (see compare.ts). */
  readonly claimless = new Set<string>();
  /** `id token` of claims that took a record with the steps of another fingerprint. */
  readonly foreign = new Set<string>();
  /** What the oracle adds to every ttl: 1 ms for a store that keeps a record through its expiry millisecond. */
  readonly extra: number;
  #commands = 0;
  /** The wall clock's lead over the monotonic one at the last call: it changes only when the wall clock steps. */
  #lead = wallLead();

  constructor(
    readonly harness: ModelHarness,
    readonly stats: Stats,
  ) {
    const name = `model.${randomUUID().slice(0, 8)}`;
    this.names = {
      name,
      ids: Array.from({ length: IDS }, (_, i) => recordId(`s${i % 2}`, name, `k${i}`)),
      tokens: Array.from({ length: TOKENS }, (_, i) => `${name}.t${i}`),
    };
    this.start = harness.clock();
    this.extra = harness.inclusiveExpiry === true ? 1 : 0;
    const { restart } = harness;
    const fence = restart?.fence
      ? { extra: this.extra, ...(restart.markerOf ? { markerOf: restart.markerOf } : {}) }
      : undefined;
    this.oracle = new Oracle(this.start - harness.slack, fence);
    this.invariants = new Invariants(this.extra);
    stats.sequences++;
  }

  fail(message: string, detail: string[] = []): never {
    throw new ModelFailure(
      [
        message,
        `trace (store answer | oracle answer, times in ms from the sequence's start at ${this.start}):`,
        ...this.trace,
        ...detail,
      ].join('\n'),
    );
  }

  async perform(generated: Spec): Promise<void> {
    this.stats.commands++;
    const spec =
      generated.kind === 'advance' || generated.kind === 'restart' || generated.kind === 'list'
        ? generated
        : aimed(generated, await this.oracle.peek(this.names.ids[generated.id]!), this.names);
    const line = `#${this.#commands++} ${showSpec(spec)}`;
    if (spec.kind === 'advance') {
      const ms = await this.delay(spec);
      await this.harness.advance(ms);
      this.trace.push(`${line}: ${ms} ms`);
      return;
    }
    if (spec.kind === 'list') return this.list(spec, line);
    if (spec.kind === 'restart') {
      await this.harness.restart!.wipe();
      this.stats.rearm = true;
      this.stats.restarts++;
      this.oracle.restart();
      this.invariants.restart();
      this.claimless.clear();
      this.foreign.clear();
      this.trace.push(
        `${line}: the store lost everything${this.harness.restart!.fence ? ', its fence marker too' : ''}`,
      );
      return;
    }
    const op = opOf(spec, this.names, this.harness.clock());
    if (op.kind === 'saveStep' && this.foreign.has(`${op.input.id} ${op.input.token}`)) {
      // The engine gives back a claim that found the steps of another payload, and saves no step under it
      // (src/core/engine.ts, stepsOfAnotherPayload). The stores differ on which fingerprint steps saved by two
      // payloads would carry (PostgreSQL: the first step's; memory and Redis: the last save's): never sent.
      this.trace.push(`${line}: not sent (its claim found another payload's steps)`);
      return;
    }
    const call = await this.call(op, line);
    if (this.undecidable !== undefined) return;
    let prefer: number | undefined;
    if (op.kind === 'claim') {
      const { time } = call.answer as ClaimResult;
      if (time !== undefined) prefer = this.timeOf(call, time, line);
    }
    const post = writes(op, call.answer) ? await this.call(inspectOf(op), `${line}, then`) : undefined;
    if (this.undecidable !== undefined) return;
    if (post !== undefined) {
      // Admin times are whole ms, floored (a store that keeps finer times expires the record up to 1 ms later):
      // the oracle takes the latest time they allow. A record that lives a little longer in the oracle than in the
      // store is decided by the windows, which reach `slack` ms past each call; one that expires earlier could
      // not be, once a later call's exact time (a claim's) has moved the oracle past it.
      const ran = ranAt(op, post.answer as RecordInfo);
      if (ran !== undefined) prefer ??= this.harness.slack > 0 ? ran + 0.999 : ran;
      this.timeOf(post, (post.answer as RecordInfo).time, `${line}, then inspect`);
    }
    await this.decide(call, line, prefer, post);
  }

  /**
   * An operator's listing, every page, checked for this run's records: each listed must be one the oracle has at a
   * time of the listing's window that the filters keep, as the oracle has it; each not listed, one the oracle has
   * absent or filtered out at such a time. Near the `olderThan` boundary, or for a record whose claim time the
   * store may not know (a claimless outcome: "a record whose claim time the store does not know is listed"),
   * either is right.
   */
  async list(spec: Extract<Spec, { kind: 'list' }>, line: string): Promise<void> {
    const input: ListInput = {
      ...(spec.state === 'any' ? {} : { state: spec.state }),
      ...(spec.named ? { name: this.names.name } : {}),
      ...(spec.olderThan === 'none' ? {} : { olderThan: spec.olderThan }),
    };
    const admin = this.harness.store.admin!;
    const before = this.harness.clock();
    const listed = new Map<string, { summary: RecordSummary; time: number }>();
    let cursor: string | undefined;
    for (let pages = 1; ; pages++) {
      let page: ListPage;
      try {
        page = await admin.list(cursor === undefined ? input : { ...input, cursor });
      } catch (error) {
        this.fail(`${line}: the store threw ${String(error)}`);
      }
      for (const summary of page.records)
        if (this.names.ids.includes(summary.id)) listed.set(summary.id, { summary, time: page.time });
      cursor = page.cursor;
      if (cursor === undefined) break;
      if (pages === 10_000) this.fail(`${line}: a listing of more than 10,000 pages`);
    }
    const after = this.harness.clock();
    const slack = this.harness.slack;
    const tolerance = slack === 0 ? 0 : 2 * slack + 2;
    const shown: string[] = [];
    for (const id of this.names.ids) {
      const lo = Math.max(before - slack, this.oracle.floor(id));
      const hi = Math.max(after + slack, lo);
      const real = listed.get(id);
      const claimless = this.claimless.has(id);
      const ctx = { notifies: false, tolerance, claimless, extra: this.extra };
      const tried: string[] = [];
      let agreed: number | undefined;
      // Earliest first: a read at a time leaves the oracle as it would be at any later one (oracle.ts).
      for (const t of candidates(await this.oracle.peek(id, lo), lo, hi, undefined)) {
        const info = await this.oracle.peek(id, t);
        const kept = listedAs(info, input, real?.time ?? t, tolerance + (real === undefined ? hi - lo : 0), claimless);
        const right = real === undefined ? kept !== 'yes' : kept !== 'no' && summaryAgrees(real.summary, info, ctx);
        if (right) {
          agreed = t;
          break;
        }
        tried.push(
          `      ${this.names.ids.indexOf(id)}: oracle at ${this.rel(t)}: ${show(info, this.start)} (${kept})`,
        );
      }
      if (agreed === undefined) {
        this.trace.push(
          `${line} → store ${real === undefined ? 'does not list' : `lists ${show(real.summary, this.start)}`} k${this.names.ids.indexOf(id)} | oracle disagrees`,
        );
        this.fail(`the store and the oracle disagree on a listing ${JSON.stringify(input)}`, tried);
      }
      this.oracle.observe(id, agreed);
      shown.push(`k${this.names.ids.indexOf(id)} ${real === undefined ? 'not listed' : 'listed'}`);
    }
    this.trace.push(`${line} → ${shown.join(', ')} (as the oracle)`);
  }

  /** How long an `advance` waits: a few ms, or to `offset` ms around the oracle's next expiry after now. */
  async delay(spec: Extract<Spec, { kind: 'advance' }>): Promise<number> {
    if (spec.to === 'tick') return 1 + (Math.abs(spec.offset) % 5);
    const now = this.harness.clock();
    let next = Number.POSITIVE_INFINITY;
    for (const id of this.names.ids) {
      const info = await this.oracle.peek(id);
      for (const t of [info.expiresAt, info.stepsExpireAt]) if (t !== undefined && t > now && t < next) next = t;
    }
    return next === Number.POSITIVE_INFINITY ? 2 : Math.min(100, Math.max(0, next + spec.offset - now));
  }

  /** `op` on the store, bracketed by the clock. */
  async call(op: Op, line: string): Promise<Call> {
    const before = this.harness.clock();
    let answer: unknown;
    try {
      answer = await exec(this.harness.store, op);
    } catch (error) {
      this.fail(`${line}: the store threw ${String(error)}`);
    }
    const after = this.harness.clock();
    const lead = wallLead();
    if (this.harness.slack > 0 && lead < this.#lead - 2) {
      this.undecidable = `the wall clock stepped back by ${Math.round(this.#lead - lead)} ms`;
      this.stats.undecidable++;
    }
    this.#lead = lead;
    return { op, answer, lo: before - this.harness.slack, hi: after + this.harness.slack };
  }

  /** A time the store gave in its answer to `call`, checked against the call's window. */
  timeOf(call: Call, time: number, line: string): number {
    if (time < call.lo || time > call.hi)
      this.fail(
        `${line}: the store answered at its time ${this.rel(time)}, outside the call's window ` +
          `[${this.rel(call.lo)}, ${this.rel(call.hi)}]`,
      );
    return time;
  }

  /**
   * Runs `call.op` on the oracle at a time of the call's window where it answers as the store did (at `prefer`
   * when that is where the store says it ran), and commits it; a failure if there is none. After a write, the
   * inspect the store answered (`post`) must agree too: two sides of an expiry can answer a claim alike and leave
   * different records (a claim sent again by its holder keeps the claim time of the live claim it renews).
   */
  async decide(call: Call, line: string, prefer: number | undefined, post?: Call): Promise<void> {
    const { op: asked, answer } = call;
    const op = widen(asked, this.extra);
    const id = op.input.id;
    const lo = Math.max(call.lo, this.oracle.floor(id));
    const hi = Math.max(call.hi, lo);
    if (prefer !== undefined && (prefer < lo || prefer > hi)) prefer = undefined;
    const seen = await this.oracle.peek(id, lo);
    const times = candidates(seen, lo, hi, prefer, this.oracle.fenceBound(id, fenceWindow(asked)));
    const ctx = this.context(asked, lo, hi, this.claimless.has(id));
    type Try = {
      t: number;
      /** The operation tried: `op`, or a forget with the named expiry shifted (forgetShifts). */
      op?: Op;
      answer: unknown;
      replica?: Replica;
      read?: { t: number; answer: unknown };
      misread?: string[];
    };
    const tries: Try[] = [];
    let pick: Try | undefined;
    const shifted = forgetShifts(op, seen, ctx.tolerance);
    if (times.length === 1 && post === undefined && shifted.length === 0) {
      const x = { t: times[0]!, answer: await this.oracle.run(op, times[0]!) };
      tries.push(x);
      if (agrees(answer, x.answer, ctx)) pick = x;
    } else {
      for (const [t, tried] of [
        ...times.map((t) => [t, op] as const),
        ...shifted.flatMap((o) => times.map((t) => [t, o] as const)),
      ]) {
        const x: Try = { t, op: tried, ...(await this.oracle.tryAt(tried, t)) };
        tries.push(x);
        if (!agrees(answer, x.answer, ctx)) continue;
        if (post !== undefined) {
          const read = await this.read(x.replica!, post, t, this.claimlessAfter(op, x.answer, seen, t));
          if (Array.isArray(read)) {
            x.misread = read;
            continue;
          }
          x.read = read;
        }
        pick = x;
        break;
      }
      pick ??= this.refusedAsHeld(op, answer, tries);
      for (const x of tries) if (x !== pick) x.replica?.store.close();
      if (pick?.replica !== undefined) this.oracle.commit(pick.replica, pick.op ?? op, pick.read?.t ?? pick.t);
    }
    const window = `[${this.rel(lo)}, ${this.rel(hi)}]`;
    if (pick === undefined) {
      this.trace.push(`${line} → store ${show(answer, this.start)} | oracle disagrees, store time in ${window}`);
      if (post !== undefined) this.trace.push(`   then inspect → store ${show(post.answer, this.start)}`);
      const tried = tries.flatMap((x) => [
        `      oracle at ${this.rel(x.t)}: ${show(x.answer, this.start)}`,
        ...(x.misread ?? []).map((read) => `         then inspect ${read}`),
      ]);
      this.fail(
        `the store and the oracle disagree on ${showOp(asked)}${post === undefined ? '' : ' or the inspect after it'}`,
        tried,
      );
    }
    const shift =
      pick.op !== undefined && pick.op !== op && pick.op.kind === 'forget' && pick.op.input.expiresAt !== undefined
        ? ` (its expiresAt taken as ${this.rel(pick.op.input.expiresAt)})`
        : '';
    this.trace.push(
      `${line} → store ${show(answer, this.start)} | oracle ${show(pick.answer, this.start)} at ${this.rel(pick.t)} in ${window}${shift}`,
    );
    if ((pick.answer as { state?: string }).state === 'fenced') this.stats.fenced++;
    if (this.oracle.recreated) this.stats.recreated++;
    // on the operation the oracle committed: a forget tried with its expiry shifted (forgetShifts) is judged by that expiry
    const broken = this.invariants.check(pick.op ?? op, pick.answer, pick.t, this.oracle.recreated);
    if (broken !== undefined) this.fail(`the oracle broke an invariant: ${broken}`);
    if (op.kind === 'claim' && (pick.answer as ClaimResult).state === 'acquired') {
      const steps = (pick.answer as { steps?: { fingerprint: string } }).steps;
      const key = `${id} ${op.input.token}`;
      if (steps !== undefined && steps.fingerprint !== op.input.fingerprint) this.foreign.add(key);
      else this.foreign.delete(key);
    }
    if (this.claimlessAfter(op, pick.answer, seen, pick.t)) this.claimless.add(id);
    else this.claimless.delete(id);
    if (post !== undefined && pick.read !== undefined) {
      this.trace.push(
        `   then inspect → store ${show(post.answer, this.start)} | oracle ${show(pick.read.answer, this.start)} at ${this.rel(pick.read.t)}`,
      );
      const wrong = this.invariants.check(post.op, pick.read.answer, pick.read.t);
      if (wrong !== undefined) this.fail(`the oracle broke an invariant: ${wrong}`);
    }
  }

  /**
   * The inspect `post` on `replica` (the oracle after a write at `after`), at the earliest time of its window where
   * it answers as the store did: that time and answer, or the oracle's answers where none did.
   */
  async read(
    replica: Replica,
    post: Call,
    after: number,
    claimless: boolean,
  ): Promise<{ t: number; answer: unknown } | string[]> {
    const lo = Math.max(post.lo, after);
    const hi = Math.max(post.hi, lo);
    replica.now = lo;
    const seen = await replica.store.admin.inspect({ id: post.op.input.id, body: true });
    const ctx = this.context(post.op, lo, hi, claimless);
    const answers: string[] = [];
    // Earliest first: a read taken at a time leaves the oracle as it would be at any later one.
    for (const t of candidates(seen, lo, hi, undefined)) {
      const answer = await replica.apply(post.op, t);
      if (agrees(post.answer, answer, ctx)) return { t, answer };
      answers.push(`at ${this.rel(t)}: ${show(answer, this.start)}`);
    }
    return answers;
  }

  context(op: Op, lo: number, hi: number, claimless: boolean): Context {
    const slack = this.harness.slack;
    const tolerance = slack === 0 ? 0 : 2 * slack + 2 + (op.kind === 'claim' ? hi - lo : 0);
    return { op, notifies: this.harness.store.onSettled !== undefined, tolerance, claimless, extra: this.extra };
  }

  /**
   * Whether, after `op` answered `answer` at `t` on the record the oracle had (`seen`), the record's outcome was
   * stored by a completion that found no live claim of its token (see compare.ts).
   */
  claimlessAfter(op: Op, answer: unknown, seen: RecordInfo, t: number): boolean {
    const id = op.input.id;
    if (op.kind === 'claim' && (answer as ClaimResult).state === 'acquired') return false;
    if (op.kind !== 'complete' || answer !== 'stored') return this.claimless.has(id);
    const live = seen.expiresAt !== undefined && seen.expiresAt > t && seen.token === op.input.token;
    if (live && seen.state === 'in_progress') return false;
    if (live && seen.state !== 'absent') return this.claimless.has(id); // sent again: nothing changed
    return true;
  }

  /**
   * PostgreSQL answers a refused completion by reading the record again (src/stores/drizzle/store.ts, `complete`: "No
   * live row: the one that refused expired since (the completion is sent again, once), or it is another claim's,
   * committed after that statement began and invisible here: held"): an outcome that expires between the statements
   * twice reads as `held`, not `finished`. Accepted where the
   * oracle, in the call's window, answers `finished` and then, past the outcome's expiry, `stored`: the completion
   * changed nothing (the oracle's `finished`), and the engine retries a `held` completion.
   */
  refusedAsHeld<T extends { t: number; answer: unknown }>(op: Op, answer: unknown, tries: T[]): T | undefined {
    if (op.kind !== 'complete' || answer !== 'held' || this.harness.store.name !== 'postgresql') return undefined;
    const inOrder = [...tries].sort((a, b) => a.t - b.t);
    const finished = inOrder.findIndex((x) => x.answer === 'finished');
    return finished >= 0 && inOrder.slice(finished + 1).some((x) => x.answer === 'stored')
      ? inOrder[finished]
      : undefined;
  }

  /** A time for the trace: ms since the sequence's start. */
  rel(t: number): string {
    return `+${Math.round((t - this.start) * 10) / 10}`;
  }

  close(): void {
    this.oracle.close();
  }
}

/**
 * The times to try an operation at, in a window [lo, hi]: the oracle's answer changes only where the record or its
 * steps expire (`seen`), or the restart fence opens (`fence`), so one per stretch between them: at `prefer` in its stretch (tried first), as near to it
 * as the others allow, or, without it, at each stretch's start.
 */
function candidates(seen: RecordInfo, lo: number, hi: number, prefer: number | undefined, fence?: number): number[] {
  const bounds = [seen.expiresAt, seen.stepsExpireAt, fence].filter(
    (b): b is number => b !== undefined && b > lo && b <= hi,
  );
  const starts = [...new Set([lo, ...bounds])].sort((a, b) => a - b);
  const times = starts.map((start, i) => {
    const end = starts[i + 1] ?? hi + 1;
    if (prefer === undefined || prefer < start) return start;
    return prefer < end ? prefer : Math.max(start, end - 1);
  });
  if (prefer !== undefined) times.sort((a, b) => Math.abs(a - prefer) - Math.abs(b - prefer));
  return times;
}

/**
 * Whether a listing with `input` keeps the oracle's record `info`, read at `time` (±`tolerance`): `yes`, `no`, or
 * `either` where the clocks cannot decide (or, `claimless`, the store may not know the claim time).
 */
function listedAs(
  info: RecordInfo,
  input: ListInput,
  time: number,
  tolerance: number,
  claimless: boolean,
): 'yes' | 'no' | 'either' {
  if (info.state === 'absent' || (input.state !== undefined && info.state !== input.state)) return 'no';
  if (input.olderThan === undefined || info.claimedAt === undefined) return 'yes';
  if (claimless && info.state !== 'in_progress') return 'either';
  const margin = time - input.olderThan - info.claimedAt;
  return margin >= tolerance ? 'yes' : margin < -tolerance ? 'no' : 'either';
}

/** The answer changed the record: an inspect reads what it left (and when, by the store's clock, the write ran). */
function writes(op: Op, answer: unknown): boolean {
  if (op.kind === 'claim') return (answer as ClaimResult).state === 'acquired';
  return op.kind !== 'inspect' && (answer === true || answer === 'stored');
}

/**
 * A forget that names the expiry the operator read is refused when the record expires later than that (plus the
 * stores' rounding). The oracle's expiry of a record is the store's within `tolerance` only (compare.ts): where the
 * named expiry is that near the oracle's, either answer is the store's to give, so the oracle also tries the
 * forget as if the named expiry were `tolerance` later or earlier (after the forget as asked).
 */
function forgetShifts(op: Op, seen: RecordInfo, tolerance: number): Op[] {
  if (op.kind !== 'forget' || op.input.expiresAt === undefined || seen.expiresAt === undefined || tolerance === 0)
    return [];
  if (Math.abs(seen.expiresAt - (op.input.expiresAt + EXPIRY_ROUNDING)) > tolerance) return [];
  const at = (expiresAt: number): Op => ({ ...op, input: { ...op.input, expiresAt } });
  return [at(op.input.expiresAt + tolerance), at(op.input.expiresAt - tolerance)];
}

/** `op` with `extra` ms more of every ttl it asks for. */
function widen(op: Op, extra: number): Op {
  if (extra === 0) return op;
  switch (op.kind) {
    case 'claim':
    case 'extend':
      return { ...op, input: { ...op.input, lockTtl: op.input.lockTtl + extra } } as Op;
    case 'complete':
    case 'saveStep':
      return { ...op, input: { ...op.input, ttl: op.input.ttl + extra } } as Op;
    default:
      return op;
  }
}

/** The window of the restart fence for `op` as the store is asked (the caller's lockTtl; a completion raises it for none). */
function fenceWindow(op: Op): number {
  return op.kind === 'claim' || op.kind === 'extend' || op.kind === 'saveStep' ? op.input.lockTtl : 0;
}

const inspectOf = (op: Op): Op => ({ kind: 'inspect', input: { id: op.input.id, body: true } });

/** When a write ran, by the store's clock, from the record it left: its new expiry minus the ttl it asked for. */
function ranAt(op: Op, info: RecordInfo): number | undefined {
  switch (op.kind) {
    case 'extend':
      if (info.state !== 'in_progress' || info.token !== op.input.token || info.expiresAt === undefined) return;
      return info.expiresAt - op.input.lockTtl;
    case 'complete':
      if (info.state !== op.input.state || info.token !== op.input.token || info.expiresAt === undefined) return;
      return info.expiresAt - op.input.ttl;
    case 'saveStep':
      if (info.steps.length > op.input.index && info.stepsExpireAt !== undefined)
        return info.stepsExpireAt - op.input.ttl;
      // Not recorded: a save that recreated its claim (the restart fence) past the lost steps, whose lease began then
      // (for a claim that was not recreated, this is its claim time, before the save's window: not used).
      if (info.state !== 'in_progress' || info.token !== op.input.token || info.expiresAt === undefined) return;
      return info.expiresAt - op.input.lockTtl;
    default:
      return undefined;
  }
}

function showOp(op: Op): string {
  return `${op.kind} ${JSON.stringify(op.input)}`;
}

class ModelCommand implements fc.AsyncCommand<Run, IdempotencyStore> {
  constructor(readonly spec: Spec) {}
  check(run: Readonly<Run>): boolean {
    return run.undecidable === undefined;
  }
  async run(run: Run): Promise<void> {
    await run.perform(this.spec);
  }
  toString(): string {
    return showSpec(this.spec);
  }
}

const envNumber = (name: string): number | undefined => {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : Number(value);
};

/**
 * A test that runs `runs` sequences (MODEL_RUNS when set) on the store `create` makes, and prints how many ran and
 * how long they took.
 */
export function modelTest(name: string, create: () => Promise<ModelHarness> | ModelHarness, runs: number): void {
  const numRuns = envNumber('MODEL_RUNS') ?? runs;
  // About 20 ms a sequence on a server; the long run gets all it needs.
  const timeout = 30_000 + numRuns * 200;
  it(
    `${name}: random sequences of operations answer as the model does`,
    async () => {
      const harness = await create();
      const stats: Stats = {
        sequences: 0,
        commands: 0,
        undecidable: 0,
        restarts: 0,
        fenced: 0,
        recreated: 0,
        rearm: true,
      };
      const started = performance.now();
      const replayPath = process.env.MODEL_REPLAY_PATH;
      const seed = envNumber('MODEL_SEED');
      const path = process.env.MODEL_PATH;
      const specs = harness.restart === undefined ? specArbitrary : specWithRestartArbitrary;
      const commands = fc.commands([specs.map((spec) => new ModelCommand(spec))], {
        maxCommands: 30,
        size: 'max',
        ...(replayPath === undefined ? {} : { replayPath }),
      });
      await fc.assert(
        fc.asyncProperty(commands, async (cmds) => {
          if (harness.restart !== undefined && stats.rearm) {
            await harness.restart.rearm();
            stats.rearm = false;
          }
          const run = new Run(harness, stats);
          try {
            await fc.asyncModelRun(() => ({ model: run, real: harness.store }), cmds);
          } finally {
            run.close();
          }
        }),
        { numRuns, ...(seed === undefined ? {} : { seed }), ...(path === undefined ? {} : { path }) },
      );
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      const cut = stats.undecidable > 0 ? `, ${stats.undecidable} cut short by a wall clock stepping back` : '';
      const fence = harness.restart?.fence
        ? ` (the fence refused ${stats.fenced} claims, recreated ${stats.recreated})`
        : '';
      const lost = harness.restart === undefined ? '' : `, ${stats.restarts} restarts${fence}`;
      console.log(
        `model ${name}: ${stats.sequences} sequences, ${stats.commands} commands${lost} in ${seconds} s${cut}`,
      );
    },
    timeout,
  );
}
