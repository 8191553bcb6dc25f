import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { REDIS_URL } from './redis.js';

export interface Pod {
  name: string;
  url: string;
  process: ChildProcess;
  /** Resolves with the first line of the pod's output that matches. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Resolves when the process has exited. */
  exited: Promise<void>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Starts the pay app (test/fixtures/pay-app.ts, configured by `env`) in a separate Node process and waits until it listens. */
export function startPod(name: string, env: Record<string, string>): Promise<Pod> {
  return startProcess(name, fileURLToPath(new URL('../fixtures/pay-app.ts', import.meta.url)), env);
}

/**
 * Runs a TypeScript server in a separate Node process and waits until its
 * output matches `ready`, whose first group is the port it listens on.
 */
export function startProcess(
  name: string,
  script: string,
  env: Record<string, string>,
  ready = /listening (\d+)/,
): Promise<Pod> {
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, REDIS_URL, POD: name, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    let started = false;
    // A generous bound (a pod compiles its TypeScript as it starts: a second or two, many more on a machine busy
    // with other suites); a pod that does not start is killed rather than left behind.
    const timer = setTimeout(() => {
      child.off('exit', failedToStart);
      child.kill('SIGKILL');
      reject(new Error(`pod ${name} did not print ${ready} within 60 s: ${out}`));
    }, 60_000);
    const failedToStart = (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`pod ${name} exited with ${code}: ${out}`));
    };
    child.once('exit', failedToStart);
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (started) return; // later output is kept for waitFor, not matched again
      const match = ready.exec(out);
      if (match) {
        started = true;
        clearTimeout(timer);
        child.off('exit', failedToStart);
        const exited = new Promise<void>((done) => {
          if (child.exitCode !== null || child.signalCode !== null) done();
          else child.once('exit', () => done());
        });
        resolve({
          name,
          url: `http://127.0.0.1:${match[1]}`,
          process: child,
          exited,
          waitFor: (pattern, timeoutMs = 10_000) =>
            new Promise<string>((found, fail) => {
              const check = () => {
                const line = out.split('\n').find((l) => pattern.test(l));
                if (line === undefined) return false;
                clearTimeout(giveUp);
                child.stdout!.off('data', check);
                found(line);
                return true;
              };
              const giveUp = setTimeout(
                () => fail(new Error(`pod ${name} never printed ${pattern}: ${out}`)),
                timeoutMs,
              );
              if (!check()) child.stdout!.on('data', check);
            }),
          kill: (signal = 'SIGTERM') =>
            new Promise<void>((done) => {
              if (child.exitCode !== null || child.signalCode !== null) return done();
              child.once('exit', () => done());
              child.kill(signal);
            }),
        });
      }
    });
  });
}
