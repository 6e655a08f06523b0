
// ---- Appended by scripts/build-wasm.sh from wasm/js/guard.js, after numbers.js (one copy
// for the web and the node build). wasm-bindgen refuses a call on a freed object ("null
// pointer passed to rust") and a call on an object already in a call (a getter of an
// argument calling it again: "recursive use") by throwing from inside wasm. The module is
// built with panic = "abort", so such a throw skips the code that gives the call's stack
// space back: a few thousand of them used up the shared stack and every later call, on
// every object of the module, trapped. So every method here is judged in JS first: a
// freed object, or one in a call, is refused with a coded error (`bad_argument`) before
// anything enters wasm. The typed fast paths run no caller code of their own, so they
// mark no object busy: while one runs, every method of every object is refused instead
// (one flag, cheaper than the Set below). Only a Proxy used as `this` runs code in one (its
// trap, at each read of the object's pointer: one comes after the name is written into the
// service's buffer), and that code may neither use the service, which would overwrite the
// name or free the service under the call, nor any other. Every other method marks its
// object busy for the length of its call. The
// object must be an instance of the method's own class (a FenceGate lent as `this` to a
// LockService method would hand wasm a pointer to the wrong kind of object). The busy mark
// is kept by the object's pointer in a Set, not on the object, so a frozen object is
// guarded as well, and so is a Proxy of the object or an object made with
// Object.create(it) (a reactive store's wrapper, say): each reaches the same pointer. Such
// a stand-in may call every method but free: the glue's free unregisters `this` from the
// clean-up that frees an object's memory when it is collected, and only the object itself
// is registered there, so a stand-in's free would leave the object's memory to be freed a
// second time (and the object itself, still holding its pointer, to use it after the
// free). free (and Symbol.dispose) is refused unless `this` is the object itself, on
// every engine (below).
{
  const refused = (message) => {
    const e = new TypeError(message);
    e.code = 'bad_argument';
    e.errno = 702;
    return e;
  };
  const apply = Reflect.apply;
  // Pointers of the objects in a call; one Set for the three classes (their objects live
  // in one memory, so no two live ones share a pointer).
  const busy = new Set();
  // Bound once, so a page that changes Set.prototype later changes nothing here.
  const isBusy = Set.prototype.has.bind(busy);
  const mark = Set.prototype.add.bind(busy);
  const unmark = Set.prototype.delete.bind(busy);
  // The clean-up registries' unregister, taken now: true only for an object registered,
  // which is the object itself. An engine without FinalizationRegistry (the glue then
  // frees nothing at collection) tells the object itself by its own pointer property: an
  // object made with Object.create(it) only inherits it (its free would zero a pointer
  // of its own and leave the object's, to be used after the free), while a Proxy's
  // forwards to the object (its free zeroes the object's pointer: nothing is left).
  const unregister = typeof FinalizationRegistry === 'undefined' ? undefined : FinalizationRegistry.prototype.unregister;
  const hasOwn = Object.prototype.hasOwnProperty;
  const register = typeof FinalizationRegistry === 'undefined' ? undefined : FinalizationRegistry.prototype.register;
  const registry = new Map([
    [LockService, LockServiceFinalization],
    [FenceGate, FenceGateFinalization],
    [SessionKeeper, SessionKeeperFinalization],
  ]);
  const CHECK_ONLY = new Set(['acquireFast', 'releaseFast', 'acquireFastId', 'releaseFastId']);
  // A typed fast call is running (see above), from its first step: the read of the
  // object's pointer that judges it is a Proxy's trap too.
  let inFast = false;
  const notInFast = () => {
    if (inFast) {
      throw refused(`invalid argument: a typed fast call is running (a Proxy's trap called the module from it)`);
    }
  };
  for (const cls of [LockService, FenceGate, SessionKeeper]) {
    const p = cls.prototype;
    const kind = cls.name;
    const clean = registry.get(cls);
    // The object's pointer, once judged live and not in a call.
    const judge = (o) => {
      notInFast();
      return pointer(o);
    };
    const pointer = (o) => {
      const ptr = o instanceof cls ? o.__wbg_ptr : 0;
      if (!ptr) {
        throw refused(`invalid argument: this ${kind} was freed (or is no ${kind})`);
      }
      if (isBusy(ptr)) {
        throw refused(`invalid argument: this ${kind} is in a call already (an argument's getter called it again)`);
      }
      return ptr;
    };
    // free: only the object itself (see above). Its registration goes here; the glue's
    // own unregister that follows finds none, which is harmless. A free that then fails
    // (a frozen object: the glue cannot write its pointer, and frees nothing) registers
    // it again, as the glue had, so that it is still freed once collected.
    const freeItself = (o, ptr, f, args) => {
      const itself = unregister === undefined ? apply(hasOwn, o, ['__wbg_ptr']) : apply(unregister, clean, [o]);
      if (!itself) {
        throw refused(`invalid argument: free() is called on the ${kind} itself, not on a Proxy of it or an object made from it`);
      }
      try {
        return apply(f, o, args);
      } catch (e) {
        // Registered again only if the glue's free failed before it took the pointer
        // (a frozen object): once it has, the memory may be freed already.
        if (unregister !== undefined && o.__wbg_ptr === ptr) apply(register, clean, [o, ptr, o]);
        throw e;
      }
    };
    for (const name of Object.getOwnPropertyNames(p)) {
      const d = Object.getOwnPropertyDescriptor(p, name);
      if (name === 'constructor' || name.startsWith('__') || typeof d.value !== 'function') continue;
      const f = d.value;
      const guarded = CHECK_ONLY.has(name)
        ? {
            [name](...args) {
              notInFast();
              inFast = true;
              try {
                pointer(this);
                return apply(f, this, args);
              } finally {
                inFast = false;
              }
            },
          }[name]
        : {
            [name](...args) {
              const ptr = judge(this);
              mark(ptr);
              try {
                return name === 'free' ? freeItself(this, ptr, f, args) : apply(f, this, args);
              } finally {
                unmark(ptr);
              }
            },
          }[name];
      Object.defineProperty(p, name, { ...d, value: guarded });
    }
    if (Symbol.dispose) p[Symbol.dispose] = p.free;
  }
}
