import type { OutcomeCodec } from '../core/outcome-codec.js';

/**
 * `.output()` parsers, applied before an outcome is stored. tRPC runs them
 * after the resolver (as middlewares marked `_type: 'output'`, innermost
 * last), outside the check: stored as the resolver returned it, an outcome
 * keeps what the parser strips (a password hash, a token) in the store.
 */
export type OutputMiddleware = ((
  opts: { next: () => Promise<unknown> } & Record<string, unknown>,
) => Promise<unknown>) & {
  _type?: string;
};

/** The output middlewares of a procedure builder's definition, innermost last. */
export function outputParsersOf(def: { middlewares?: unknown }): OutputMiddleware[] {
  const middlewares = Array.isArray(def.middlewares) ? (def.middlewares as OutputMiddleware[]) : [];
  return middlewares.filter((middleware) => typeof middleware === 'function' && middleware._type === 'output');
}

/** What to answer and store for a resolver's value, given its `.output()` parsers. */
export interface ParsedOutput {
  /** What the resolver answers (tRPC's parsers then run on it) and the engine stores. */
  value: unknown;
  /** False when no stored form replays through the parsers as the first answer did: stored as unreplayable. */
  replayable: boolean;
}

/**
 * What to store of a resolver's `value`. tRPC answers the client with the
 * parsers' output; a replay is its stored form, deserialized, passed through
 * the parsers again. So the parsers' output is stored when it replays to
 * itself (a parser that checks or strips fields): the store keeps only what
 * the client may see. Else (a parser that transforms) `value` itself, when
 * it replays to the same answer, keeping what the parser strips. Else the
 * outcome cannot be replayed: it is recorded as such (it ran once).
 */
export async function parsedOutput(
  value: unknown,
  parsers: readonly OutputMiddleware[],
  opts: Record<string, unknown>,
  codec: OutcomeCodec<unknown>,
): Promise<ParsedOutput> {
  let answer: string;
  let parsed: unknown;
  try {
    parsed = await parse(value, parsers, opts);
    answer = codec.serialize(parsed);
  } catch {
    // Refused by a parser (tRPC answers 500 to this call too), or with no stored form: left as it is.
    return { value, replayable: true };
  }
  for (const candidate of [parsed, value]) {
    try {
      const replayed = await parse(codec.deserialize(codec.serialize(candidate)), parsers, opts);
      if (codec.serialize(replayed) === answer) return { value: candidate, replayable: true };
    } catch {
      // This form does not replay: try the next.
    }
  }
  return { value, replayable: false };
}

async function parse(value: unknown, parsers: readonly OutputMiddleware[], opts: Record<string, unknown>) {
  let data = value;
  for (let i = parsers.length - 1; i >= 0; i--) {
    const current = data;
    const result = (await parsers[i]!({
      ...opts,
      next: () => Promise.resolve({ ok: true, data: current, ctx: opts.ctx }),
    })) as { ok?: boolean; data?: unknown };
    if (result?.ok !== true) throw new Error('An output parser did not answer.');
    data = result.data;
  }
  return data;
}

/**
 * The `.output()` stage of one call: `parse` gives what the parsers let
 * through, which is what is stored (and what a replay must pass again), and
 * `codec` refuses to store a value no stored form of which passes them again,
 * so that the engine records it as unreplayable.
 */
export function outputStage(
  codec: OutcomeCodec<unknown>,
  parsers: readonly OutputMiddleware[],
  opts: Record<string, unknown>,
): { codec: OutcomeCodec<unknown>; parse(value: unknown): Promise<unknown> } {
  let unreplayable: { value: unknown } | undefined;
  return {
    codec: {
      ...codec,
      serialize(value: unknown) {
        if (unreplayable !== undefined && Object.is(value, unreplayable.value)) {
          throw new TypeError('No stored form of this result passes the procedure’s output parser again.');
        }
        return codec.serialize(value);
      },
    },
    async parse(value: unknown) {
      const parsed = await parsedOutput(value, parsers, opts, codec);
      if (!parsed.replayable) unreplayable = { value: parsed.value };
      return parsed.value;
    },
  };
}
