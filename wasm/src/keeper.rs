//! `SessionKeeper`: the client's own view of its lease, for JavaScript.

use fencelock::Lease;
use wasm_bindgen::prelude::*;

use crate::js::{self, Fail, Obj, MAX_SAFE};

/// The client side of a session lease, in the host's time units: when to heartbeat and
/// whether it may still act. Feed it `heartbeatSent(at)` / `heartbeatAcked(sentAt)` and
/// ask `lease(now)` / `mayAct(now)` before every action on the resource.
#[wasm_bindgen]
pub struct SessionKeeper {
    core: fencelock::SessionKeeper,
    ttl: u64,
}

#[wasm_bindgen]
impl SessionKeeper {
    /// A keeper for a session of `ttl`, heartbeating every `interval`, stopping `margin`
    /// before the lease could expire. Throws `bad_config` unless `0 < interval < ttl -
    /// margin`, `out_of_range`. Cost: O(1).
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "number")] ttl: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] interval: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] margin: JsValue,
    ) -> Result<SessionKeeper, JsValue> {
        let ttl = js::num(&ttl, "ttl")?;
        let interval = js::num(&interval, "interval")?;
        let margin = js::num(&margin, "margin")?;
        let core = fencelock::SessionKeeper::new(ttl, interval, margin).map_err(Fail::from)?;
        Ok(SessionKeeper { core, ttl })
    }

    /// Records that a heartbeat (or the open) was sent at `at`. Throws
    /// `time_went_backwards` (before the previous send) and `out_of_range`, also when
    /// `at + ttl` is above 2^53-1 (the lease's end must be an exact JS number). Cost: O(1).
    #[wasm_bindgen(js_name = heartbeatSent)]
    pub fn heartbeat_sent(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] at: JsValue,
    ) -> Result<(), JsValue> {
        let at = js::num(&at, "at")?;
        if at.saturating_add(self.ttl) > MAX_SAFE {
            return Err(Fail::OutOfRange(alloc::format!(
                "at + ttl = {at} + {} is above 2^53-1",
                self.ttl
            ))
            .into());
        }
        Ok(self.core.heartbeat_sent(at).map_err(Fail::from)?)
    }

    /// Records the acknowledgement of the heartbeat sent at `sentAt`; returns whether it
    /// extended the lease. Throws `time_went_backwards` if no such heartbeat was sent,
    /// `out_of_range`. Cost: O(1).
    #[wasm_bindgen(js_name = heartbeatAcked)]
    pub fn heartbeat_acked(
        &mut self,
        #[wasm_bindgen(js_name = sentAt, unchecked_param_type = "number")] sent_at: JsValue,
    ) -> Result<bool, JsValue> {
        let sent_at = js::num(&sent_at, "sentAt")?;
        Ok(self.core.heartbeat_acked(sent_at).map_err(Fail::from)?)
    }

    /// The service said the session expired or closed: the lease is gone for good.
    /// Cost: O(1).
    #[wasm_bindgen(js_name = sessionLost)]
    pub fn session_lost(&mut self) {
        self.core.session_lost();
    }

    /// The lease at `now`: `{state: "safe", until}`, `{state: "jeopardy", expiresAt}`,
    /// `{state: "expired"}` or `{state: "unconfirmed"}`. Throws `out_of_range`. Cost: O(1).
    #[wasm_bindgen(unchecked_return_type = "Lease")]
    pub fn lease(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let now = js::num(&now, "now")?;
        let state = |s: &str| Obj::new().with("state", s);
        Ok(match self.core.lease(now) {
            Lease::Safe { until } => state("safe").with("until", js::number(until, "until")?),
            Lease::Jeopardy { expires_at } => {
                state("jeopardy").with("expiresAt", js::number(expires_at, "expiresAt")?)
            }
            Lease::Expired => state("expired"),
            Lease::Unconfirmed => state("unconfirmed"),
        }
        .done())
    }

    /// True only while the lease is safe. Throws `out_of_range`. Cost: O(1).
    #[wasm_bindgen(js_name = mayAct)]
    pub fn may_act(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<bool, JsValue> {
        let now = js::num(&now, "now")?;
        Ok(self.core.may_act(now))
    }

    /// When the next heartbeat is due (`now` if none was sent yet). Throws
    /// `out_of_range`. Cost: O(1).
    #[wasm_bindgen(js_name = heartbeatDue)]
    pub fn heartbeat_due(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<f64, JsValue> {
        let now = js::num(&now, "now")?;
        let due = self.core.heartbeat_due(now);
        js::number(due, "heartbeatDue")?;
        Ok(due as f64)
    }

    /// The next instant to wake (a heartbeat due, or the lease changing state), or `null`
    /// once lost. Throws `out_of_range`. Cost: O(1).
    #[wasm_bindgen(js_name = pollTimeout, unchecked_return_type = "number | null")]
    pub fn poll_timeout(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let now = js::num(&now, "now")?;
        Ok(js::opt_number(self.core.poll_timeout(now), "pollTimeout")?)
    }
}
