//! [`GateFence`]: the core's `FenceGate` and the data it guards, behind one mutex.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};

use fencelock::{Error, FenceGate, GateRow, NameKey, Token};

use crate::{precheck, Fence, FenceError, StorageError};

struct Guarded<D> {
    gate: FenceGate<Vec<GateRow>>,
    data: D,
}

/// An in-process fence: a [`FenceGate`] and the data `D` it guards, behind one mutex, so
/// that the check, the write to `D` and the admit are one step for every thread.
///
/// Cloning gives another handle to the same gate and data (an `Arc`; O(1)). The gate holds at
/// most `capacity` resources and never forgets one (forgetting a highest token would let
/// a stale holder back in); a new resource past that is refused with
/// [`Error::CapacityExceeded`].
///
/// In-memory data has no rollback: a write that returns `Err` must leave `D` as it found
/// it (the gate records nothing). A write that panics poisons the fence: every later call
/// that reaches the gate or `D` answers [`FenceError::Storage`], since `D` may be
/// half-written (an input refused before that, an empty name or token 0, is still refused
/// as such). A [`read`](Self::read) that panics does not: it had `D` only to read.
///
/// A write or read runs under the fence's mutex: its closure must not use the same fence
/// (through a clone), which would wait for that mutex for ever on its own thread.
///
/// **Resource names others choose** (a shared store's tenants, names taken from
/// requests): make the fence with [`with_name_key`](Self::with_name_key) and a secret key
/// drawn from a random source. [`new`](Self::new) indexes names with the core's fixed,
/// public hash, so whoever chooses names can choose many that share one probe run, and
/// every write, admit and `highest` of them (under the one mutex, so every writer waits)
/// then scans the whole run. The key changes nothing else: every answer is the same.
pub struct GateFence<D> {
    inner: Arc<Mutex<Guarded<D>>>,
}

impl<D> Clone for GateFence<D> {
    fn clone(&self) -> Self {
        GateFence {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D> GateFence<D> {
    /// A fence with room for `capacity` resources, guarding `data`.
    ///
    /// Errors: [`Error::BadConfig`](fencelock::Error) for more than
    /// [`MAX_ROWS`](fencelock::MAX_ROWS) resources (checked before allocating) or more
    /// than the allocator gives (refused, never an abort).
    /// Cost: O(capacity) (96 bytes a resource).
    pub fn new(capacity: usize, data: D) -> Result<Self, fencelock::Error> {
        Self::build(capacity, data, None)
    }

    /// A fence with room for `capacity` resources, guarding `data`, whose resource index
    /// hashes names under `key` (the core's [`FenceGate::set_name_key`]): names chosen to
    /// share a probe run cannot slow every write. Take the key's 16 bytes from the
    /// operating system's random source ([`NameKey::from_bytes`]) and keep them secret;
    /// each process may draw its own. Answers are the same as [`new`](Self::new)'s.
    ///
    /// Errors: as [`new`](Self::new). Cost: O(capacity); afterwards each name is hashed
    /// with SipHash-1-3 (about 4 times the unkeyed hash).
    pub fn with_name_key(capacity: usize, data: D, key: NameKey) -> Result<Self, fencelock::Error> {
        Self::build(capacity, data, Some(key))
    }

    fn build(capacity: usize, data: D, key: Option<NameKey>) -> Result<Self, fencelock::Error> {
        fencelock::check_rows(capacity)?;
        let mut rows = Vec::new();
        rows.try_reserve_exact(capacity)
            .map_err(|_| Error::BadConfig("not enough memory for this gate capacity"))?;
        rows.resize(capacity, GateRow::EMPTY);
        let mut gate = FenceGate::new(rows)?;
        if let Some(key) = key {
            gate.set_name_key(key);
        }
        Ok(GateFence {
            inner: Arc::new(Mutex::new(Guarded { gate, data })),
        })
    }

    /// Only a panic inside a fenced write poisons the mutex: `read` catches its closure's
    /// panic and lets go of the lock before passing it on.
    fn lock(&self) -> Result<MutexGuard<'_, Guarded<D>>, StorageError> {
        self.inner.lock().map_err(|_| {
            StorageError::corrupt("a fenced write panicked; the guarded data may be half-written")
        })
    }

    /// Whether resource names are hashed under a key ([`with_name_key`](Self::with_name_key)).
    ///
    /// Errors: [`StorageError`] if a write panicked. Cost: the lock.
    pub fn is_name_keyed(&self) -> Result<bool, StorageError> {
        Ok(self.lock()?.gate.is_name_keyed())
    }

    /// Reads the guarded data (under the mutex; fenced writes wait). A panic in `read`
    /// reaches the caller, and the fence goes on: the mutex is released unpoisoned first
    /// (`read` had `D` only to read; a `D` with interior mutability that `read` changes
    /// is the caller's to keep whole).
    ///
    /// Errors: [`StorageError`] if a write panicked. Cost: the lock plus `read`.
    pub fn read<R>(&self, read: impl FnOnce(&D) -> R) -> Result<R, StorageError> {
        let g = self.lock()?;
        let out = catch_unwind(AssertUnwindSafe(|| read(&g.data)));
        // Dropped while not panicking: the mutex is not poisoned.
        drop(g);
        match out {
            Ok(r) => Ok(r),
            Err(panic) => resume_unwind(panic),
        }
    }
}

impl<D> Fence for GateFence<D> {
    type Tx<'t>
        = D
    where
        Self: 't;

    fn write<T, E, F>(&mut self, resource: &str, token: Token, write: F) -> Result<T, FenceError<E>>
    where
        F: FnOnce(&mut D) -> Result<T, E>,
    {
        precheck(resource, token, false)?;
        let mut g = self.lock()?;
        let Guarded { gate, data } = &mut *g;
        gate.check_admit(resource, token)
            .map_err(FenceError::Refused)?;
        let out = write(data).map_err(FenceError::Write)?;
        // Cannot fail: checked above under the same lock.
        gate.admit(resource, token).map_err(FenceError::Refused)?;
        Ok(out)
    }

    fn highest(&mut self, resource: &str) -> Result<Option<Token>, StorageError> {
        Ok(self.lock()?.gate.highest(resource))
    }
}
