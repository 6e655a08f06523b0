//! Interned lock names: a name checked once (the core's `LockName::new`) and stored, then
//! passed to the typed fast path as a number, so a hot acquire or release copies no string
//! into wasm memory. Only the crossing changes: the id path hands the core the stored
//! name, through the same core call as the string path.
//!
//! Bounded: at most as many names as the service has lock rows (`capacity().locks`), each
//! row about 80 bytes (the name inline, its generation), allocated as names are interned,
//! not up front. A full table is `capacity_exceeded` with `.table` `"names"`;
//! `forgetName` frees a row.
//!
//! Ids: row `r` in generation `g` has the id `g × 2^32 + r + 1` (so the first ids are 1,
//! 2, 3…, and a row's later names have ids past 2^32). Forgetting a name moves its row to
//! the next generation, so the forgotten id is `unknown_name` from then on and a later
//! name in that row gets a new id; the generation wraps to 0 after 2^21 − 2 (so ids stay
//! below 2^53), the one case in which an old id could name a new name: after 2 097 150
//! reuses of one row.

use alloc::vec::Vec;

use fencelock::LockName;

use crate::js::{self, Fail, MAX_SAFE};

/// The last generation: its ids are below 2^53 (at most `MAX_GENERATION × 2^32 + 2^32`).
const MAX_GENERATION: u64 = (MAX_SAFE >> 32) - 1;

const _: () = assert!((MAX_GENERATION << 32) + (1 << 32) <= MAX_SAFE);

/// One row: its generation and, while interned, the name.
struct Row {
    generation: u64,
    name: Option<LockName>,
}

/// The table of interned names of one service.
pub(crate) struct Names {
    /// The most rows (the service's lock capacity).
    max: u64,
    rows: Vec<Row>,
    /// Rows whose name was forgotten, to reuse (the last freed first).
    free: Vec<u32>,
}

impl Names {
    /// An empty table of at most `max` rows.
    pub(crate) fn new(max: u32) -> Names {
        Names {
            max: u64::from(max),
            rows: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Stores `name` and returns its id: `capacity_exceeded` (`"names"`) when every row is
    /// in use, `out_of_memory` when the module cannot grow. Cost: O(name length),
    /// amortised O(1) allocation.
    pub(crate) fn intern(&mut self, name: LockName) -> Result<u64, Fail> {
        let r = match self.free.pop() {
            Some(r) => r,
            None => {
                let r = self.rows.len();
                if r as u64 >= self.max {
                    return Err(Fail::NamesFull);
                }
                // `free` never holds more entries than there are rows: reserving for one
                // more row now makes every later `forget` infallible.
                let oom = |_| Fail::OutOfMemory("cannot grow the names table".into());
                self.rows.try_reserve(1).map_err(oom)?;
                self.free.try_reserve(r + 1).map_err(oom)?;
                self.rows.push(Row {
                    generation: 0,
                    name: None,
                });
                // `r` < `max` <= u32::MAX.
                u32::try_from(r).unwrap_or(u32::MAX)
            }
        };
        let Some(row) = self.rows.get_mut(r as usize) else {
            return Err(Fail::NamesFull);
        };
        row.name = Some(name);
        Ok((row.generation << 32) + u64::from(r) + 1)
    }

    /// The row of an id and the row itself, if the id names an interned name.
    #[inline(always)]
    fn find(&self, id: u64) -> Option<(usize, &Row)> {
        // Row r + 1 in the low 32 bits (0 is no id), the generation above.
        let r = ((id & 0xffff_ffff) as usize).checked_sub(1)?;
        let row = self.rows.get(r)?;
        (row.generation == id >> 32 && row.name.is_some()).then_some((r, row))
    }

    /// The id given as a JS number: a number that is not a safe non-negative integer is
    /// `out_of_range` (as every number), one that names no interned name `unknown_name`.
    fn id(id: f64) -> Result<u64, Fail> {
        match js::safe_u64(id) {
            Some(id) => Ok(id),
            None => js::num(&wasm_bindgen::JsValue::from_f64(id), "nameId"),
        }
    }

    /// The name an id stands for. Cost: O(1). Inlined into the two id calls; the refusals
    /// are out of line.
    #[inline(always)]
    pub(crate) fn get(&self, id: f64) -> Result<&LockName, Fail> {
        let found = js::safe_u64(id)
            .and_then(|k| self.find(k))
            .and_then(|(_, row)| row.name.as_ref());
        match found {
            Some(name) => Ok(name),
            None => Err(Self::not_found(id)),
        }
    }

    /// Why [`Self::get`] found nothing: `out_of_range` or `unknown_name`.
    #[cold]
    #[inline(never)]
    fn not_found(id: f64) -> Fail {
        match Self::id(id) {
            Ok(id) => Fail::UnknownName(id),
            Err(f) => f,
        }
    }

    /// Forgets the name of `id`: the id is unknown from now on, its row free for another
    /// name. Cost: O(1).
    pub(crate) fn forget(&mut self, id: f64) -> Result<(), Fail> {
        let id = Self::id(id)?;
        let (r, _) = self.find(id).ok_or(Fail::UnknownName(id))?;
        if let Some(row) = self.rows.get_mut(r) {
            row.name = None;
            // The next generation, unless its ids would pass 2^53 - 1: then back to 0.
            row.generation = if row.generation < MAX_GENERATION {
                row.generation + 1
            } else {
                0
            };
        }
        // Reserved by `intern`: this does not allocate.
        self.free.push(u32::try_from(r).unwrap_or(u32::MAX));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[test]
    fn ids_are_bounded_and_a_forgotten_id_stays_unknown() {
        let mut t = Names::new(2);
        assert_eq!(t.intern(name("a")).unwrap(), 1);
        assert_eq!(t.intern(name("b")).unwrap(), 2);
        assert_eq!(t.intern(name("c")), Err(Fail::NamesFull));
        assert_eq!(t.get(1.0).unwrap().as_str(), "a");
        t.forget(1.0).unwrap();
        assert_eq!(t.get(1.0), Err(Fail::UnknownName(1)));
        assert_eq!(t.forget(1.0), Err(Fail::UnknownName(1)));
        assert_eq!(t.rows.len() - t.free.len(), 1);
        // row 0, generation 1
        let c = (1u64 << 32) + 1;
        assert_eq!(t.intern(name("c")).unwrap(), c);
        assert_eq!(t.get(c as f64).unwrap().as_str(), "c");
        assert_eq!(t.get(1.0), Err(Fail::UnknownName(1)));
        for bad in [0.0, 3.0, 4.0, 2f64.powi(32), 2f64.powi(32) + 2.0, 1e15] {
            assert!(matches!(t.get(bad), Err(Fail::UnknownName(_))), "{bad}");
        }
        // (a number that is not a safe integer is `out_of_range`, made from a JS value:
        // the node tests check it)
        let mut none = Names::new(0);
        assert_eq!(none.intern(name("a")), Err(Fail::NamesFull));
        assert_eq!(none.get(1.0), Err(Fail::UnknownName(1)));
    }

    #[test]
    fn generations_wrap_below_2_pow_53() {
        let mut t = Names::new(1);
        t.intern(name("a")).unwrap();
        t.rows[0].generation = MAX_GENERATION;
        let last = (MAX_GENERATION << 32) + 1;
        assert_eq!(t.get(last as f64).unwrap().as_str(), "a");
        t.forget(last as f64).unwrap();
        assert_eq!(t.intern(name("b")).unwrap(), 1);
    }
}
