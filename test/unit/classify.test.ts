/**
 * `classify`: the one decision after an operation ran, as a table of every
 * outcome kind × the policy switches that change it. Pure: no store.
 */
import { TRPCError } from '@trpc/server';
import { describe, expect, it } from 'vitest';
import { classify, type Outcome, type Settlement } from '../../src/core/classify.js';
import { retryable } from '../../src/core/idempotency-error.js';
import { TOO_LARGE_BODY, UNREPLAYABLE_BODY } from '../../src/core/outcome.js';
import { jsonCodec } from '../../src/core/outcome-codec.js';
import { trpcCodec } from '../../src/trpc/transformer-codec.js';

const codec = trpcCodec(undefined);
const cyclic: Record<string, unknown> = {};
cyclic.self = cyclic;
async function* stream() {
  yield 1;
}

const rows: [string, Outcome, Settlement, Settlement][] = [
  // [outcome, decision out of a transaction, decision in transactional mode]
  [
    'a value',
    { ok: true, value: { id: 1 } },
    { kind: 'store', state: 'completed', body: '{"id":1}' },
    { kind: 'store', state: 'completed', body: '{"id":1}' },
  ],
  [
    'undefined (a procedure returning nothing)',
    { ok: true, value: undefined },
    { kind: 'store', state: 'completed', body: '' },
    { kind: 'store', state: 'completed', body: '' },
  ],
  [
    'a value larger than maxResponseBytes',
    { ok: true, value: 'x'.repeat(200) },
    { kind: 'store', state: 'failed', body: TOO_LARGE_BODY, reason: 'response_too_large' },
    { kind: 'release', reason: 'response_too_large' },
  ],
  [
    'a value the codec cannot serialize',
    { ok: true, value: cyclic },
    { kind: 'store', state: 'failed', body: UNREPLAYABLE_BODY, reason: 'unreplayable' },
    { kind: 'release', reason: 'unreplayable' },
  ],
  [
    'a stream',
    { ok: true, value: stream() },
    { kind: 'store', state: 'failed', body: UNREPLAYABLE_BODY, reason: 'unreplayable' },
    { kind: 'release', reason: 'unreplayable' },
  ],
  [
    'a 4xx the codec stores',
    { ok: false, error: new TRPCError({ code: 'BAD_REQUEST', message: 'Card declined' }) },
    { kind: 'store', state: 'failed', body: '{"code":"BAD_REQUEST","message":"Card declined"}' },
    { kind: 'store', state: 'failed', body: '{"code":"BAD_REQUEST","message":"Card declined"}' },
  ],
  [
    'a 4xx marked retryable()',
    { ok: false, error: retryable(new TRPCError({ code: 'BAD_REQUEST', message: 'try later' })) },
    { kind: 'release', reason: 'retryable' },
    { kind: 'release', reason: 'retryable' },
  ],
  [
    'a 409 of the procedure (the moment, not the operation)',
    { ok: false, error: new TRPCError({ code: 'CONFLICT' }) },
    { kind: 'release', reason: 'error' },
    { kind: 'release', reason: 'error' },
  ],
  [
    'a 429',
    { ok: false, error: new TRPCError({ code: 'TOO_MANY_REQUESTS' }) },
    { kind: 'release', reason: 'error' },
    { kind: 'release', reason: 'error' },
  ],
  [
    'a 5xx',
    { ok: false, error: new TRPCError({ code: 'INTERNAL_SERVER_ERROR' }) },
    { kind: 'release', reason: 'error' },
    { kind: 'release', reason: 'error' },
  ],
  [
    'a plain Error (a crash in the resolver)',
    { ok: false, error: new Error('boom') },
    { kind: 'release', reason: 'error' },
    { kind: 'release', reason: 'error' },
  ],
];

describe('classify', () => {
  it.each(rows)('%s', (_name, outcome, outside, inTransaction) => {
    expect(classify(outcome, codec, { maxResponseBytes: 100, transaction: false })).toEqual(outside);
    expect(classify(outcome, codec, { maxResponseBytes: 100, transaction: true })).toEqual(inTransaction);
  });

  it('releases an error the codec throws on, and stores no error with a codec that stores none', () => {
    const throwing = {
      ...codec,
      serializeError: () => {
        throw new Error('cannot');
      },
    };
    expect(
      classify({ ok: false, error: new TRPCError({ code: 'BAD_REQUEST' }) }, throwing, {
        maxResponseBytes: 100,
        transaction: false,
      }),
    ).toEqual({ kind: 'release', reason: 'error' });
    expect(
      classify({ ok: false, error: new TRPCError({ code: 'BAD_REQUEST' }) }, jsonCodec, {
        maxResponseBytes: 100,
        transaction: false,
      }),
    ).toEqual({ kind: 'release', reason: 'error' });
  });
});
