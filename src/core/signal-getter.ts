/**
 * The lease, the claimed run and the resolver's options hand out the claim's
 * AbortSignal through a getter, so that it is made only for an operation that
 * reads it; most never do. `signalGetter(read)` returns `attach(target, source)`,
 * which gives `target` an own, enumerable `signal` (as on tRPC's resolver
 * options, so `{ ...opts }` keeps it) worth `read(source)` at each read. Every
 * target shares one descriptor rather than a getter literal made per call.
 */
export function signalGetter<S>(read: (source: S) => AbortSignal): SignalAttacher<S> {
  const key = Symbol('signalSource');
  const descriptor: PropertyDescriptor = {
    get(this: { [key]: S }) {
      return read(this[key]);
    },
    enumerable: true,
    configurable: true,
  };
  const attach = <T extends object>(target: T, source: S) => {
    (target as T & { [key]?: S })[key] = source;
    return Object.defineProperty(target, 'signal', descriptor) as T & { readonly signal: AbortSignal };
  };
  return Object.assign(attach, {
    sourceOf: (target: unknown): S | undefined =>
      typeof target === 'object' && target !== null ? (target as { [key]?: S })[key] : undefined,
  });
}

/** Attaches a `signal` read through from `source`; `sourceOf` gives back the source an object was attached to. */
export interface SignalAttacher<S> {
  <T extends object>(target: T, source: S): T & { readonly signal: AbortSignal };
  sourceOf(target: unknown): S | undefined;
}
