/**
 * A fake downstream service (the inventory service or the payment provider of
 * test/faults/steps-crash.test.ts), run in a process of its own:
 *   SERVICE   its name ('inventory', 'payment'), the prefix of the ids it hands out
 * and prints `listening <port>` once it listens on a free port.
 *
 * POST <any path> applies an effect once per `Idempotency-Key`, as a payment
 * provider does: the first request with a key applies it and stores the
 * response, every later one gets that stored response back. The caller names
 * the operation the call belongs to in `X-Operation`, so that `GET /stats`
 * can say how many effects each operation caused, whatever keys it sent.
 *
 * `X-Kill-Pid: <pid>` with `X-Kill-After: <n>` makes the service SIGKILL that
 * process once it has applied the effects of n such calls and before it
 * answers any: the caller dies with the effects done downstream and their
 * answers lost, the worst moment for a retry, in all n operations at once.
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

const service = process.env.SERVICE ?? 'service';

export interface OperationStats {
  /** Requests received for this operation, replays included. */
  calls: number;
  /** The distinct idempotency keys it sent. */
  keys: string[];
  /** Effects applied: one per distinct key. */
  effects: number;
  /** The response stored for each key. */
  responses: Record<string, unknown>;
}

export interface ServiceStats {
  calls: number;
  distinctKeys: number;
  operations: Record<string, OperationStats>;
}

/** Calls held unanswered, per process to kill. */
const held = new Map<number, IncomingMessage[]>();
const stored = new Map<string, { operation: string; response: unknown }>();
const stats: ServiceStats = { calls: 0, distinctKeys: 0, operations: {} };
let applied = 0;

async function bodyOf(req: IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text === '' ? undefined : JSON.parse(text);
}

const server = createServer(async (req, res) => {
  const send = (status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  if (req.method === 'GET' && req.url === '/stats') return send(200, stats);
  if (req.method !== 'POST') return send(404, { error: `${req.method} ${req.url}: only POST and GET /stats` });
  const key = req.headers['idempotency-key'];
  const operation = req.headers['x-operation'];
  if (typeof key !== 'string' || typeof operation !== 'string') {
    return send(400, { error: 'Send an Idempotency-Key and an X-Operation header.' });
  }
  const input = await bodyOf(req);
  stats.calls++;
  const op = (stats.operations[operation] ??= { calls: 0, keys: [], effects: 0, responses: {} });
  op.calls++;
  const seen = stored.get(key);
  if (seen !== undefined) {
    // The same key from another operation would be a key collision: say so rather than replay.
    if (seen.operation !== operation) return send(422, { error: `key ${key} was used by operation ${seen.operation}` });
    return send(200, seen.response);
  }
  // The effect, applied once per key: what the test counts.
  const response = { id: `${service}-${++applied}`, key, input };
  stored.set(key, { operation, response });
  stats.distinctKeys++;
  op.keys.push(key);
  op.effects++;
  op.responses[key] = response;
  const victim = Number(req.headers['x-kill-pid']);
  if (victim > 0) {
    // The caller dies before it can read any answer; the answers are never sent.
    const calls = held.get(victim) ?? [];
    held.set(victim, calls);
    calls.push(req);
    if (calls.length < Number(req.headers['x-kill-after'] ?? 1)) return;
    process.kill(victim, 'SIGKILL');
    console.log(`killed ${victim} after ${calls.length}`);
    for (const call of calls) call.socket.destroy();
    held.delete(victim);
    return;
  }
  send(200, response);
});

server.listen(0, '127.0.0.1', () => {
  console.log(`listening ${(server.address() as AddressInfo).port}`);
});
