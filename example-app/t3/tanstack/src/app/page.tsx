import Link from "next/link";

import styles from "./index.module.css";

// The home page of the TanStack variant: t3's own reads its posts through @trpc/react-query
// (src/trpc/server.ts, src/app/_components/post.tsx), which this variant does not install.
export default function Home() {
  return (
    <main className={styles.main}>
      <div className={styles.container}>
        <h1 className={styles.title}>
          Create <span className={styles.pinkSpan}>T3</span> App
        </h1>
        <Link className={styles.card} href="/pay">
          <h3 className={styles.cardTitle}>Pay →</h3>
          <div className={styles.cardText}>Idempotent payments with trpc-idempotency.</div>
        </Link>
      </div>
    </main>
  );
}
