import { spawn } from 'node:child_process';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { type Pod, startProcess } from '../helpers/pods.js';
import { REDIS_URL } from '../helpers/redis.js';

const server = fileURLToPath(new URL('../../example-app/src/server.ts', import.meta.url));
const provider = fileURLToPath(new URL('../../example-app/src/provider.ts', import.meta.url));

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

/** The example app's card provider as a process of its own, on a free port, for instances to share (PROVIDER_URL). */
export function startProvider(): Promise<Instance> {
  return startProcess('provider', provider, { PORT: '0' }, /card provider listening on http:\/\/localhost:(\d+)/);
}

/** What the provider holds: the POSTs it received, and one charge per key. */
export async function providerCharges(
  provider: Instance,
  key?: string,
): Promise<{ calls: number; charges: { id: string; key: string; amount: number; requests: number }[] }> {
  const url = new URL('/charges', provider.url);
  if (key !== undefined) url.searchParams.set('key', key);
  return (await fetch(url)).json() as never;
}

export interface Balancer {
  url: string;
  close(): Promise<void>;
}

/**
 * A TCP load balancer in front of instances, as nginx's round robin is: each
 * new connection goes to the next instance, and an instance that refuses
 * connections (a dead one) is skipped. It never resends what a client sent.
 */
export async function startBalancer(instances: readonly Instance[]): Promise<Balancer> {
  const ports = instances.map((i) => Number(new URL(i.url).port));
  const sockets = new Set<Socket>();
  let next = 0;
  const balancer = createServer((client) => {
    client.pause(); // nothing is read before an instance accepts the connection
    client.on('error', () => client.destroy());
    sockets.add(client);
    const attempt = (tried: number) => {
      if (tried === ports.length) return client.destroy();
      const port = ports[next++ % ports.length]!;
      const upstream = connect(port, '127.0.0.1');
      upstream.once('error', () => attempt(tried + 1));
      upstream.once('connect', () => {
        sockets.add(upstream);
        const end = () => {
          client.destroy();
          upstream.destroy();
          sockets.delete(client);
          sockets.delete(upstream);
        };
        upstream.removeAllListeners('error');
        upstream.on('error', end).on('close', end);
        client.on('error', end).on('close', end);
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
    };
    attempt(0);
  });
  await new Promise<void>((resolve) => balancer.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(balancer.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        balancer.close(() => resolve());
      }),
  };
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
