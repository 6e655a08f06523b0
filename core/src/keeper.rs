//! [`SessionKeeper`]: the client's own view of its lease.

use crate::Error;

/// How many recent keep-alive send times a [`SessionKeeper`] remembers, to match
/// acknowledgements against. An ack for an older send cannot extend the lease past a
/// newer acknowledged one anyway; an ack for a send it does not remember is refused.
pub const KEEPER_MEMORY: usize = 8;

/// What the client may do now, by its own clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// No keep-alive (or open) has been acknowledged yet: the client holds nothing.
    Unconfirmed,
    /// The lease is certainly valid: act freely until `until`.
    Safe {
        /// `last acknowledged send + ttl − margin`.
        until: u64,
    },
    /// Within `margin` of possible expiry (Chubby's jeopardy): stop acting on the resource
    /// now; keep sending keep-alives in case the service answers.
    Jeopardy {
        /// `last acknowledged send + ttl`: past this the session may be gone.
        expires_at: u64,
    },
    /// The lease may have expired (or the service said it did): everything held is lost.
    Expired,
}

/// The client side of a session lease, sans-IO, in the client's time units (the same
/// length of tick as the service's, read from the client's own clock). It decides nothing
/// about locks; it tells the client when to send a keep-alive and whether it may still act.
///
/// The lease is counted from when the last *acknowledged* keep-alive was *sent*: the
/// service received it no earlier, so its deadline is no earlier than `sent + ttl`. The
/// holder must stop at `sent + ttl − margin`; the margin absorbs clock-rate drift, the
/// time between checking and acting, and the phase between the client's ticks and the
/// service's (so it is at least one tick). A leader that cannot renew steps down by its own
/// clock, erring toward a gap with no leader rather than two.
///
/// Every time given to it must come from a monotonic clock (never stepped back: not the
/// wall clock). It keeps no record of the times [`lease`](Self::lease) is asked at, so a
/// clock stepped back between two calls makes a lease that read `Expired` read `Safe`
/// again; only a send time before the previous one is caught.
///
/// Use: call [`keep_alive_sent`](Self::keep_alive_sent) when sending a keep-alive (or the
/// open), [`keep_alive_acked`](Self::keep_alive_acked) with that send time when its
/// acknowledgement arrives, [`lease`](Self::lease) before every action on the resource,
/// and wake up at [`poll_timeout`](Self::poll_timeout).
///
/// Memory: the last [`KEEPER_MEMORY`] send times, a fixed array (the type is `Copy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionKeeper {
    ttl: u64,
    interval: u64,
    margin: u64,
    /// Recent send times, oldest first; `sent` of them are valid.
    sends: [u64; KEEPER_MEMORY],
    sent: usize,
    acked_send: Option<u64>,
    lost: bool,
}

impl SessionKeeper {
    /// A keeper for a session of `ttl`, sending a keep-alive every `interval`, stopping
    /// `margin` before the lease could expire.
    ///
    /// Errors: [`Error::BadConfig`] unless `0 < margin < ttl` and
    /// `0 < interval < ttl − margin` (a keep-alive must be able to land while the lease is
    /// still safe). The margin is at least one tick: the client's clock and the service's
    /// are read in whole ticks with any phase between them, so the service's tick can
    /// begin up to one tick before the client's does, and with no margin the lease would
    /// read safe for up to a tick after the session expired. Cost: O(1).
    pub fn new(ttl: u64, interval: u64, margin: u64) -> Result<Self, Error> {
        if margin == 0 || margin >= ttl {
            return Err(Error::BadConfig("margin must be in 1..ttl"));
        }
        if interval == 0 || interval >= ttl - margin {
            return Err(Error::BadConfig(
                "keep-alive interval must be in 1..ttl - margin",
            ));
        }
        Ok(SessionKeeper {
            ttl,
            interval,
            margin,
            sends: [0; KEEPER_MEMORY],
            sent: 0,
            acked_send: None,
            lost: false,
        })
    }

    fn last_sent(&self) -> Option<u64> {
        self.sent.checked_sub(1).map(|i| self.sends[i])
    }

    /// Records that a keep-alive (or the session open) was sent at `at`.
    ///
    /// A send at the same time as the previous one records nothing new (it is the same
    /// send time to match an acknowledgement against).
    ///
    /// Errors: [`Error::TimeWentBackwards`] if `at` is before the previous send (nothing
    /// recorded). Cost: O(1) ([`KEEPER_MEMORY`] moves when the memory is full).
    pub fn keep_alive_sent(&mut self, at: u64) -> Result<(), Error> {
        if let Some(prev) = self.last_sent() {
            if at < prev {
                return Err(Error::TimeWentBackwards {
                    now: crate::Tick(prev),
                    requested: crate::Tick(at),
                });
            }
            if at == prev {
                return Ok(());
            }
        }
        if self.sent == KEEPER_MEMORY {
            self.sends.copy_within(1.., 0);
            self.sent -= 1;
        }
        self.sends[self.sent] = at;
        self.sent += 1;
        Ok(())
    }

    /// Records the acknowledgement of the keep-alive sent at `sent_at`. Returns whether it
    /// extended the lease (a late ack of an older keep-alive does not).
    ///
    /// A keep-alive retried with the same request number is answered from the service's
    /// record and renews nothing: acknowledge it with its **first** attempt's send time,
    /// never the retry's (docs/SPEC.md §10), or the lease would be counted from a renewal
    /// that did not happen.
    ///
    /// Errors: [`Error::UnknownKeepAlive`] if no keep-alive sent at `sent_at` is among the
    /// last [`KEEPER_MEMORY`] recorded (an ack from the future, a forged or garbled time,
    /// or one too old to remember); nothing changes. Cost: O([`KEEPER_MEMORY`]).
    pub fn keep_alive_acked(&mut self, sent_at: u64) -> Result<bool, Error> {
        if !self.sends[..self.sent].contains(&sent_at) {
            return Err(Error::UnknownKeepAlive { sent_at });
        }
        if self.lost || self.acked_send.is_some_and(|a| a >= sent_at) {
            return Ok(false);
        }
        self.acked_send = Some(sent_at);
        Ok(true)
    }

    /// The service said the session expired (or closed): the lease is gone for good.
    /// Cost: O(1). Errors: none.
    pub fn session_lost(&mut self) {
        self.lost = true;
    }

    /// The lease at `now`. Cost: O(1). Errors: none.
    pub fn lease(&self, now: u64) -> Lease {
        if self.lost {
            return Lease::Expired;
        }
        let Some(sent) = self.acked_send else {
            return Lease::Unconfirmed;
        };
        let expires_at = sent.saturating_add(self.ttl);
        let until = expires_at - self.margin;
        if now < until {
            Lease::Safe { until }
        } else if now < expires_at {
            Lease::Jeopardy { expires_at }
        } else {
            Lease::Expired
        }
    }

    /// True only while the lease is [`Lease::Safe`]. Check it before each action on the
    /// resource (and still carry the token: this check is an opinion, the gate is a fact).
    /// Cost: O(1). Errors: none.
    pub fn may_act(&self, now: u64) -> bool {
        matches!(self.lease(now), Lease::Safe { .. })
    }

    /// The time the next keep-alive is due: `interval` after the last send, or `now` if
    /// none was sent. Cost: O(1). Errors: none.
    pub fn next_keep_alive(&self, now: u64) -> u64 {
        match self.last_sent() {
            Some(t) => t.saturating_add(self.interval),
            None => now,
        }
    }

    /// The next instant the host should wake: a keep-alive falling due, or the lease
    /// changing state (safe → jeopardy → expired); `None` once lost. It may be at or
    /// before `now` (a keep-alive is overdue): act at once. Cost: O(1). Errors: none.
    pub fn poll_timeout(&self, now: u64) -> Option<u64> {
        if self.lost {
            return None;
        }
        let due = self.next_keep_alive(now);
        let change = match self.lease(now) {
            Lease::Safe { until } => Some(until),
            Lease::Jeopardy { expires_at } => Some(expires_at),
            _ => None,
        };
        Some(change.map_or(due, |c| c.min(due)))
    }

    /// The configured ttl, interval and margin. Cost: O(1). Errors: none.
    pub fn config(&self) -> (u64, u64, u64) {
        (self.ttl, self.interval, self.margin)
    }
}
