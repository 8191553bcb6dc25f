"use client";

// t3's client provider on tRPC's TanStack React Query integration: the same QueryClient,
// the same links as the default variant's src/trpc/react.tsx, and useTRPC() for components.

import { QueryClientProvider, type QueryClient } from "@tanstack/react-query";
import { createTRPCClient, httpBatchStreamLink, loggerLink } from "@trpc/client";
import { type inferRouterInputs, type inferRouterOutputs } from "@trpc/server";
import { createTRPCContext } from "@trpc/tanstack-react-query";
import { useState } from "react";
import SuperJSON from "superjson";
import { idempotencyHeaders, idempotencyLink } from "trpc-idempotency/client";

import { type AppRouter } from "~/server/api/root";
import { createQueryClient } from "./query-client";

export const { TRPCProvider, useTRPC } = createTRPCContext<AppRouter>();

export type RouterInputs = inferRouterInputs<AppRouter>;
export type RouterOutputs = inferRouterOutputs<AppRouter>;

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
  const [trpcClient] = useState(() =>
    createTRPCClient<AppRouter>({
      links: [
        loggerLink({
          enabled: (op) =>
            process.env.NODE_ENV === "development" ||
            (op.direction === "down" && op.result instanceof Error),
        }),
        idempotencyLink(),
        httpBatchStreamLink({
          transformer: SuperJSON,
          url: apiUrl(),
          headers: idempotencyHeaders({
            headers: { "x-trpc-source": "nextjs-react" },
          }),
        }),
      ],
    }),
  );

  return (
    <QueryClientProvider client={queryClient}>
      <TRPCProvider trpcClient={trpcClient} queryClient={queryClient}>
        {props.children}
      </TRPCProvider>
    </QueryClientProvider>
  );
}
