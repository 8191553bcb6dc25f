/**
 * trpc-idempotency/core in a project that has no tRPC: a queue consumer or a
 * webhook handler installs the packed package alone (@trpc/server is an
 * optional peer), and the engine runs an operation once per key.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, inject, it } from 'vitest';
import { NPM_FLAGS, run } from './pack.js';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

it('installs without @trpc/server, and the engine from /core runs an operation once per key', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'trpc-idempotency-core-'));
  dirs.push(dir);
  const tgz = inject('tgz');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'queue-consumer', private: true, type: 'module' }));
  await run('npm', ['install', tgz, ...NPM_FLAGS], dir);
  expect(existsSync(join(dir, 'node_modules/trpc-idempotency/package.json'))).toBe(true);
  expect(existsSync(join(dir, 'node_modules/@trpc'))).toBe(false);

  writeFileSync(
    join(dir, 'consumer.mjs'),
    `import { createIdempotencyEngine, IdempotencyError } from 'trpc-idempotency/core';
const engine = createIdempotencyEngine();
let shipped = 0;
const message = { id: 'msg-1', body: { order: 42 } };
const handle = () => engine.run({ key: message.id, name: 'orders.paid', payload: message.body }, async () => ({ shipment: ++shipped }));
const first = await handle();
const redelivered = await handle();
let refused;
try {
  await engine.run({ key: message.id, name: 'orders.paid', payload: { order: 43 } }, async () => ({ shipment: ++shipped }));
} catch (error) {
  refused = error instanceof IdempotencyError ? error.reason : String(error);
}
console.log(JSON.stringify({ first, redelivered, shipped, refused }));
`,
  );
  const { output } = await run(process.execPath, [join(dir, 'consumer.mjs')], dir);
  expect(JSON.parse(output.trim().split('\n').at(-1)!)).toEqual({
    first: { value: { shipment: 1 }, replayed: false },
    redelivered: { value: { shipment: 1 }, replayed: true },
    shipped: 1,
    refused: 'payload_mismatch',
  });
  // and the root entry, which is the tRPC adapter, says what it needs
  const root = await run(process.execPath, ['-e', "import('trpc-idempotency').catch((e) => console.log(e.code))"], dir);
  expect(root.output).toContain('ERR_MODULE_NOT_FOUND');
});
