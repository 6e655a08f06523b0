
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
  p.acquireFast = function acquireFastNumbers(now, session, lock, mode, wait, until, request, count, limit) {
    return acquireFast.call(this, num(now), num(session), lock, num(mode), num(wait), opt(until), opt(request), opt(count), opt(limit));
  };
  p.releaseFast = function releaseFastNumbers(now, session, lock, request) {
    return releaseFast.call(this, num(now), num(session), lock, opt(request));
  };
  p.acquireFastId = function acquireFastIdNumbers(now, session, nameId, mode, wait, until, request, count, limit) {
    return acquireFastId.call(this, num(now), num(session), num(nameId), num(mode), num(wait), opt(until), opt(request), opt(count), opt(limit));
  };
  p.releaseFastId = function releaseFastIdNumbers(now, session, nameId, request) {
    return releaseFastId.call(this, num(now), num(session), num(nameId), opt(request));
  };
  p.setEventLimit = function setEventLimitNumbers(limit) {
    return setEventLimit.call(this, num(limit));
  };
}
