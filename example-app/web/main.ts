import { createTRPCClient, httpBatchLink } from '@trpc/client';
import {
  createIdempotencyKey,
  getIdempotencyReason,
  idempotencyHeaders,
  idempotencyLink,
} from 'trpc-idempotency/client';
import type { AppRouter } from '../src/app.js';

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const logBox = $<HTMLDivElement>('log');
const log = (line: string) => {
  logBox.textContent = `${new Date().toLocaleTimeString()}  ${line}\n${logBox.textContent ?? ''}`;
};
const short = (key: string) => `${key.slice(0, 8)}…`;

const client = createTRPCClient<AppRouter>({
  links: [
    idempotencyLink({
      baseDelayMs: 300,
      onRetry: ({ attempts, key, delayMs, error }) =>
        log(
          `attempt ${attempts} failed (${error.message}); retrying with the same key ${short(key)} in ${Math.round(delayMs)} ms`,
        ),
    }),
    httpBatchLink({ url: '/trpc', headers: idempotencyHeaders() }),
  ],
});

// One key per payment: made at the click, kept while that payment is unsettled
// (a second click of the same payment reuses it), replaced once it settles.
const payment = createIdempotencyKey();

async function refresh() {
  const charges = await client.payments.list.query();
  $('count').textContent = `(${charges.length})`;
  $('charges').replaceChildren(
    ...charges.map((c) => {
      const li = document.createElement('li');
      li.dataset.chargeId = String(c.id);
      li.textContent = `#${c.id}  ${(c.amount / 100).toFixed(2)} ${c.currency}  on ${c.instance}`;
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

$<HTMLFormElement>('checkout').addEventListener('submit', async (event) => {
  event.preventDefault();
  const idempotencyKey = payment.current();
  const amount = Number($<HTMLInputElement>('amount').value);
  const currency = $<HTMLSelectElement>('currency').value as 'EUR' | 'USD' | 'GBP';
  log(`Pay: ${amount} ${currency} with key ${short(idempotencyKey)}`);
  try {
    const charge = await client.payments.create.mutate(
      { amount, currency, clientTimestamp: Date.now() },
      { context: { idempotencyKey } },
    );
    log(`charge #${charge.id} (run on ${charge.instance})`);
    payment.settle();
  } catch (error) {
    log(`failed: ${getIdempotencyReason(error) ?? ''} ${(error as Error).message}`);
    payment.settle(error);
  } finally {
    $<HTMLInputElement>('drop').checked = false;
    await refresh();
  }
});

void refresh();
