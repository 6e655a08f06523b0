//! [`SessionKeeper`]: the client's own view of its lease.

use crate::Error;

/// What the client may do now, by its own clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// No heartbeat (or open) has been acknowledged yet: the client holds nothing.
    Unconfirmed,
    /// The lease is certainly valid: act freely until `until`.
    Safe {
        /// `last acknowledged send + ttl − margin`.
        until: u64,
    },
    /// Within `margin` of possible expiry (Chubby's jeopardy): stop acting on the resource
    /// now; keep heartbeating in case the service answers.
    Jeopardy {
        /// `last acknowledged send + ttl`: past this the session may be gone.
        expires_at: u64,
    },
    /// The lease may have expired (or the service said it did): everything held is lost.
    Expired,
}

/// The client side of a session lease, sans-IO, in the host's time units (not the
/// service's ticks). It decides nothing about locks; it tells the client when to send a
/// heartbeat and whether it may still act.
///
/// The lease is counted from when the last *acknowledged* heartbeat was *sent*: the
/// service received it no earlier, so its deadline is no earlier than `sent + ttl`. The
/// holder must stop at `sent + ttl − margin`; the margin absorbs clock-rate drift and the
/// time between checking and acting. A leader that cannot renew steps down by its own
/// clock, erring toward a gap with no leader rather than two.
///
/// Use: call [`heartbeat_sent`](Self::heartbeat_sent) when sending a keep-alive (or the
/// open), [`heartbeat_acked`](Self::heartbeat_acked) with that send time when its
/// acknowledgement arrives, [`lease`](Self::lease) before every action on the resource,
/// and wake up at [`poll_timeout`](Self::poll_timeout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionKeeper {
    ttl: u64,
    interval: u64,
    margin: u64,
    last_sent: Option<u64>,
    acked_send: Option<u64>,
    lost: bool,
}

impl SessionKeeper {
    /// A keeper for a session of `ttl`, heartbeating every `interval`, stopping `margin`
    /// before the lease could expire.
    ///
    /// Errors: [`Error::BadConfig`] unless `0 < interval < ttl − margin` and
    /// `margin < ttl` (a heartbeat must be able to land while the lease is still safe).
    /// Cost: O(1).
    pub fn new(ttl: u64, interval: u64, margin: u64) -> Result<Self, Error> {
        if margin >= ttl {
            return Err(Error::BadConfig("margin must be smaller than ttl"));
        }
        if interval == 0 || interval >= ttl - margin {
            return Err(Error::BadConfig(
                "heartbeat interval must be in 1..ttl - margin",
            ));
        }
        Ok(SessionKeeper {
            ttl,
            interval,
            margin,
            last_sent: None,
            acked_send: None,
            lost: false,
        })
    }

    /// Records that a heartbeat (or the session open) was sent at `at`.
    ///
    /// Errors: [`Error::TimeWentBackwards`] if `at` is before the previous send.
    /// Cost: O(1).
    pub fn heartbeat_sent(&mut self, at: u64) -> Result<(), Error> {
        if let Some(prev) = self.last_sent {
            if at < prev {
                return Err(Error::TimeWentBackwards {
                    now: crate::Tick(prev),
                    requested: crate::Tick(at),
                });
            }
        }
        self.last_sent = Some(at);
        Ok(())
    }

    /// Records the acknowledgement of the heartbeat sent at `sent_at`. Returns whether it
    /// extended the lease (a late ack of an older heartbeat does not).
    ///
    /// Errors: [`Error::TimeWentBackwards`] if `sent_at` is after the latest recorded send
    /// (no such heartbeat was sent). Cost: O(1).
    pub fn heartbeat_acked(&mut self, sent_at: u64) -> Result<bool, Error> {
        match self.last_sent {
            Some(last) if sent_at <= last => {}
            _ => {
                return Err(Error::TimeWentBackwards {
                    now: crate::Tick(self.last_sent.unwrap_or(0)),
                    requested: crate::Tick(sent_at),
                })
            }
        }
        if self.lost || self.acked_send.is_some_and(|a| a >= sent_at) {
            return Ok(false);
        }
        self.acked_send = Some(sent_at);
        Ok(true)
    }

    /// The service said the session expired (or closed): the lease is gone for good.
    /// Cost: O(1).
    pub fn session_lost(&mut self) {
        self.lost = true;
    }

    /// The lease at `now`. Cost: O(1).
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
    /// Cost: O(1).
    pub fn may_act(&self, now: u64) -> bool {
        matches!(self.lease(now), Lease::Safe { .. })
    }

    /// When the next heartbeat is due: `interval` after the last send, or `now` if none
    /// was sent. Cost: O(1).
    pub fn heartbeat_due(&self, now: u64) -> u64 {
        match self.last_sent {
            Some(t) => t.saturating_add(self.interval),
            None => now,
        }
    }

    /// The next instant the host should wake: a heartbeat falling due, or the lease
    /// changing state (safe → jeopardy → expired); `None` once lost. It may be at or
    /// before `now` (a heartbeat is overdue): act at once. Cost: O(1).
    pub fn poll_timeout(&self, now: u64) -> Option<u64> {
        if self.lost {
            return None;
        }
        let hb = self.heartbeat_due(now);
        let change = match self.lease(now) {
            Lease::Safe { until } => Some(until),
            Lease::Jeopardy { expires_at } => Some(expires_at),
            _ => None,
        };
        Some(change.map_or(hb, |c| c.min(hb)))
    }

    /// The configured ttl, interval and margin. Cost: O(1).
    pub fn config(&self) -> (u64, u64, u64) {
        (self.ttl, self.interval, self.margin)
    }
}
