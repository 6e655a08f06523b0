// The packed package through a bundler, as a web project uses it: the vite of tools/ (the
// pinned version) with its root PROJECT, a directory that has the tarball installed (and
// no vite of its own), this directory's index.html and main.js, and wasm/README.md's
// vite.config.js. scripts/test-packages.sh makes it and runs
//   node wasm/tests/bundler/check.mjs PROJECT
// Three runs, each opened in headless Chromium (Debian's, driven by playwright-core):
//   build   `vite build` with no config file, dist/ served by python3 -m http.server;
//   dev     the dev server with no config file, which pre-bundles fencelock and
//           fencelock/lite (where vite 7 and earlier lose the .wasm: wasm/README.md);
//   config  the dev server with PROJECT/vite.config.js, which pre-bundles neither.
// Each must show exactly RESULT in body[data-result], load both .wasm files (the full
// module's and fencelock/lite's) with status 200 as application/wasm, and have no console
// error or warning (wasm-bindgen warns when it falls back from a wrong MIME type), no
// uncaught error, no failed request or HTTP error, and no warning or error from vite.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, rmSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const tools = createRequire(path.join(repo, 'tools', 'package.json'));
const { chromium } = tools('playwright-core');
const vite = await import(pathToFileURL(tools.resolve('vite')).href);
const { version: viteVersion } = tools('vite/package.json');

const project = path.resolve(process.argv[2] ?? '');
const config = path.join(project, 'vite.config.js');
for (const f of ['index.html', 'main.js', 'node_modules/fencelock/package.json', 'vite.config.js']) {
  if (!existsSync(path.join(project, f))) throw new Error(`usage: check.mjs PROJECT (no ${f} in ${project})`);
}
if (existsSync(path.join(project, 'node_modules', 'vite'))) throw new Error('the project has a vite of its own');

// main.js's story: A granted token 1 and writes; B queued; A's session expires at 10, B is
// granted 2 and writes; A's late write with 1 is refused by the gate (stale 1 2). Then the
// appended guard refuses a string mode (-702, bad_argument), and fencelock/lite replays
// the grant, the queue and the expiry (codes 3 granted, 4 queued, 10 ticked; B granted 2).
const RESULT = {
  tokenA: 1,
  queued: 'queued',
  events: [['session_expired', 1, null], ['released', 1, 1], ['granted', 2, 2]],
  tokenB: 2,
  writes: ['admitted 1', 'admitted 2', 'stale 1 2'],
  guard: -702,
  lite: { codes: [3, 4, 10], grants: [[2, 2]] },
};
const WASM = [/^fencelock_wasm_bg\b.*\.wasm$/, /^fencelock_lite_bg\b.*\.wasm$/];

// vite's own warnings and errors (an asset URL it could not resolve is only a warning).
const viteProblems = [];
const logger = vite.createLogger('warn');
for (const level of ['warn', 'warnOnce', 'error']) {
  const log = logger[level].bind(logger);
  logger[level] = (msg, options) => { viteProblems.push(`vite ${level}: ${msg}`); log(msg, options); };
}
const inline = (configFile, extra = {}) => ({ root: project, configFile, customLogger: logger, logLevel: 'warn', ...extra });

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const stops = [() => browser.close()];
try {
  // build: the files a user deploys, served by a plain static server.
  const dist = path.join(project, 'dist');
  rmSync(dist, { recursive: true, force: true });
  await vite.build(inline(false, { build: { outDir: dist } }));
  const assets = readdirSync(path.join(dist, 'assets')).sort();
  console.log(`vite ${viteVersion} build: ${assets.map((a) => `assets/${a}`).join(', ')}`);
  const loaded = await check('build', await serve(dist));
  console.log(`build, served by python3 -m http.server: as expected; ${loaded}`);

  // dev: the dev server as it starts with no config (it pre-bundles both entry points, the
  // case that breaks the .wasm URL in vite 7 and earlier), then with the README's config
  // (which pre-bundles neither).
  for (const [name, configFile, prebundles] of [
    ['dev server, no config', false, ['fencelock', 'fencelock/lite']],
    ['dev server, vite.config.js', config, []],
  ]) {
    rmSync(path.join(project, 'node_modules', '.vite'), { recursive: true, force: true });
    const server = await vite.createServer(inline(configFile, { server: { host: '127.0.0.1', port: 0, strictPort: true } }));
    const stop = () => server.close();
    stops.push(stop);
    await server.listen();
    const requested = [];
    const loaded = await check(name, server.resolvedUrls.local[0], requested);
    const { optimized } = server.environments.client.depsOptimizer.metadata;
    await stop();
    stops.splice(stops.indexOf(stop), 1);
    assert.deepEqual(Object.keys(optimized).sort(), prebundles, `${name}: what the dev server pre-bundled`);
    for (const [id, { file }] of Object.entries(optimized)) {
      const want = `/node_modules/.vite/deps/${path.basename(file)}`;
      assert.ok(requested.includes(want), `${name}: the page did not load ${id} pre-bundled, ${want}: ${requested.join(' ')}`);
    }
    console.log(`${name}: as expected; pre-bundled ${prebundles.join(', ') || 'nothing'}; ${loaded}`);
  }
} finally {
  for (const stop of stops.reverse()) await stop();
}
assert.deepEqual(viteProblems, [], 'vite warned or failed');
console.log(`bundler: each run showed ${JSON.stringify(RESULT)}`);

// Serves DIR on 127.0.0.1 at a port the system picks, until this script ends.
async function serve(dir) {
  const py = spawn('python3', ['-u', '-m', 'http.server', '0', '--bind', '127.0.0.1', '--directory', dir],
    { stdio: ['ignore', 'pipe', 'ignore'] });
  stops.push(() => py.kill());
  let seen = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`python3 -m http.server did not start: ${seen}`)), 10_000);
    py.on('exit', (code) => reject(new Error(`python3 -m http.server exited (${code}): ${seen}`)));
    py.stdout.on('data', (d) => {
      seen += d;
      const m = /port (\d+)/.exec(seen);
      if (m) { clearTimeout(timer); resolve(`http://127.0.0.1:${m[1]}/`); }
    });
  });
}

// Opens URL in a fresh page and checks what it shows, what it loaded and what it logged;
// adds the path of every response to REQUESTED and returns the .wasm files loaded.
async function check(name, url, requested = []) {
  const page = await browser.newPage();
  const problems = [];
  const wasm = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()}`));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`);
    const file = new URL(r.url()).pathname;
    requested.push(file);
    if (file.endsWith('.wasm')) wasm.push({ file, status: r.status(), type: r.headers()['content-type'] });
  });
  const fail = (what) => { throw new Error(`${name}: ${what}${problems.map((p) => `\n  ${p}`).join('')}`); };
  try {
    await page.goto(url);
    await page.waitForSelector('body[data-result], body[data-error]', { state: 'attached', timeout: 20_000 })
      .catch(() => fail('the page wrote no result in 20 s'));
    const { result, error } = await page.evaluate(() => ({ ...document.body.dataset }));
    if (error !== undefined) fail(`the page failed: ${error}`);
    assert.deepEqual(JSON.parse(result), RESULT, `${name}: the page showed ${result}`);
    const kinds = wasm.map((w) => WASM.findIndex((re) => re.test(path.basename(w.file)))).sort();
    const served = wasm.every((w) => w.status === 200 && w.type === 'application/wasm');
    if (String(kinds) !== '0,1' || !served) fail(`not one of each .wasm, 200 and application/wasm: ${JSON.stringify(wasm)}`);
    if (problems.length) fail('console, page or network problems:');
    return `loaded ${wasm.map((w) => w.file).join(' and ')} as application/wasm`;
  } finally {
    await page.close();
  }
}
