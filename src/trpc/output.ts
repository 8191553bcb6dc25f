import type { OutcomeCodec } from '../core/codec.js';

/**
 * `.output()` parsers, applied before an outcome is stored. tRPC runs them
 * after the resolver (as middlewares marked `_type: 'output'`, innermost
 * last), outside the check: stored as the resolver returned it, an outcome
 * keeps what the parser strips (a password hash, a token) in the store.
 */
type OutputMiddleware = ((opts: { next: () => Promise<unknown> } & Record<string, unknown>) => Promise<unknown>) & {
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
