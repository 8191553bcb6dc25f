/**
 * The package's bin from the packed tarball: installed into a fresh project
 * with ioredis (no pg), `npx trpc-idempotency` is on the path, answers
 * `--help`, and inspects a record the project's own code made through the
 * installed package on the machine's Redis; `--database-url` without pg says
 * what to install.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, inject, it } from 'vitest';
import { commandEnv, NPM_FLAGS, run } from './pack.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

it('npx trpc-idempotency: --help, and inspect --json of a record made by the project, on Redis', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'trpc-idempotency-cli-'));
  dirs.push(dir);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'ops', private: true, type: 'module' }));
  await run('npm', ['install', inject('tgz'), 'ioredis@5', ...NPM_FLAGS], dir);
  const npx = (args: string[]) => run('npx', ['--no-install', 'trpc-idempotency', ...args], dir);

  const help = await npx(['--help']);
  expect(help.output).toContain('Usage: trpc-idempotency <command>');
  expect((await npx(['release', '--help'])).output).toContain('--force');

  const prefix = `stacks-cli-${Math.random().toString(36).slice(2)}:`;
  writeFileSync(
    join(dir, 'make.mjs'),
    `import { Redis } from 'ioredis';
import { createIdempotencyEngine } from 'trpc-idempotency/core';
import { redisStore } from 'trpc-idempotency/redis';
const client = new Redis(process.env.REDIS_URL);
const engine = createIdempotencyEngine({ store: redisStore({ client, prefix: process.env.PREFIX }) });
await engine.run({ key: 'K', name: 'pay', scope: 'u1', payload: { amount: 5 } }, async () => ({ charged: 5 }));
await client.quit();
`,
  );
  await run(process.execPath, [join(dir, 'make.mjs')], dir, commandEnv({ REDIS_URL, PREFIX: prefix }));
  const name = ['--redis', REDIS_URL, '--prefix', prefix, '--scope', 'u1', '--procedure', 'pay', '--key', 'K'];
  const inspected = await npx(['inspect', ...name, '--json', '--body']);
  expect(JSON.parse(inspected.output)).toMatchObject({
    id: 'u1:pay:K',
    state: 'completed',
    procedure: 'pay',
    body: expect.stringContaining('"charged":5'),
  });
  // forgotten, so that the test leaves nothing behind
  const released = await npx(['release', ...name, '--confirm', '--outcome', '--json']);
  expect(released.output).toContain('"result":"forgotten"');

  // no pg in this project: the command names what to install, and exits with 1
  await expect(npx(['stats', '--database-url', 'postgres://127.0.0.1:5432/test'])).rejects.toThrow(
    /ended with 1:\ntrpc-idempotency: --database-url needs the package pg, which is not installed here: npm install pg/,
  );
});
