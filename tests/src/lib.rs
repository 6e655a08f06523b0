//! # fencelock-tests — how fencelock is verified
//!
//! * [`vectors`]: conformance vectors (`tests/vectors/*.vec`): scenario definitions, the
//!   generator that renders them, and the native runner. The C and wasm runners replay the
//!   same files.
//! * [`calls`]: error-precedence tables (`tests/vectors/*.calls`): the format, its parser
//!   and the native runner (typed methods and frames).
//! * [`gate_vectors`]: conformance vectors for fences (`tests/vectors/gate/*.vec`): what
//!   the in-process gate, a database table or an object store must answer.
//! * [`invariants`]: the invariants of docs/SPEC.md §7 (I1–I10) as checks over a
//!   service's queries and snapshot ([`invariants::check_service`]) and over its replies
//!   and events ([`invariants::Shadow`]): the one checker, used by every other part, the
//!   fuzz targets included.
//! * [`model`]: the reference model (std collections, scans), predicting each input's
//!   reply and events.
//! * [`gen`]: the one random client-like input generator (simulation chaos, model-based
//!   tests, determinism tests).
//! * [`sim`]: the seeded deterministic simulation (clients with `SessionKeeper`s, pauses,
//!   lost keep-alives, hosts that tick late or never, a resource behind a
//!   [`fencelock::FenceGate`]).
//! * [`rng`]: the small seeded generator (no global randomness); [`hex`]: the vector
//!   files' hex.
//!
//! Model checking (stateright), model-based tests (proptest), determinism, atomic errors,
//! the keep-alive timing test and the invariant checker's own tests (each check seen to
//! fire) live in `tests/tests/`.

pub mod calls;
pub mod gate_vectors;
pub mod gen;
pub mod hex;
pub mod invariants;
pub mod model;
pub mod rng;
pub mod sim;
pub mod vectors;
