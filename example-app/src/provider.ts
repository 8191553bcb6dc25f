/**
 * A fake card provider, the payments service's downstream: an HTTP server of
 * its own, idempotent the way real providers are (Stripe, Adyen): one charge
 * per `Idempotency-Key`, the same charge replayed for the same key.
 *
 *   POST /charges  {"amount":1000,"currency":"EUR"}  with an Idempotency-Key header
 *     201 the new charge; 200 with `Idempotent-Replayed: true` for a key seen before;
 *     422 for a key seen before with another amount or currency; 400 without a key.
 *   GET /charges[?key=...]  {"calls": <POSTs received>, "charges": [...]}
 *
 * Run on its own (`npx tsx example-app/src/provider.ts`, env PORT, 4000 by default; 0
 * picks a free port) to share it between instances, or in the app's process
 * (`startProvider()`), which `npm run demo` does when PROVIDER_URL is unset.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

export interface ProviderCharge {
  /** The provider's id of the charge, `ch_1`, `ch_2`... */
  id: string;
  /** The Idempotency-Key it was made with. */
  key: string;
  amount: number;
  currency: string;
  createdAt: string;
  /** How many POSTs came with this key: 1, plus one per retry that was replayed. */
  requests: number;
}

export interface Provider {
  url: string;
  close(): Promise<void>;
}

/** Starts the provider on `port` (0: a free one); it keeps its charges in memory. */
export async function startProvider(port = 0): Promise<Provider> {
  const byKey = new Map<string, ProviderCharge>();
  let calls = 0;

  const send = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));

  const charge = async (req: IncomingMessage, res: ServerResponse) => {
    calls++;
    const key = req.headers['idempotency-key'];
    let text = '';
    for await (const chunk of req) text += chunk;
    if (typeof key !== 'string' || key === '') {
      return send(res, 400, { error: 'Send an Idempotency-Key header: each charge needs its own key.' });
    }
    let input: { amount?: unknown; currency?: unknown };
    try {
      input = JSON.parse(text);
    } catch {
      return send(res, 400, { error: 'The body must be JSON: {"amount": <cents>, "currency": "EUR"}.' });
    }
    if (!Number.isInteger(input.amount) || typeof input.currency !== 'string') {
      return send(res, 400, { error: 'The body must be {"amount": <whole cents>, "currency": "EUR"}.' });
    }
    const seen = byKey.get(key);
    if (seen !== undefined) {
      if (seen.amount !== input.amount || seen.currency !== input.currency) {
        return send(res, 422, {
          error: `Key ${key} already charged ${seen.amount} ${seen.currency}: a new charge needs a new key.`,
        });
      }
      seen.requests++;
      return send(res, 200, seen, { 'idempotent-replayed': 'true' });
    }
    const created: ProviderCharge = {
      id: `ch_${byKey.size + 1}`,
      key,
      amount: input.amount as number,
      currency: input.currency,
      createdAt: new Date().toISOString(),
      requests: 1,
    };
    byKey.set(key, created);
    return send(res, 201, created);
  };

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== '/charges') return send(res, 404, { error: 'Only /charges is here.' });
    if (req.method === 'POST') {
      charge(req, res).catch((error: Error) => send(res, 500, { error: error.message }));
      return;
    }
    if (req.method === 'GET') {
      const key = url.searchParams.get('key');
      const charges = [...byKey.values()].filter((c) => key === null || c.key === key);
      return send(res, 200, { calls, charges });
    }
    send(res, 405, { error: 'GET or POST /charges.' });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, () => resolve());
  });
  return {
    url: `http://localhost:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The app's side of the provider: one charge, sent with the caller's idempotency key. */
export function providerClient(url: string) {
  return {
    async charge(input: { amount: number; currency: string }, key: string): Promise<ProviderCharge> {
      const response = await fetch(new URL('/charges', url), {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ amount: input.amount, currency: input.currency }),
      });
      const body = (await response.json()) as ProviderCharge & { error?: string };
      if (!response.ok) {
        throw new Error(`The card provider answered ${response.status}: ${body.error ?? 'no reason given'}`);
      }
      return body;
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const provider = await startProvider(Number(process.env.PORT ?? 4000));
  console.log(`card provider listening on ${provider.url}`);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () =>
      provider.close().then(
        () => process.exit(0),
        (error: unknown) => {
          console.error('card provider: closing failed:', error);
          process.exit(1);
        },
      ),
    );
  }
}
