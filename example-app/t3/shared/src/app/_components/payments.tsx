"use client";

import { useEffect, useState } from "react";

// What the pay page shows: the same in both variants, whichever tRPC React package the page uses.

export interface Answer {
  chargeId?: string;
  amount?: number;
  /** Whether `createdAt` came back as a Date (superjson), on the first run and on a replay. */
  createdAtIsDate?: boolean;
  error?: string;
}

export function toAnswer(
  data: { chargeId: string; amount: number; createdAt: Date } | undefined,
  error: unknown,
): Answer {
  if (data === undefined) {
    return { error: error instanceof Error ? error.message : String(error) };
  }
  return {
    chargeId: data.chargeId,
    amount: data.amount,
    createdAtIsDate: data.createdAt instanceof Date,
  };
}

/** Pays each amount at once (so the batch link sends one request) and waits for every answer. */
export async function payAll(
  pay: (input: { amount: number }) => Promise<{ chargeId: string; amount: number; createdAt: Date }>,
  amounts: number[],
): Promise<Answer[]> {
  const settled = await Promise.allSettled(amounts.map((amount) => pay({ amount })));
  return settled.map((r) => (r.status === "fulfilled" ? toAnswer(r.value, null) : toAnswer(undefined, r.reason)));
}

function AnswerItem({ answer }: { answer: Answer }) {
  if (answer.error !== undefined) {
    return <li data-error={answer.error}>failed: {answer.error}</li>;
  }
  return (
    <li data-charge={answer.chargeId} data-date={String(answer.createdAtIsDate)}>
      {answer.chargeId}: {answer.amount} ({answer.createdAtIsDate ? "createdAt is a Date" : "createdAt is not a Date"})
    </li>
  );
}

export function PaymentsView(props: {
  onPay: () => void;
  onPayThree: () => void;
  paying: boolean;
  latest: string | undefined;
  answers: Answer[];
  batch: Answer[];
  /** More of the page, shown last. */
  children?: React.ReactNode;
}) {
  // true once React has hydrated the page: the buttons have their handlers
  const [ready, setReady] = useState(false);
  useEffect(() => setReady(true), []);
  return (
    <main data-ready={ready} style={{ fontFamily: "sans-serif", padding: "2rem", display: "grid", gap: "1rem" }}>
      <h1>Pay</h1>
      <div style={{ display: "flex", gap: "1rem" }}>
        <button id="pay" type="button" disabled={props.paying} onClick={props.onPay}>
          Pay 10.00
        </button>
        <button id="pay3" type="button" onClick={props.onPayThree}>
          Pay 3
        </button>
      </div>
      <p>
        Latest charge: <output id="charge">{props.latest ?? "none"}</output>
      </p>
      <h2>Pay: every answer</h2>
      <ul id="answers">
        {props.answers.map((answer, i) => (
          <AnswerItem key={i} answer={answer} />
        ))}
      </ul>
      <h2>Pay 3: one batch</h2>
      <ul id="batch">
        {props.batch.map((answer, i) => (
          <AnswerItem key={i} answer={answer} />
        ))}
      </ul>
      {props.children}
    </main>
  );
}
