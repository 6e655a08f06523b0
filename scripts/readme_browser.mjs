// Opens one page in headless Chromium (Debian's, driven by playwright-core from tools/) and
// prints what it shows; for scripts/readme_examples.py, which serves the page on 127.0.0.1.
// Exits 1 on an uncaught page error, a console error, a failed request, or a page whose
// body is still empty 20 s after it loaded.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { chromium } = createRequire(path.join(root, 'tools', 'package.json'))('playwright-core');
const url = process.argv[2];
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const problems = [];
try {
  const page = await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()}`));
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });
  await page.goto(url, { waitUntil: 'networkidle' });
  await page.waitForFunction(() => document.body && document.body.innerText.trim() !== '', null,
    { timeout: 20_000 }).catch(() => problems.push('the page shows nothing'));
  await page.waitForTimeout(500); // a module's last lines after its first output
  console.log(await page.evaluate(() => document.body.innerText));
} finally {
  await browser.close();
}
if (problems.length) {
  console.log(problems.join('\n'));
  process.exit(1);
}
