import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { REDIS_URL } from './redis.js';

export interface Pod {
  name: string;
  url: string;
  process: ChildProcess;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

const fixture = fileURLToPath(new URL('../fixtures/pod.ts', import.meta.url));

/** Starts the pod fixture in a separate Node process and waits until it listens. */
export function startPod(name: string, env: Record<string, string>): Promise<Pod> {
  const child = spawn(process.execPath, ['--import', 'tsx', fixture], {
    env: { ...process.env, REDIS_URL, POD: name, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`pod ${name} did not start: ${out}`)), 20_000);
    child.once('exit', (code) => reject(new Error(`pod ${name} exited with ${code}: ${out}`)));
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening (\d+)/.exec(out);
      if (match) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve({
          name,
          url: `http://127.0.0.1:${match[1]}`,
          process: child,
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
