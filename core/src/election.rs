//! Leader election: `acquire(wait: forever)` on an election lock. The holder is the
//! leader and its fencing token is the epoch; a downstream [`FenceGate`](crate::FenceGate)
//! rejects epoch n once it has seen n + 1. A thin layer over the lock service, not a
//! second state machine.

use crate::LockService;
use crate::{Error, Mode, Reply, SessionId, Sink, Storage, Tick, Token, Wait};

/// The current leader of an election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leader's session.
    pub session: SessionId,
    /// Its epoch: the token of its grant. Every action it takes downstream carries it.
    pub epoch: Token,
}

impl<S: Storage> LockService<S> {
    /// Stands `session` as a candidate in `election`: an exclusive acquire that waits
    /// forever. A `Granted` reply means it leads (the token is its epoch); `Queued` means
    /// it waits in line, and a later [`Output::Granted`](crate::Output) promotes it.
    ///
    /// Errors: those of [`acquire`](Self::acquire). Cost: as acquire.
    pub fn campaign(
        &mut self,
        now: Tick,
        session: SessionId,
        election: &str,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        self.acquire(
            now,
            session,
            election,
            Mode::Exclusive,
            Wait::Forever,
            request,
            out,
        )
    }

    /// Withdraws `session` from `election` (after advancing to `now`): steps down if it
    /// leads (replies `Released`; the next candidate is promoted with a higher epoch), else
    /// leaves the queue (replies `Cancelled`).
    ///
    /// Errors: [`Error::NotQueued`] if it is neither leader nor candidate, and those of
    /// [`release`](Self::release) / [`cancel`](Self::cancel). Cost: as release.
    pub fn resign(
        &mut self,
        now: Tick,
        session: SessionId,
        election: &str,
        request: Option<u64>,
        out: &mut impl Sink,
    ) -> Result<Reply, Error> {
        // Whether it leads is decided at `now`: advance first (one room check for the
        // whole input), then release or cancel without advancing again.
        self.advance(now, out)?;
        // A retry of a resign must take the same path as the original (which changed who
        // leads), so the recorded answer decides; otherwise whether it leads now does.
        let leads = match self.recorded_release_or_cancel(session, request) {
            Some(released) => released,
            None => self.leader(election).is_some_and(|l| l.session == session),
        };
        if leads {
            self.release_now(session, election, request, out)
        } else {
            self.cancel_now(session, election, request, out)
        }
    }

    /// The current leader of `election`, if any: its exclusive holder (an election's
    /// name held shared or in permits by plain acquires has none). Cost: O(name length):
    /// an exclusive hold is its lock's only one (I1), so the first holder decides.
    /// Errors: none.
    pub fn leader(&self, election: &str) -> Option<Leader> {
        self.holders(election)
            .next()
            .filter(|h| h.mode == Mode::Exclusive)
            .map(|h| Leader {
                session: h.session,
                epoch: h.token,
            })
    }
}
