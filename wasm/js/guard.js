
// ---- Appended by scripts/build-wasm.sh from wasm/js/guard.js, after numbers.js (one copy
// for the web and the node build). wasm-bindgen refuses a call on a freed object ("null
// pointer passed to rust") and a call on an object already in a call (a getter of an
// argument calling it again: "recursive use") by throwing from inside wasm. The module is
// built with panic = "abort", so such a throw skips the code that gives the call's stack
// space back: a few thousand of them used up the shared stack and every later call, on
// every object of the module, trapped. So every method here is judged in JS first: a
// freed object, or one in a call, is refused with a coded error (`bad_argument`) before
// anything enters wasm. The typed fast paths run no caller code while they run, so they
// only check; every other method marks its object busy for the length of its call. The
// object must be an instance of the method's own class (a FenceGate lent as `this` to a
// LockService method would hand wasm a pointer to the wrong kind of object), and the busy
// mark is kept in a WeakSet, not on the object, so a frozen object is guarded as well.
{
  const refused = (message) => {
    const e = new TypeError(message);
    e.code = 'bad_argument';
    e.errno = 702;
    return e;
  };
  const apply = Reflect.apply;
  const busy = new WeakSet();
  // Bound once, so a page that changes WeakSet.prototype later changes nothing here.
  const isBusy = WeakSet.prototype.has.bind(busy);
  const mark = WeakSet.prototype.add.bind(busy);
  const unmark = WeakSet.prototype.delete.bind(busy);
  const CHECK_ONLY = new Set(['acquireFast', 'releaseFast', 'acquireFastId', 'releaseFastId']);
  for (const cls of [LockService, FenceGate, SessionKeeper]) {
    const p = cls.prototype;
    const kind = cls.name;
    const judge = (o) => {
      if (!(o instanceof cls) || !o.__wbg_ptr) {
        throw refused(`invalid argument: this ${kind} was freed (or is no ${kind})`);
      }
      if (isBusy(o)) {
        throw refused(`invalid argument: this ${kind} is in a call already (an argument's getter called it again)`);
      }
    };
    for (const name of Object.getOwnPropertyNames(p)) {
      const d = Object.getOwnPropertyDescriptor(p, name);
      if (name === 'constructor' || name.startsWith('__') || typeof d.value !== 'function') continue;
      const f = d.value;
      const guarded = CHECK_ONLY.has(name)
        ? {
            [name](...args) {
              judge(this);
              return apply(f, this, args);
            },
          }[name]
        : {
            [name](...args) {
              judge(this);
              mark(this);
              try {
                return apply(f, this, args);
              } finally {
                unmark(this);
              }
            },
          }[name];
      Object.defineProperty(p, name, { ...d, value: guarded });
    }
    if (Symbol.dispose) p[Symbol.dispose] = p.free;
  }
}
