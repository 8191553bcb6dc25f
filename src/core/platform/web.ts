// The engine's runtime primitives from Web standards only, for where `node:` modules may be absent:
// Cloudflare Workers (with or without nodejs_compat), browsers, edge runtimes. package.json's
// "imports" maps `#platform` here under every condition but `node`, `bun` and `deno` (./node.ts).
//
// - the clock: the global `performance` and timers (unref'd where the runtime can);
// - `crypto.randomUUID()` (Web Crypto);
// - SHA-256: synchronous, as the engine hashes inside synchronous code (a fingerprint, a step's key):
//   @noble/hashes (audited, no dependencies), since Web Crypto's digest is asynchronous only;
// - AsyncLocalStorage and AsyncResource where the runtime gives them without an import
//   (`process.getBuiltinModule`: Workers with nodejs_compat; a global AsyncLocalStorage: Vercel's edge
//   runtime). Without them, what needs a run's async context is refused (protected-run.ts).
import { sha256 } from '@noble/hashes/sha2.js';
import type { EngineClock } from '../clock.js';
import { utf8Length } from '../utf8.js';
import type { AsyncScope, RunStorage } from './types.js';

export { utf8Length };

export const platformName = 'web';

interface AsyncHooks {
  AsyncLocalStorage?: new <T>() => RunStorage<T>;
  AsyncResource?: new (name: string) => AsyncScope;
}

const runtime = globalThis as {
  process?: { getBuiltinModule?: (id: string) => unknown };
  AsyncLocalStorage?: new <T>() => RunStorage<T>;
  setImmediate?: (fn: () => void) => unknown;
};

function builtin<T>(id: string): T | undefined {
  try {
    return runtime.process?.getBuiltinModule?.(id) as T | undefined;
  } catch {
    return undefined;
  }
}

const asyncHooks = builtin<AsyncHooks>('node:async_hooks');

/** The runtime's clocks and timers: the engine's default clock (clock.ts). */
export const realClock: EngineClock = {
  now: () => performance.now(),
  timeOrigin: performance.timeOrigin,
  wallNow: () => Date.now(),
  setTimeout(fn, ms) {
    const timer = setTimeout(fn, ms);
    (timer as { unref?: () => void }).unref?.();
    return timer;
  },
  clearTimeout: (timer) => clearTimeout(timer as Parameters<typeof clearTimeout>[0]),
  setImmediate:
    typeof runtime.setImmediate === 'function'
      ? (fn) => void runtime.setImmediate!(fn)
      : (fn) => void setTimeout(fn, 0),
};

/**
 * A timer per entry (timing.ts's EntryTimers): on Cloudflare Workers a timer belongs to the request that set
 * it, and one shared by several requests would stop with the first of them.
 */
export const sharedTimers = false;

export const randomUUID = (): string => crypto.randomUUID();

const encoder = new TextEncoder();
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** SHA-256 of the UTF-8 of `text` (a lone surrogate as U+FFFD, as Node hashes it), as bytes. */
export function sha256Bytes(text: string): Uint8Array {
  return sha256(encoder.encode(text));
}

/** Lowercase hex of `bytes[0..end)`. */
export function hexOf(bytes: Uint8Array, end: number): string {
  let out = '';
  for (let i = 0; i < end; i++) out += HEX[bytes[i]!];
  return out;
}

/** SHA-256 of the UTF-8 of `text`, in lowercase hex. */
export function sha256Hex(text: string): string {
  return hexOf(sha256Bytes(text), 32);
}

/** Standard base64 of `length` bytes of `buffer` from `offset`. */
export function base64Of(buffer: ArrayBufferLike, offset: number, length: number): string {
  const bytes = new Uint8Array(buffer, offset, length);
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** SHA-256 of the UTF-8 of `text`, in base64url (unpadded). */
export function sha256Base64url(text: string): string {
  const digest = sha256Bytes(text);
  return base64Of(digest.buffer, digest.byteOffset, digest.byteLength)
    .replace(/=+$/, '')
    .replace(/\+/g, '-')
    .replace(/\//g, '_');
}

/** AsyncLocalStorage, where the runtime has one; undefined elsewhere. */
export const AsyncContext: (new <T>() => RunStorage<T>) | undefined =
  asyncHooks?.AsyncLocalStorage ?? runtime.AsyncLocalStorage;

const noScope: AsyncScope = { runInAsyncScope: (fn, thisArg, ...args) => fn.apply(thisArg, args) };

/** An async scope of its own, named `name` (AsyncResource), or none where the runtime has no async context. */
export function asyncScope(name: string): AsyncScope {
  return asyncHooks?.AsyncResource === undefined ? noScope : new asyncHooks.AsyncResource(name);
}
