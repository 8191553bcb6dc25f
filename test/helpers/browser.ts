import { type Browser, chromium } from 'playwright-core';

/**
 * Debian's Chromium, headless, driven by playwright-core (`npx playwright install`
 * cannot download browsers here). CHROMIUM_PATH points at another binary.
 * Background traffic and QUIC are off, so the page's requests are the only ones.
 */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
