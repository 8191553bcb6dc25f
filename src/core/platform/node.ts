// The engine's runtime primitives on Node.js, and on Bun and Deno, which implement these modules
// natively. package.json's "imports" maps `#platform` here under the `node`, `bun` and `deno`
// conditions, and to ./web.ts (Web standards only) under any other: Cloudflare Workers, browsers,
// edge runtimes. The engine reads `#platform` only; this file keeps Node's fastest path: its native
// SHA-256 (one call where crypto.hash exists), Buffer's UTF-8 length and base64, AsyncLocalStorage.
import { AsyncLocalStorage, AsyncResource } from 'node:async_hooks';
import * as crypto from 'node:crypto';
// Imported: in Node 20 the global `performance` is an accessor.
import { performance } from 'node:perf_hooks';
import type { EngineClock } from '../clock.js';
import type { AsyncScope, RunStorage } from './types.js';

export const platformName = 'node';

/** Node's clocks and timers: the engine's default clock (clock.ts). */
export const realClock: EngineClock = {
  now: () => performance.now(),
  timeOrigin: performance.timeOrigin,
  wallNow: () => Date.now(),
  setTimeout(fn, ms) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return timer;
  },
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout),
  setImmediate(fn) {
    setImmediate(fn);
  },
};

/** One timer serves every entry of a delay (timing.ts's TimerQueue): a Node.js timer belongs to no request. */
export const sharedTimers = true;

export const randomUUID: () => string = crypto.randomUUID;

// crypto.hash (Node >= 20.12) hashes in one call, without a Hash object; a
// namespace import, since a named one would fail to link on older Node 20.
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: 'base64url') => string }).hash;

/** SHA-256 of the UTF-8 of `text`, in base64url. */
export function sha256Base64url(text: string): string {
  return oneShot === undefined
    ? crypto.createHash('sha256').update(text).digest('base64url')
    : oneShot('sha256', text, 'base64url');
}

/** SHA-256 of the UTF-8 of `text`, in lowercase hex. */
export function sha256Hex(text: string): string {
  return crypto.createHash('sha256').update(text).digest('hex');
}

/** SHA-256 of the UTF-8 of `text`, as bytes. */
export function sha256Bytes(text: string): Uint8Array {
  return crypto.createHash('sha256').update(text).digest();
}

/** Lowercase hex of `bytes[0..end)`. */
export function hexOf(bytes: Uint8Array, end: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, end).toString('hex');
}

/** How many bytes `text` takes in UTF-8 (a lone surrogate as U+FFFD's 3). */
export function utf8Length(text: string): number {
  return Buffer.byteLength(text);
}

/** Standard base64 of `length` bytes of `buffer` from `offset`. */
export function base64Of(buffer: ArrayBufferLike, offset: number, length: number): string {
  return Buffer.from(buffer, offset, length).toString('base64');
}

/** AsyncLocalStorage: Node always has it. */
export const AsyncContext: (new <T>() => RunStorage<T>) | undefined = AsyncLocalStorage;

/** An async scope of its own, named `name` (AsyncResource). */
export function asyncScope(name: string): AsyncScope {
  return new AsyncResource(name);
}
