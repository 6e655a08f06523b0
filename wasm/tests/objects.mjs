// One small object of each class of the full module, and one call of each that reads its
// memory, for the tests of who may free an object. Takes the classes as the caller loaded
// them (no_finalization.test.mjs loads the package only after deleting
// FinalizationRegistry, so this module loads nothing itself). Not a test file itself.

/** For each class name: a maker of a small object, and a call that reads its memory (it
 * answers the same every time, so a stand-in's answer can be compared with the object's). */
export function objectsOf({ LockService, FenceGate, SessionKeeper }) {
  return {
    LockService: {
      make: () => new LockService({ sessions: 2, locks: 2, claims: 2 }),
      use: (o) => o.tick(o.now() + 1).reply.kind,
    },
    FenceGate: { make: () => new FenceGate(2), use: (o) => o.highest('r') },
    SessionKeeper: { make: () => new SessionKeeper(10, 3, 2), use: (o) => o.mayAct(0) },
  };
}
