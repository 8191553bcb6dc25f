/**
 * Starts one instance of the payments service.
 *
 * env: PORT (3000; 0 picks a free port), INSTANCE_ID (hostname-based),
 *      IDEMPOTENCY_STORE (memory | redis | postgres | mysql | sqlite; memory), REDIS_URL, REDIS_PREFIX,
 *      IDEMPOTENCY_DATABASE_URL (mysql://... for mysql; sqlite:path for sqlite, a temporary file when unset),
 *      DATABASE_URL (the ledger; PGlite in memory when unset), LOCK_TTL (ms, 30000),
 *      PROVIDER_URL (the card provider; one started in this process when unset),
 *      CHARGE_DELAY_MS (1500), LOG_EVENTS (1)
 */
import { readFile } from 'node:fs/promises';
import { createServer, type RequestListener } from 'node:http';
import { hostname } from 'node:os';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { metrics } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { createApp, createContext, type StoreKind } from './app.js';
import { openDatabase } from './db.js';
import { startProvider } from './provider.js';

const env = process.env;
const port = Number(env.PORT ?? 3000);
const instanceId = env.INSTANCE_ID ?? `${hostname()}-${process.pid}`;
const storeKind = (env.IDEMPOTENCY_STORE ?? 'memory') as StoreKind;
if (!['memory', 'redis', 'postgres', 'mysql', 'sqlite'].includes(storeKind)) {
  throw new Error(`IDEMPOTENCY_STORE must be memory, redis, postgres, mysql or sqlite, not ${storeKind}.`);
}
if (storeKind === 'memory' && env.DATABASE_URL) {
  console.warn(
    'IDEMPOTENCY_STORE=memory protects one instance only; use redis, postgres, mysql or sqlite when several share DATABASE_URL.',
  );
}

// The port first, so that a taken one is told at once, before anything opens. Requests that
// arrive meanwhile wait until the service is ready.
let ready!: (handler: RequestListener) => void;
const handler = new Promise<RequestListener>((resolve) => (ready = resolve));
const server = createServer((req, res) => void handler.then((handle) => handle(req, res)));
const onListenError = (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EADDRINUSE') throw error;
  // Another demo (or anything else) holds the port: one line that says what to do, no stack.
  console.error(`Port ${port} is in use: set PORT to another port (PORT=${port + 1} npm run demo).`);
  process.exit(1);
};
server.once('error', onListenError);
await new Promise<void>((listening) => server.listen(port, listening));
server.off('error', onListenError);

// OpenTelemetry metrics, scraped by Prometheus from /metrics on the app's own port.
const prometheus = new PrometheusExporter({ preventServerStart: true });
const meterProvider = new MeterProvider({
  resource: resourceFromAttributes({ 'service.name': 'trpc-idempotency-demo', 'service.instance.id': instanceId }),
  readers: [prometheus],
});
metrics.setGlobalMeterProvider(meterProvider);

// Instances that share a store share one provider (PROVIDER_URL); alone, the demo brings its own.
const ownProvider = env.PROVIDER_URL ? undefined : await startProvider();
const providerUrl = env.PROVIDER_URL || ownProvider!.url;
// The crash control needs another instance to take over the payment, so a store they share: with
// the memory store the claim and the recorded charge step die with the process.
const crashable = storeKind !== 'memory';
const lockTtl = Number(env.LOCK_TTL ?? 30_000);

const database = await openDatabase(env.DATABASE_URL);
const app = await createApp({
  db: database.db,
  store: storeKind,
  redisUrl: env.REDIS_URL,
  redisPrefix: env.REDIS_PREFIX,
  idempotencyDatabaseUrl: env.IDEMPOTENCY_DATABASE_URL,
  instanceId,
  providerUrl,
  chargeDelayMs: Number(env.CHARGE_DELAY_MS ?? 1_500),
  lockTtl,
  onEvent:
    env.LOG_EVENTS === '0' ? undefined : (event) => console.log(JSON.stringify({ event: 'idempotency', ...event })),
  crashAfterCharge: crashable
    ? () => {
        // As a power cut would: no response, no cleanup, the claim left to expire.
        console.log(JSON.stringify({ event: 'crash', instance: instanceId }));
        process.kill(process.pid, 'SIGKILL');
        throw new Error('unreachable: SIGKILL ends the process');
      }
    : undefined,
});

const trpc = createHTTPHandler({ router: app.appRouter, createContext, basePath: '/trpc' });
const webRoot = fileURLToPath(new URL('../web/dist/', import.meta.url));
const types: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.css': 'text/css',
};

// The demo's switch: the next payments.create response is dropped after the
// charge ran, as a timeout or a load balancer would drop it.
let dropNext = false;

ready(async (req, res) => {
  res.setHeader('x-instance-id', instanceId);
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (url.pathname.startsWith('/trpc/')) {
    if (dropNext && req.method === 'POST' && url.pathname.includes('payments.create')) {
      dropNext = false;
      // tRPC writes the body with res.write, once per chunk, then calls res.end: the first of
      // those cuts the connection and logs it, once; the calls after it find it cut.
      let dropped = false;
      const drop = () => {
        if (dropped) return;
        dropped = true;
        console.log(JSON.stringify({ event: 'response_dropped', instance: instanceId }));
        // The answer starts and is cut off, as a timeout or a crashed proxy would cut it.
        // (A connection closed before any byte would be resent by some browsers on their own.)
        req.socket.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n[{"res', () =>
          req.socket.destroy(),
        );
      };
      res.write = (() => {
        drop();
        return true;
      }) as never;
      res.end = (() => {
        drop();
        return res;
      }) as never;
    }
    return trpc(req, res);
  }
  if (req.method === 'POST' && url.pathname === '/demo/drop-next-response') {
    dropNext = true;
    res.writeHead(204).end();
    return;
  }
  if (req.method === 'GET' && url.pathname === '/demo/config') {
    // What the page needs to know to offer the crash control and to retry long enough for it.
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ instance: instanceId, store: storeKind, lockTtl, crashable }));
    return;
  }
  if (req.method === 'GET' && url.pathname === '/metrics') {
    prometheus.getMetricsRequestHandler(req, res);
    return;
  }
  if (url.pathname === '/healthz') {
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    return;
  }
  const file = normalize(url.pathname === '/' ? 'index.html' : url.pathname.slice(1));
  if (file.startsWith('..')) {
    res.writeHead(400).end();
    return;
  }
  try {
    const body = await readFile(join(webRoot, file));
    res.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' }).end(body);
  } catch {
    const hint =
      url.pathname === '/'
        ? 'The page is not built: run `npm run demo` (it builds it) or `npm run example:web`.'
        : 'Not found';
    res.writeHead(404, { 'content-type': 'text/plain' }).end(hint);
  }
});

const address = server.address();
const actual = typeof address === 'object' && address !== null ? address.port : port;
const base = `http://localhost:${actual}`;
const post = (key: string, body: string) =>
  `curl -si -X POST ${base}/trpc/payments.create -H 'content-type: application/json' -H 'idempotency-key: ${key}' -d '${body}'`;
console.log(`trpc-idempotency demo (instance ${instanceId}) listening on ${base}
idempotency store: ${storeKind}${storeKind === 'redis' ? ` (${env.REDIS_URL ?? 'redis://127.0.0.1:6379'})` : app.storeWhere === undefined ? '' : `: ${app.storeWhere}`}; ledger: ${database.kind}
card provider: ${providerUrl}${ownProvider === undefined ? '' : ' (in this process)'}; the crash control is ${crashable ? 'on' : 'off (it needs several instances sharing a redis or postgres store)'}

Open ${base} for the checkout page, or try (amounts in cents: 1000 is 10.00 EUR):
First call, runs the charge:
  ${post('order-1', '{"amount":1000,"currency":"EUR","clientTimestamp":1}')}
Same key again, replayed without charging (idempotent-replayed: true; clientTimestamp is excluded):
  ${post('order-1', '{"amount":1000,"currency":"EUR","clientTimestamp":2}')}
Same key, another amount: 422
  ${post('order-1', '{"amount":5000,"currency":"EUR"}')}
Two at once with a new key: one charges, the other gets 409 with Retry-After
  ${post('order-2', '{"amount":700,"currency":"EUR"}')} & ${post('order-2', '{"amount":700,"currency":"EUR"}')}; wait
No key: 400
  curl -si -X POST ${base}/trpc/payments.create -H 'content-type: application/json' -d '{"amount":1000,"currency":"EUR"}'
The ledger:
  curl -s ${base}/trpc/payments.list
The charges at the card provider (one per key, however often it was sent):
  curl -s ${providerUrl}/charges
Metrics (OpenTelemetry, Prometheus format):
  curl -s ${base}/metrics | grep idempotency
`);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    server.close();
    server.closeAllConnections();
    // Exit 1 when something did not close cleanly (a pool, the exporter), saying what.
    Promise.all([app.close(), database.close(), meterProvider.shutdown(), ownProvider?.close()]).then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(JSON.stringify({ event: 'shutdown_failed', instance: instanceId, message: String(error) }));
        process.exit(1);
      },
    );
  });
}
