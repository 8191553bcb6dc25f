/**
 * Processes of test/faults/steps-crash.test.ts: the fake downstream services
 * and the checkout servers, each a Node process of its own whose output lines
 * the test reads.
 */
import { fileURLToPath } from 'node:url';
import type { TRPCClientError } from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';
import { type Pod, startProcess } from '../../../helpers/pods.js';
import type { ServiceStats } from './downstream.js';
import type { KillPoint } from './points.js';

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

export interface Proc extends Pod {
  /** Every line it printed after `listening`. */
  lines: string[];
}

async function start(name: string, script: string, env: Record<string, string>): Promise<Proc> {
  const pod = await startProcess(name, here(script), env);
  const lines: string[] = [];
  let partial = '';
  // Attached right after the ready line was matched, before the next chunk can arrive.
  pod.process.stdout!.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString()).split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
  });
  return Object.assign(pod, { lines });
}

export interface Service extends Proc {
  stats(): Promise<ServiceStats>;
}

export async function startService(name: 'inventory' | 'payment'): Promise<Service> {
  const proc = await start(name, './downstream.ts', { SERVICE: name });
  return Object.assign(proc, {
    stats: async () => (await (await fetch(`${proc.url}/stats`)).json()) as ServiceStats,
  });
}

export interface CheckoutEnv {
  STORE: 'redis' | 'postgres';
  DATABASE_URL: string;
  INVENTORY_URL: string;
  PAYMENT_URL: string;
  LOCK_TTL: string;
  STORE_TIMEOUT: string;
  PREFIX?: string;
}

export async function startCheckout(name: string, env: CheckoutEnv): Promise<Proc> {
  return start(name, './checkout-server.ts', { ...env });
}

/** Arms `server` to be SIGKILLed once `count` checkouts have reached `point`. */
export async function arm(server: Proc, point: KillPoint, count: number): Promise<void> {
  const response = await fetch(`${server.url}/die-at?point=${point}&count=${count}`, { method: 'POST' });
  if (response.status !== 204) throw new Error(`arming ${server.name} at ${point}: ${response.status}`);
}

/** Lines of `procs` about operation `key` that start with `kind` (`fn`, `step`), without the key. */
export function linesOf(procs: Proc[], kind: string, key: string): string[] {
  return procs.flatMap((p) =>
    p.lines.filter((l) => l.startsWith(`${kind} ${key} `)).map((l) => l.slice(kind.length + key.length + 2)),
  );
}

/** How a tRPC client error looks to a retrying client: an HTTP status (0: no answer) and the idempotency reason. */
export function statusOf(error: unknown): { status: number; reason?: string } {
  const data = (error as TRPCClientError<AnyTRPCRouter>).data as
    | { httpStatus?: number; idempotency?: { reason?: string } }
    | undefined;
  return { status: data?.httpStatus ?? 0, reason: data?.idempotency?.reason };
}
