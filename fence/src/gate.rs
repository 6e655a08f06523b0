//! [`GateFence`]: the core's `FenceGate` and the data it guards, behind one mutex.

use std::sync::{Arc, Mutex, MutexGuard};

use fencelock::{Error, FenceGate, GateRow, Token};

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
/// answers [`FenceError::Storage`], since `D` may be half-written.
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
        fencelock::check_rows(capacity)?;
        let mut rows = Vec::new();
        rows.try_reserve_exact(capacity)
            .map_err(|_| Error::BadConfig("not enough memory for this gate capacity"))?;
        rows.resize(capacity, GateRow::EMPTY);
        Ok(GateFence {
            inner: Arc::new(Mutex::new(Guarded {
                gate: FenceGate::new(rows)?,
                data,
            })),
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, Guarded<D>>, StorageError> {
        self.inner.lock().map_err(|_| {
            StorageError::corrupt("a fenced write panicked; the guarded data may be half-written")
        })
    }

    /// Reads the guarded data (under the mutex; fenced writes wait).
    ///
    /// Errors: [`StorageError`] if a write panicked. Cost: the lock plus `read`.
    pub fn read<R>(&self, read: impl FnOnce(&D) -> R) -> Result<R, StorageError> {
        Ok(read(&self.lock()?.data))
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
