/**
 * The wiring the README shows: the OpenTelemetry SDK with a Prometheus
 * exporter, served on /metrics next to a real tRPC handler, scraped over HTTP.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { initTRPC } from '@trpc/server';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { expect, it } from 'vitest';
import { z } from 'zod';
import { type IdempotencyMeta, idempotencyErrorFormatter, memoryStore, withIdempotency } from '../../src/index.js';
import { openTelemetry } from '../../src/otel.js';
import { createClient, rejectionOf } from '../helpers/trpc.js';

/** The samples of one metric family, as label sets and values. */
function samples(text: string, name: string): { labels: Record<string, string>; value: number }[] {
  const out: { labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[key!] = value!;
    out.push({ labels, value: Number(match[3]) });
  }
  return out;
}

it('serves the idempotency metrics on /metrics in the Prometheus text format', async () => {
  // The SDK: a MeterProvider whose reader is the Prometheus exporter, without a server of its own.
  const prometheus = new PrometheusExporter({ preventServerStart: true });
  const meterProvider = new MeterProvider({
    resource: resourceFromAttributes({ 'service.name': 'payments', 'service.instance.id': 'test-1' }),
    readers: [prometheus],
  });

  const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
  const idempotent = withIdempotency(t.procedure, {
    scope: 'global',
    store: memoryStore(),
    onEvent: openTelemetry({ meterProvider }),
  });
  const router = t.router({
    pay: idempotent
      .input(z.object({ amount: z.number() }))
      .mutation(({ input }) => ({ id: randomUUID(), amount: input.amount })),
  });
  const trpc = createHTTPHandler({ router, createContext: ({ req, res }) => ({ req, res }), basePath: '/trpc/' });
  const server = createServer((req, res) => {
    if (req.url === '/metrics') return prometheus.getMetricsRequestHandler(req, res);
    return trpc(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  try {
    const client = createClient<typeof router>(`${base}/trpc`);
    const key = randomUUID();
    await client.pay.mutate({ amount: 1 }, { context: { key } });
    await client.pay.mutate({ amount: 1 }, { context: { key } });
    await rejectionOf(client.pay.mutate({ amount: 2 }, { context: { key } }));

    const response = await fetch(`${base}/metrics`);
    expect(response.status).toBe(200);
    const text = await response.text();

    expect(text).toContain('# TYPE idempotency_checks_total counter');
    expect(text).toContain('# TYPE idempotency_check_duration histogram');
    expect(text).toContain('# TYPE idempotency_replay_bytes_total counter');
    const checks = samples(text, 'idempotency_checks_total');
    expect(checks.map((s) => [s.labels.idempotency_result, s.value]).sort()).toEqual([
      ['acquired', 1],
      ['mismatch', 1],
      ['replayed', 1],
    ]);
    for (const s of checks) {
      expect(s.labels).toMatchObject({
        idempotency_procedure: 'pay',
        idempotency_store_name: 'memory',
        otel_scope_name: 'trpc-idempotency',
      });
    }
    const buckets = samples(text, 'idempotency_check_duration_bucket').filter(
      (s) => s.labels.idempotency_result === 'acquired',
    );
    expect(buckets.map((s) => s.labels.le)).toEqual([
      '0.0001',
      '0.00025',
      '0.0005',
      '0.001',
      '0.0025',
      '0.005',
      '0.01',
      '0.025',
      '0.05',
      '0.1',
      '0.25',
      '0.5',
      '1',
      '2.5',
      '5',
      '10',
      '+Inf',
    ]);
    expect(buckets.at(-1)!.value).toBe(1);
    expect(samples(text, 'idempotency_check_duration_count').reduce((n, s) => n + s.value, 0)).toBe(3);
    expect(samples(text, 'idempotency_replay_bytes_total')[0]!.value).toBeGreaterThan(0);
    expect(text).not.toContain(key);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await meterProvider.shutdown();
  }
});
