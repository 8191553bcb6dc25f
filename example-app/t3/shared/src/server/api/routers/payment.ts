import { z } from "zod";

import { createTRPCRouter, idempotentProcedure, publicProcedure } from "~/server/api/trpc";

interface Charge {
  chargeId: string;
  amount: number;
  createdAt: Date;
}

// An in-memory ledger, like the posts of t3's example router: one server process.
const charges: Charge[] = [];
let executions = 0;

export const paymentRouter = createTRPCRouter({
  pay: idempotentProcedure
    .input(z.object({ amount: z.number().int().positive() }))
    .mutation(async ({ input }) => {
      executions++;
      // A slow payment provider: the second call of a double click arrives while the first runs.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const charge: Charge = {
        chargeId: `ch_${charges.length + 1}`,
        amount: input.amount,
        createdAt: new Date(),
      };
      charges.push(charge);
      return charge;
    }),

  // How many times `pay` ran, and what it charged.
  stats: publicProcedure.query(() => ({
    executions,
    charges: charges.map(({ chargeId, amount }) => ({ chargeId, amount })),
  })),
});
