//! `SessionKeeper`: the client's own view of its lease, for JavaScript.

use fencelock::Lease;
use wasm_bindgen::prelude::*;

use crate::js::{self, Fail, Obj};

/// The client side of a session lease, in the host's time units: when to send a
/// keep-alive and whether it may still act. Feed it `keepAliveSent(at)` (also for the
/// open) and `keepAliveAcked(sentAt)`, and ask `lease(now)` / `mayAct(now)` before every
/// action on the resource.
#[wasm_bindgen]
pub struct SessionKeeper {
    core: fencelock::SessionKeeper,
}

fn time(v: &JsValue, what: &str) -> Result<u64, Fail> {
    js::num(v, what)
}

#[wasm_bindgen]
impl SessionKeeper {
    /// A keeper for a session of `ttl`, sending a keep-alive every `interval`, stopping
    /// `margin` before the lease could expire. Throws `bad_config` unless
    /// `0 < margin < ttl` and `0 < interval < ttl - margin`, `out_of_range`. Cost: O(1).
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "U64")] ttl: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] interval: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] margin: JsValue,
    ) -> Result<SessionKeeper, JsValue> {
        let ttl = time(&ttl, "ttl")?;
        let interval = time(&interval, "interval")?;
        let margin = time(&margin, "margin")?;
        let core = fencelock::SessionKeeper::new(ttl, interval, margin).map_err(Fail::from)?;
        Ok(SessionKeeper { core })
    }

    /// Records that a keep-alive (or the open) was sent at `at`. Throws
    /// `time_went_backwards` (before the previous send; nothing recorded), `out_of_range`.
    /// Cost: O(1).
    #[wasm_bindgen(js_name = keepAliveSent)]
    pub fn keep_alive_sent(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "U64")] at: JsValue,
    ) -> Result<(), JsValue> {
        let at = time(&at, "at")?;
        Ok(self.core.keep_alive_sent(at).map_err(Fail::from)?)
    }

    /// Records the acknowledgement of the keep-alive sent at `sentAt`; returns whether it
    /// extended the lease (a late ack of an older keep-alive does not). Throws
    /// `unknown_keep_alive` (with `.sentAt`) if no keep-alive sent at `sentAt` is among
    /// the last 8 recorded (nothing changes), `out_of_range`. Cost: O(1).
    #[wasm_bindgen(js_name = keepAliveAcked)]
    pub fn keep_alive_acked(
        &mut self,
        #[wasm_bindgen(js_name = sentAt, unchecked_param_type = "U64")] sent_at: JsValue,
    ) -> Result<bool, JsValue> {
        let sent_at = time(&sent_at, "sentAt")?;
        Ok(self.core.keep_alive_acked(sent_at).map_err(Fail::from)?)
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
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let now = time(&now, "now")?;
        let state = |s: &str| Obj::new().with("state", s);
        Ok(match self.core.lease(now) {
            Lease::Safe { until } => state("safe").with("until", js::number(until)),
            Lease::Jeopardy { expires_at } => {
                state("jeopardy").with("expiresAt", js::number(expires_at))
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
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
    ) -> Result<bool, JsValue> {
        let now = time(&now, "now")?;
        Ok(self.core.may_act(now))
    }

    /// The time the next keep-alive is due: `interval` after the last send, or `now` if
    /// none was sent yet. Throws `out_of_range`. Cost: O(1).
    #[wasm_bindgen(js_name = nextKeepAlive, unchecked_return_type = "U64")]
    pub fn next_keep_alive(
        &self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let now = time(&now, "now")?;
        Ok(js::number(self.core.next_keep_alive(now)))
    }

    /// The next instant to wake (a keep-alive due, or the lease changing state), or
    /// `null` once lost. Throws `out_of_range`. Cost: O(1).
    #[wasm_bindgen(js_name = pollTimeout, unchecked_return_type = "U64 | null")]
    pub fn poll_timeout(
        &self,
        #[wasm_bindgen(unchecked_param_type = "U64")] now: JsValue,
    ) -> Result<JsValue, JsValue> {
        let now = time(&now, "now")?;
        Ok(js::opt_number(self.core.poll_timeout(now)))
    }
}
