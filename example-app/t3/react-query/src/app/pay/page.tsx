"use client";

import { useState } from "react";
import { createIdempotencyKey } from "trpc-idempotency/client";

import { type Answer, payAll, PaymentsView, toAnswer } from "~/app/_components/payments";
import { api } from "~/trpc/react";

export default function PayPage() {
  const [answers, setAnswers] = useState<Answer[]>([]);
  const [batch, setBatch] = useState<Answer[]>([]);

  // One key per payment: kept across a double click and every retry, renewed once the payment is settled.
  const [key] = useState(createIdempotencyKey);
  const pay = api.payment.pay.useMutation({
    trpc: { context: { idempotencyKey: key } },
    onSettled: (data, error) => {
      key.settle(error);
      setAnswers((list) => [...list, toAnswer(data, error)]);
    },
  });

  // No key in the context: idempotencyLink gives each call a key of its own.
  const payOne = api.payment.pay.useMutation();

  return (
    <PaymentsView
      onPay={() => pay.mutate({ amount: 1000 })}
      onPayThree={() => void payAll(payOne.mutateAsync, [100, 200, 300]).then(setBatch)}
      paying={pay.isPending}
      latest={pay.data?.chargeId}
      answers={answers}
      batch={batch}
    />
  );
}
