// Headless Chromium as every browser test starts it (CHROMIUM overrides the path).
import { chromium } from 'playwright-core';

export const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';

export function launch() {
  return chromium.launch({
    executablePath,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-quic'],
  });
}
