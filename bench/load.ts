/**
 * The load generator: a process of its own (forked by run.ts, commands over
 * IPC), so the servers under test never share an event loop with it.
 * autocannon over loopback; every variant gets the same request, with a
 * fresh Idempotency-Key per request or one from a pool of completed keys.
 */
import { randomUUID } from 'node:crypto';
import { Agent, request } from 'node:http';
import { createRequire } from 'node:module';
import { PAY_BODY } from './lib/app.js';

const require = createRequire(import.meta.url);
const autocannon = require('autocannon') as (
  opts: object,
  cb: (err: unknown, result: AutocannonResult) => void,
) => void;

interface AutocannonResult {
  duration: number;
  '2xx': number;
  non2xx: number;
  errors: number;
  timeouts: number;
  latency: { p50: number; p99: number; average: number };
  requests: { total: number };
}

export interface LoadCommand {
  id: number;
  /** run: autocannon at saturation; paced: a fixed rate, open loop; prime: complete the replay keys. */
  type: 'run' | 'prime' | 'paced';
  url: string;
  connections: number;
  /** Seconds (run, paced). */
  duration?: number;
  /** Requests (run): this many, then stop, instead of running for `duration`. */
  amount?: number;
  /** Requests per second (paced). */
  rate?: number;
  /** fresh: a new key per request; replay: keys `${prefix}-${i}` for i < count, completed by `prime`. */
  keys: { mode: 'fresh' } | { mode: 'replay'; prefix: string; count: number };
}

export interface LoadResult {
  id: number;
  rps: number;
  total: number;
  ok: number;
  non2xx: number;
  errors: number;
  p50_ms: number;
  p99_ms: number;
  seconds: number;
  /** prime only: how many of the checked keys answered with the stored result. */
  replayChecked?: number;
}

const HEADERS = { 'content-type': 'application/json' };

function keySource(keys: LoadCommand['keys']): () => string {
  if (keys.mode === 'fresh') return () => randomUUID();
  let i = 0;
  const pool = Array.from({ length: keys.count }, (_, n) => `${keys.prefix}-${n}`);
  return () => pool[i++ % pool.length]!;
}

function run(command: LoadCommand): Promise<LoadResult> {
  const nextKey = keySource(command.keys);
  return new Promise((resolve, reject) => {
    autocannon(
      {
        url: command.url,
        connections: command.connections,
        // autocannon refuses an undefined duration: pass one or the other.
        ...(command.amount === undefined ? { duration: command.duration } : { amount: command.amount }),
        pipelining: 1,
        requests: [
          {
            method: 'POST',
            path: '/pay',
            headers: { ...HEADERS },
            body: PAY_BODY,
            setupRequest(req: { headers: Record<string, string> }) {
              req.headers['idempotency-key'] = nextKey();
              return req;
            },
          },
        ],
      },
      (err, result) => {
        if (err) return reject(err);
        resolve({
          id: command.id,
          rps: result['2xx'] / result.duration,
          total: result.requests.total,
          ok: result['2xx'],
          non2xx: result.non2xx,
          errors: result.errors + result.timeouts,
          p50_ms: result.latency.p50,
          p99_ms: result.latency.p99,
          seconds: result.duration,
        });
      },
    );
  });
}

async function post(url: string, key: string): Promise<{ status: number; body: string }> {
  const response = await fetch(`${url}/pay`, {
    method: 'POST',
    headers: { ...HEADERS, 'idempotency-key': key },
    body: PAY_BODY,
  });
  return { status: response.status, body: await response.text() };
}

/** Completes every key of the pool once, then checks that a second call replays the first's result. */
async function prime(command: LoadCommand): Promise<LoadResult> {
  if (command.keys.mode !== 'replay') throw new Error('prime needs replay keys');
  const { prefix, count } = command.keys;
  const started = performance.now();
  const first = new Map<number, string>();
  let next = 0;
  let failed = 0;
  await Promise.all(
    Array.from({ length: command.connections }, async () => {
      while (next < count) {
        const n = next++;
        const { status, body } = await post(command.url, `${prefix}-${n}`);
        if (status !== 200) failed++;
        if (n < 20) first.set(n, body);
      }
    }),
  );
  let replayChecked = 0;
  for (const [n, body] of first) if ((await post(command.url, `${prefix}-${n}`)).body === body) replayChecked++;
  return {
    id: command.id,
    rps: 0,
    total: count,
    ok: count - failed,
    non2xx: failed,
    errors: 0,
    p50_ms: 0,
    p99_ms: 0,
    seconds: (performance.now() - started) / 1000,
    replayChecked,
  };
}

/**
 * A fixed rate, open loop: request i leaves at start + i / rate whether or not earlier ones have
 * answered (up to `connections` sockets; a request waiting for a socket counts that wait), and its
 * latency is timed with performance.now() from the moment it was issued, to the microsecond:
 * what an application under half its peak load feels per request.
 */
function paced(command: LoadCommand): Promise<LoadResult> {
  const nextKey = keySource(command.keys);
  const rate = command.rate!;
  const total = Math.max(1, Math.round(rate * command.duration!));
  const url = new URL(command.url);
  const agent = new Agent({ keepAlive: true, maxSockets: command.connections });
  const latencies: number[] = [];
  let ok = 0;
  let non2xx = 0;
  let errors = 0;
  let done = 0;
  const started = performance.now();
  return new Promise((resolve) => {
    const finish = () => {
      if (++done < total) return;
      agent.destroy();
      latencies.sort((a, b) => a - b);
      const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
      const seconds = (performance.now() - started) / 1000;
      resolve({
        id: command.id,
        rps: ok / seconds,
        total,
        ok,
        non2xx,
        errors,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        seconds,
      });
    };
    const fire = () => {
      const issued = performance.now();
      const req = request(
        {
          agent,
          host: url.hostname,
          port: url.port,
          method: 'POST',
          path: '/pay',
          headers: { ...HEADERS, 'content-length': Buffer.byteLength(PAY_BODY), 'idempotency-key': nextKey() },
        },
        (res) => {
          res.resume();
          res.on('end', () => {
            latencies.push(performance.now() - issued);
            if (res.statusCode === 200) ok++;
            else non2xx++;
            finish();
          });
        },
      );
      req.on('error', () => {
        errors++;
        finish();
      });
      req.end(PAY_BODY);
    };
    let sent = 0;
    const tick = () => {
      const due = Math.min(total, Math.floor(((performance.now() - started) * rate) / 1000) + 1);
      while (sent < due) {
        sent++;
        fire();
      }
      if (sent < total) setTimeout(tick, 1);
    };
    tick();
  });
}

process.on('message', (command: LoadCommand) => {
  (command.type === 'prime' ? prime(command) : command.type === 'paced' ? paced(command) : run(command)).then(
    (result) => process.send!({ ok: true, result }),
    (error: unknown) => process.send!({ ok: false, id: command.id, error: String(error) }),
  );
});
process.on('disconnect', () => process.exit(0));
