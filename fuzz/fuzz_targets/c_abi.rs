//! Arbitrary bytes through the C ABI's hostile-bytes entry points — the layer with
//! `unsafe` code, where bytes meet caller buffers — each answered as the core answers:
//! * as a service snapshot: `fencelock_service_restore` (heap) and
//!   `fencelock_service_restore_in` (caller memory of exactly the layout's size, and of a
//!   size cut short) give the core's result code; what they accept re-snapshots to the
//!   same bytes;
//! * as length-prefixed input frames to a service (the restored one, or a fresh one):
//!   `fencelock_service_handle_frame` (reply buffers of any size, some too small) gives the
//!   reply frame or the result code of a twin core service fed the same frames, and
//!   `fencelock_service_drain_frames` (output buffers of any size) gives its events, byte
//!   for byte, all or nothing;
//! * as a gate snapshot: `fencelock_gate_restore` gives the core's answer;
//! * both restored keyed too (`fencelock_service_restore_keyed`,
//!   `fencelock_gate_restore_keyed`): the same answer as unkeyed, and the same bytes.
//!
//! The first byte chooses the tables (1–4 sessions and locks, 1–8 claims) and whether the
//! service is placed in caller memory; then come a snapshot (`[n: u16 LE]` and `n`
//! bytes) and the frames (`[len: u8][frame]…`), so that a restored service is handed
//! inputs the fuzzer chooses.
#![no_main]

use core::ptr::null_mut;
use std::mem::MaybeUninit;

use fencelock::{
    Config, FenceGate, GateRow, Input, LockService, Output, VecStorage, MAX_FRAME_LEN,
};
use fencelock_ffi::{
    fencelock_capacity, fencelock_config, fencelock_gate, fencelock_gate_free,
    fencelock_gate_restore, fencelock_gate_restore_keyed, fencelock_gate_snapshot, fencelock_reply,
    fencelock_result, fencelock_service, fencelock_service_drain_frames, fencelock_service_free,
    fencelock_service_handle_frame, fencelock_service_layout_watchers, fencelock_service_new,
    fencelock_service_restore, fencelock_service_restore_in, fencelock_service_restore_keyed,
    fencelock_service_snapshot, fencelock_service_snapshot_len,
};
use libfuzzer_sys::fuzz_target;

type Core = LockService<VecStorage>;

/// The key of the keyed restores (any key answers as none; a fixed one keeps runs
/// reproducible).
const KEY: [u8; 16] = *b"fuzz-c-abi-key!!";

fn code(r: fencelock_result) -> u32 {
    r as u32
}

/// The C service's snapshot bytes.
fn c_snapshot(svc: *mut fencelock_service) -> Vec<u8> {
    let mut n = 0usize;
    // SAFETY: live handle; writable.
    assert_eq!(
        unsafe { fencelock_service_snapshot_len(svc, &mut n) },
        fencelock_result::Ok
    );
    let mut buf = vec![0u8; n];
    let mut got = 0usize;
    // SAFETY: live handle; `buf` valid for `n` bytes; writable.
    let r = unsafe { fencelock_service_snapshot(svc, buf.as_mut_ptr(), n, &mut got) };
    assert_eq!((r, got), (fencelock_result::Ok, n));
    buf
}

/// Exactly `len` bytes (at least 1) at `align`, so that AddressSanitizer sees a write
/// past them; freed on drop.
struct Arena {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Arena {
    fn new(len: usize, align: usize) -> Arena {
        let layout = std::alloc::Layout::from_size_align(len.max(1), align).expect("a layout");
        // SAFETY: the layout's size is at least 1.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Arena { ptr, layout }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    // Then `[n: u16 LE][snapshot: n bytes][len: u8][frame]…`: the snapshot restored (on
    // the heap, placed, as a gate), the frames handed to the restored service — or, when
    // the snapshot is refused, to a fresh one.
    let Some((n, rest)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let (snap, frame_bytes) = rest.split_at((u16::from_le_bytes(*n) as usize).min(rest.len()));
    let cap = fencelock_capacity {
        sessions: 1 + (head & 3) as u32,
        locks: 1 + ((head >> 2) & 3) as u32,
        claims: 1 + ((head >> 4) & 7) as u32,
    };
    let placed = head & 0x80 != 0;
    let storage = || {
        VecStorage::new(
            cap.sessions as usize,
            cap.locks as usize,
            cap.claims as usize,
        )
    };

    // The bytes as a service snapshot.
    let native = LockService::restore(storage(), snap);
    let mut heap = null_mut();
    // SAFETY: `cap` and `snap` valid; `heap` writable.
    let r = unsafe { fencelock_service_restore(&cap, snap.as_ptr(), snap.len(), &mut heap) };
    match &native {
        Ok(_) => {
            assert_eq!(
                r,
                fencelock_result::Ok,
                "the core restores what the C ABI refuses"
            );
            assert_eq!(
                c_snapshot(heap),
                snap,
                "a restored service re-snapshots to its bytes"
            );
        }
        Err((_, e)) => {
            assert_eq!(code(r), e.code(), "another refusal than the core's ({e:?})");
            assert!(heap.is_null(), "a refused restore created a service");
        }
    }
    // Keyed as it loads: the same answer and, restored, the same bytes.
    let mut keyed = null_mut();
    // SAFETY: `cap`, `snap` and `KEY` valid; `keyed` writable.
    let rk = unsafe {
        fencelock_service_restore_keyed(
            &cap,
            snap.as_ptr(),
            snap.len(),
            KEY.as_ptr(),
            KEY.len(),
            &mut keyed,
        )
    };
    assert_eq!(rk, r, "keyed, the restore answers otherwise");
    if rk == fencelock_result::Ok {
        assert_eq!(c_snapshot(keyed), snap, "keyed, other bytes");
    } else {
        assert!(keyed.is_null(), "a refused keyed restore created a service");
    }
    // SAFETY: NULL or a live handle, freed once.
    unsafe { fencelock_service_free(keyed) };
    // Placed: the layout for the snapshot's max_watchers (the default when it has none),
    // exactly, and cut short.
    let watchers = native.as_ref().map_or(4, |s| s.config().max_watchers);
    let (mut size, mut align) = (0usize, 0usize);
    // SAFETY: valid pointers.
    let lr = unsafe { fencelock_service_layout_watchers(&cap, watchers, &mut size, &mut align) };
    assert_eq!(lr, fencelock_result::Ok);
    let mut placed_svc = null_mut();
    // Each attempt in memory of exactly `len` bytes: a short one must be refused, and a
    // write past it is AddressSanitizer's to see.
    let mut mem = None;
    for len in [size, size / 2, size.saturating_sub(1)] {
        let arena = Arena::new(len, align);
        let mut svc = null_mut();
        // SAFETY: `arena` valid for `len` bytes at `align`; the rest valid and apart.
        let r = unsafe {
            fencelock_service_restore_in(
                arena.ptr.cast(),
                len,
                &cap,
                snap.as_ptr(),
                snap.len(),
                &mut svc,
            )
        };
        if r == fencelock_result::Ok {
            assert!(
                native.is_ok(),
                "placed, the C ABI restores what the core refuses"
            );
            assert_eq!(
                len, size,
                "restored into less memory than the layout asks for"
            );
            assert_eq!(c_snapshot(svc), snap);
            if placed {
                placed_svc = svc;
                mem = Some(arena);
                break;
            }
            // SAFETY: live handle, freed once (before its memory).
            unsafe { fencelock_service_free(svc) };
        } else {
            assert!(svc.is_null());
            if len == size {
                let e = native.as_ref().err().map(|(_, e)| e.code());
                assert_eq!(
                    Some(code(r)),
                    e,
                    "placed in the layout's size, another answer"
                );
            }
        }
    }

    // The bytes as input frames: [len: u8][frame]…, to the restored service and its
    // twin, or to fresh ones.
    let (svc, mut twin): (*mut fencelock_service, Core) = match native {
        Ok(core) if placed && !placed_svc.is_null() => {
            // SAFETY: live handle, freed once (the placed one is used instead).
            unsafe { fencelock_service_free(heap) };
            (placed_svc, core)
        }
        Ok(core) => (heap, core),
        Err(_) => {
            let config = fencelock_config {
                capacity: cap,
                lock_delay: (head >> 6) as u64,
                max_name_len: 64,
                max_watchers: 4,
            };
            let mut fresh = null_mut();
            // SAFETY: valid pointers.
            assert_eq!(
                unsafe { fencelock_service_new(&config, &mut fresh) },
                fencelock_result::Ok
            );
            let core = LockService::new(
                storage(),
                Config {
                    lock_delay: config.lock_delay,
                    max_name_len: 64,
                    max_watchers: 4,
                },
            )
            .expect("config");
            (fresh, core)
        }
    };
    let mut frames = frame_bytes;
    let mut n = 0u8;
    while let Some((&len, tail)) = frames.split_first() {
        let len = (len as usize).min(tail.len());
        let (frame, after) = tail.split_at(len);
        frames = after;
        n = n.wrapping_add(1);
        // Reply buffers: none, too small, exactly enough (the core's frames fit in
        // MAX_FRAME_LEN).
        let reply_cap = match n % 3 {
            0 => 0,
            1 => (len % MAX_FRAME_LEN).min(MAX_FRAME_LEN - 1),
            _ => MAX_FRAME_LEN,
        };
        let mut reply = MaybeUninit::<fencelock_reply>::uninit();
        let mut reply_buf = vec![0u8; reply_cap];
        let mut reply_len = usize::MAX;
        let before = twin.snapshot_vec();
        // SAFETY: live handle; `frame` valid; `reply` writable; `reply_buf` valid for
        // `reply_cap` bytes; `reply_len` writable.
        let r = unsafe {
            fencelock_service_handle_frame(
                svc,
                frame.as_ptr(),
                frame.len(),
                reply.as_mut_ptr(),
                if reply_cap == 0 {
                    null_mut()
                } else {
                    reply_buf.as_mut_ptr()
                },
                reply_cap,
                &mut reply_len,
            )
        };
        let mut events: Vec<Output> = Vec::new();
        if reply_cap != 0 && reply_cap < MAX_FRAME_LEN {
            // Refused before anything is decoded: the twin is not fed either.
            assert_eq!(r, fencelock_result::BufferTooSmall);
            assert_eq!(reply_len, MAX_FRAME_LEN);
            assert_eq!(
                c_snapshot(svc),
                before,
                "a refused call changed the service"
            );
        } else {
            match twin.handle_frame(frame, &mut events) {
                Ok(want) => {
                    assert_eq!(
                        r,
                        fencelock_result::Ok,
                        "the core applied {:?}",
                        Input::from_frame(frame)
                    );
                    let mut buf = [0u8; MAX_FRAME_LEN];
                    let m = want.to_frame(&mut buf).expect("a reply fits");
                    if reply_cap == 0 {
                        assert_eq!(reply_len, 0);
                    } else {
                        assert_eq!(&reply_buf[..reply_len], &buf[..m], "another reply frame");
                    }
                }
                Err(e) => {
                    assert_eq!(code(r), e.code(), "another refusal than the core's ({e:?})");
                    assert_eq!(reply_len, 0);
                }
            }
            assert_eq!(
                c_snapshot(svc),
                twin.snapshot_vec(),
                "the C service and its twin differ"
            );
        }
        // Its events, drained into a buffer of a size the bytes choose: too small is
        // BUFFER_TOO_SMALL with the size needed, and nothing dequeued.
        let want: Vec<u8> = events
            .iter()
            .flat_map(|o| {
                let mut buf = [0u8; MAX_FRAME_LEN];
                let m = o.to_frame(&mut buf).expect("an event fits");
                let mut rec = (m as u16).to_le_bytes().to_vec();
                rec.extend_from_slice(&buf[..m]);
                rec
            })
            .collect();
        let short = (frame.first().copied().unwrap_or(0) as usize).min(want.len());
        for out_cap in [short, want.len()] {
            let mut out = vec![0u8; out_cap];
            let mut got = usize::MAX;
            // SAFETY: live handle; `out` valid for `out_cap` bytes; `got` writable.
            let r = unsafe {
                fencelock_service_drain_frames(
                    svc,
                    if out_cap == 0 {
                        null_mut()
                    } else {
                        out.as_mut_ptr()
                    },
                    out_cap,
                    &mut got,
                )
            };
            if out_cap < want.len() {
                assert_eq!((r, got), (fencelock_result::BufferTooSmall, want.len()));
            } else {
                assert_eq!(r, fencelock_result::Ok);
                assert_eq!(&out[..got], &want[..], "other events than the core's");
                break;
            }
        }
    }
    // SAFETY: live handle, freed once.
    unsafe { fencelock_service_free(svc) };
    drop(mem);

    // The bytes as a gate snapshot.
    let native = FenceGate::restore(vec![GateRow::EMPTY; cap.claims as usize], snap);
    let mut gate: *mut fencelock_gate = null_mut();
    // SAFETY: `snap` valid; `gate` writable.
    let r = unsafe {
        fencelock_gate_restore(cap.claims as usize, snap.as_ptr(), snap.len(), &mut gate)
    };
    match native {
        Ok(_) => {
            assert_eq!(
                r,
                fencelock_result::Ok,
                "the core restores a gate the C ABI refuses"
            );
            let mut buf = vec![0u8; snap.len()];
            let mut got = 0usize;
            // SAFETY: live gate; `buf` valid for its length; writable.
            let s = unsafe { fencelock_gate_snapshot(gate, buf.as_mut_ptr(), buf.len(), &mut got) };
            assert_eq!((s, &buf[..got]), (fencelock_result::Ok, snap));
        }
        Err((_, e)) => {
            assert_eq!(
                code(r),
                e.code(),
                "another gate refusal than the core's ({e:?})"
            );
            assert!(gate.is_null());
        }
    }
    // SAFETY: NULL or a live gate, freed once.
    unsafe { fencelock_gate_free(gate) };
    let mut keyed: *mut fencelock_gate = null_mut();
    // SAFETY: `snap` and `KEY` valid; `keyed` writable.
    let rk = unsafe {
        fencelock_gate_restore_keyed(
            cap.claims as usize,
            snap.as_ptr(),
            snap.len(),
            KEY.as_ptr(),
            KEY.len(),
            &mut keyed,
        )
    };
    assert_eq!(rk, r, "keyed, the gate's restore answers otherwise");
    assert_eq!(keyed.is_null(), rk != fencelock_result::Ok);
    if rk == fencelock_result::Ok {
        let mut buf = vec![0u8; snap.len()];
        let mut got = 0usize;
        // SAFETY: live gate; `buf` valid for its length; writable.
        let s = unsafe { fencelock_gate_snapshot(keyed, buf.as_mut_ptr(), buf.len(), &mut got) };
        assert_eq!(
            (s, &buf[..got]),
            (fencelock_result::Ok, snap),
            "keyed, other bytes"
        );
    }
    // SAFETY: NULL or a live gate, freed once.
    unsafe { fencelock_gate_free(keyed) };
});
