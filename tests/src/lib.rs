//! # fencelock-tests — how fencelock is verified
//!
//! * [`vectors`]: conformance vectors (`tests/vectors/*.vec`): scenario definitions, the
//!   generator that renders them, and the native runner. The C and wasm runners replay the
//!   same files.
//! * [`gate_vectors`]: conformance vectors for fences (`tests/vectors/gate/*.vec`): what
//!   the in-process gate, a database table or an object store must answer.
//! * [`invariants`]: DESIGN.md's invariants as checks over a service's queries and
//!   snapshot ([`invariants::check_service`]) and over its output stream
//!   ([`invariants::Shadow`]); used by the simulation, the model-based tests and the fuzz
//!   targets alike.
//! * [`sim`]: the seeded deterministic simulation (clients, pauses, missed heartbeats, a
//!   resource behind a [`fencelock::FenceGate`]).
//! * [`rng`]: the small seeded generator the simulation uses (no global randomness).
//!
//! Model checking (stateright) and model-based tests (proptest) live in `tests/tests/`.

pub mod gate_vectors;
pub mod hex;
pub mod invariants;
pub mod model;
pub mod rng;
pub mod sim;
pub mod vectors;
