//! `fencelock_gate`: the resource-side fencing check behind an opaque handle.

use core::ffi::c_char;

use fencelock::{Error, FenceGate, GateRow, Token};

use crate::handle::{call, last_error, tag_first, Handle, HandleState};
use crate::result::{fencelock_result, ffi_panic_boundary, Fail};
use crate::types::{
    buf, bytes, fencelock_name, give, list_out, name, name_key, out, put, set, take, write_list,
};

/// A fence gate: the highest token seen per resource; lower tokens are refused. Opaque:
/// create with `fencelock_gate_new` or `fencelock_gate_restore`, free with
/// `fencelock_gate_free`. Not thread-safe per handle: calls on one gate must not overlap,
/// `const` ones included (a failing call records its error in the handle).
// `repr(C)`, so the tag (in `state`) is the handle's first eight bytes (asserted below).
// Written as an always-true `cfg_attr` because cbindgen does not expand one: the header
// keeps the type opaque (`header_is_current` fails if that ever changes).
#[cfg_attr(all(), repr(C))]
pub struct fencelock_gate {
    state: HandleState,
    gate: FenceGate<Vec<GateRow>>,
}

const _: () = assert!(tag_first(core::mem::offset_of!(fencelock_gate, state)));

impl Handle for fencelock_gate {
    const TAG: u64 = u64::from_le_bytes(*b"fl:gate.");
    fn state(&self) -> &HandleState {
        &self.state
    }
}

/// `capacity` empty rows, or `BAD_CONFIG` — more rows than the core allows (its
/// `check_rows`, the same check `FenceGate::new` makes, made here before allocating), or
/// the allocation failed — instead of aborting the host process.
fn gate_rows(capacity: usize) -> Result<Vec<GateRow>, Fail> {
    fencelock::check_rows(capacity)?;
    let mut rows = Vec::new();
    rows.try_reserve_exact(capacity)
        .map_err(|_| Error::BadConfig("not enough memory for this gate capacity"))?;
    rows.resize(capacity, GateRow::EMPTY);
    Ok(rows)
}

fn gate_handle(gate: FenceGate<Vec<GateRow>>) -> fencelock_gate {
    fencelock_gate {
        state: HandleState::new::<fencelock_gate>(),
        gate,
    }
}

/// Creates an empty gate for up to `capacity` resources (entries are never evicted:
/// size it for every resource it will ever guard).
///
/// Errors: `NULL_PARAMETER`, `BAD_CONFIG` (more than 2^31 − 1 resources, the core's
/// `MAX_ROWS`, or not enough memory: refused, never an abort). Cost: O(capacity) time
/// and about 100 bytes per resource.
///
/// # Safety
/// `out_gate` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_new(
    capacity: usize,
    out_gate: *mut *mut fencelock_gate,
) -> fencelock_result {
    ffi_panic_boundary!({
        let dst = out(out_gate)?;
        let gate = FenceGate::new(gate_rows(capacity)?)?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { give(dst, gate_handle(gate)) };
        Ok(())
    })
}

/// Frees a gate. NULL is fine; must not be called twice; the handle must not be used
/// afterwards. A handle of another kind frees nothing. Cost: O(1).
///
/// # Safety
/// `gate` NULL or a live gate handle.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_free(gate: *mut fencelock_gate) {
    let _ = ffi_panic_boundary!({
        // SAFETY: NULL or live, freed once (contract).
        unsafe { take(gate) };
        Ok(())
    });
}

/// Admits a write to `resource` carrying `token`: accepted if `token` is at least the
/// highest seen, which it then becomes.
///
/// Errors (the gate's tokens unchanged; the refusal is kept for `fencelock_gate_last_error`): `STALE` (a higher token was seen: see
/// `fencelock_gate_highest`), `ZERO_TOKEN`, `EMPTY_NAME`, `NAME_TOO_LONG`,
/// `INVALID_UTF8`, `CAPACITY_EXCEEDED` (a new resource when full), `NULL_PARAMETER`.
/// Cost: O(name length).
///
/// # Safety
/// `gate` NULL or live; `resource` NULL or valid for `resource_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_admit(
    gate: *mut fencelock_gate,
    resource: *const u8,
    resource_len: usize,
    token: u64,
) -> fencelock_result {
    // SAFETY: `gate` NULL or live; `resource` NULL or valid for `resource_len` bytes
    // (contract).
    unsafe {
        call(
            gate,
            || name(resource, resource_len),
            |g, resource| Ok(g.gate.admit(resource, Token(token))?),
        )
    }
}

/// Checks `token` for `resource` without admitting it (the gate's tokens are unchanged).
/// Errors: as admit, less capacity. A refusal is still recorded for
/// `fencelock_gate_last_error`, so, as every call on a handle, it must not overlap another
/// call on the same gate (`const` included). Cost: O(name length).
///
/// # Safety
/// As `fencelock_gate_admit`.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_check(
    gate: *const fencelock_gate,
    resource: *const u8,
    resource_len: usize,
    token: u64,
) -> fencelock_result {
    // SAFETY: `gate` NULL or live; `resource` NULL or valid for `resource_len` bytes
    // (contract).
    unsafe {
        call(
            gate,
            || name(resource, resource_len),
            |g, resource| Ok(g.gate.check(resource, Token(token))?),
        )
    }
}

/// The highest token admitted for `resource`: `*seen` false (and `*highest` 0) if none.
/// Cost: O(name length).
///
/// # Safety
/// As `fencelock_gate_admit`; `seen` and `highest` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_highest(
    gate: *const fencelock_gate,
    resource: *const u8,
    resource_len: usize,
    seen: *mut bool,
    highest: *mut u64,
) -> fencelock_result {
    // SAFETY: `gate` NULL or live; `resource` NULL or valid for `resource_len` bytes;
    // `seen` and `highest` checked, then writable (contract).
    unsafe {
        call(
            gate,
            || Ok((name(resource, resource_len)?, out(seen)?, out(highest)?)),
            |g, (resource, s, h)| {
                let t = g.gate.highest(resource);
                put(s, t.is_some());
                put(h, t.map_or(0, |t| t.0));
                Ok(())
            },
        )
    }
}

/// Sets the secret key the gate hashes resource names with (`key[..key_len]`, exactly
/// `FENCELOCK_NAME_KEY_LEN` bytes, from a random source; keep it secret): a gate in
/// front of resources whose names others choose takes one, so that names chosen to
/// share a probe run cannot slow every check. Nothing else changes: answers, entries
/// and snapshots are the same whatever the key. It may be called again; it is not in
/// snapshots (set it again after `fencelock_gate_restore`).
///
/// Errors (nothing changes): `NULL_PARAMETER`, `INVALID_ARGUMENT` (another length).
/// Cost: O(capacity), to rebuild the index; afterwards each name is hashed with
/// SipHash-1-3.
///
/// # Safety
/// `gate` NULL or live; `key` NULL or valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_set_name_key(
    gate: *mut fencelock_gate,
    key: *const u8,
    key_len: usize,
) -> fencelock_result {
    // SAFETY: `gate` NULL or live; `key` NULL or valid for `key_len` bytes (contract).
    unsafe {
        call(
            gate,
            || name_key(key, key_len),
            |g, key| {
                g.gate.set_name_key(key);
                Ok(())
            },
        )
    }
}

/// Whether the gate hashes names under a key (`*keyed`). Cost: O(1).
///
/// # Safety
/// `gate` NULL or live; `keyed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_is_name_keyed(
    gate: *const fencelock_gate,
    keyed: *mut bool,
) -> fencelock_result {
    // SAFETY: `gate` NULL or live; `keyed` checked, then writable (contract).
    unsafe {
        call(
            gate,
            || out(keyed),
            |g, dst| set(dst, g.gate.is_name_keyed()),
        )
    }
}

/// The resources with their highest tokens (`fencelock_name.highest`), in the order
/// first admitted, into `entries[..cap]`; `*count` = how many; `BUFFER_TOO_SMALL`
/// (nothing written) if more than `cap`. Cost: O(resources).
///
/// # Safety
/// `gate` NULL or live; `entries` NULL or valid for `cap` elements; `count` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_entries(
    gate: *const fencelock_gate,
    entries: *mut fencelock_name,
    cap: usize,
    count: *mut usize,
) -> fencelock_result {
    // SAFETY: `gate` NULL or live; list pointers per contract.
    unsafe {
        call(
            gate,
            || list_out(entries, cap, count),
            |g, dst| {
                write_list(dst, || {
                    g.gate.iter().map(|(n, t)| fencelock_name::new(n, t.0))
                })
            },
        )
    }
}

/// Writes the gate's snapshot into `buf[..cap]`; `*len` = bytes written, or with
/// `BUFFER_TOO_SMALL` the size needed and nothing written to `buf` (`buf` may be NULL
/// when `cap` is 0: a size query). Cost: O(resources), twice when `buf` is given.
///
/// # Safety
/// `gate` NULL or live; `buf` NULL or valid for `cap` bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_snapshot(
    gate: *const fencelock_gate,
    buf_: *mut u8,
    cap: usize,
    len: *mut usize,
) -> fencelock_result {
    // SAFETY: `gate` NULL or live; `buf_` NULL or valid for `cap` bytes; `len` checked,
    // then writable (contract).
    unsafe {
        call(
            gate,
            || Ok((buf(buf_, cap)?, out(len)?)),
            |g, (dst, len)| {
                // Sized first: the core's snapshot writes the prefix that fits, and a
                // short buffer must get nothing but the size.
                let need = g.gate.snapshot_len();
                if dst.len() < need {
                    put(len, need);
                    return Err(fencelock_result::BufferTooSmall.into());
                }
                set(len, g.gate.snapshot(dst).map_err(Fail::Core)?)
            },
        )
    }
}

/// Creates a gate for up to `capacity` resources from `fencelock_gate_snapshot` bytes.
/// The bytes carry no checksum: store them with one of your own (a highest token lowered
/// by damage restores as it reads).
///
/// Errors (nothing created), in this order: `NULL_PARAMETER`; `BAD_CONFIG` for more than
/// 2^31 − 1 rows; the snapshot's header (`BAD_MAGIC`, `UNSUPPORTED_VERSION`,
/// `CORRUPT_SNAPSHOT`), judged before any row is allocated;
/// `BAD_CONFIG` for not enough memory; then the rest of the bytes (`CORRUPT_SNAPSHOT`,
/// `CAPACITY_EXCEEDED`). Cost: O(capacity + resources).
///
/// # Safety
/// `snapshot` NULL or valid for `len` bytes; `out_gate` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_restore(
    capacity: usize,
    snapshot: *const u8,
    len: usize,
    out_gate: *mut *mut fencelock_gate,
) -> fencelock_result {
    // SAFETY: forwarded contract.
    ffi_panic_boundary!({ unsafe { restore(capacity, snapshot, len, || Ok(None), out_gate) } })
}

/// The body of `fencelock_gate_restore` and `_restore_keyed`: the arguments in their order
/// (`key` before the out-pointer, as the keyed function takes them), the row count, the snapshot's header, then the rows
/// made and the snapshot restored into them, keyed when `key` gives one.
///
/// # Safety
/// As `fencelock_gate_restore`; `key` reads only what its caller may.
unsafe fn restore(
    capacity: usize,
    snapshot: *const u8,
    len: usize,
    key: impl FnOnce() -> Result<Option<fencelock::NameKey>, Fail>,
    out_gate: *mut *mut fencelock_gate,
) -> Result<(), Fail> {
    // SAFETY: NULL or valid for len bytes (contract).
    let bytes = unsafe { bytes(snapshot, len) }?;
    let key = key()?;
    let dst = out(out_gate)?;
    fencelock::check_rows(capacity)?;
    // The header judged before any row is allocated, as a service's restore judges its
    // own first: junk with a large capacity is refused without touching gigabytes.
    fencelock::gate_snapshot_resources(bytes)?;
    let rows = gate_rows(capacity)?;
    let gate = match key {
        Some(key) => FenceGate::restore_keyed(rows, bytes, key),
        None => FenceGate::restore(rows, bytes),
    }
    .map_err(|(_, e)| Fail::Core(e))?;
    // SAFETY: checked non-NULL, writable (contract).
    unsafe { give(dst, gate_handle(gate)) };
    Ok(())
}

/// `fencelock_gate_restore` with the resource-name index keyed by `key[..key_len]`
/// (exactly `FENCELOCK_NAME_KEY_LEN` bytes, from a random source; keep it secret) as its
/// rows are loaded: the core's `FenceGate::restore_keyed`. The way to restore bytes of a
/// source that may choose them: names chosen to share one probe run make an unkeyed
/// restore O(n²) (and `fencelock_gate_set_name_key` after it comes too late for that).
///
/// Errors (nothing created): the arguments', one by one in their order (`NULL_PARAMETER`
/// for a NULL pointer, `INVALID_ARGUMENT` for a snapshot length past `PTRDIFF_MAX` or a
/// key of another length), then those of `fencelock_gate_restore`, in its order. Cost: as
/// `fencelock_gate_restore`, with each name hashed by SipHash-1-3.
///
/// # Safety
/// As `fencelock_gate_restore`; `key` NULL or valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_restore_keyed(
    capacity: usize,
    snapshot: *const u8,
    len: usize,
    key: *const u8,
    key_len: usize,
    out_gate: *mut *mut fencelock_gate,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: forwarded contract; `key` NULL or valid for `key_len` bytes (contract).
        unsafe {
            restore(
                capacity,
                snapshot,
                len,
                || name_key(key, key_len).map(Some),
                out_gate,
            )
        }
    })
}

/// Writes the detailed message of the most recent failed call on this gate (the core's
/// text, with the tokens of a `STALE` refusal), or "ok" if none failed yet. Buffer rules as `fencelock_result_message`; a poisoned
/// gate still answers. Errors: `NULL_PARAMETER`, `BUFFER_TOO_SMALL` (truncated).
/// Cost: O(message length).
///
/// # Safety
/// `gate` NULL or live; `buf` NULL or valid for `len` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_gate_last_error(
    gate: *const fencelock_gate,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> fencelock_result {
    // SAFETY: forwarded contract.
    unsafe { last_error(gate, buf, len, out_len) }
}
