"use client";

// t3's client provider on tRPC's TanStack React Query integration: the same QueryClient,
// the same links as the default variant's src/trpc/react.tsx, and useTRPC() for components.
// Payments in flight are persisted with their key, and resumed after a reload.

import { createAsyncStoragePersister } from "@tanstack/query-async-storage-persister";
import { type QueryClient } from "@tanstack/react-query";
import { PersistQueryClientProvider } from "@tanstack/react-query-persist-client";
import { createTRPCClient, httpBatchStreamLink, loggerLink } from "@trpc/client";
import { type inferRouterInputs, type inferRouterOutputs } from "@trpc/server";
import { createTRPCContext, createTRPCOptionsProxy } from "@trpc/tanstack-react-query";
import { useState } from "react";
import SuperJSON from "superjson";
import {
  idempotencyHeaders,
  idempotencyLink,
  resumeMutations,
  shouldPersistMutation,
} from "trpc-idempotency/client";

import { type AppRouter } from "~/server/api/root";
import { createQueryClient } from "./query-client";

export const { TRPCProvider, useTRPC } = createTRPCContext<AppRouter>();

export type RouterInputs = inferRouterInputs<AppRouter>;
export type RouterOutputs = inferRouterOutputs<AppRouter>;

/** How long the server keeps a key's outcome: withIdempotency's ttl (24 h unless you set another). */
const SERVER_TTL_MS = 24 * 60 * 60 * 1000;

// localStorage in the browser; on the server there is no storage, and nothing is persisted.
const persister = createAsyncStoragePersister({
  storage: typeof window === "undefined" ? undefined : window.localStorage,
  throttleTime: 0, // written at once: a tab closed right after the click keeps the payment
});

// The browser keeps one QueryClient; each server render makes its own.
let browserQueryClient: QueryClient | undefined;
function queryClientHere(): QueryClient {
  if (typeof window === "undefined") return createQueryClient();
  browserQueryClient ??= createQueryClient();
  return browserQueryClient;
}

function apiUrl(): string {
  if (typeof window !== "undefined") return `${window.location.origin}/api/trpc`;
  return `http://localhost:${process.env.PORT ?? 3000}/api/trpc`;
}

export function TRPCReactProvider(props: { children: React.ReactNode }) {
  const queryClient = queryClientHere();
  const [trpcClient] = useState(() => {
    const client = createTRPCClient<AppRouter>({
      links: [
        loggerLink({
          enabled: (op) =>
            process.env.NODE_ENV === "development" ||
            (op.direction === "down" && op.result instanceof Error),
        }),
        idempotencyLink({ maxKeyAgeMs: SERVER_TTL_MS }), // an older key is not sent
        httpBatchStreamLink({
          transformer: SuperJSON,
          url: apiUrl(),
          headers: idempotencyHeaders({
            headers: { "x-trpc-source": "nextjs-react" },
          }),
        }),
      ],
    });
    // What a restored payment runs: TanStack persists its variables (so its key), never functions.
    const trpc = createTRPCOptionsProxy<AppRouter>({ client, queryClient });
    queryClient.setMutationDefaults(trpc.payment.pay.mutationKey(), trpc.payment.pay.mutationOptions());
    return client;
  });

  return (
    <PersistQueryClientProvider
      client={queryClient}
      persistOptions={{
        persister,
        // Longer than the server's ttl: an older payment is shown as unresolved, not dropped unseen.
        maxAge: Number.POSITIVE_INFINITY,
        dehydrateOptions: {
          shouldDehydrateMutation: shouldPersistMutation,
          shouldDehydrateQuery: () => false, // payments only: the server renders the queries
        },
      }}
      onSuccess={() => resumeMutations(queryClient)}
    >
      <TRPCProvider trpcClient={trpcClient} queryClient={queryClient}>
        {props.children}
      </TRPCProvider>
    </PersistQueryClientProvider>
  );
}
