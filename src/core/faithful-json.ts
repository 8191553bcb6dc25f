/**
 * JSON that gives back the value it was written from, for results stored
 * without a data transformer: a replay must be the value the first call
 * returned, so that an `.output()` parser accepts it as it accepted the first
 * (a `z.date()` refuses the string a Date becomes in plain JSON), and a
 * server-side caller gets the same Date, Map or Set.
 *
 * A value that JSON keeps as it is (plain objects and arrays of strings,
 * finite numbers, booleans and null) is written as plain JSON. One holding
 * Dates, Maps, Sets, BigInts, RegExps, undefined, holes, NaN, ±Infinity or -0
 * is written as `~` and a JSON pair: the value with each of them replaced by
 * a JSON stand-in, and the list of `[path, tag]` that says what to put back.
 * No JSON text starts with `~`, so the two never meet. Other objects are
 * kept in the form JSON gives them (the client's form); functions, symbols
 * and cycles throw: the engine then records the outcome as unreplayable (it
 * ran once) rather than store something else.
 */

const TAGGED = '~';
/** Deeper than this is refused (as JSON.stringify would overflow the stack on far less than a cycle). */
const MAX_DEPTH = 1_000;

type Tag = 'undefined' | 'hole' | 'number' | 'bigint' | 'date' | 'map' | 'set' | 'regexp';
type Path = (string | number)[];

export function serializeFaithfully(value: unknown): string {
  if (value === undefined) return '';
  if (isPlain(value, 0)) return JSON.stringify(value);
  const tags: [Path, Tag][] = [];
  const json = standIn(value, [], tags);
  return tags.length === 0 ? JSON.stringify(json) : `${TAGGED}${JSON.stringify([json, tags])}`;
}

const TAGS: ReadonlySet<string> = new Set<Tag>([
  'undefined',
  'hole',
  'number',
  'bigint',
  'date',
  'map',
  'set',
  'regexp',
]);

export function deserializeFaithfully(body: string): unknown {
  if (body === '') return undefined;
  if (body.charCodeAt(0) !== 0x7e) return JSON.parse(body);
  const pair: unknown = JSON.parse(body.slice(1));
  if (!Array.isArray(pair) || pair.length !== 2 || !Array.isArray(pair[1])) throw malformed();
  const tags = pair[1] as unknown[];
  const root: Record<string, unknown> = { value: pair[0] };
  // Deepest first: a Map or Set is built from entries already put back.
  tags.sort((a, b) => pathOf(b).length - pathOf(a).length);
  for (const entry of tags) {
    const path = pathOf(entry);
    const tag = (entry as unknown[])[1];
    if (typeof tag !== 'string' || !TAGS.has(tag)) throw malformed();
    // Only through the containers JSON.parse made, by their own fields: a body read from the store
    // cannot reach a prototype (`constructor`, `__proto__`) however it was written.
    let parent: Record<string | number, unknown> = root;
    let at: string | number = 'value';
    for (const segment of path) {
      const next = Object.hasOwn(parent, at) ? parent[at] : undefined;
      if (!isContainer(next)) throw malformed();
      parent = next;
      at = segment;
    }
    if (!Object.hasOwn(parent, at)) throw malformed();
    if (tag === 'hole') delete parent[at];
    else define(parent, at, revive(tag as Exclude<Tag, 'hole'>, parent[at]));
  }
  return root.value;
}

function pathOf(entry: unknown): Path {
  const path = Array.isArray(entry) ? (entry[0] as unknown) : undefined;
  if (!Array.isArray(path) || !path.every((s) => typeof s === 'string' || Number.isInteger(s))) throw malformed();
  return path as Path;
}

function isContainer(value: unknown): value is Record<string | number, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto = Object.getPrototypeOf(value) as object | null;
  return Array.isArray(value) || proto === Object.prototype || proto === null;
}

function malformed(): Error {
  return new Error(
    'A stored outcome is malformed (its faithful JSON does not describe its own fields); it cannot be replayed.',
  );
}

/** True when JSON.stringify writes `value` so that JSON.parse gives it back as it is. */
function isPlain(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value) && !Object.is(value, -0);
    case 'object': {
      if (value === null) return true;
      if (depth >= MAX_DEPTH) return false;
      if (Array.isArray(value)) {
        if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return false;
        for (let i = 0; i < value.length; i++) {
          if (!(i in value) || !isPlain(value[i], depth + 1)) return false;
        }
        return true;
      }
      const proto = Object.getPrototypeOf(value) as object | null;
      if (
        (proto !== Object.prototype && proto !== null) ||
        typeof (value as { toJSON?: unknown }).toJSON === 'function'
      ) {
        return false;
      }
      for (const key in value) {
        if (!isPlain((value as Record<string, unknown>)[key], depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/**
 * The JSON stand-in of `value`, whose path is `path` (a stack, copied only
 * when a tag is recorded), recording in `tags` what it stands for.
 */
function standIn(value: unknown, path: Path, tags: [Path, Tag][], fromToJSON = false): unknown {
  const tag = (what: Tag) => tags.push([path.slice(), what]);
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      if (Number.isFinite(value) && !Object.is(value, -0)) return value;
      tag('number');
      return Object.is(value, -0) ? '-0' : String(value); // 'NaN', 'Infinity', '-Infinity'
    case 'undefined':
      tag('undefined');
      return null;
    case 'bigint':
      tag('bigint');
      return String(value);
    case 'object':
      if (value === null) return null;
      break;
    default:
      throw new TypeError(`A ${typeof value} has no faithful JSON form.`);
  }
  if (path.length >= MAX_DEPTH)
    throw new TypeError(`The value is nested more than ${MAX_DEPTH} levels deep (or cyclic).`);
  const below = (segment: string | number, item: unknown) => {
    path.push(segment);
    const out = standIn(item, path, tags);
    path.pop();
    return out;
  };
  // As JSON.stringify: an object's own toJSON() first (a Decimal's string, a Map subclass's object), but not
  // again on what it returned; a Date's own is the one the tag below stands for.
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (!fromToJSON && typeof toJSON === 'function' && toJSON !== Date.prototype.toJSON) {
    const last = path.length === 0 ? '' : String(path[path.length - 1]);
    return standIn((toJSON as (key: string) => unknown).call(value, last), path, tags, true);
  }
  if (Array.isArray(value)) {
    const out: unknown[] = [];
    for (let i = 0; i < value.length; i++) {
      if (i in value) out.push(below(i, value[i]));
      else {
        path.push(i);
        tag('hole');
        path.pop();
        out.push(null);
      }
    }
    return out;
  }
  if (fromToJSON) {
    // What a toJSON() returned is written as an object of its own fields, whatever its class.
  } else if (value instanceof Date) {
    tag('date');
    const time = value.getTime();
    return Number.isNaN(time) ? null : time;
  } else if (value instanceof Map) {
    tag('map');
    const entries: unknown[] = [];
    for (const [k, v] of value) {
      path.push(entries.length);
      entries.push([below(0, k), below(1, v)]);
      path.pop();
    }
    return entries;
  } else if (value instanceof Set) {
    tag('set');
    const items: unknown[] = [];
    for (const item of value) items.push(below(items.length, item));
    return items;
  } else if (value instanceof RegExp) {
    tag('regexp');
    return [value.source, value.flags];
  }
  // Any other object is what JSON makes of it, as the client receives it: its own fields. A
  // server-side caller gets that form back, not the class.
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) define(out, key, below(key, (value as Record<string, unknown>)[key]));
  return out;
}

function revive(tag: Exclude<Tag, 'hole'>, json: unknown): unknown {
  switch (tag) {
    case 'undefined':
      return undefined;
    case 'number':
      return json === '-0' ? -0 : Number(json);
    case 'bigint':
      return BigInt(json as string);
    case 'date':
      return new Date(json === null ? Number.NaN : (json as number));
    case 'map':
      return new Map(json as [unknown, unknown][]);
    case 'set':
      return new Set(json as unknown[]);
    case 'regexp': {
      const [source, flags] = json as [string, string];
      return new RegExp(source, flags);
    }
  }
}

/** Sets a field as data, even one named `__proto__`. */
function define(target: Record<string | number, unknown>, key: string | number, value: unknown): void {
  Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true });
}
