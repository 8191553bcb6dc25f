import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { type Pod, startProcess } from '../helpers/pods.js';
import { REDIS_URL } from '../helpers/redis.js';

const server = fileURLToPath(new URL('../../example-app/src/server.ts', import.meta.url));

export type Instance = Pod;

/** One instance of the example app, as `npm run demo` starts it, on a free port. */
export function startInstance(name: string, env: Record<string, string>): Promise<Instance> {
  return startProcess(
    name,
    server,
    { PORT: '0', INSTANCE_ID: name, REDIS_URL, LOG_EVENTS: '0', CHARGE_DELAY_MS: '100', ...env },
    /listening on http:\/\/localhost:(\d+)/,
  );
}

/** Runs the example app's server, as `npm run demo` does, until it exits by itself (killed after `timeoutMs`). */
export function runToExit(
  env: Record<string, string>,
  timeoutMs = 30_000,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', server], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

export interface Answer {
  status: number;
  instance: string | null;
  replayed: boolean;
  chargeId?: number;
  reason?: string;
}

/** payments.create over plain HTTP, as any client in any language would send it. */
export async function pay(
  instance: Instance,
  opts: { key?: string; user: string; amount?: number; currency?: string; clientTimestamp?: number },
): Promise<Answer> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-user': opts.user };
  if (opts.key !== undefined) headers['idempotency-key'] = opts.key;
  const response = await fetch(`${instance.url}/trpc/payments.create`, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      amount: opts.amount ?? 1000,
      currency: opts.currency ?? 'EUR',
      clientTimestamp: opts.clientTimestamp ?? Date.now(),
    }),
  });
  const body = (await response.json()) as {
    result?: { data: { id: number } };
    error?: { data?: { idempotency?: { reason: string } } };
  };
  return {
    status: response.status,
    instance: response.headers.get('x-instance-id'),
    replayed: response.headers.get('idempotent-replayed') === 'true',
    chargeId: body.result?.data.id,
    reason: body.error?.data?.idempotency?.reason,
  };
}
