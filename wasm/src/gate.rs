//! `FenceGate`: the resource-side fencing check for JavaScript.

use alloc::vec::Vec;

use fencelock::{GateRow, Token};
use js_sys::Array;
use wasm_bindgen::prelude::*;

use crate::js::{self, Fail, Obj, MAX_SAFE};
use crate::service::rows;

type Core = fencelock::FenceGate<Vec<GateRow>>;

/// Remembers the highest token admitted per resource and refuses lower ones: put it in
/// front of whatever the lock protects. Entries are never evicted; size it for every
/// resource it will ever guard.
#[wasm_bindgen]
pub struct FenceGate {
    core: Core,
}

fn token_arg(v: &JsValue) -> Result<Token, Fail> {
    js::num(v, "token").map(Token)
}

#[wasm_bindgen]
impl FenceGate {
    /// An empty gate for `capacity` resources. Cost: O(capacity) time, about 96 bytes per
    /// resource. Throws `out_of_range`, `bad_config` (over 2^31-1), `out_of_memory`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "number")] capacity: JsValue,
    ) -> Result<FenceGate, JsValue> {
        let n = js::num(&capacity, "capacity")?;
        Ok(FenceGate {
            core: Core::new(rows(n, GateRow::EMPTY, "resources")?),
        })
    }

    /// Rebuilds a gate from `snapshot()` bytes into `capacity` rows. Throws `bad_magic`,
    /// `unsupported_version`, `corrupt_snapshot`, `capacity_exceeded`, and `out_of_range`
    /// if a token is above 2^53-1 (this gate's tokens are JS numbers). Cost:
    /// O(capacity + resources).
    pub fn restore(
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] capacity: JsValue,
    ) -> Result<FenceGate, JsValue> {
        let bytes = js::bytes(&bytes, "snapshot")?;
        let n = js::num(&capacity, "capacity")?;
        let core = Core::restore(rows(n, GateRow::EMPTY, "resources")?, &bytes)
            .map_err(|(_, e)| Fail::from(e))?;
        if let Some((name, t)) = core.iter().find(|(_, t)| t.0 > MAX_SAFE) {
            return Err(Fail::OutOfRange(alloc::format!(
                "resource \"{name}\" has token {}, above 2^53-1",
                t.0
            ))
            .into());
        }
        Ok(FenceGate { core })
    }

    /// Admits a write to `resource` carrying `token` (accepted if it is at least the
    /// highest seen, which it then becomes). Throws `stale` (with `.token` and
    /// `.highest`), `zero_token`, `empty_name`, `name_too_long`, `capacity_exceeded`,
    /// `out_of_range`, `bad_argument`; nothing is recorded then. Cost: O(name length).
    pub fn admit(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "string")] resource: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] token: JsValue,
    ) -> Result<(), JsValue> {
        let resource = js::string(&resource, "resource")?;
        let token = token_arg(&token)?;
        Ok(self.core.admit(&resource, token).map_err(Fail::from)?)
    }

    /// Checks `token` for `resource` without recording it. Throws as `admit` (but never
    /// `capacity_exceeded`). Cost: O(name length).
    pub fn check(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] resource: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] token: JsValue,
    ) -> Result<(), JsValue> {
        let resource = js::string(&resource, "resource")?;
        let token = token_arg(&token)?;
        Ok(self.core.check(&resource, token).map_err(Fail::from)?)
    }

    /// The highest token admitted for `resource`, or `null`. Cost: O(name length).
    #[wasm_bindgen(unchecked_return_type = "number | null")]
    pub fn highest(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] resource: JsValue,
    ) -> Result<JsValue, JsValue> {
        let resource = js::string(&resource, "resource")?;
        Ok(js::opt_number(
            self.core.highest(&resource).map(|t| t.0),
            "highest",
        )?)
    }

    /// `[{resource, highest}]` in the order first admitted. Cost: O(resources).
    #[wasm_bindgen(unchecked_return_type = "GateEntry[]")]
    pub fn entries(&self) -> Result<Array, JsValue> {
        let out = Array::new();
        for (name, t) in self.core.iter() {
            out.push(
                &Obj::new()
                    .with("resource", name)
                    .with("highest", js::token(t)?)
                    .done(),
            );
        }
        Ok(out)
    }

    /// The gate's snapshot bytes. Cost: O(resources).
    #[wasm_bindgen(unchecked_return_type = "Uint8Array")]
    pub fn snapshot(&self) -> Result<JsValue, JsValue> {
        let mut buf = js::zeroed(self.core.snapshot_len(), "snapshot")?;
        let n = self.core.snapshot(&mut buf).map_err(Fail::from)?;
        Ok(js::uint8(buf.get(..n).unwrap_or(&[])))
    }
}
