// The web build by its subpath, `fencelock/web` (web/fencelock_wasm.d.ts), with the
// glue's own `init` input: `await init()` fetches the .wasm beside the .js, or takes a
// URL, a Response or the bytes. Checked by scripts/test-wasm.sh under both configs;
// type-checked only, never run.
import init, { LockService } from 'fencelock/web';
import type { InitInput, InitOutput, Reply } from 'fencelock/web';

const wasmUrl = new URL('./fencelock_wasm_bg.wasm', import.meta.url);
const loaded: InitOutput = await init({ module_or_path: wasmUrl });
const memory: WebAssembly.Memory = loaded.memory;
const input: InitInput = await fetch(wasmUrl);
await init(input);
// @ts-expect-error init returns a promise of the module's exports
const notAwaited: InitOutput = init();
console.log(memory.buffer.byteLength, notAwaited);

const svc = new LockService({ sessions: 4, locks: 4, claims: 4 });
const reply: Reply = svc.openSession(0, 10).reply;
if (reply.kind === 'opened') console.log(reply.session, reply.expiresAt);
// @ts-expect-error "open" is not a reply kind
if (reply.kind === 'open') console.log('never');
svc.free();
