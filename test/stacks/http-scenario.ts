/**
 * The HTTP scenario every server of docs/adapters.md is put through (adapters.test.ts: Node's
 * adapters, Bun, Deno; workers.test.ts: workerd): a first call, its replay, 422, 409, no key, a
 * batch of 3 and its replay, the key header twice. The server serves ./adapters/router.ts's
 * procedures (`pay`, `hold`, `release`, `stats`) at `base`.
 */
import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** JSON when it parses: a call's body, or a batch's array of them. */
  body: unknown;
}

/** What the scenario reads of a call's body. */
interface CallBody {
  result?: { data?: { amount?: number } };
  error?: { data?: { idempotency?: { reason?: string } } };
}

/**
 * One POST over Node's http client, so that a header given as an array is
 * sent as that many header lines.
 */
function post(url: string, headers: Record<string, string | string[]>, body: unknown): Promise<Answer> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...headers },
        timeout: 30_000,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            // not JSON: kept as text, for the failure message
          }
          resolve({ status: res.statusCode!, headers: res.headers, body: parsed });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url} in 30 s`)));
    req.on('error', reject);
    req.end(payload);
  });
}

export async function stats(base: string): Promise<{ executions: number; holding: string[] }> {
  const response = await fetch(`${base}/stats`);
  const body = (await response.json()) as { result: { data: { executions: number; holding: string[] } } };
  return body.result.data;
}

export const STEPS = ['first', 'replay', '422', '409', 'no key', 'batch', 'batch replay', 'twice'] as const;
export type Step = (typeof STEPS)[number];
export interface Outcome {
  ok: boolean;
  /** What came back, for the table. */
  seen: string;
}

const reason = (answer: Answer) => (answer.body as CallBody | undefined)?.error?.data?.idempotency?.reason;
const dataOf = (answer: Answer) => (answer.body as CallBody | undefined)?.result?.data;

/** The scenario over HTTP; every step runs, whatever the ones before it gave. */
export async function scenario(base: string): Promise<Record<Step, Outcome>> {
  const outcomes = {} as Record<Step, Outcome>;
  const step = async (name: Step, body: () => Promise<Outcome>) => {
    try {
      outcomes[name] = await body();
    } catch (error) {
      outcomes[name] = { ok: false, seen: `threw ${String(error).slice(0, 200)}` };
    }
  };
  const key = randomUUID();
  let first: Answer | undefined;

  await step('first', async () => {
    const before = await stats(base);
    first = await post(`${base}/pay`, { 'idempotency-key': key }, { amount: 100 });
    const ran = (await stats(base)).executions - before.executions;
    return {
      ok:
        first.status === 200 &&
        dataOf(first)?.amount === 100 &&
        first.headers['idempotent-replayed'] === undefined &&
        ran === 1,
      seen: `${first.status}${ran === 1 ? '' : `, ran ${ran} times`}`,
    };
  });

  await step('replay', async () => {
    const before = await stats(base);
    const again = await post(`${base}/pay`, { 'idempotency-key': key }, { amount: 100 });
    const ran = (await stats(base)).executions - before.executions;
    const same = JSON.stringify(again.body) === JSON.stringify(first?.body);
    const marker = again.headers['idempotent-replayed'];
    return {
      ok: again.status === 200 && same && marker === 'true' && ran === 0,
      seen: `${again.status} replayed=${marker ?? '-'}${same ? '' : ', another body'}${ran === 0 ? '' : `, ran ${ran}`}`,
    };
  });

  await step('422', async () => {
    const other = await post(`${base}/pay`, { 'idempotency-key': key }, { amount: 200 });
    return {
      ok: other.status === 422 && reason(other) === 'payload_mismatch',
      seen: `${other.status} ${reason(other)}`,
    };
  });

  await step('409', async () => {
    const id = randomUUID();
    const holdKey = randomUUID();
    const running = post(`${base}/hold`, { 'idempotency-key': holdKey }, { id });
    let duplicate: Answer;
    try {
      const deadline = Date.now() + 15_000;
      while (!(await stats(base)).holding.includes(id)) {
        if (Date.now() > deadline) throw new Error('the held mutation never started');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      duplicate = await post(`${base}/hold`, { 'idempotency-key': holdKey }, { id });
    } finally {
      await post(`${base}/release`, {}, { id });
    }
    const settled = await running; // the first, released, ends with its result
    const retryAfter = duplicate.headers['retry-after'];
    return {
      ok:
        duplicate.status === 409 && reason(duplicate) === 'in_progress' && retryAfter === '1' && settled.status === 200,
      seen: `${duplicate.status} ${reason(duplicate)} retry-after=${retryAfter ?? '-'}${settled.status === 200 ? '' : `, the first ended with ${settled.status}`}`,
    };
  });

  await step('no key', async () => {
    const before = await stats(base);
    const answer = await post(`${base}/pay`, {}, { amount: 100 });
    const ran = (await stats(base)).executions - before.executions;
    return {
      ok: answer.status === 400 && reason(answer) === 'key_missing' && ran === 0,
      seen: `${answer.status} ${reason(answer)}`,
    };
  });

  // A batch as httpBatchLink sends it: one request, the inputs by index, a key per call.
  const batchUrl = `${base}/pay,pay,pay?batch=1`;
  const batchKeys = [randomUUID(), randomUUID(), randomUUID()];
  const batchHeaders = Object.fromEntries(batchKeys.map((k, i) => [`idempotency-key-${i}`, k]));
  const batchBody = { 0: { amount: 1 }, 1: { amount: 2 }, 2: { amount: 3 } };
  let batch: Answer | undefined;
  const markers = (answer: Answer) => [0, 1, 2].map((i) => answer.headers[`idempotent-replayed-${i}`] ?? '-');

  await step('batch', async () => {
    const before = await stats(base);
    batch = await post(batchUrl, batchHeaders, batchBody);
    const ran = (await stats(base)).executions - before.executions;
    const amounts = Array.isArray(batch.body) ? (batch.body as CallBody[]).map((c) => c.result?.data?.amount) : [];
    return {
      ok: batch.status === 200 && amounts.join() === '1,2,3' && markers(batch).join() === '-,-,-' && ran === 3,
      seen: `${batch.status} [${amounts.join(',')}]${markers(batch).join() === '-,-,-' ? '' : ` replayed=${markers(batch).join()}`}${ran === 3 ? '' : `, ran ${ran}`}`,
    };
  });

  await step('batch replay', async () => {
    const before = await stats(base);
    const again = await post(batchUrl, batchHeaders, batchBody);
    const ran = (await stats(base)).executions - before.executions;
    const same = JSON.stringify(again.body) === JSON.stringify(batch?.body);
    return {
      ok: again.status === 200 && same && markers(again).join() === 'true,true,true' && ran === 0,
      seen: `${again.status} replayed=${markers(again).join()}${same ? '' : ', other bodies'}${ran === 0 ? '' : `, ran ${ran}`}`,
    };
  });

  await step('twice', async () => {
    const before = await stats(base);
    // two `Idempotency-Key` lines in one request
    const answer = await post(`${base}/pay`, { 'idempotency-key': [randomUUID(), randomUUID()] }, { amount: 100 });
    const ran = (await stats(base)).executions - before.executions;
    return {
      ok: answer.status === 400 && reason(answer) === 'key_invalid' && ran === 0,
      seen: `${answer.status} ${reason(answer)}`,
    };
  });

  return outcomes;
}
