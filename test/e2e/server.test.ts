/**
 * The example app's server as a person meets it, started as `npm run demo`
 * starts it: error bodies in production shape (no stack, no file paths), and
 * a port already taken, and a clean shutdown (exit code 0, its own card provider gone).
 */
import { randomUUID } from 'node:crypto';
import { type AddressInfo, createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Instance, runToExit, startInstance } from './helpers.js';

// The demo's defaults: the memory store, the ledger in PGlite.
const demo = { IDEMPOTENCY_STORE: 'memory', DATABASE_URL: '' };

describe('error bodies', () => {
  let app: Instance;
  beforeAll(async () => {
    app = await startInstance('errors', demo);
  });
  afterAll(async () => {
    await app?.kill('SIGKILL');
  });

  const user = `errors-${randomUUID()}`;
  const post = async (body: object, key?: string) => {
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-user': user };
    if (key !== undefined) headers['idempotency-key'] = key;
    const response = await fetch(`${app.url}/trpc/payments.create`, {
      method: 'POST',
      headers,
      body: JSON.stringify(body),
    });
    const text = await response.text();
    return {
      status: response.status,
      text,
      error: (JSON.parse(text) as { error?: { message: string; data: Record<string, unknown> } }).error,
    };
  };
  const productionShaped = (answer: Awaited<ReturnType<typeof post>>) => {
    expect(answer.error?.message).toBeTruthy();
    expect(answer.error?.data).not.toHaveProperty('stack');
    expect(answer.text).not.toContain(process.cwd()); // no absolute path of the server's files
    expect(answer.text).not.toMatch(/\n\s+at /);
  };

  it('a 422 (same key, another amount) has its reason and no stack', async () => {
    const key = randomUUID();
    expect((await post({ amount: 1000, currency: 'EUR' }, key)).status).toBe(200);
    const mismatch = await post({ amount: 5000, currency: 'EUR' }, key);
    expect(mismatch.status).toBe(422);
    expect(mismatch.error?.data).toMatchObject({ httpStatus: 422, idempotency: { reason: 'payload_mismatch' } });
    productionShaped(mismatch);
  });

  it('a 400 without a key, and a 400 for a bad input, have no stack', async () => {
    const missing = await post({ amount: 1000, currency: 'EUR' });
    expect(missing.status).toBe(400);
    expect(missing.error?.data).toMatchObject({ httpStatus: 400, idempotency: { reason: 'key_missing' } });
    productionShaped(missing);

    const invalid = await post({ amount: -5, currency: 'EUR' }, randomUUID());
    expect(invalid.status).toBe(400);
    expect(invalid.error?.data).toMatchObject({ code: 'BAD_REQUEST', httpStatus: 400 });
    productionShaped(invalid);
  });
});

describe('a busy port', () => {
  it('prints one line naming PORT on stderr and exits with code 1', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, resolve)); // on every address, as the server listens
    const port = (blocker.address() as AddressInfo).port;
    try {
      const run = await runToExit({ ...demo, PORT: String(port), LOG_EVENTS: '0' });
      expect(run.code).toBe(1);
      expect(run.stderr.split('\n').filter((line) => line !== '')).toEqual([
        `Port ${port} is in use: set PORT to another port (PORT=${port + 1} npm run demo).`,
      ]);
      expect(run.stdout).toBe('');
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });
});

describe('shutdown', () => {
  it('SIGTERM after a payment closes the server, its ledger and its own card provider, and exits with code 0', async () => {
    const app = await startInstance('shutdown', { ...demo, LOG_EVENTS: '0' });
    try {
      const line = await app.waitFor(/card provider: http:/);
      const providerUrl = /card provider: (http:\/\/[^\s;]+)/.exec(line)![1]!;
      const paid = await fetch(`${app.url}/trpc/payments.create`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID() },
        body: JSON.stringify({ amount: 500, currency: 'EUR' }),
      });
      expect(paid.status).toBe(200);
      await app.kill('SIGTERM');
      expect({ code: app.process.exitCode, signal: app.process.signalCode }).toEqual({ code: 0, signal: null });
      // The provider it started lived in its process: gone with it.
      await expect(fetch(`${providerUrl}/charges`)).rejects.toThrow();
    } finally {
      await app.kill('SIGKILL');
    }
  });
});
