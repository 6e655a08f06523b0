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
