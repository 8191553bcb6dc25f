"use client";

import { type MutationState, useMutation, useMutationState } from "@tanstack/react-query";
import { useState } from "react";
import {
  createIdempotencyKey,
  isKeyExpiredError,
  readIdempotencyKey,
  withIdempotencyKey,
} from "trpc-idempotency/client";

import { type Answer, payAll, PaymentsView, toAnswer } from "~/app/_components/payments";
import { type RouterInputs, type RouterOutputs, useTRPC } from "~/trpc/react";

type PayState = MutationState<RouterOutputs["payment"]["pay"], unknown, RouterInputs["payment"]["pay"]>;

export default function PayPage() {
  const trpc = useTRPC();
  const [answers, setAnswers] = useState<Answer[]>([]);
  const [batch, setBatch] = useState<Answer[]>([]);

  // One key per payment: kept across a double click and every retry, renewed once the payment is settled.
  const [key] = useState(createIdempotencyKey);
  const pay = useMutation(
    trpc.payment.pay.mutationOptions({
      onSettled: (data, error) => {
        key.settle(error);
        setAnswers((list) => [...list, toAnswer(data, error)]);
      },
    }),
  );

  // Every payment whose variables carry its key, restored ones too (a resumed payment calls no onSettled).
  const payments = useMutationState({
    filters: {
      mutationKey: trpc.payment.pay.mutationKey(),
      predicate: (mutation) => readIdempotencyKey(mutation.state.variables) !== undefined,
    },
    select: (mutation) => mutation.state as PayState,
  });

  // No key in the context: idempotencyLink gives each call a key of its own.
  const payOne = useMutation(trpc.payment.pay.mutationOptions());

  return (
    <PaymentsView
      onPay={() => pay.mutate(withIdempotencyKey({ amount: 1000 }, { key: key.current() }))}
      onPayThree={() => void payAll(payOne.mutateAsync, [100, 200, 300]).then(setBatch)}
      paying={pay.isPending}
      latest={pay.data?.chargeId}
      answers={answers}
      batch={batch}
    >
      <h2>Payments with their key, across reloads</h2>
      <ul id="payments">
        {payments.map((state, i) => (
          <PaymentItem key={i} state={state} />
        ))}
      </ul>
    </PaymentsView>
  );
}

function PaymentItem({ state }: { state: PayState }) {
  const key = readIdempotencyKey(state.variables)?.key;
  if (state.data !== undefined) {
    return (
      <li data-key={key} data-charge={state.data.chargeId}>
        {key}: paid, {state.data.chargeId}
      </li>
    );
  }
  if (state.status === "pending") {
    return (
      <li data-key={key} data-pending="true">
        {key}: {state.isPaused ? "waiting for the network" : "sending"}
      </li>
    );
  }
  if (isKeyExpiredError(state.error)) {
    return (
      <li data-key={key} data-error="key_expired">
        {key}: unresolved, not sent again: check the charges before paying again
      </li>
    );
  }
  return (
    <li data-key={key} data-error={String(state.error)}>
      {key}: failed
    </li>
  );
}
