//! `fencelock_service`: the lock service behind an opaque handle, with an output queue.
//!
//! # Memory
//!
//! A service is one block: the handle, then the session, lock and claim rows (the core's
//! `SliceStorage`), then — for a service placed in caller memory — a fixed ring of
//! outputs. `fencelock_service_new` allocates that block itself (and queues outputs in a
//! growable deque); `fencelock_service_init_in` lays it out in memory the caller gives
//! (and queues outputs in the fixed ring, sized for the most outputs one input can emit:
//! sessions + 2 × claims + 1, the core's documented bound). Both paths run the same
//! code, so every test of one tests the other.

use core::cell::Cell;
use core::ffi::{c_char, c_void};
use core::ops::Deref;
use core::ptr;
use std::alloc::{self, Layout};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

use fencelock::storage::{ClaimRow, LockRow, SessionRow};
use fencelock::{Error, LockService, Output, SessionId, SliceStorage, Tick};

use crate::result::{fencelock_result, ffi_panic_boundary, Fail};
use crate::types::{
    arg, buf, bytes, fencelock_capacity, fencelock_config, fencelock_holder, fencelock_leader,
    fencelock_name, fencelock_output, fencelock_session_info, fencelock_waiter, mode_arg, name,
    name_copy, out, put, set, wait_arg, write_list, write_message, FENCELOCK_FRAME_PREFIX_LEN,
    FENCELOCK_MAX_FRAME_LEN,
};

type Service = LockService<SliceStorage<'static>>;
type Sink<'a> = &'a mut dyn FnMut(Output);

/// Outputs not yet drained, oldest first.
enum Queue {
    /// `fencelock_service_new`: grows as needed.
    Heap(VecDeque<Output>),
    /// `fencelock_service_init_in`: fixed slots in the caller's block.
    Ring {
        slots: &'static mut [Option<Output>],
        head: usize,
        len: usize,
    },
}

impl Queue {
    fn len(&self) -> usize {
        match self {
            Queue::Heap(q) => q.len(),
            Queue::Ring { len, .. } => *len,
        }
    }

    fn get(&self, i: usize) -> Option<&Output> {
        match self {
            Queue::Heap(q) => q.get(i),
            Queue::Ring { slots, head, len } => {
                if i >= *len {
                    return None;
                }
                slots[(head + i) % slots.len()].as_ref()
            }
        }
    }

    fn push(&mut self, o: Output) {
        match self {
            Queue::Heap(q) => q.push_back(o),
            Queue::Ring { slots, head, len } => {
                // The ring holds the core's documented worst case for one input and inputs
                // are refused unless it is empty, so this cannot fail; if it did, the
                // panic poisons the handle rather than dropping an output.
                assert!(*len < slots.len(), "output bound exceeded");
                let i = (*head + *len) % slots.len();
                slots[i] = Some(o);
                *len += 1;
            }
        }
    }

    fn pop(&mut self) -> Option<Output> {
        match self {
            Queue::Heap(q) => q.pop_front(),
            Queue::Ring { slots, head, len } => {
                if *len == 0 {
                    return None;
                }
                let o = slots[*head].take();
                *head = (*head + 1) % slots.len();
                *len -= 1;
                o
            }
        }
    }

    fn accepts_input(&self) -> bool {
        match self {
            Queue::Heap(_) => true,
            Queue::Ring { len, .. } => *len == 0,
        }
    }
}

#[derive(Clone, Copy)]
enum Owner {
    /// Allocated by this library with this layout; freed by `fencelock_service_free`.
    Library(Layout),
    /// The caller's memory; `fencelock_service_free` only ends the service.
    Caller,
}

/// A lock service. Opaque: create with `fencelock_service_new` (or `_init_in`,
/// `_restore`, `_restore_in`), free with `fencelock_service_free`.
///
/// Not thread-safe: calls on one handle must not overlap (distinct handles are
/// independent).
pub struct fencelock_service {
    svc: Service,
    queue: Queue,
    owner: Owner,
    /// The latest failure, for `fencelock_service_last_error` (a `Cell`: getters, which
    /// take a `const` handle, record their failures too).
    last: Cell<Option<Fail>>,
    /// Set by a caught panic: the state may be half-updated, so nothing runs on it again.
    poisoned: Cell<bool>,
}

/// Where each part of a service's block goes.
struct Plan {
    layout: Layout,
    sessions: (usize, usize),
    locks: (usize, usize),
    claims: (usize, usize),
    ring: (usize, usize),
    placed: bool,
}

fn plan(cap: &fencelock_capacity, placed: bool) -> Result<Plan, Fail> {
    let too_big = Fail::Core(Error::BadConfig(
        "capacities too large for this address space",
    ));
    let (s, l, c) = (
        cap.sessions as usize,
        cap.locks as usize,
        cap.claims as usize,
    );
    // The core refuses these too, but only after the tables were allocated and filled:
    // refuse up front instead of touching gigabytes first.
    let limit = i32::MAX as usize;
    if s > limit || l > limit || c > limit {
        return Err(Error::BadConfig("a table has more than 2^31 - 1 rows").into());
    }
    let ring_len = if placed {
        c.checked_mul(2)
            .and_then(|x| x.checked_add(s))
            .and_then(|x| x.checked_add(1))
            .ok_or(too_big)?
    } else {
        0
    };
    let mut layout = Layout::new::<fencelock_service>();
    let mut part = |array: Result<Layout, _>, n: usize| -> Result<(usize, usize), Fail> {
        let (grown, offset) = layout
            .extend(array.map_err(|_| too_big)?)
            .map_err(|_| too_big)?;
        layout = grown;
        Ok((offset, n))
    };
    let sessions = part(Layout::array::<SessionRow>(s), s)?;
    let locks = part(Layout::array::<LockRow>(l), l)?;
    let claims = part(Layout::array::<ClaimRow>(c), c)?;
    let ring = part(Layout::array::<Option<Output>>(ring_len), ring_len)?;
    Ok(Plan {
        layout: layout.pad_to_align(),
        sessions,
        locks,
        claims,
        ring,
        placed,
    })
}

/// Writes `n` copies of `v()` at `mem + offset` and returns them as a slice.
///
/// # Safety
/// `mem + offset` is aligned for `T` and valid for writing `n` `T`s for as long as the
/// returned slice is used, and nothing else uses that memory meanwhile.
unsafe fn fill<T>(
    mem: *mut u8,
    (offset, n): (usize, usize),
    v: impl Fn() -> T,
) -> &'static mut [T] {
    // SAFETY: offset is within the block (from `plan`), per the caller's contract.
    let p = unsafe { mem.add(offset) }.cast::<T>();
    for i in 0..n {
        // SAFETY: i < n elements fit at p (the plan's array layout).
        unsafe { p.add(i).write(v()) };
    }
    // SAFETY: n initialised, aligned elements at non-NULL p, used by nobody else.
    unsafe { core::slice::from_raw_parts_mut(p, n) }
}

/// Lays a service out in `mem` per `plan` and builds it with `make`.
///
/// # Safety
/// `mem` is non-NULL, aligned to `plan.layout.align()`, valid for `plan.layout.size()`
/// bytes, and used by nothing else until the handle is freed.
unsafe fn build(
    mem: *mut u8,
    plan: &Plan,
    owner: Owner,
    make: impl FnOnce(SliceStorage<'static>) -> Result<Service, Error>,
) -> Result<*mut fencelock_service, Error> {
    // SAFETY: the parts are disjoint, aligned and inside the block (Layout::extend).
    let sessions = unsafe { fill(mem, plan.sessions, || SessionRow::EMPTY) };
    // SAFETY: as above.
    let locks = unsafe { fill(mem, plan.locks, || LockRow::EMPTY) };
    // SAFETY: as above.
    let claims = unsafe { fill(mem, plan.claims, || ClaimRow::EMPTY) };
    let queue = if plan.placed {
        Queue::Ring {
            // SAFETY: as above.
            slots: unsafe { fill(mem, plan.ring, || None) },
            head: 0,
            len: 0,
        }
    } else {
        Queue::Heap(VecDeque::new())
    };
    let svc = make(SliceStorage {
        sessions,
        locks,
        claims,
    })?;
    let h = mem.cast::<fencelock_service>();
    // SAFETY: the handle sits at offset 0, aligned (the block's first part).
    unsafe {
        h.write(fencelock_service {
            svc,
            queue,
            owner,
            last: Cell::new(None),
            poisoned: Cell::new(false),
        })
    };
    Ok(h)
}

/// Allocates a block for `cap` and builds a service in it; frees it on error.
fn create(
    cap: &fencelock_capacity,
    make: impl FnOnce(SliceStorage<'static>) -> Result<Service, Error>,
) -> Result<*mut fencelock_service, Fail> {
    let plan = plan(cap, false)?;
    // SAFETY: the layout is never zero-sized (it starts with the handle).
    let mem = unsafe { alloc::alloc(plan.layout) };
    if mem.is_null() {
        return Err(Error::BadConfig("not enough memory for these capacities").into());
    }
    // SAFETY: fresh allocation of exactly this layout, owned by the new handle.
    match unsafe { build(mem, &plan, Owner::Library(plan.layout), make) } {
        Ok(h) => Ok(h),
        Err(e) => {
            // SAFETY: allocated above with this layout; nothing refers to it any more.
            unsafe { alloc::dealloc(mem, plan.layout) };
            Err(e.into())
        }
    }
}

/// Builds a service in caller memory after checking it.
///
/// # Safety
/// `mem` is NULL or valid for `mem_len` bytes, unused by anything else until freed.
unsafe fn place(
    mem: *mut c_void,
    mem_len: usize,
    cap: &fencelock_capacity,
    make: impl FnOnce(SliceStorage<'static>) -> Result<Service, Error>,
) -> Result<*mut fencelock_service, Fail> {
    if mem.is_null() {
        return Err(fencelock_result::NullParameter.into());
    }
    let plan = plan(cap, true)?;
    if (mem as usize) % plan.layout.align() != 0 {
        return Err(fencelock_result::MisalignedMemory.into());
    }
    if mem_len < plan.layout.size() {
        return Err(fencelock_result::BufferTooSmall.into());
    }
    // SAFETY: non-NULL, aligned, big enough (checked), exclusively the service's (contract).
    Ok(unsafe { build(mem.cast(), &plan, Owner::Caller, make) }?)
}

/// How an extern function receives its service: `*mut` (inputs, drains) lends the body a
/// `&mut fencelock_service`, `*const` (getters) a `&fencelock_service`.
pub(crate) trait ServicePtr: Copy {
    /// What the body gets.
    type Handle<'a>: Deref<Target = fencelock_service>;

    /// The handle behind the pointer, `None` for NULL.
    ///
    /// # Safety
    /// `self` is NULL or a live handle that no other call uses (for `*const`: mutates)
    /// during `'a`.
    unsafe fn handle<'a>(self) -> Option<Self::Handle<'a>>;

    /// `h` lent for a shorter time, usable again afterwards.
    fn reborrow<'b>(h: &'b mut Self::Handle<'_>) -> Self::Handle<'b>;
}

impl ServicePtr for *mut fencelock_service {
    type Handle<'a> = &'a mut fencelock_service;

    unsafe fn handle<'a>(self) -> Option<&'a mut fencelock_service> {
        // SAFETY: the caller's contract: NULL or live and unaliased.
        unsafe { self.as_mut() }
    }

    fn reborrow<'b>(h: &'b mut &mut fencelock_service) -> &'b mut fencelock_service {
        h
    }
}

impl ServicePtr for *const fencelock_service {
    type Handle<'a> = &'a fencelock_service;

    unsafe fn handle<'a>(self) -> Option<&'a fencelock_service> {
        // SAFETY: the caller's contract: NULL or live and not mutated meanwhile.
        unsafe { self.as_ref() }
    }

    fn reborrow<'b>(h: &'b mut &fencelock_service) -> &'b fencelock_service {
        h
    }
}

/// Runs `f` on a live handle: `NULL_PARAMETER` for NULL, `PANIC` for a poisoned one.
/// A panic inside `f` poisons the handle.
///
/// # Safety
/// `svc` is NULL or a live handle not used (for `*const`: not mutated) by another call at
/// the same time.
pub(crate) unsafe fn with_service<P: ServicePtr>(
    svc: P,
    f: impl FnOnce(P::Handle<'_>) -> Result<(), Fail>,
) -> Result<(), Fail> {
    // SAFETY: the caller's contract.
    let mut h = unsafe { svc.handle() }.ok_or(Fail::Code(fencelock_result::NullParameter))?;
    if h.poisoned.get() {
        return Err(fencelock_result::Panic.into());
    }
    match catch_unwind(AssertUnwindSafe(|| f(P::reborrow(&mut h)))) {
        Ok(r) => r,
        Err(_) => {
            h.poisoned.set(true);
            Err(fencelock_result::Panic.into())
        }
    }
}

/// The body of every extern function on a service handle, inside the panic boundary:
/// `args` checks and converts the other arguments (before the handle is looked at), then
/// `body` runs on the handle through [`with_service`]. Returns the result code, and
/// remembers a failure (argument checks included; `DONE` is none) for
/// `fencelock_service_last_error`.
///
/// # Safety
/// As [`with_service`].
unsafe fn service_call<P: ServicePtr, A>(
    svc: P,
    args: impl FnOnce() -> Result<A, Fail>,
    body: impl FnOnce(P::Handle<'_>, A) -> Result<(), Fail>,
) -> fencelock_result {
    let run = || -> Result<(), Fail> {
        let a = args()?;
        // SAFETY: forwarded contract.
        unsafe { with_service(svc, |h| body(h, a)) }
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => fencelock_result::Ok,
        Ok(Err(fail)) => {
            if !matches!(fail, Fail::Code(fencelock_result::Done)) {
                // SAFETY: `svc` is NULL or a live handle (the contract), and the one lent
                // to `body` is gone.
                if let Some(h) = unsafe { svc.handle() } {
                    h.last.set(Some(fail));
                }
            }
            fail.code()
        }
        Err(_) => fencelock_result::Panic,
    }
}

/// [`service_call`] for an input: `f` runs the core on the converted arguments, its
/// outputs are queued (`OUTPUTS_PENDING` while a fixed ring still holds some).
///
/// # Safety
/// As [`with_service`].
unsafe fn service_input<A>(
    svc: *mut fencelock_service,
    args: impl FnOnce() -> Result<A, Fail>,
    f: impl FnOnce(&mut Service, &mut Sink<'_>, A) -> Result<(), Error>,
) -> fencelock_result {
    // SAFETY: forwarded contract.
    unsafe { service_call(svc, args, |h, a| h.apply(|s, o| f(s, o, a))) }
}

impl fencelock_service {
    /// Applies one input, queueing its outputs. Refused while a fixed ring still holds
    /// outputs (so it can never overflow).
    fn apply<R>(
        &mut self,
        f: impl FnOnce(&mut Service, &mut Sink<'_>) -> Result<R, Error>,
    ) -> Result<R, Fail> {
        if !self.queue.accepts_input() {
            return Err(fencelock_result::OutputsPending.into());
        }
        let queue = &mut self.queue;
        let mut sink: Sink<'_> = &mut |o| queue.push(o);
        Ok(f(&mut self.svc, &mut sink)?)
    }

    /// Writes every queued output as `[len u16 LE][frame]` into `dst`, all or nothing:
    /// `Ok(bytes written)`, or `Err((bytes needed, BUFFER_TOO_SMALL))` dequeuing nothing.
    fn drain_frames(&mut self, dst: &mut [u8]) -> Result<usize, (usize, Fail)> {
        let mut frame = [0u8; FENCELOCK_MAX_FRAME_LEN];
        let mut need = 0usize;
        for i in 0..self.queue.len() {
            let o = self
                .queue
                .get(i)
                .ok_or((0, Fail::Code(fencelock_result::Panic)))?;
            need +=
                FENCELOCK_FRAME_PREFIX_LEN + o.to_frame(&mut frame).map_err(|e| (0, e.into()))?;
        }
        if need > dst.len() {
            return Err((need, fencelock_result::BufferTooSmall.into()));
        }
        let mut at = 0;
        while let Some(o) = self.queue.pop() {
            // Cannot fail: a MAX_FRAME_LEN buffer fits every output (and did just above).
            let n = o.to_frame(&mut frame).map_err(|e| (0, e.into()))?;
            dst[at..at + 2].copy_from_slice(&(n as u16).to_le_bytes());
            dst[at + 2..at + 2 + n].copy_from_slice(&frame[..n]);
            at += 2 + n;
        }
        Ok(at)
    }
}

/// `Some(n)` for a request number, `None` for 0 ("no request number").
fn request(n: u64) -> Option<u64> {
    (n != 0).then_some(n)
}

// ===================================================================== lifecycle

/// Creates a service with empty tables of the configured capacities, allocated by this
/// library, and stores its handle in `*out`.
///
/// Errors: `NULL_PARAMETER`, `BAD_CONFIG` (a `max_name_len` outside 1..=64, a table of
/// more than 2^31 − 1 rows, or not enough memory). Cost: O(capacity) time; memory
/// `fencelock_service_layout`'s size (minus the output ring) plus queued outputs.
///
/// # Safety
/// `config` is NULL or a valid config; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_new(
    config: *const fencelock_config,
    out_service: *mut *mut fencelock_service,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: NULL or valid (contract).
        let config = *unsafe { arg(config) }?;
        let dst = out(out_service)?;
        let h = create(&config.capacity, |s| LockService::new(s, config.core()))?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { put(dst, h) };
        Ok(())
    })
}

/// Ends a service and frees what this library allocated for it. `NULL` is fine (does
/// nothing). Must not be called twice on the same handle, and the handle must not be
/// used afterwards. For a service placed with `_init_in`/`_restore_in`, the memory is
/// the caller's again once this returns. Cost: O(1) plus the queued outputs.
///
/// # Safety
/// `svc` is NULL or a live handle, not used concurrently or after this call.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_free(svc: *mut fencelock_service) {
    let _ = ffi_panic_boundary!({
        if svc.is_null() {
            return Ok(());
        }
        // SAFETY: live handle (contract); read before it is dropped.
        let owner = unsafe { (*svc).owner };
        // SAFETY: live handle, dropped exactly once (contract: no second free).
        unsafe { ptr::drop_in_place(svc) };
        if let Owner::Library(layout) = owner {
            // SAFETY: allocated by `create` with exactly this layout.
            unsafe { alloc::dealloc(svc.cast(), layout) };
        }
        Ok(())
    });
}

/// The size and alignment of the memory `fencelock_service_init_in` /
/// `fencelock_service_restore_in` need for these capacities (the handle, the tables and
/// a fixed output ring of sessions + 2 × claims + 1 outputs).
///
/// Errors: `NULL_PARAMETER`, `BAD_CONFIG` (sizes overflow). Cost: O(1).
///
/// # Safety
/// `capacity` is NULL or valid; `size` and `align` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_layout(
    capacity: *const fencelock_capacity,
    size: *mut usize,
    align: *mut usize,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: NULL or valid (contract).
        let cap = unsafe { arg(capacity) }?;
        let (size, align) = (out(size)?, out(align)?);
        let plan = plan(cap, true)?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe {
            put(size, plan.layout.size());
            put(align, plan.layout.align());
        }
        Ok(())
    })
}

/// Creates a service inside `mem` (for embedders without malloc: a static array, an
/// arena). This library allocates nothing for it, ever: outputs queue in a fixed ring
/// inside `mem`, so each input is refused with `OUTPUTS_PENDING` until the previous
/// input's outputs have been drained.
///
/// The memory must stay valid, unmoved and untouched until `fencelock_service_free`.
///
/// Errors: `NULL_PARAMETER`, `MISALIGNED_MEMORY`, `BUFFER_TOO_SMALL` (`mem_len` below
/// the layout's size), `BAD_CONFIG`. Cost: O(capacity).
///
/// # Safety
/// `mem` is NULL or valid for reading and writing `mem_len` bytes as said above;
/// `config` NULL or valid; `out_service` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_init_in(
    mem: *mut c_void,
    mem_len: usize,
    config: *const fencelock_config,
    out_service: *mut *mut fencelock_service,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: NULL or valid (contract).
        let config = *unsafe { arg(config) }?;
        let dst = out(out_service)?;
        // SAFETY: forwarded contract on `mem`.
        let h = unsafe {
            place(mem, mem_len, &config.capacity, |s| {
                LockService::new(s, config.core())
            })
        }?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { put(dst, h) };
        Ok(())
    })
}

/// Creates a service from snapshot bytes (`fencelock_service_snapshot`) with tables of
/// `capacity`; lock-delay and the name limit come from the snapshot. Every invariant is
/// checked before the bytes are accepted.
///
/// Errors: `NULL_PARAMETER`, `BAD_MAGIC`, `UNSUPPORTED_VERSION`, `CORRUPT_SNAPSHOT`
/// (including truncated bytes), `CAPACITY_EXCEEDED` (the snapshot does not fit),
/// `BAD_CONFIG`. Nothing is created on error. Cost: O(capacity + snapshot length).
///
/// # Safety
/// `capacity` NULL or valid; `snapshot` NULL or valid for `len` bytes; `out_service`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_restore(
    capacity: *const fencelock_capacity,
    snapshot: *const u8,
    len: usize,
    out_service: *mut *mut fencelock_service,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: NULL or valid (contract).
        let cap = unsafe { arg(capacity) }?;
        // SAFETY: NULL or valid for len bytes (contract).
        let bytes = unsafe { bytes(snapshot, len) }?;
        let dst = out(out_service)?;
        let h = create(cap, |s| LockService::restore(s, bytes).map_err(|(_, e)| e))?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { put(dst, h) };
        Ok(())
    })
}

/// `fencelock_service_restore` into caller memory (see `fencelock_service_init_in`).
/// The snapshot must not lie in `mem[..mem_len]` (which is overwritten while the
/// snapshot is read): overlapping ranges are refused with `INVALID_ARGUMENT`.
///
/// Errors: those of both, and `INVALID_ARGUMENT`. Cost: O(capacity + snapshot length).
///
/// # Safety
/// As `fencelock_service_init_in` and `fencelock_service_restore`.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_restore_in(
    mem: *mut c_void,
    mem_len: usize,
    capacity: *const fencelock_capacity,
    snapshot: *const u8,
    len: usize,
    out_service: *mut *mut fencelock_service,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: NULL or valid (contract). Copied: `mem` is written below.
        let cap = *unsafe { arg(capacity) }?;
        let (at, mem_at) = (snapshot as usize, mem as usize);
        if at != 0 && mem_at != 0 && overlap(at, len, mem_at, mem_len) {
            return Err(fencelock_result::InvalidArgument.into());
        }
        // SAFETY: NULL or valid for len bytes (contract), outside `mem` (checked).
        let bytes = unsafe { bytes(snapshot, len) }?;
        let dst = out(out_service)?;
        // SAFETY: forwarded contract on `mem`.
        let h = unsafe {
            place(mem, mem_len, &cap, |s| {
                LockService::restore(s, bytes).map_err(|(_, e)| e)
            })
        }?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { put(dst, h) };
        Ok(())
    })
}

/// Whether the address ranges `[a, a + a_len)` and `[b, b + b_len)` share a byte (empty
/// ranges share none). Addresses only: no pointer is formed or read.
fn overlap(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    a_len != 0 && b_len != 0 && a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

// ======================================================================== inputs
//
// Every input: on success its outputs are queued (drain them with
// `fencelock_service_poll_output` or `fencelock_service_drain_frames`); on error nothing
// changed and nothing was queued. `request` is the idempotent-retry number, 0 = none.
// All share: `NULL_PARAMETER` (NULL handle or required pointer), `PANIC` (poisoned
// handle), `OUTPUTS_PENDING` (placed service with undrained outputs).

/// Opens a session expiring `ttl` ticks from now; its id goes to `*session`. Queues
/// `SESSION_OPENED`.
///
/// Errors: `BAD_TTL` (0), `DEADLINE_OVERFLOW`, `CAPACITY_EXCEEDED`. Cost: O(log sessions).
///
/// # Safety
/// `svc` NULL or a live handle; `session` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_open_session(
    svc: *mut fencelock_service,
    ttl: u64,
    session: *mut u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `session` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || out(session),
            |h, dst| {
                let id = h.apply(|s, o| s.open_session(ttl, o))?;
                set(dst, id.0)
            },
        )
    }
}

/// Renews a session (deadline = now + ttl). Queues `SESSION_RENEWED`, the heartbeat ack.
///
/// Errors: `UNKNOWN_SESSION`, `DEADLINE_OVERFLOW`, `STALE_REQUEST`, `REQUEST_REUSED`.
/// Cost: O(log sessions).
///
/// # Safety
/// `svc` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_keep_alive(
    svc: *mut fencelock_service,
    session: u64,
    request_number: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live (contract).
    unsafe {
        service_input(
            svc,
            || Ok(()),
            |s, o, ()| s.keep_alive(SessionId(session), request(request_number), o),
        )
    }
}

/// Closes a session: queues `SESSION_CLOSED`, `RELEASED` per hold, then the `GRANTED`s
/// this frees.
///
/// Errors: `UNKNOWN_SESSION`, `STALE_REQUEST`, `REQUEST_REUSED`. Cost: O(its claims +
/// outputs).
///
/// # Safety
/// `svc` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_close_session(
    svc: *mut fencelock_service,
    session: u64,
    request_number: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live (contract).
    unsafe {
        service_input(
            svc,
            || Ok(()),
            |s, o, ()| s.close_session(SessionId(session), request(request_number), o),
        )
    }
}

/// Acquires the lock named by `lock[..lock_len]` (UTF-8) in `mode` (a `fencelock_mode`),
/// waiting as `wait` (a `fencelock_wait`) says; `wait_until` is the deadline tick for
/// `FENCELOCK_WAIT_UNTIL` and ignored otherwise. Queues `GRANTED` (with the fencing
/// token), `QUEUED` or `BUSY`.
///
/// Errors: `INVALID_ARGUMENT` (mode or wait), `INVALID_UTF8`, `UNKNOWN_SESSION`,
/// `EMPTY_NAME`, `NAME_TOO_LONG`, `ALREADY_QUEUED`, `MODE_MISMATCH`, `CAPACITY_EXCEEDED`,
/// `STALE_REQUEST`, `REQUEST_REUSED`. Cost: O(name length + log claims).
///
/// # Safety
/// `svc` NULL or a live handle; `lock` NULL or valid for `lock_len` bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fencelock_service_acquire(
    svc: *mut fencelock_service,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    mode: u32,
    wait: u32,
    wait_until: u64,
    request_number: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes (contract).
    unsafe {
        service_input(
            svc,
            || {
                Ok((
                    name(lock, lock_len)?,
                    mode_arg(mode)?,
                    wait_arg(wait, wait_until)?,
                ))
            },
            |s, o, (lock, mode, wait)| {
                s.acquire(
                    SessionId(session),
                    lock,
                    mode,
                    wait,
                    request(request_number),
                    o,
                )
            },
        )
    }
}

/// Releases a held lock. Queues `RELEASED`, then `GRANTED` to the head of its queue.
///
/// Errors: `INVALID_UTF8`, `UNKNOWN_SESSION`, name errors, `NOT_HOLDER`,
/// `STALE_REQUEST`, `REQUEST_REUSED`. Cost: O(name length + log claims + outputs).
///
/// # Safety
/// `svc` NULL or a live handle; `lock` NULL or valid for `lock_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_release(
    svc: *mut fencelock_service,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    request_number: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes (contract).
    unsafe {
        service_input(
            svc,
            || name(lock, lock_len),
            |s, o, lock| s.release(SessionId(session), lock, request(request_number), o),
        )
    }
}

/// Withdraws a queued acquire. Queues `WAIT_CANCELLED`, then any `GRANTED` it unblocks.
///
/// Errors: `INVALID_UTF8`, `UNKNOWN_SESSION`, name errors, `NOT_QUEUED`,
/// `STALE_REQUEST`, `REQUEST_REUSED`. Cost: O(name length + log claims + outputs).
///
/// # Safety
/// `svc` NULL or a live handle; `lock` NULL or valid for `lock_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_cancel(
    svc: *mut fencelock_service,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    request_number: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes (contract).
    unsafe {
        service_input(
            svc,
            || name(lock, lock_len),
            |s, o, lock| s.cancel(SessionId(session), lock, request(request_number), o),
        )
    }
}

/// Advances logical time to `now`: expiries (`SESSION_EXPIRED`, `RELEASED`), wait
/// timeouts (`WAIT_TIMED_OUT`), then grants (`GRANTED`), in that order. Call it no later
/// than `fencelock_service_poll_timeout` says; earlier or repeated calls are harmless.
///
/// Errors: `TIME_WENT_BACKWARDS`. Cost: O(1) with nothing due, else O(log n) per due
/// deadline plus the outputs.
///
/// # Safety
/// `svc` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_tick(
    svc: *mut fencelock_service,
    now: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live (contract).
    unsafe { service_input(svc, || Ok(()), |s, o, ()| s.tick(Tick(now), o)) }
}

/// Stands `session` as a candidate in `election` (an exclusive acquire that waits
/// forever): `GRANTED` = it leads, the token is its epoch; `QUEUED` = it watches.
///
/// Errors: those of `fencelock_service_acquire`. Cost: as acquire.
///
/// # Safety
/// `svc` NULL or a live handle; `election` NULL or valid for `election_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_campaign(
    svc: *mut fencelock_service,
    session: u64,
    election: *const u8,
    election_len: usize,
    request_number: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `election` NULL or valid for `election_len` bytes
    // (contract).
    unsafe {
        service_input(
            svc,
            || name(election, election_len),
            |s, o, election| s.campaign(SessionId(session), election, request(request_number), o),
        )
    }
}

/// Withdraws `session` from `election`: steps down if it leads (the next candidate gets
/// a higher epoch), else leaves the queue.
///
/// Errors: `NOT_QUEUED` (neither leader nor candidate), and those of release/cancel.
/// Cost: as release.
///
/// # Safety
/// `svc` NULL or a live handle; `election` NULL or valid for `election_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_resign(
    svc: *mut fencelock_service,
    session: u64,
    election: *const u8,
    election_len: usize,
    request_number: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `election` NULL or valid for `election_len` bytes
    // (contract).
    unsafe {
        service_input(
            svc,
            || name(election, election_len),
            |s, o, election| s.resign(SessionId(session), election, request(request_number), o),
        )
    }
}

/// The byte-level entry point: decodes one postcard input frame, applies it, and writes
/// the queued outputs' frames into `out_buf` as `[length: u16 little-endian][frame]`
/// records, oldest first; `*out_len` gets the bytes written.
///
/// * Input refused (`BAD_FRAME` or the input's error): nothing changed, nothing
///   written, `*out_len` = 0.
/// * `BUFFER_TOO_SMALL`: the input **was applied**; its outputs stay queued and
///   `*out_len` is the size needed. Fetch them with `fencelock_service_drain_frames`
///   (never by sending the input again). `out_buf` may be NULL when `out_cap` is 0.
///
/// A buffer of (sessions + 2 × claims + 1) × (2 + `FENCELOCK_MAX_FRAME_LEN`) bytes always
/// fits one input's outputs. Cost: O(frame length) + the input's cost + O(outputs).
///
/// The input frame is copied before anything is written, so `frame` and `out_buf` may
/// be the same buffer (or overlap): reusing one buffer for request and response is fine.
/// A frame longer than `FENCELOCK_MAX_FRAME_LEN` is refused with `BAD_FRAME`.
///
/// # Safety
/// `svc` NULL or a live handle; `frame` NULL or valid for `frame_len` bytes; `out_buf`
/// NULL or valid for `out_cap` bytes (it may overlap `frame`); `out_len` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_handle_frame(
    svc: *mut fencelock_service,
    frame: *const u8,
    frame_len: usize,
    out_buf: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
) -> fencelock_result {
    let args = || -> Result<_, Fail> {
        if frame.is_null() {
            return Err(fencelock_result::NullParameter.into());
        }
        // Copy the input out of the caller's memory before anything is written: the
        // caller may reuse one buffer for the request and the response. No valid input
        // frame is longer than FENCELOCK_MAX_FRAME_LEN, so a longer one is BAD_FRAME
        // (decided below, after the usual argument checks); its bytes are never read.
        let mut input = [0u8; FENCELOCK_MAX_FRAME_LEN];
        let copied = frame_len <= input.len();
        if copied {
            // SAFETY: `frame` is non-NULL and valid for frame_len bytes (contract), which
            // fit `input`, a local that cannot overlap the caller's memory.
            unsafe { ptr::copy_nonoverlapping(frame, input.as_mut_ptr(), frame_len) };
        }
        // SAFETY: NULL or valid for out_cap bytes (contract); no reference into the
        // input frame is alive any more.
        let dst = unsafe { buf(out_buf, out_cap) }?;
        let len = out(out_len)?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { put(len, 0) };
        Ok((input, copied, dst, len))
    };
    // SAFETY: `svc` NULL or live (contract).
    unsafe {
        service_call(svc, args, |h, (input, copied, dst, len)| {
            h.apply(|s, o| {
                if copied {
                    s.handle_frame(&input[..frame_len], o)
                } else {
                    Err(Error::BadFrame)
                }
            })?;
            write_frames(h, dst, len)
        })
    }
}

fn write_frames(h: &mut fencelock_service, dst: &mut [u8], len: *mut usize) -> Result<(), Fail> {
    let (n, r) = match h.drain_frames(dst) {
        Ok(n) => (n, Ok(())),
        Err((need, fail)) => (need, Err(fail)),
    };
    // SAFETY: `len` was checked non-NULL by the caller and is writable (its contract).
    unsafe { put(len, n) };
    r
}

/// Writes every queued output as frames (the format of `fencelock_service_handle_frame`),
/// all or nothing. `*out_len` gets the bytes written, or with `BUFFER_TOO_SMALL` the
/// size needed (nothing is dequeued). Nothing queued: `OK` with `*out_len` = 0.
///
/// Cost: O(queued outputs).
///
/// # Safety
/// `svc` NULL or a live handle; `out_buf` NULL or valid for `out_cap` bytes; `out_len`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_drain_frames(
    svc: *mut fencelock_service,
    out_buf: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `out_buf` NULL or valid for `out_cap` bytes; `out_len`
    // checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || Ok((buf(out_buf, out_cap)?, out(out_len)?)),
            |h, (dst, len)| write_frames(h, dst, len),
        )
    }
}

// ======================================================================= outputs

/// Moves the oldest queued output into `*output`: `OK`, or `DONE` when none is left
/// (then `output->kind` is `FENCELOCK_OUTPUT_KIND_NONE`). Each output names the session
/// the host must tell; none may be dropped.
///
/// Errors: `NULL_PARAMETER`, `PANIC`. Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `output` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_poll_output(
    svc: *mut fencelock_service,
    output: *mut fencelock_output,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `output` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || out(output),
            |h, dst| {
                let o = h.queue.pop();
                let r = o
                    .as_ref()
                    .map_or(fencelock_output::NONE, fencelock_output::from_core);
                put(dst, r);
                o.map(|_| ()).ok_or(fencelock_result::Done.into())
            },
        )
    }
}

/// How many outputs are queued. Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_pending(
    svc: *const fencelock_service,
    count: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `count` checked, then writable (contract).
    unsafe { service_call(svc, || out(count), |h, dst| set(dst, h.queue.len())) }
}

// ======================================================================= queries
//
// Getters change nothing. They share `NULL_PARAMETER` and `PANIC` (poisoned handle).

/// The current tick. Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `now` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_now(
    svc: *const fencelock_service,
    now: *mut u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `now` checked, then writable (contract).
    unsafe { service_call(svc, || out(now), |h, dst| set(dst, h.svc.now().0)) }
}

/// The next tick at which something is due (`*scheduled` true, `*at` the tick), or
/// nothing scheduled (`*scheduled` false, `*at` 0). Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `scheduled` and `at` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_poll_timeout(
    svc: *const fencelock_service,
    scheduled: *mut bool,
    at: *mut u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `scheduled` and `at` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || Ok((out(scheduled)?, out(at)?)),
            |h, (s, a)| {
                let t = h.svc.poll_timeout();
                put(s, t.is_some());
                put(a, t.map_or(0, |t| t.0));
                Ok(())
            },
        )
    }
}

/// The highest token granted so far (0 before the first grant). Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `revision` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_revision(
    svc: *const fencelock_service,
    revision: *mut u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `revision` checked, then writable (contract).
    unsafe { service_call(svc, || out(revision), |h, dst| set(dst, h.svc.revision())) }
}

/// The configuration, capacities included. Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `config` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_config(
    svc: *const fencelock_service,
    config: *mut fencelock_config,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `config` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || out(config),
            |h, dst| {
                let c = h.svc.config();
                set(
                    dst,
                    fencelock_config {
                        capacity: h.svc.capacity().into(),
                        lock_delay: c.lock_delay,
                        max_name_len: c.max_name_len,
                    },
                )
            },
        )
    }
}

/// Entries in use per table (open sessions, live lock entries, holds + waits).
/// Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_len(
    svc: *const fencelock_service,
    len: *mut fencelock_capacity,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `len` checked, then writable (contract).
    unsafe { service_call(svc, || out(len), |h, dst| set(dst, h.svc.len().into())) }
}

/// A live session's state; `UNKNOWN_SESSION` if it is not open. Cost: O(its claims).
///
/// # Safety
/// `svc` NULL or a live handle; `info` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_session(
    svc: *const fencelock_service,
    session: u64,
    info: *mut fencelock_session_info,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `info` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || out(info),
            |h, dst| {
                let id = SessionId(session);
                let s = h.svc.session(id).ok_or(Error::UnknownSession(id))?;
                set(
                    dst,
                    fencelock_session_info {
                        id: s.id.0,
                        ttl: s.ttl,
                        expires_at: s.expires_at.0,
                        last_request: s.last_request,
                        holds: s.holds,
                        waits: s.waits,
                    },
                )
            },
        )
    }
}

/// Open session ids in id order, into `ids[..cap]`; `*count` = how many there are.
/// `BUFFER_TOO_SMALL` (nothing written) if more than `cap`; `ids` may be NULL when `cap`
/// is 0. Cost: O(sessions).
///
/// # Safety
/// `svc` NULL or a live handle; `ids` NULL or valid for `cap` elements; `count` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_sessions(
    svc: *const fencelock_service,
    ids: *mut u64,
    cap: usize,
    count: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; list pointers per contract.
    unsafe {
        service_call(
            svc,
            || Ok(()),
            |h, ()| write_list(ids, cap, count, || h.svc.sessions().map(|s| s.0)),
        )
    }
}

/// Lock entries (held, awaited or in lock-delay) in creation order, as
/// `write_list` does for `fencelock_service_sessions`. Cost: O(locks).
///
/// # Safety
/// As `fencelock_service_sessions`.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_locks(
    svc: *const fencelock_service,
    names: *mut fencelock_name,
    cap: usize,
    count: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; list pointers per contract.
    unsafe {
        service_call(
            svc,
            || Ok(()),
            |h, ()| {
                write_list(names, cap, count, || {
                    h.svc.locks().map(|l| fencelock_name::new(l.as_str(), 0))
                })
            },
        )
    }
}

/// The holders of a lock in grant order (none if free or unknown), written like
/// `fencelock_service_sessions`. Errors add `INVALID_UTF8`. Cost: O(name + holders).
///
/// # Safety
/// As `fencelock_service_sessions`; `lock` NULL or valid for `lock_len` bytes (it is
/// copied first, so it may overlap the outputs).
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_holders(
    svc: *const fencelock_service,
    lock: *const u8,
    lock_len: usize,
    holders: *mut fencelock_holder,
    cap: usize,
    count: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes, copied before
    // the list (which may overlap it) is written; list pointers per contract.
    unsafe {
        service_call(
            svc,
            || name_copy(lock, lock_len),
            |h, lock| {
                write_list(holders, cap, count, || {
                    let lock = lock.get();
                    lock.into_iter()
                        .flat_map(|l| h.svc.holders(l))
                        .map(|x| fencelock_holder {
                            session: x.session.0,
                            token: x.token.0,
                            mode: x.mode.into(),
                        })
                })
            },
        )
    }
}

/// The queue of a lock, head first, written like `fencelock_service_sessions`. Errors
/// add `INVALID_UTF8`. Cost: O(name + waiters).
///
/// # Safety
/// As `fencelock_service_holders`.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_waiters(
    svc: *const fencelock_service,
    lock: *const u8,
    lock_len: usize,
    waiters: *mut fencelock_waiter,
    cap: usize,
    count: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes, copied before
    // the list (which may overlap it) is written; list pointers per contract.
    unsafe {
        service_call(
            svc,
            || name_copy(lock, lock_len),
            |h, lock| {
                write_list(waiters, cap, count, || {
                    let lock = lock.get();
                    lock.into_iter()
                        .flat_map(|l| h.svc.waiters(l))
                        .map(|w| fencelock_waiter {
                            session: w.session.0,
                            deadline: w.deadline.map_or(0, |t| t.0),
                            mode: w.mode.into(),
                            has_deadline: w.deadline.is_some(),
                        })
                })
            },
        )
    }
}

/// Whether a lock is in lock-delay (`*active`) and until which tick (`*until`, else 0).
/// Errors add `INVALID_UTF8`. Cost: O(name length).
///
/// # Safety
/// `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `active`, `until` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_lock_delay_until(
    svc: *const fencelock_service,
    lock: *const u8,
    lock_len: usize,
    active: *mut bool,
    until: *mut u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `active` and
    // `until` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || Ok((name(lock, lock_len)?, out(active)?, out(until)?)),
            |h, (lock, a, u)| {
                let t = h.svc.lock_delay_until(lock);
                put(a, t.is_some());
                put(u, t.map_or(0, |t| t.0));
                Ok(())
            },
        )
    }
}

/// The leader of an election (`*has_leader`, `*leader`; zeroed if none). Errors add
/// `INVALID_UTF8`. Cost: O(name length).
///
/// # Safety
/// `svc` NULL or live; `election` NULL or valid for `election_len` bytes; `has_leader`
/// and `leader` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_leader(
    svc: *const fencelock_service,
    election: *const u8,
    election_len: usize,
    has_leader: *mut bool,
    leader: *mut fencelock_leader,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `election` NULL or valid for `election_len` bytes;
    // `has_leader` and `leader` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || {
                Ok((
                    name(election, election_len)?,
                    out(has_leader)?,
                    out(leader)?,
                ))
            },
            |h, (election, has, dst)| {
                let l = h.svc.leader(election);
                put(has, l.is_some());
                set(
                    dst,
                    fencelock_leader {
                        session: l.map_or(0, |l| l.session.0),
                        epoch: l.map_or(0, |l| l.epoch.0),
                    },
                )
            },
        )
    }
}

// ===================================================================== snapshots

/// The size of `fencelock_service_snapshot`'s output. Cost: O(sessions + locks + claims).
///
/// # Safety
/// `svc` NULL or a live handle; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_snapshot_len(
    svc: *const fencelock_service,
    len: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `len` checked, then writable (contract).
    unsafe { service_call(svc, || out(len), |h, dst| set(dst, h.svc.snapshot_len())) }
}

/// Writes the canonical snapshot of the service's state (not its queued outputs) into
/// `buf[..cap]`; `*len` = bytes written, or with `BUFFER_TOO_SMALL` the size needed.
/// `buf` may be NULL when `cap` is 0. Cost: O(sessions + locks + claims).
///
/// # Safety
/// `svc` NULL or a live handle; `buf` NULL or valid for `cap` bytes; `len` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_snapshot(
    svc: *const fencelock_service,
    buf_: *mut u8,
    cap: usize,
    len: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `buf_` NULL or valid for `cap` bytes; `len` checked,
    // then writable (contract).
    unsafe {
        service_call(
            svc,
            || Ok((buf(buf_, cap)?, out(len)?)),
            |h, (dst, len)| match h.svc.snapshot(dst) {
                Ok(n) => set(len, n),
                Err(Error::BufferTooSmall { need }) => {
                    put(len, need as usize);
                    Err(fencelock_result::BufferTooSmall.into())
                }
                Err(e) => Err(e.into()),
            },
        )
    }
}

// ======================================================================== errors

/// Writes the detailed message of the most recent failed call on this handle (the
/// core's text, with its numbers: "name too long: 70 bytes, at most 64"), or "ok" if
/// none failed yet. Buffer rules as `fencelock_result_message`.
///
/// # Safety
/// `svc` NULL or a live handle; `buf` NULL or valid for `len` bytes; `out_len` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_last_error(
    svc: *const fencelock_service,
    buf_: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: NULL or live (contract). A poisoned handle still answers this.
        let h = unsafe { svc.as_ref() }.ok_or(fencelock_result::NullParameter)?;
        let msg = match h.last.get() {
            None => fencelock_result::Ok.message().to_string(),
            Some(Fail::Core(e)) => e.to_string(),
            Some(Fail::Code(c)) => c.message().to_string(),
        };
        // SAFETY: forwarded contract.
        unsafe { write_message(&msg, buf_, len, out_len) }
    })
}
