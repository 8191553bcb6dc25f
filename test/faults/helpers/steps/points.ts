/** Where the checkout server can be told to die (checkout-server.ts says what each point means). */
export const POINTS = ['before-reserve', 'in-reserve', 'between', 'in-charge', 'after-ledger'] as const;
export type KillPoint = (typeof POINTS)[number];
