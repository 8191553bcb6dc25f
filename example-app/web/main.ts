import { createAsyncStoragePersister } from '@tanstack/query-async-storage-persister';
import { type Mutation, MutationObserver, QueryClient } from '@tanstack/query-core';
import { persistQueryClient } from '@tanstack/query-persist-client-core';
import { createTRPCClient, httpBatchLink } from '@trpc/client';
import type { inferRouterInputs, inferRouterOutputs } from '@trpc/server';
import {
  createIdempotencyKey,
  DEFAULT_RETRY,
  getHttpStatus,
  getIdempotencyReason,
  idempotencyHeaders,
  idempotencyLink,
  isKeyExpiredError,
  isRetryableError,
  readIdempotencyKey,
  shouldPersistMutation,
  type WithIdempotencyKey,
  withIdempotencyKey,
} from 'trpc-idempotency/client';
import type { AppRouter } from '../src/app.js';

type Currency = 'EUR' | 'USD' | 'GBP';

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const logBox = $<HTMLOListElement>('log');
/** HH:MM:SS in the browser's time zone. */
const clock = (at: string | Date) => {
  const d = new Date(at);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
};
/** What happened: one entry per event, newest first. */
const log = (line: string) => {
  const entry = document.createElement('li');
  const at = document.createElement('span');
  at.className = 'at';
  at.textContent = clock(new Date());
  const what = document.createElement('span');
  what.className = 'what';
  what.textContent = line;
  entry.append(at, what);
  logBox.prepend(entry);
};
const short = (key: string) => `${key.slice(0, 8)}…`;
/** An amount in cents, as the page shows it: 1050 → "10.50 EUR". */
const money = (amount: number, currency: string) => `${(amount / 100).toFixed(2)} ${currency}`;

/** A failed attempt, in a few words. */
function failure(error: unknown): string {
  const status = getHttpStatus(error);
  const reason = getIdempotencyReason(error);
  if (status === 409 && reason === 'in_progress') return "409 conflict: this key's first call was still running";
  if (status === undefined) return `no answer (${(error as Error).message})`;
  return `${status}${reason === undefined ? '' : ` ${reason}`}`;
}

/** One click, Pay or Resend, or a payment resumed after a reload: its line in Results and its retries. */
interface Call {
  line: HTMLLIElement;
  retries: string[];
  /** Who retried: the client link (the default), or TanStack Query (`?retry=N`). */
  retriedBy: string;
}

/**
 * What the server answered for each key, read from the response headers by the
 * link's `fetch`: whether it was a replay (`Idempotent-Replayed-<i>` for call i
 * of a batch) and which instance answered (`x-instance-id`). The last answer
 * for a key is the one its call resolves with.
 */
const answers = new Map<string, { replayed: boolean; instance: string | null }>();

async function fetchAndRead(input: RequestInfo | URL | string, init?: RequestInit): Promise<Response> {
  const response = await fetch(input, init);
  for (const [name, key] of new Headers(init?.headers)) {
    const call = /^idempotency-key(?:-(\d+))?$/.exec(name); // Headers gives names in lower case
    if (call === null) continue;
    const replayed = response.headers.get(
      call[1] === undefined ? 'idempotent-replayed' : `idempotent-replayed-${call[1]}`,
    );
    answers.set(key, { replayed: replayed === 'true', instance: response.headers.get('x-instance-id') });
  }
  return response;
}

/** What the server says about itself (GET /demo/config). */
interface DemoConfig {
  instance: string;
  store: string;
  /** The claim's lifetime, in ms: how long a crashed instance's payment stays locked. */
  lockTtl: number;
  /** Whether another instance can take over a crashed one's payment (a store they share). */
  crashable: boolean;
}
let config: DemoConfig = { instance: 'unknown', store: 'memory', lockTtl: 30_000, crashable: false };

/**
 * Attempts per payment that meets 409: enough to outlast the claim of a crashed
 * instance. Each retry of a 409 waits at least its Retry-After (1 s), so after
 * lockTtl / 1 s retries the claim has expired; a few more cover the crash and
 * the takeover. Other failures keep the link's default.
 */
const attemptsFor = (error: unknown) =>
  getHttpStatus(error) === 409 ? Math.ceil(config.lockTtl / 1_000) + 5 : DEFAULT_RETRY.maxAttempts;

// "Crash this instance mid-payment": the next payments.create request carries
// `x-demo-crash: after-charge`, once; the link's retries go without it.
let crashNext = false;

/**
 * `?retry=N`: TanStack Query retries a failed payment N times (100 ms apart) and the link does not;
 * by default the link retries and TanStack does not. Either way every attempt sends the payment's key.
 */
const tanstackRetries = Number(new URLSearchParams(location.search).get('retry') ?? 0);
/** How long the server keeps a key's outcome: payments.create's ttl (the layer's default, 24 h). */
const KEY_TTL_MS = 24 * 60 * 60 * 1000;

const client = createTRPCClient<AppRouter>({
  links: [
    idempotencyLink({
      maxKeyAgeMs: KEY_TTL_MS, // an older key is not sent: the payment is shown as unresolved
      baseDelayMs: 300,
      // A 409 is retried about once a second (its Retry-After), for as long as attemptsFor allows.
      maxDelayMs: 2_000,
      maxAttempts: 1_000,
      retry: ({ error, attempts }) => tanstackRetries === 0 && attempts < attemptsFor(error) && isRetryableError(error),
      onRetry: ({ op, attempts, key, delayMs, error }) => {
        log(
          `attempt ${attempts} failed (${error.message}); retrying with the same key ${short(key)} in ${Math.round(delayMs)} ms`,
        );
        const call = op.context.call as Call | undefined;
        if (call === undefined) return;
        call.retries.push(failure(error));
        show(call, 'pending', `Retrying with the same key in ${Math.round(delayMs)} ms`, `key ${short(key)}`);
      },
    }),
    httpBatchLink({
      url: '/trpc',
      headers: idempotencyHeaders({
        headers: ({ opList }) => {
          if (!crashNext || !opList.some((op) => op.path === 'payments.create')) return {};
          crashNext = false;
          return { 'x-demo-crash': 'after-charge' };
        },
      }),
      fetch: (input, init) => fetchAndRead(input, init as RequestInit),
    }),
  ],
});

/** The line's outcome, its headline, its details, and, under them, the retries the link made for it. */
function show(call: Call, outcome: string, headline: string, ...details: string[]) {
  const span = (className: string, text: string) => {
    const element = document.createElement('span');
    element.className = className;
    element.textContent = text;
    return element;
  };
  const parts = [span('outcome', headline), span('detail', details.filter((d) => d !== '').join(' · '))];
  const n = call.retries.length;
  if (n > 0) {
    parts.push(
      span('retried', `Retried ${n}× by ${call.retriedBy} with the same key, after: ${call.retries.join('; ')}`),
    );
  }
  call.line.dataset.outcome = outcome;
  call.line.dataset.retries = String(n);
  call.line.replaceChildren(...parts);
}

// One key per payment: made at the click, kept while that payment is unsettled
// (a second click of the same payment reuses it), replaced once it settles.
const payment = createIdempotencyKey();
// The key and amount of the last Pay, for "Resend with the last key".
let last: { key: string; amount: number; currency: Currency } | undefined;

type PayInput = inferRouterInputs<AppRouter>['payments']['create'];
type Charge = inferRouterOutputs<AppRouter>['payments']['create'];
/** A payment as TanStack Query holds it: its input with its key (withIdempotencyKey). */
type PayVariables = WithIdempotencyKey<PayInput>;
const PAY = ['payments.create'];
/** The line of each payment, by its variables: found again from the link's onRetry and the cache's events. */
const calls = new WeakMap<object, Call>();

// Each payment is a TanStack Query mutation whose variables carry its key. The persister keeps
// the unsettled ones in localStorage (one paused while offline, and one still waiting for its
// answer when the page goes away); the next load sends them again, with their keys.
const queryClient = new QueryClient();
queryClient.setMutationDefaults(PAY, {
  mutationFn: (variables: PayVariables) =>
    client.payments.create.mutate(variables, { context: { call: calls.get(variables) } }),
  retry: (failures, error) => failures < tanstackRetries && isRetryableError(error),
  retryDelay: 100,
});
queryClient.mount(); // resumes paused payments when the browser is back online
const [, restored] = persistQueryClient({
  queryClient,
  persister: createAsyncStoragePersister({ storage: localStorage, key: 'checkout-payments', throttleTime: 0 }),
  // Past TanStack's default of 24 h too: a payment older than its key's ttl is shown as unresolved, not dropped.
  maxAge: Number.POSITIVE_INFINITY,
  dehydrateOptions: { shouldDehydrateMutation: shouldPersistMutation },
});

queryClient.getMutationCache().subscribe((event) => {
  if (event.type !== 'updated') return;
  const variables = event.mutation.state.variables as PayVariables | undefined;
  const call = variables === undefined ? undefined : calls.get(variables);
  if (call === undefined || variables === undefined) return;
  const key = short(readIdempotencyKey(variables)!.key);
  if (event.action.type === 'pause') {
    log(`offline: the payment with key ${key} waits for the network`);
    show(call, 'paused', 'Waiting for the network — sent with the same key once back online', `key ${key}`);
  } else if (event.action.type === 'failed') {
    const error = event.action.error;
    call.retriedBy = 'TanStack Query';
    call.retries.push(failure(error));
    log(
      `attempt ${event.action.failureCount} failed (${(error as Error).message}); TanStack Query retries with the same key ${key}`,
    );
    show(call, 'pending', 'Retrying with the same key', `key ${key}`);
  }
});

/** A date and time in the browser's zone: 2026-12-05 09:30:00. */
const dateTime = (at: number) => {
  const d = new Date(at);
  const day = [d.getFullYear(), d.getMonth() + 1, d.getDate()].map((n) => String(n).padStart(2, '0')).join('-');
  return `${day} ${clock(d)}`;
};

/** Runs one payment (`run`) and shows how it ended on a new line in Results. */
async function send(variables: PayVariables, what: string, run: () => Promise<unknown>): Promise<unknown> {
  const { key, createdAt } = readIdempotencyKey(variables)!;
  const { amount, currency } = variables;
  const line = document.createElement('li');
  line.dataset.key = key;
  $('results').prepend(line);
  const call: Call = { line, retries: [], retriedBy: 'the client link' };
  calls.set(variables, call);
  const sent = `${what} ${money(amount, currency)} with key ${short(key)}`;
  show(call, 'pending', `${what}: sending ${money(amount, currency)}…`, `key ${short(key)}`);
  log(`${what} ${money(amount, currency)} with key ${short(key)}`);
  try {
    const charge = (await run()) as Charge;
    const answer = answers.get(key);
    const instance = answer?.instance ?? 'unknown';
    line.dataset.instance = instance;
    const ran = charge.instance === instance ? '' : `charged on ${charge.instance}`;
    const charged = `charge #${charge.id}, ${money(charge.amount, charge.currency)}`;
    const atProvider = `provider charge ${charge.provider.id}`;
    line.dataset.resumed = charge.steps.resumed.join(',');
    if (answer?.replayed) {
      log(
        `Replayed charge #${charge.id} (${money(charge.amount, charge.currency)}, charged at ${clock(charge.createdAt)} on ${charge.instance}): not charged again; answered by ${instance}`,
      );
      show(
        call,
        'replayed',
        `Replayed — originally charged at ${clock(charge.createdAt)}`,
        `${charged}, not charged again`,
        atProvider,
        `key ${short(key)}`,
        `answered by ${instance}`,
        ran,
      );
    } else if (charge.steps.resumed.includes('charge')) {
      // The attempt that charged died before its ledger write; this one took over after its claim
      // expired, got the recorded charge step back, and wrote the ledger row.
      log(
        `Charge #${charge.id} (${money(charge.amount, charge.currency)}) finished by ${charge.instance}: resumed after the charge step recorded by ${charge.provider.instance}, ${atProvider} reused, not charged again`,
      );
      show(
        call,
        'resumed',
        `Charge reused from the crashed attempt on ${charge.provider.instance}; finished by ${instance}`,
        `${atProvider} made once by ${charge.provider.instance}, not charged again`,
        `ledger ${charged} written by ${charge.instance} at ${clock(charge.createdAt)}`,
        `key ${short(key)}`,
        `answered by ${instance}`,
      );
    } else {
      log(`Charged ${money(charge.amount, charge.currency)}: charge #${charge.id} on ${charge.instance}`);
      show(
        call,
        'charged',
        `Charged at ${clock(charge.createdAt)}`,
        charged,
        atProvider,
        `key ${short(key)}`,
        `answered by ${instance}`,
        ran,
      );
    }
    return undefined;
  } catch (error) {
    const status = getHttpStatus(error);
    const reason = getIdempotencyReason(error);
    const instance = answers.get(key)?.instance ?? 'no instance';
    line.dataset.instance = instance;
    if (isKeyExpiredError(error)) {
      // Past the ttl the server may have forgotten this key: sent again, it could charge a second time.
      log(
        `${sent} not sent: its key was made at ${dateTime(createdAt)}, longer ago than the server keeps answers (${KEY_TTL_MS / 3_600_000} h)`,
      );
      show(
        call,
        'unresolved',
        `Unresolved — not sent again: its key was made at ${dateTime(createdAt)}, longer ago than the server keeps its answer (${KEY_TTL_MS / 3_600_000} h)`,
        'Check Charges below before paying again',
        sent,
      );
    } else if (reason === 'payload_mismatch') {
      const earlier = last?.key === key ? ` (it paid ${money(last.amount, last.currency)})` : '';
      log(
        `${what} ${money(amount, currency)} refused: ${status} payload_mismatch, the key was used for another amount${earlier}`,
      );
      show(
        call,
        'mismatch',
        `Refused: ${status} payload_mismatch — this key was already used for another amount; a new payment needs a new key`,
        `${sent}${earlier}`,
        `answered by ${instance}`,
      );
    } else {
      log(
        `${what} ${money(amount, currency)} failed: ${status ?? 'no answer'}${reason === undefined ? '' : ` ${reason}`} — ${(error as Error).message}`,
      );
      show(
        call,
        'failed',
        `Failed: ${status ?? 'no answer'}${reason === undefined ? '' : ` ${reason}`} — ${(error as Error).message}`,
        sent,
        `answered by ${instance}`,
      );
    }
    return error;
  }
}

async function refresh() {
  const charges = await client.payments.list.query();
  $('count').textContent = `(${charges.length})`;
  $('charges').replaceChildren(
    ...charges.map((c) => {
      const li = document.createElement('li');
      li.dataset.chargeId = String(c.id);
      li.textContent = `#${c.id}  ${money(c.amount, c.currency)}  on ${c.instance}`;
      return li;
    }),
  );
}

$<HTMLInputElement>('drop').addEventListener('change', async (event) => {
  if ((event.target as HTMLInputElement).checked) {
    await fetch('/demo/drop-next-response', { method: 'POST' });
    log('the server will drop its next payments.create response (after charging)');
  }
});

$<HTMLInputElement>('crash').addEventListener('change', (event) => {
  if ((event.target as HTMLInputElement).checked) {
    log(
      'the instance that takes the next payment will crash right after its charge step is recorded, before the ledger write',
    );
  }
});

// The field is in the currency's unit with cents (10.50 EUR), as a buyer types it; the API takes
// cents (1050), as payment APIs do, so that no amount is a float.
const form = () => ({
  amount: Math.round(Number($<HTMLInputElement>('amount').value) * 100),
  currency: $<HTMLSelectElement>('currency').value as Currency,
});

$<HTMLFormElement>('checkout').addEventListener('submit', async (event) => {
  event.preventDefault();
  const key = payment.current();
  const { amount, currency } = form();
  last = { key, amount, currency };
  $<HTMLButtonElement>('resend').disabled = false;
  crashNext = $<HTMLInputElement>('crash').checked;
  // The key travels in the variables: TanStack's retries, and a reload, send it again.
  const variables = withIdempotencyKey({ amount, currency, clientTimestamp: Date.now() }, { key });
  const error = await send(variables, 'Pay', () =>
    new MutationObserver<Charge, Error, PayVariables>(queryClient, { mutationKey: PAY }).mutate(variables),
  );
  payment.settle(error);
  $<HTMLInputElement>('drop').checked = false;
  $<HTMLInputElement>('crash').checked = false;
  await refresh();
});

// The last Pay's key with what the form says now: a replay if nothing changed, a 422 if the amount did.
$<HTMLButtonElement>('resend').addEventListener('click', async () => {
  // A button outside the form's submit: check the field as a submit would.
  if (last === undefined || !$<HTMLInputElement>('amount').reportValidity()) return;
  const { amount, currency } = form();
  const variables = withIdempotencyKey({ amount, currency, clientTimestamp: Date.now() }, { key: last.key });
  await send(variables, 'Resend', () =>
    new MutationObserver<Charge, Error, PayVariables>(queryClient, { mutationKey: PAY }).mutate(variables),
  );
  await refresh();
});

async function configure() {
  config = (await (await fetch('/demo/config')).json()) as DemoConfig;
  const crash = $<HTMLInputElement>('crash');
  crash.disabled = !config.crashable;
  $('crash-note').textContent = config.crashable
    ? `Another instance finishes the payment once the crashed one's claim expires (lockTtl ${config.lockTtl / 1_000} s).`
    : `Off with the ${config.store} store: it needs several instances sharing a Redis or PostgreSQL store, so that another one can take over the payment (see the README).`;
  document.body.dataset.ready = 'true';
}

/** The payments a persister restored (unsettled when the page went away), sent again with their keys. */
async function resume() {
  await restored;
  const unsettled = queryClient
    .getMutationCache()
    .getAll()
    .filter((m) => m.state.status === 'pending' && shouldPersistMutation(m)) as Mutation<Charge, Error, PayVariables>[];
  document.body.dataset.restored = String(unsettled.length);
  await Promise.all(unsettled.map((m) => send(m.state.variables!, 'Resumed after reload:', () => m.continue())));
  if (unsettled.length > 0) await refresh();
}

void configure();
void refresh();
void resume();
