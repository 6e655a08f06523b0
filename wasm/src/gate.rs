//! `FenceGate`: the resource-side fencing check for JavaScript.

use alloc::vec::Vec;

use fencelock::{GateRow, Token};
use js_sys::Array;
use wasm_bindgen::prelude::*;

use crate::js::{self, Fail, Obj};
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
    /// resource. Throws `out_of_range`, `bad_config` (over 2^31-1 rows, the core's
    /// `check_rows`), `out_of_memory`.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "U64")] capacity: JsValue,
    ) -> Result<FenceGate, JsValue> {
        let n = js::num(&capacity, "capacity")?;
        let core = Core::new(rows(n, GateRow::EMPTY, "resources")?).map_err(Fail::from)?;
        Ok(FenceGate { core })
    }

    /// Rebuilds a gate from `snapshot()` bytes (which carry no checksum: store them with one
    /// of your own) into `capacity` rows; with `key` (16 bytes
    /// from a random source) its index keyed as the rows load, for bytes of a source that
    /// may choose the names (`setNameKey` after an unkeyed restore comes too late: names
    /// chosen to share a probe run make that restore O(n²)). Throws `bad_magic`,
    /// `unsupported_version`, `corrupt_snapshot`, `capacity_exceeded`, `bad_config`,
    /// `out_of_range`, `bad_argument` (a key too: not a `Uint8Array` of 16 bytes),
    /// `out_of_memory`; the bytes' header is judged before any row is allocated, so junk
    /// is `bad_magic` at any capacity the core allows, and no more of the rest is copied
    /// into the module's memory than the records the header counts (at most `capacity`)
    /// can be, plus one byte. Cost: O(capacity + resources).
    pub fn restore(
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] capacity: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "Uint8Array")] key: JsValue,
    ) -> Result<FenceGate, JsValue> {
        let plain = js::plain_bytes(&bytes, "snapshot")?;
        let n = js::num(&capacity, "capacity")?;
        let key = js::optional_name_key(&key)?;
        // The header judged before any row is allocated (as the C ABI does), from its own
        // bytes, and no more of the rest copied than the records it counts can be, plus
        // one byte: junk is not copied into the module's memory, which would stay grown.
        let rows_n = crate::service::row_count(n)?;
        // No more than `n` rows' records: a header counting more is refused by its count.
        let most = fencelock::gate_snapshot_max_len_within(&js::head(&plain, "snapshot")?, rows_n)
            .map_err(Fail::from)?;
        let bytes = js::copy_at_most(&plain, most.saturating_add(1), "snapshot")?;
        let rows = rows(n, GateRow::EMPTY, "resources")?;
        let core = match key {
            Some(key) => Core::restore_keyed(rows, &bytes, key),
            None => Core::restore(rows, &bytes),
        }
        .map_err(|(_, e)| Fail::from(e))?;
        Ok(FenceGate { core })
    }

    /// Keys the resource-name index with a secret (`key`: 16 bytes from a random source,
    /// `crypto.getRandomValues(new Uint8Array(16))`; keep it secret): a gate in front of
    /// resources whose names others choose takes one, so that names chosen to share a
    /// probe run cannot slow every check. Nothing else changes; a key is not in
    /// snapshots. Throws `bad_argument` (not a `Uint8Array` of 16 bytes; nothing
    /// changes). Cost: O(capacity).
    #[wasm_bindgen(js_name = setNameKey)]
    pub fn set_name_key(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] key: JsValue,
    ) -> Result<(), JsValue> {
        self.core.set_name_key(js::name_key(&key)?);
        Ok(())
    }

    /// Whether `setNameKey` was called. Cost: O(1).
    #[wasm_bindgen(js_name = isNameKeyed)]
    pub fn is_name_keyed(&self) -> bool {
        self.core.is_name_keyed()
    }

    /// Admits a write to `resource` carrying `token` (accepted if it is at least the
    /// highest seen, which it then becomes). Throws, in the core's order, `zero_token`,
    /// `stale` (with `.token` and `.highest`), `empty_name`, `name_too_long`,
    /// `capacity_exceeded`; before them `out_of_range` and `bad_argument` for arguments
    /// that cannot be a token or a name. Nothing is recorded then. Cost: O(name length).
    pub fn admit(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "string")] resource: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] token: JsValue,
    ) -> Result<(), JsValue> {
        let resource = js::name(&resource, "resource")?;
        let token = token_arg(&token)?;
        self.core
            .admit(resource.as_str(), token)
            .map_err(|e| Fail::from(resource.error(e)).into())
    }

    /// Checks `token` for `resource` without recording it. Throws as `admit` (but never
    /// `capacity_exceeded`). Cost: O(name length).
    pub fn check(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] resource: JsValue,
        #[wasm_bindgen(unchecked_param_type = "U64")] token: JsValue,
    ) -> Result<(), JsValue> {
        let resource = js::name(&resource, "resource")?;
        let token = token_arg(&token)?;
        self.core
            .check(resource.as_str(), token)
            .map_err(|e| Fail::from(resource.error(e)).into())
    }

    /// The highest token admitted for `resource`, or `null`. Throws `bad_argument`.
    /// Cost: O(name length).
    #[wasm_bindgen(unchecked_return_type = "U64 | null")]
    pub fn highest(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] resource: JsValue,
    ) -> Result<JsValue, JsValue> {
        let resource = js::name(&resource, "resource")?;
        Ok(js::opt_number(
            self.core.highest(resource.as_str()).map(|t| t.0),
        ))
    }

    /// `[{resource, highest}]` in the order first admitted. Cost: O(resources).
    #[wasm_bindgen(unchecked_return_type = "GateEntry[]")]
    pub fn entries(&self) -> Array {
        self.core
            .iter()
            .map(|(name, t)| {
                Obj::new()
                    .with("resource", name)
                    .with("highest", js::token(t))
                    .done()
            })
            .collect()
    }

    /// The gate's snapshot bytes. Throws `out_of_memory`. Cost: O(resources).
    #[wasm_bindgen(unchecked_return_type = "Uint8Array")]
    pub fn snapshot(&self) -> Result<JsValue, JsValue> {
        let mut buf = js::zeroed(self.core.snapshot_len(), "snapshot")?;
        let n = self.core.snapshot(&mut buf).map_err(Fail::from)?;
        Ok(js::uint8(buf.get(..n).unwrap_or(&[])))
    }
}
