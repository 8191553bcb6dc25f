/**
 * TanStack Query's persisters keep paused mutations (sent while offline) and
 * resume them with `resumePausedMutations()`. A mutation already sent but
 * unanswered when the page unloads is neither: TanStack does not persist it,
 * and would not resume it. These two functions add it, when its variables
 * carry a key (`withIdempotencyKey`): sent again with that key, the server
 * replays the first outcome or runs it once.
 *
 * They read mutations by shape, so they fit any copy of TanStack Query 5 and
 * this package does not depend on it.
 */
import { readIdempotencyKey } from './carried-key.js';

/** The fields of a TanStack Query `Mutation` these functions read. */
export interface PersistableMutation {
  options: { mutationKey?: unknown };
  state: { status: string; isPaused: boolean; variables?: unknown };
  continue(): Promise<unknown>;
}

/** A TanStack Query `QueryClient`, as far as {@link resumeMutations} uses it. */
export interface MutationCacheOwner {
  getMutationCache(): { getAll(): readonly PersistableMutation[] };
}

function carriesKey(variables: unknown): boolean {
  try {
    return readIdempotencyKey(variables) !== undefined;
  } catch {
    return false; // a malformed field: the link reports it when the mutation runs
  }
}

/**
 * `dehydrateOptions.shouldDehydrateMutation` for TanStack's persisters: what
 * TanStack persists by default (paused mutations), plus every pending
 * mutation whose variables carry a key and that has a `mutationKey`, so one
 * in flight when the page unloads is stored with its key. (Without a
 * `mutationKey` a restored mutation finds no `mutationFn` in
 * `setMutationDefaults` and could never be sent.)
 *
 * @example
 * persistQueryClient({ queryClient, persister, dehydrateOptions: { shouldDehydrateMutation: shouldPersistMutation } });
 */
export function shouldPersistMutation(mutation: PersistableMutation): boolean {
  if (mutation.state.isPaused) return true;
  return (
    mutation.state.status === 'pending' &&
    mutation.options.mutationKey !== undefined &&
    carriesKey(mutation.state.variables)
  );
}

/**
 * Resumes, after a persister restored the cache, what TanStack's
 * `resumePausedMutations()` resumes (paused mutations) and the pending
 * mutations that carry a key (in flight when the page unloaded). Each is
 * sent again with its own variables, so with its key; one that still cannot
 * run (offline) pauses, and TanStack resumes it when the network is back.
 * Needs each mutation's `mutationFn` from `queryClient.setMutationDefaults`.
 * Resolves when every one has settled; read each outcome from the mutation
 * cache.
 */
export function resumeMutations(queryClient: MutationCacheOwner): Promise<void> {
  const unsettled = queryClient
    .getMutationCache()
    .getAll()
    .filter((mutation) => mutation.state.status === 'pending' && shouldPersistMutation(mutation));
  return Promise.all(unsettled.map((mutation) => mutation.continue().catch(() => undefined))).then(() => undefined);
}
