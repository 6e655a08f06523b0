//! [`Sink`]: where the service puts the events an input causes for others.

use crate::Output;

/// Receives the [`Output`] events of one input, in order, before the call returns. The
/// service buffers nothing, so it can drop nothing.
///
/// Implemented for closures (`&mut |o: Output| …`), for `Vec<Output>` and `EventQueue`
/// (feature `alloc`; the queue bounded by an [`EventLimit`]) and for
/// `heapless::Deque<Output, N>`. A bounded sink reports its free [`room`](Sink::room);
/// the service refuses an input with [`Error::BufferTooSmall`](crate::Error) — before
/// changing anything — unless the room covers the most that input could emit
/// ([`LockService::max_events`](crate::LockService::max_events)), so a push never finds a
/// bounded sink full.
pub trait Sink {
    /// Takes one event. Cost: the implementation's (O(1) for the ones provided).
    fn event(&mut self, event: Output);

    /// How many more events this sink can take; `usize::MAX` (the default) for an
    /// unbounded one. Cost: O(1).
    fn room(&self) -> usize {
        usize::MAX
    }
}

impl<F: FnMut(Output)> Sink for F {
    fn event(&mut self, event: Output) {
        self(event)
    }
}

#[cfg(feature = "alloc")]
impl Sink for alloc::vec::Vec<Output> {
    fn event(&mut self, event: Output) {
        self.push(event)
    }
}

impl<const N: usize> Sink for heapless::Deque<Output, N> {
    fn event(&mut self, event: Output) {
        // Cannot fail: the service checks `room` before it changes anything. Should the
        // bound ever fall short, tests and fuzzing (debug builds) say so here.
        let pushed = self.push_back(event);
        debug_assert!(
            pushed.is_ok(),
            "a bounded sink was full: the event bound fell short"
        );
    }

    fn room(&self) -> usize {
        N - self.len()
    }
}

/// The limit a host keeps its event queue within when the queue grows as events arrive (a
/// heap queue a binding drains on request): at most [`limit`](Self::limit) events, never
/// below [`bound`](Self::bound), the most events one input of the service can emit at
/// capacity ([`Capacity::max_events`](crate::Capacity::max_events)) — so an empty queue
/// always has room for the next input, and a host that never drains is refused
/// ([`Error::BufferTooSmall`](crate::Error)) instead of growing without end. The queue's
/// [`Sink::room`] is [`room`](Self::room) of what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventLimit {
    // In 64 bits, so that a bound past `usize::MAX` on a 32-bit target (large tables with
    // many watchers) is judged as on a 64-bit one, not saturated into refusing every input.
    limit: u64,
    bound: u64,
}

impl EventLimit {
    /// No limit: a sink that takes every event of the input it is given to.
    pub const UNBOUNDED: EventLimit = EventLimit {
        limit: u64::MAX,
        bound: 0,
    };

    /// The default limit for a service whose bound at capacity is `bound`: twice it (a
    /// host that drains after each input never nears it). `bound` must be at least the
    /// service's [`max_events`](crate::LockService::max_events) at capacity
    /// ([`default_event_limit`](crate::LockService::default_event_limit) is this limit made
    /// from it): with room for `bound` events the queue reports room for any input, so a
    /// smaller `bound` would let one input's events take the queue past its limit.
    /// Errors: none. Cost: O(1).
    pub const fn new(bound: usize) -> EventLimit {
        EventLimit::of_bound(bound as u64)
    }

    /// [`new`](Self::new) of a bound in 64 bits (the service's own, which a 32-bit
    /// `usize` may not hold). Cost: O(1).
    pub(crate) const fn of_bound(bound: u64) -> EventLimit {
        EventLimit {
            limit: bound.saturating_mul(2),
            bound,
        }
    }

    /// The most events the queue may hold (`usize::MAX` when more: a 32-bit target).
    /// Cost: O(1). Errors: none.
    pub const fn limit(&self) -> usize {
        crate::service::clamp(self.limit)
    }

    /// The bound the limit may not go below (`usize::MAX` when more: a 32-bit target).
    /// Cost: O(1). Errors: none.
    pub const fn bound(&self) -> usize {
        crate::service::clamp(self.bound)
    }

    /// Sets the limit: at least [`bound`](Self::bound); one below what the queue holds
    /// refuses inputs until it is drained. `usize::MAX` is "as many as this target can
    /// hold" and is always taken (on a 32-bit target the bound can pass it). Errors:
    /// `Err(bound)` below the bound, nothing changed (each binding words it as its own
    /// argument error). Cost: O(1).
    pub fn set(&mut self, limit: usize) -> Result<(), usize> {
        let limit = if limit == usize::MAX {
            u64::MAX
        } else {
            limit as u64
        };
        if limit < self.bound {
            return Err(self.bound());
        }
        self.limit = limit;
        Ok(())
    }

    /// The room to report as [`Sink::room`] while `queued` events are held: the limit less
    /// them, or `usize::MAX` once that covers the bound (room for any input, so the
    /// service skips working out [`max_events`](crate::LockService::max_events) — always,
    /// for [`UNBOUNDED`](Self::UNBOUNDED)). Computed in 64 bits: the same answer on every
    /// target. Cost: O(1). Errors: none.
    pub fn room(&self, queued: usize) -> usize {
        let room = self.limit.saturating_sub(queued as u64);
        if room >= self.bound {
            usize::MAX
        } else {
            crate::service::clamp(room)
        }
    }
}

/// An event queue on the heap kept within an [`EventLimit`] (feature `alloc`): the sink of
/// a binding that keeps events until its host takes them (the wasm fast path). Its
/// [`Sink::room`] is the limit's [`room`](EventLimit::room) of what it holds, so the
/// service refuses an input whose events might not fit ([`Error::BufferTooSmall`](crate::Error))
/// and the queue never grows past its limit.
#[cfg(feature = "alloc")]
#[derive(Clone, Debug)]
pub struct EventQueue {
    events: alloc::vec::Vec<Output>,
    limit: EventLimit,
}

#[cfg(feature = "alloc")]
impl EventQueue {
    /// An empty queue within `limit`. Cost: O(1), no allocation until the first event.
    /// Errors: none.
    pub const fn new(limit: EventLimit) -> EventQueue {
        EventQueue {
            events: alloc::vec::Vec::new(),
            limit,
        }
    }

    /// The events held, oldest first. Cost: O(1). Errors: none.
    pub fn events(&self) -> &[Output] {
        &self.events
    }

    /// Forgets the events held (keeping the allocation). Cost: O(events). Errors: none.
    pub fn clear(&mut self) {
        self.events.clear()
    }

    /// The limit it keeps within. Cost: O(1). Errors: none.
    pub fn limit(&self) -> &EventLimit {
        &self.limit
    }

    /// Sets the limit ([`EventLimit::set`]): errors `Err(bound)` below the bound, nothing
    /// changed. Cost: O(1). Errors: the bound, as said.
    pub fn set_limit(&mut self, limit: usize) -> Result<(), usize> {
        self.limit.set(limit)
    }
}

#[cfg(feature = "alloc")]
impl Sink for EventQueue {
    fn event(&mut self, event: Output) {
        // Within the limit: the service checked `room` before it changed anything.
        self.events.push(event)
    }

    // Out of line: the service inlines its check into every input, and one copy of this
    // is smaller (it matters in a wasm module).
    #[inline(never)]
    fn room(&self) -> usize {
        self.limit.room(self.events.len())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)] // a test's failed set-up is a failed test
mod tests {
    use super::*;
    use crate::{Config, Error, LockService, Mode, SessionId, Tick, VecStorage, Wait};

    fn snapshot(svc: &LockService<VecStorage>) -> alloc::vec::Vec<u8> {
        let mut buf = alloc::vec![0u8; 4096];
        let n = svc.snapshot(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// A queue at its limit makes the service refuse an input whose events might not fit,
    /// with nothing changed; once cleared, the same input is applied and its event kept.
    #[test]
    fn an_event_queue_keeps_its_events_within_its_limit() {
        let storage = VecStorage::try_new(2, 1, 2).unwrap();
        let mut svc = LockService::new(storage, Config::default()).unwrap();
        let bound = svc.capacity().max_events(svc.config().max_watchers);
        let mut q = EventQueue::new(svc.default_event_limit());
        assert_eq!(q.limit().bound(), bound);
        assert_eq!(q.limit().limit(), 2 * bound);
        assert_eq!(
            q.room(),
            usize::MAX,
            "an empty queue has room for any input"
        );
        let t = Tick(1);
        let open = |svc: &mut LockService<VecStorage>, q: &mut EventQueue| match svc
            .open_session(t, 100, q)
        {
            Ok(crate::Reply::Opened { session, .. }) => session,
            other => panic!("{other:?}"),
        };
        let (a, b) = (open(&mut svc, &mut q), open(&mut svc, &mut q));
        svc.acquire(t, a, "l", Mode::Exclusive, Wait::None, None, &mut q)
            .unwrap();
        svc.acquire(t, b, "l", Mode::Exclusive, Wait::Forever, None, &mut q)
            .unwrap();
        // Full: as many events as the limit allows.
        while q.events().len() < q.limit().limit() {
            q.event(Output::SessionExpired {
                session: SessionId(9),
            });
        }
        assert_eq!(q.room(), 0);
        let before = snapshot(&svc);
        let refused = svc.release(t, a, "l", None, &mut q);
        assert!(
            matches!(refused, Err(Error::BufferTooSmall { .. })),
            "{refused:?}"
        );
        assert_eq!(
            snapshot(&svc),
            before,
            "a refused input changed the service"
        );
        assert_eq!(q.events().len(), q.limit().limit());
        // Drained, the release goes through and its grant to `b` is kept.
        q.clear();
        svc.release(t, a, "l", None, &mut q).unwrap();
        assert!(
            matches!(q.events(), [Output::Granted { session, .. }] if *session == b),
            "{:?}",
            q.events()
        );
        // The limit never goes below the bound.
        assert_eq!(q.set_limit(bound - 1), Err(bound));
        assert_eq!(q.set_limit(bound), Ok(()));
    }
}
