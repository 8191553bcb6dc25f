/**
 * The lease, the claimed call and the resolver's options all hand out the
 * claim's AbortSignal through a getter, so that it is made only for an
 * operation that reads it: an AbortController costs several microseconds, and
 * most operations never look at their signal.
 *
 * `signalGetter(read)` returns `attach(target, source)`, which gives `target`
 * an own, enumerable `signal` whose value is `read(source)`, computed at each
 * read. All the objects of one `attach` share one descriptor, hence one getter
 * function: an object literal with a getter of its own (`{ get signal() {} }`),
 * made on every call, gets a hidden class of its own, which makes every
 * young-generation GC slower. A class would share its getter too, but on its
 * prototype, where `{ ...opts }` and `Object.keys` do not see it; here `signal`
 * stays an own property, as it is on tRPC's resolver options. `source` is
 * stored on the object (under a symbol), so attaching allocates no closure.
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
