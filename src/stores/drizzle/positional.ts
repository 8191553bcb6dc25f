// Statements with positional parameters (`?`), as the MySQL and SQLite stores send them through Drizzle.

/**
 * One statement: its text with `?` for each parameter, and the parameter
 * each `?` takes, in order (a name can come more than once). Written with
 * `:name` for readability, see `statement`.
 */
export interface Statement<K extends string> {
  readonly text: string;
  readonly params: readonly K[];
}

/** A statement of the `:name` placeholders in `text` (a letter after the colon: `'00:00'` is not one). */
export function statement<const K extends string>(names: readonly K[], text: string): Statement<K> {
  const params: K[] = [];
  const out = text.replace(/:([a-zA-Z]\w*)/g, (_, name: string) => {
    if (!(names as readonly string[]).includes(name)) throw new Error(`statement: unknown parameter :${name}`);
    params.push(name as K);
    return '?';
  });
  return { text: out, params };
}
