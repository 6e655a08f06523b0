
// ---- Appended by scripts/build-wasm.sh from wasm/js/numbers.js (one copy for the web and
// the node build). The typed fast path's numbers cross as wasm `f64` arguments, which the
// engine converts only as it enters wasm: after the glue above has read `this.__wbg_ptr`.
// A `valueOf` run by that conversion could free the service under the call, and the
// conversion turns "5" into 5, `null` into 0 and throws a TypeError for a bigint. So each
// method here passes a JS number as it is and anything else as NaN, which the module
// refuses (`out_of_range`, or `bad_argument` for a mode or wait code) before the core is
// called; no `valueOf` or `toString` of an argument ever runs. Optional numbers keep
// `undefined` and `null` (none).
{
  const num = (x) => (typeof x === 'number' ? x : NaN);
  const opt = (x) => (x === undefined || x === null ? x : num(x));
  const p = LockService.prototype;
  const { acquireFast, releaseFast, acquireFastId, releaseFastId, setEventLimit } = p;
  for (const [name, f] of Object.entries({ acquireFast, releaseFast, acquireFastId, releaseFastId, setEventLimit })) {
    if (typeof f !== 'function') throw new Error(`fencelock: the generated LockService has no ${name} to guard`);
  }
  // A short name crosses without an allocation: a string of at most NAME_UNITS UTF-16
  // units with no lone surrogate is written as UTF-8 straight into the service's name
  // buffer (fast.rs: `nameBuffer`, NAME_ROOM bytes), and the call passes its length; any
  // other value goes the general way, which judges it (and so does every name but an
  // ASCII one on an engine without String.prototype.isWellFormed). The buffer's view is kept per
  // service and made again when the memory has grown (a grown memory detaches the old
  // view: its byteLength is 0). A genuine service is checked live (`__wbg_ptr`) right
  // before the write, after everything that could run other code; the intrinsics used
  // from then on were taken when this module loaded, so no code of the caller's runs
  // between the write and the call. The buffer entry points are taken off the prototype:
  // only this glue calls them. A fast call during one of the service's own calls (a
  // getter of an object API argument calling acquireFast) is refused as re-entrant before
  // it writes anything (wasm/js/guard.js wraps these methods, after this glue).
  const NAME_UNITS = 64;
  const NAME_ROOM = 3 * NAME_UNITS;
  const { nameBuffer, acquireFastBuf, releaseFastBuf } = p;
  for (const [name, f] of Object.entries({ nameBuffer, acquireFastBuf, releaseFastBuf })) {
    if (typeof f !== 'function') throw new Error(`fencelock: the generated LockService has no ${name}`);
  }
  delete p.nameBuffer;
  delete p.acquireFastBuf;
  delete p.releaseFastBuf;
  const isWellFormed = String.prototype.isWellFormed;
  const charCodeAt = String.prototype.charCodeAt;
  const encoder = new TextEncoder();
  const encodeInto = TextEncoder.prototype.encodeInto;
  const call = Function.prototype.call.bind(Function.prototype.call);
  const views = new WeakMap();
  const { get: viewOf, set: setView } = WeakMap.prototype;
  const U8 = Uint8Array;
  const bufferOf = Object.getOwnPropertyDescriptor(WebAssembly.Memory.prototype, 'buffer').get;
  const byteLengthOf = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(U8.prototype), 'byteLength').get;
  // Writes `lock` into the service's buffer and returns its length in bytes, or -1 when
  // the name is to go the general way (or `svc` is no live service: that way says so).
  const put = (svc, lock) => {
    if (typeof lock !== 'string' || lock.length > NAME_UNITS) return -1;
    if (!(svc instanceof LockService)) return -1;
    let view = call(viewOf, views, svc);
    if (view === undefined || call(byteLengthOf, view) === 0) {
      if (svc.__wbg_ptr === 0) return -1;
      const at = call(nameBuffer, svc);
      view = new U8(call(bufferOf, wasm.memory), at, NAME_ROOM);
      call(setView, views, svc, view);
    }
    if (svc.__wbg_ptr === 0) return -1;
    // An ASCII name (the common case) is copied unit by unit: it is its own UTF-8 and has
    // no surrogate, and the loop costs less than a call into the engine's encoder (about
    // 15 ns against 35 for a 14-character name). Any other is judged and written whole by
    // the encoder, from the start.
    const n = lock.length;
    let i = 0;
    for (; i < n; i++) {
      const c = call(charCodeAt, lock, i);
      if (c > 0x7f) break;
      view[i] = c;
    }
    if (i === n) return n;
    if (isWellFormed === undefined || !call(isWellFormed, lock)) return -1; // (an engine before 2023)
    const { read, written } = call(encodeInto, encoder, lock, view);
    return read === lock.length ? written : -1;
  };
  p.acquireFast = function acquireFastNumbers(now, session, lock, mode, wait, until, request, count, limit) {
    const len = put(this, lock);
    if (len >= 0) {
      return call(acquireFastBuf, this, num(now), num(session), len, num(mode), num(wait), opt(until), opt(request), opt(count), opt(limit));
    }
    return call(acquireFast, this, num(now), num(session), lock, num(mode), num(wait), opt(until), opt(request), opt(count), opt(limit));
  };
  p.releaseFast = function releaseFastNumbers(now, session, lock, request) {
    const len = put(this, lock);
    if (len >= 0) return call(releaseFastBuf, this, num(now), num(session), len, opt(request));
    return call(releaseFast, this, num(now), num(session), lock, opt(request));
  };
  p.acquireFastId = function acquireFastIdNumbers(now, session, nameId, mode, wait, until, request, count, limit) {
    return call(acquireFastId, this, num(now), num(session), num(nameId), num(mode), num(wait), opt(until), opt(request), opt(count), opt(limit));
  };
  p.releaseFastId = function releaseFastIdNumbers(now, session, nameId, request) {
    return call(releaseFastId, this, num(now), num(session), num(nameId), opt(request));
  };
  p.setEventLimit = function setEventLimitNumbers(limit) {
    return call(setEventLimit, this, num(limit));
  };
}
