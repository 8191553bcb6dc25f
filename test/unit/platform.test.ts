/**
 * `#platform`'s two implementations (src/core/platform): Node's (node:crypto, Buffer, node:async_hooks)
 * and Web standards' (@noble/hashes, TextEncoder, btoa), which package.json's "imports" picks by
 * runtime. Each primitive gives the same answer in both, so a record written by a Worker is read the
 * same by a Node process (fingerprints, step keys, key hashes, sizes). And EntryTimers, the timer
 * queue of the Web one, keeps TimerQueue's contract: each entry fires once its delay has passed,
 * never once removed. And the client, which browsers load, reaches neither: no `node:` module, no
 * #platform.
 */
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it, vi } from 'vitest';
import * as node from '../../src/core/platform/node.js';
import * as web from '../../src/core/platform/web.js';
import { EntryTimers, type Timed } from '../../src/core/timing.js';
import { utf8Length } from '../../src/core/utf8.js';
import { useRealTime, useVirtualTime, virtualClock } from '../helpers/virtual-time.js';

const TEXTS = [
  '',
  'a',
  'pay\n{"amount":100}',
  'é',
  '€ and 日本',
  '🙂 pairs 𝄞',
  '\ud800 lone high',
  'lone low \udc00',
  'high at the end \ud83d',
  '\udc00\ud800 reversed',
  'x'.repeat(100_000),
  '€🙂'.repeat(20_000),
];

describe('#platform: node.ts and web.ts agree', () => {
  it('on SHA-256 (base64url, hex, bytes) and on UTF-8 lengths, lone surrogates included', () => {
    for (const text of TEXTS) {
      expect(web.sha256Base64url(text)).toBe(node.sha256Base64url(text));
      expect(web.sha256Hex(text)).toBe(node.sha256Hex(text));
      expect([...web.sha256Bytes(text)]).toEqual([...node.sha256Bytes(text)]);
      expect(web.utf8Length(text)).toBe(node.utf8Length(text));
      expect(utf8Length(text)).toBe(Buffer.byteLength(text));
    }
  });

  it('on hex and base64 of bytes, at an offset, past the chunk btoa is fed in', () => {
    const bytes = new Uint8Array(70_001).map((_, i) => (i * 31 + 7) & 0xff);
    for (const [offset, length] of [
      [0, 0],
      [0, 1],
      [1, 2],
      [3, 65_536],
      [0, 70_001],
    ] as const) {
      expect(web.base64Of(bytes.buffer, offset, length)).toBe(node.base64Of(bytes.buffer, offset, length));
    }
    expect(web.hexOf(bytes, 16)).toBe(node.hexOf(bytes, 16));
  });

  it('on random UUIDs (version 4) and on the clock', () => {
    for (const platform of [node, web]) {
      expect(platform.randomUUID()).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      const { now, timeOrigin, wallNow } = platform.realClock;
      expect(Math.abs(timeOrigin + now() - wallNow())).toBeLessThan(1_000);
    }
  });

  it('Node shares one timer per delay; the Web one a timer per entry', () => {
    expect(node.sharedTimers).toBe(true);
    expect(web.sharedTimers).toBe(false);
  });
});

function entry(name: string, log: { name: string; at: number }[]): Timed {
  return {
    due: 0,
    prev: undefined,
    next: undefined,
    queue: undefined,
    fire() {
      log.push({ name, at: performance.now() });
    },
  };
}

describe('EntryTimers', () => {
  it('fires each entry once its delay has passed (from when it was added, or since), never a removed one', async () => {
    useVirtualTime();
    try {
      const queue = new EntryTimers(40, virtualClock());
      const log: { name: string; at: number }[] = [];
      const [a, b, c] = [entry('a', log), entry('b', log), entry('c', log)];
      queue.add(a, performance.now());
      queue.add(b, performance.now());
      queue.addSince(c, performance.now() - 30); // due 10 ms from now
      expect(c.queue).toBe(queue);
      queue.remove(b);
      expect(b.queue).toBeUndefined();
      await vi.advanceTimersByTimeAsync(10);
      expect(log).toEqual([{ name: 'c', at: 10 }]);
      expect(c.queue).toBeUndefined();
      await vi.advanceTimersByTimeAsync(30);
      expect(log).toEqual([
        { name: 'c', at: 10 },
        { name: 'a', at: 40 },
      ]);
      queue.add(a, performance.now()); // added again after firing
      queue.remove(a);
      queue.remove(a); // twice: no-op
      await vi.advanceTimersByTimeAsync(100);
      expect(log).toHaveLength(2);
    } finally {
      await useRealTime();
    }
  });
});

describe('the client (trpc-idempotency/client)', () => {
  it('bundles for a browser without a node: module and without #platform', async () => {
    const result = await build({
      entryPoints: [fileURLToPath(new URL('../../src/client.ts', import.meta.url))],
      bundle: true,
      write: false,
      format: 'esm',
      platform: 'browser',
      external: ['@trpc/*'],
      metafile: true,
      logLevel: 'silent',
    });
    const inputs = Object.keys(result.metafile.inputs);
    expect(inputs.filter((file) => file.includes('/platform/') || file.includes('@noble'))).toEqual([]);
    const imports = Object.values(result.metafile.outputs).flatMap((output) => output.imports.map((i) => i.path));
    expect(imports.filter((path) => !path.startsWith('@trpc/'))).toEqual([]);
  });
});
