//! [`Sink`]: where the service puts the events an input causes for others.

use crate::Output;

/// Receives the [`Output`] events of one input, in order, before the call returns. The
/// service buffers nothing, so it can drop nothing.
///
/// Implemented for closures (`&mut |o: Output| …`), for `Vec<Output>` (feature `alloc`) and
/// for `heapless::Deque<Output, N>`. A bounded sink reports its free [`room`](Sink::room);
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
        // Cannot fail: the service checks `room` before it changes anything.
        let _ = self.push_back(event);
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
    limit: usize,
    bound: usize,
}

impl EventLimit {
    /// No limit: a sink that takes every event of the input it is given to.
    pub const UNBOUNDED: EventLimit = EventLimit {
        limit: usize::MAX,
        bound: 0,
    };

    /// The default limit for a service whose bound at capacity is `bound`: twice it (a
    /// host that drains after each input never nears it). Cost: O(1).
    pub const fn new(bound: usize) -> EventLimit {
        EventLimit {
            limit: bound.saturating_mul(2),
            bound,
        }
    }

    /// The most events the queue may hold. Cost: O(1).
    pub const fn limit(&self) -> usize {
        self.limit
    }

    /// The bound the limit may not go below. Cost: O(1).
    pub const fn bound(&self) -> usize {
        self.bound
    }

    /// Sets the limit: at least [`bound`](Self::bound); one below what the queue holds
    /// refuses inputs until it is drained. Errors: `Err(bound)` below the bound, nothing
    /// changed (each binding words it as its own argument error). Cost: O(1).
    pub fn set(&mut self, limit: usize) -> Result<(), usize> {
        if limit < self.bound {
            return Err(self.bound);
        }
        self.limit = limit;
        Ok(())
    }

    /// The room to report as [`Sink::room`] while `queued` events are held: the limit less
    /// them, or `usize::MAX` once that covers the bound (room for any input, so the
    /// service skips working out [`max_events`](crate::LockService::max_events) — always,
    /// for [`UNBOUNDED`](Self::UNBOUNDED)). Cost: O(1).
    pub fn room(&self, queued: usize) -> usize {
        let room = self.limit.saturating_sub(queued);
        if room >= self.bound && self.bound != usize::MAX {
            usize::MAX
        } else {
            room
        }
    }
}
