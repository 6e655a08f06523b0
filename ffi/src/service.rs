//! `fencelock_service`: the lock service behind an opaque handle, with an event queue.
//!
//! # Memory
//!
//! A service is one block: the handle, then the session, lock and claim rows (the core's
//! `SliceStorage`), then — for a service placed in caller memory — a fixed ring of
//! events. `fencelock_service_new` allocates that block itself (and queues events in a
//! deque allocated as events arrive, up to an event limit: by default twice the bound
//! below, `fencelock_service_set_event_limit` to change it); `fencelock_service_init_in`
//! lays it out in memory the caller gives (and queues events in the fixed ring, sized
//! for the most events one input can emit: the core's bound `max_events` at capacity,
//! S + 2·C + (2·C + 1)·min(max_watchers, C) for S sessions and C claims — S + 2·C when
//! watches are off). Both queues are the core's `Sink` and report their free room (the
//! limit, or the ring's size, minus what is queued), so the core itself refuses an input
//! with `BUFFER_TOO_SMALL`, before changing anything, when the queue could not take
//! every event that input might emit. Both paths run the same code, so every test of one
//! tests the other.

use core::ffi::{c_char, c_void};
use core::ptr;
use std::alloc::{self, Layout};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use fencelock::storage::{
    Bucket, ClaimRow, LabelRow, LockRow, SessionRow, Tables, TaggedBucket, BUCKETS_PER_ROW,
};
use fencelock::{
    Error, EventLimit, Label, LabeledSliceStorage, LockService, Mode, Output, Reply, SessionId,
    Sink, Tick, Token,
};

use crate::handle::{call, check, end, last_error, tag_first, Handle, HandleState};
use crate::result::{fencelock_result, ffi_panic_boundary, Fail};
use crate::types::{
    aligned, arg, buf, buf_len, bytes, check_array_len, fencelock_capacity, fencelock_config,
    fencelock_holder, fencelock_leader, fencelock_name, fencelock_op, fencelock_op_kind,
    fencelock_output, fencelock_permits, fencelock_reply, fencelock_session_info, fencelock_usage,
    fencelock_waiter, holder_out, label_buf, list_out, mode_arg, mode_out, name, name_copy,
    name_key, no_holder, op_mode, out, put, set, wait_arg, write_list, FENCELOCK_FRAME_PREFIX_LEN,
    FENCELOCK_MAX_FRAME_LEN,
};

type Service = LockService<LabeledSliceStorage<'static>>;

/// Events not yet drained, oldest first: the core's [`Sink`] for every input.
enum Queue {
    /// `fencelock_service_new`: allocated as events arrive (nothing up front), never
    /// holding more than `limit` events (`room` is `limit` minus what is queued).
    Heap {
        events: VecDeque<Output>,
        /// The most events it may hold, at least the core's bound at capacity: by
        /// default the core's `LockService::default_event_limit` (its rule).
        limit: EventLimit,
    },
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
            Queue::Heap { events, .. } => events.len(),
            Queue::Ring { len, .. } => *len,
        }
    }

    fn get(&self, i: usize) -> Option<&Output> {
        match self {
            Queue::Heap { events, .. } => events.get(i),
            Queue::Ring { slots, head, len } => {
                if i >= *len {
                    return None;
                }
                slots[(head + i) % slots.len()].as_ref()
            }
        }
    }

    fn pop(&mut self) -> Option<Output> {
        match self {
            Queue::Heap { events, .. } => events.pop_front(),
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
}

impl Queue {
    /// Drops the oldest event without moving it anywhere (after `get(0)` has been read).
    fn discard_front(&mut self) {
        match self {
            Queue::Heap { events, .. } => {
                events.pop_front();
            }
            Queue::Ring { slots, head, len } => {
                if *len > 0 {
                    slots[*head] = None;
                    *head = (*head + 1) % slots.len();
                    *len -= 1;
                }
            }
        }
    }

    /// Hands every queued event to `f` by reference, oldest first, with its position,
    /// then empties the queue: no event is moved out of the queue (an `Output` is about
    /// 200 bytes, and a move is a copy). Cost: O(events).
    fn drain_each(&mut self, mut f: impl FnMut(usize, &Output)) {
        match self {
            Queue::Heap { events: q, .. } => {
                let (a, b) = q.as_slices();
                for (i, o) in a.iter().enumerate() {
                    f(i, o);
                }
                for (i, o) in b.iter().enumerate() {
                    f(a.len() + i, o);
                }
                q.clear();
            }
            Queue::Ring { slots, head, len } => {
                // Nothing queued: nothing to move (and a ring of no slots, which the core's
                // bound gives a service of no sessions and no claims, has no remainder).
                if *len == 0 {
                    return;
                }
                for i in 0..*len {
                    let at = (*head + i) % slots.len();
                    if let Some(o) = &slots[at] {
                        f(i, o);
                    }
                    slots[at] = None;
                }
                *head = (*head + *len) % slots.len();
                *len = 0;
            }
        }
    }
}

impl Sink for Queue {
    fn event(&mut self, o: Output) {
        match self {
            // The core checks `room` first, so this stays within the limit.
            Queue::Heap { events, .. } => events.push_back(o),
            Queue::Ring { slots, head, len } => {
                // The core checks `room` against the most events the input can emit before
                // it changes anything, so this cannot fail; if it did (a core bug), the
                // panic poisons the handle rather than dropping an event.
                assert!(*len < slots.len(), "event bound exceeded");
                let i = (*head + *len) % slots.len();
                slots[i] = Some(o);
                *len += 1;
            }
        }
    }

    fn room(&self) -> usize {
        match self {
            Queue::Heap { events, limit } => limit.room(events.len()),
            Queue::Ring { slots, len, .. } => slots.len() - len,
        }
    }
}

impl Queue {
    /// The most events the queue may hold: the heap queue's limit, the ring's size.
    fn limit(&self) -> usize {
        match self {
            Queue::Heap { limit, .. } => limit.limit(),
            Queue::Ring { slots, .. } => slots.len(),
        }
    }

    /// Sets the heap queue's limit: `new` must be at least the core's bound at capacity,
    /// so an empty queue has room for any input. A ring's size is fixed: only its own
    /// size is accepted (a no-op). A limit below what is queued now is allowed: inputs
    /// are refused until a drain. Errors: `INVALID_ARGUMENT` (nothing changes).
    fn set_limit(&mut self, new: usize) -> Result<(), Fail> {
        match self {
            Queue::Heap { limit, .. } => limit
                .set(new)
                .map_err(|_| fencelock_result::InvalidArgument.into()),
            Queue::Ring { slots, .. } if new == slots.len() => Ok(()),
            _ => Err(fencelock_result::InvalidArgument.into()),
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
/// Not thread-safe: calls on one handle must not overlap, `const` ones (the queries)
/// included: a failing call records its error in the handle for
/// `fencelock_service_last_error`. Distinct handles are independent.
// `repr(C)`, so the tag (in `state`) is the handle's first eight bytes (asserted below).
// Written as an always-true `cfg_attr` because cbindgen does not expand one: the header
// keeps the type opaque (`header_is_current` fails if that ever changes).
#[cfg_attr(all(), repr(C))]
pub struct fencelock_service {
    state: HandleState,
    svc: Service,
    queue: Queue,
    owner: Owner,
}

const _: () = assert!(tag_first(core::mem::offset_of!(fencelock_service, state)));

impl Handle for fencelock_service {
    const TAG: u64 = u64::from_le_bytes(*b"fl:servc");
    fn state(&self) -> &HandleState {
        &self.state
    }
}

/// Where each part of a service's block goes.
struct Plan {
    layout: Layout,
    sessions: (usize, usize),
    session_index: (usize, usize),
    locks: (usize, usize),
    lock_index: (usize, usize),
    claims: (usize, usize),
    claim_index: (usize, usize),
    labels: (usize, usize),
    ring: (usize, usize),
    placed: bool,
}

const TOO_BIG: Error = Error::BadConfig("capacities too large for this address space");

/// The core's bound on the events of one input at capacity (`Capacity::max_events`:
/// every session open, every claim a hold, wait or watch) for a lock's `max_watchers`.
/// `None` where the core's figure saturates (it does not fit a `usize`).
fn ring_bound(cap: &fencelock_capacity, max_watchers: u32) -> Option<usize> {
    let bound = fencelock::Capacity::from(*cap).max_events(max_watchers);
    (bound != usize::MAX).then_some(bound)
}

/// The block for `cap` with an event ring of `ring_len` slots (0: the heap queue).
fn plan(cap: &fencelock_capacity, ring_len: usize, placed: bool) -> Result<Plan, Fail> {
    let too_big = Fail::Core(TOO_BIG);
    let (s, l, c) = (
        cap.sessions as usize,
        cap.locks as usize,
        cap.claims as usize,
    );
    // The core's own row limit, in the core's order, before anything is allocated (the
    // core checks it too, but only once the tables exist: gigabytes touched first).
    fencelock::check_rows(s)?;
    fencelock::check_rows(l)?;
    fencelock::check_rows(c)?;
    let mut layout = Layout::new::<fencelock_service>();
    let mut part = |array: Result<Layout, _>, n: usize| -> Result<(usize, usize), Fail> {
        let (grown, offset) = layout
            .extend(array.map_err(|_| too_big)?)
            .map_err(|_| too_big)?;
        layout = grown;
        Ok((offset, n))
    };
    let sessions = part(Layout::array::<SessionRow>(s), s)?;
    // The core's index buckets per row (row counts are below 2^31: the products cannot
    // overflow).
    let n = BUCKETS_PER_ROW;
    let session_index = part(Layout::array::<Bucket>(n * s), n * s)?;
    let locks = part(Layout::array::<LockRow>(l), l)?;
    let lock_index = part(Layout::array::<TaggedBucket>(n * l), n * l)?;
    let claims = part(Layout::array::<ClaimRow>(c), c)?;
    let claim_index = part(Layout::array::<Bucket>(n * c), n * c)?;
    // One label row per session: any session may carry a holder label.
    let labels = part(Layout::array::<LabelRow>(s), s)?;
    let ring = part(Layout::array::<Option<Output>>(ring_len), ring_len)?;
    Ok(Plan {
        layout: layout.pad_to_align(),
        sessions,
        session_index,
        locks,
        lock_index,
        claims,
        claim_index,
        labels,
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
    make: impl FnOnce(LabeledSliceStorage<'static>) -> Result<Service, Error>,
) -> Result<*mut fencelock_service, Error> {
    // SAFETY: the parts are disjoint, aligned and inside the block (Layout::extend).
    let sessions = unsafe { fill(mem, plan.sessions, || SessionRow::EMPTY) };
    // SAFETY: as above.
    let session_index = unsafe { fill(mem, plan.session_index, || Bucket::EMPTY) };
    // SAFETY: as above.
    let locks = unsafe { fill(mem, plan.locks, || LockRow::EMPTY) };
    // SAFETY: as above.
    let lock_index = unsafe { fill(mem, plan.lock_index, || TaggedBucket::EMPTY) };
    // SAFETY: as above.
    let claims = unsafe { fill(mem, plan.claims, || ClaimRow::EMPTY) };
    // SAFETY: as above.
    let claim_index = unsafe { fill(mem, plan.claim_index, || Bucket::EMPTY) };
    // SAFETY: as above.
    let labels = unsafe { fill(mem, plan.labels, || LabelRow::EMPTY) };
    let mut queue = if plan.placed {
        Queue::Ring {
            // SAFETY: as above.
            slots: unsafe { fill(mem, plan.ring, || None) },
            head: 0,
            len: 0,
        }
    } else {
        // Limit and bound are set below, once the service's config (a snapshot's, for a
        // restore) is known.
        Queue::Heap {
            events: VecDeque::new(),
            limit: EventLimit::UNBOUNDED,
        }
    };
    let svc = make(LabeledSliceStorage {
        tables: Tables {
            sessions,
            session_index,
            locks,
            lock_index,
            claims,
            claim_index,
        },
        labels,
    })?;
    if let Queue::Heap { limit, .. } = &mut queue {
        // The core's default: twice the bound (a host that never drains is refused with
        // `BUFFER_TOO_SMALL` instead of growing the queue without end), worked out in 64
        // bits as every binding's is.
        *limit = svc.default_event_limit();
    }
    let h = mem.cast::<fencelock_service>();
    // SAFETY: the handle sits at offset 0, aligned (the block's first part).
    unsafe {
        h.write(fencelock_service {
            state: HandleState::new::<fencelock_service>(),
            svc,
            queue,
            owner,
        });
        crate::handle::settle(h);
    };
    Ok(h)
}

/// Allocates a block for `cap` and builds a service in it; frees it on error.
fn create(
    cap: &fencelock_capacity,
    make: impl FnOnce(LabeledSliceStorage<'static>) -> Result<Service, Error>,
) -> Result<*mut fencelock_service, Fail> {
    let plan = plan(cap, 0, false)?;
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

/// The block of a placed service whose config allows `max_watchers` watchers per lock:
/// its event ring holds the core's bound at capacity.
fn placed_plan(cap: &fencelock_capacity, max_watchers: u32) -> Result<Plan, Fail> {
    // The row limit first (the core's order), then the ring's arithmetic.
    plan(cap, 0, true)?;
    let ring = ring_bound(cap, max_watchers).ok_or(Fail::Core(TOO_BIG))?;
    plan(cap, ring, true)
}

/// Builds a service in caller memory after checking it. `max_watchers` is the config's
/// (`init_in`), or `None` when only the service made will tell (`restore_in`: the
/// snapshot carries it): then the ring takes all of `mem` after the tables, and a ring
/// shorter than the bound for the restored config is `BUFFER_TOO_SMALL` (the service
/// is dropped unused; nothing else was touched). `out`, where the caller will write
/// the handle, must lie outside `mem[..mem_len]`.
///
/// # Safety
/// `mem` is NULL or valid for `mem_len` bytes, unused by anything else until freed.
unsafe fn place(
    mem: *mut c_void,
    mem_len: usize,
    out: *mut *mut fencelock_service,
    cap: &fencelock_capacity,
    max_watchers: Option<u32>,
    judge: impl FnOnce() -> Result<(), Error>,
    make: impl FnOnce(LabeledSliceStorage<'static>) -> Result<Service, Error>,
) -> Result<*mut fencelock_service, Fail> {
    if mem.is_null() {
        return Err(fencelock_result::NullParameter.into());
    }
    // No object is larger than PTRDIFF_MAX: a longer `mem_len` is not the memory's.
    let mem_len = buf_len(mem_len)?;
    if overlap(
        out as usize,
        core::mem::size_of::<*mut fencelock_service>(),
        mem as usize,
        mem_len,
    ) {
        return Err(fencelock_result::InvalidArgument.into());
    }
    judge()?;
    let plan = match max_watchers {
        Some(w) => placed_plan(cap, w)?,
        None => {
            let tables = plan(cap, 0, true)?;
            let slot = core::mem::size_of::<Option<Output>>();
            let rest = mem_len.saturating_sub(tables.ring.0) / slot;
            plan(cap, rest, true)?
        }
    };
    if !(mem as usize).is_multiple_of(plan.layout.align()) {
        return Err(fencelock_result::MisalignedMemory.into());
    }
    if mem_len < plan.layout.size() {
        return Err(fencelock_result::BufferTooSmall.into());
    }
    // The bytes the new service would take (its layout's size from `mem`: the rest of a
    // longer block is not written) must hold no live placed service (not freed yet), at
    // `mem` or further in, nor reach into one's bytes: building over it would empty its
    // tables under the handle its host still holds, which would still pass the handle
    // check — and a refused restore would leave it so. Known from the list of placed
    // services and the bytes each took, so `mem`, which may be uninitialised, is read
    // only where the list says a handle was written, and then only its tag and home: a
    // host that reused the memory without a `_free` has written over them, and such an
    // entry is no live service (it goes when this block is built). One that begins before
    // `mem` is not read (those bytes are not the caller's to lend here): not freed, it is
    // taken as live, and only its `_free` lets its bytes go.
    let start = mem as usize;
    let stop = start.saturating_add(plan.layout.size());
    let head = 8 + core::mem::size_of::<usize>(); // what `check` reads: tag and home
    let live_within = {
        let p = placed();
        p.range(..start)
            .any(|(&at, &len)| at.saturating_add(len) > start)
            || p.range(start..stop).any(|(&at, _)| {
                at.saturating_add(head) > stop
                    // SAFETY: `at - start + head <= plan.layout.size() <= mem_len` (checked
                    // above and here): inside `mem`, which the caller lends for reading and
                    // writing (the contract); aligned as a handle, since one was placed
                    // there. Its bytes may be anything a host wrote since, which `check`
                    // reads as plain integers and compares.
                    || unsafe {
                        check(mem.cast::<u8>().add(at - start).cast::<fencelock_service>())
                    }
                    .is_ok()
            })
    };
    if live_within {
        return Err(fencelock_result::InvalidArgument.into());
    }
    // SAFETY: non-NULL, aligned, big enough (checked), exclusively the service's (contract).
    let h = unsafe { build(mem.cast(), &plan, Owner::Caller, make) }?;
    // SAFETY: just built, and nobody else has it yet.
    let need = ring_bound(cap, unsafe { (*h).svc.config().max_watchers });
    if need.is_none_or(|n| n > plan.ring.1) {
        // SAFETY: built above, never handed out; the memory is the caller's.
        end(unsafe { &*h });
        // SAFETY: as above.
        unsafe { ptr::drop_in_place(h) };
        return Err(fencelock_result::BufferTooSmall.into());
    }
    let mut p = placed();
    // What the list held inside these bytes was no live service (checked above).
    p.retain(|&at, _| !(start..stop).contains(&at));
    p.insert(h as usize, plan.layout.size());
    Ok(h)
}

/// The addresses of the services placed in caller memory (`_init_in`, `_restore_in`) and
/// not freed yet, each with the bytes it took (its layout's size): how [`place`] tells a
/// block that holds, or overlaps, a live service without reading memory that may be
/// uninitialised. One entry per live placed service.
static PLACED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

/// [`PLACED`], whatever a panic elsewhere left it as (each change is one insert or remove).
fn placed() -> MutexGuard<'static, BTreeMap<usize, usize>> {
    PLACED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The body of every extern function on a service handle (see [`call`]).
///
/// # Safety
/// As [`call`].
unsafe fn service_call<P: crate::handle::HandlePtr<Target = fencelock_service>, A>(
    svc: P,
    args: impl FnOnce() -> Result<A, Fail>,
    body: impl FnOnce(P::Ref<'_>, A) -> Result<(), Fail>,
) -> fencelock_result {
    // SAFETY: forwarded contract.
    unsafe { call(svc, args, body) }
}

/// [`call`] for an input: `reply` is checked first, then `args` convert the other
/// arguments; `f` runs the core with the service's queue as its sink, and its reply is
/// written to `*reply`, with `pending` the events now queued. Any failure (a refused
/// argument, the core's refusal, a panic) leaves `*reply` zeroed (kind `NONE`) instead:
/// written once either way, after the call, rather than zeroed first and written again
/// (measured: about 10 instructions an acquire + release). A refusal by the core leaves
/// the events of the advance to `now` queued (they stand: the core's rule).
///
/// # Safety
/// As [`call`]; `reply` NULL or writable.
unsafe fn service_input<A>(
    svc: *mut fencelock_service,
    reply: *mut fencelock_reply,
    args: impl FnOnce() -> Result<A, Fail>,
    f: impl FnOnce(&mut Service, &mut Queue, A) -> Result<Reply, Error>,
) -> fencelock_result {
    let args = || -> Result<_, Fail> { Ok((out(reply)?, args()?)) };
    // SAFETY: forwarded contract.
    let result = unsafe {
        call(svc, args, |h, (dst, a)| {
            let r = f(&mut h.svc, &mut h.queue, a)?;
            set(dst, reply_out(&r, &h.queue))
        })
    };
    if result != fencelock_result::Ok && !reply.is_null() && reply.is_aligned() {
        // SAFETY: non-NULL, aligned, writable (contract); nothing else holds it now.
        unsafe { put(reply, fencelock_reply::NONE) };
    }
    result
}

/// The caller's reply to an applied input: the core's `Reply` converted, with `pending`
/// the events now queued (saturated: the queue's limit may be set past `u32::MAX`).
/// Cost: O(1).
#[inline(always)]
fn reply_out(r: &Reply, queue: &Queue) -> fencelock_reply {
    fencelock_reply {
        pending: u32::try_from(queue.len()).unwrap_or(u32::MAX),
        ..fencelock_reply::from_core(r)
    }
}

impl fencelock_service {
    /// Writes every queued event as `[len u16 LE][frame]` into `dst`, all or nothing:
    /// `Ok(bytes written)`, or `Err((bytes needed, BUFFER_TOO_SMALL))` dequeuing nothing.
    fn drain_frames(&mut self, dst: &mut [u8]) -> Result<usize, (usize, Fail)> {
        let mut frame = [0u8; FENCELOCK_MAX_FRAME_LEN];
        let mut need = 0usize;
        for i in 0..self.queue.len() {
            let o = self
                .queue
                .get(i)
                .ok_or((0, Fail::Code(fencelock_result::UnknownError)))?;
            need +=
                FENCELOCK_FRAME_PREFIX_LEN + o.to_frame(&mut frame).map_err(|e| (0, e.into()))?;
        }
        if need > dst.len() {
            return Err((need, fencelock_result::BufferTooSmall.into()));
        }
        let mut at = 0;
        while let Some(o) = self.queue.pop() {
            // Cannot fail: a MAX_FRAME_LEN buffer fits every event (and did just above).
            let n = o.to_frame(&mut frame).map_err(|e| (0, e.into()))?;
            dst[at..at + 2].copy_from_slice(&(n as u16).to_le_bytes());
            dst[at + 2..at + 2 + n].copy_from_slice(&frame[..n]);
            at += 2 + n;
        }
        Ok(at)
    }
}

/// The core's verdict on a config, given before the row limit is checked and the tables
/// are allocated — the core's own order (config, then rows), so a config wrong in both
/// ways gets the core's error. Cost: O(1).
fn judge_config(config: &fencelock_config) -> Result<(), Error> {
    config.core().validate()
}

/// The core's verdict on what a snapshot says before the row limit matters — its magic,
/// version, header and config (`fencelock::snapshot_config`) — given before this library
/// checks the row limit and allocates. A later refusal (capacity, records) is left to the
/// real restore. Cost: O(1).
fn judge_snapshot(bytes: &[u8]) -> Result<(), Error> {
    fencelock::snapshot_config(bytes).map(|_| ())
}

/// `Some(n)` for a request number, `None` for 0 ("no request number").
fn request(n: u64) -> Option<u64> {
    (n != 0).then_some(n)
}

// ===================================================================== lifecycle

/// Creates a service with empty tables of the configured capacities, allocated by this
/// library, and stores its handle in `*out`.
///
/// Errors: `NULL_PARAMETER`, `BAD_CONFIG` (a `max_name_len` outside 1..=64, then a table
/// of more than 2^31 − 1 rows — the core's `MAX_ROWS`, checked before anything is
/// allocated — or not enough memory). Cost: O(capacity) time; memory
/// `fencelock_service_layout`'s size (minus the event ring) plus queued events, at most
/// the event limit (`fencelock_service_event_limit`: by default twice the ring's length;
/// an input that could overflow it is refused with `BUFFER_TOO_SMALL`, so a host must
/// drain, ideally after every input).
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
        judge_config(&config)?;
        let h = create(&config.capacity, |s| LockService::new(s, config.core()))?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { put(dst, h) };
        Ok(())
    })
}

/// Ends a service and frees what this library allocated for it. `NULL` is fine (does
/// nothing). Must not be called twice on the same handle, and the handle must not be
/// used afterwards. For a service placed with `_init_in`/`_restore_in`, the memory is
/// the caller's again once this returns, marked ended: a second free does nothing and
/// any other call on it is `INVALID_HANDLE` (until the caller reuses the memory). A
/// handle of another kind frees nothing. Cost: O(1) plus the queued events.
///
/// # Safety
/// `svc` is NULL or a live handle, not used concurrently or after this call.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_free(svc: *mut fencelock_service) {
    let _ = ffi_panic_boundary!({
        // SAFETY: NULL or a handle (contract). NULL, another kind or an ended service:
        // nothing to free.
        if unsafe { check(svc) }.is_err() {
            return Ok(());
        }
        // SAFETY: a live service (checked); read before it is dropped.
        let owner = unsafe { (*svc).owner };
        // A placed service's tag is ended and the service unlisted under the lock that
        // `place` reads listed tags under, so the two never overlap. (Dropping a service
        // takes no lock.)
        let listed = matches!(owner, Owner::Caller).then(placed);
        // SAFETY: as above. Ended first, so a second free (or any later call) is refused
        // for certain while the memory is the caller's.
        end(unsafe { &*svc });
        // SAFETY: a live service, dropped exactly once (its tag is gone now).
        unsafe { ptr::drop_in_place(svc) };
        match owner {
            // SAFETY: allocated by `create` with exactly this layout.
            Owner::Library(layout) => unsafe { alloc::dealloc(svc.cast(), layout) },
            Owner::Caller => {
                if let Some(mut p) = listed {
                    p.remove(&(svc as usize));
                }
            }
        }
        Ok(())
    });
}

/// The size and alignment of the memory `fencelock_service_init_in` /
/// `fencelock_service_restore_in` need for these capacities and the default
/// `max_watchers` (`FENCELOCK_DEFAULT_MAX_WATCHERS`; for another value use
/// `fencelock_service_layout_watchers`): the handle, the tables and a fixed event ring
/// of the most events one input can emit at capacity, S + 2·C + (2·C + 1)·min(4, C) for
/// S sessions and C claims.
///
/// Errors: `NULL_PARAMETER`, `BAD_CONFIG` (a table of more than 2^31 − 1 rows, or sizes
/// that overflow). Cost: O(1).
///
/// # Safety
/// `capacity` is NULL or valid; `size` and `align` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_layout(
    capacity: *const fencelock_capacity,
    size: *mut usize,
    align: *mut usize,
) -> fencelock_result {
    // SAFETY: forwarded contract.
    unsafe {
        fencelock_service_layout_watchers(
            capacity,
            crate::types::FENCELOCK_DEFAULT_MAX_WATCHERS,
            size,
            align,
        )
    }
}

/// `fencelock_service_layout` for a config whose `max_watchers` is `max_watchers`: the
/// event ring holds S + 2·C + (2·C + 1)·min(`max_watchers`, C) events (S + 2·C for 0,
/// watches off), the core's bound at capacity.
///
/// Errors: as `fencelock_service_layout`. Cost: O(1).
///
/// # Safety
/// As `fencelock_service_layout`.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_layout_watchers(
    capacity: *const fencelock_capacity,
    max_watchers: u32,
    size: *mut usize,
    align: *mut usize,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: NULL or valid (contract).
        let cap = unsafe { arg(capacity) }?;
        let (size, align) = (out(size)?, out(align)?);
        let plan = placed_plan(cap, max_watchers)?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe {
            put(size, plan.layout.size());
            put(align, plan.layout.align());
        }
        Ok(())
    })
}

/// Creates a service inside `mem` (for embedders that keep its memory themselves: a
/// static array, an arena). Its tables and events are all in `mem`, and its inputs,
/// drains and reads allocate nothing (this call adds its address to the library's small
/// set of placed services, and error texts are formatted on the heap: see the README):
/// events queue in a fixed ring inside `mem`, and the core refuses an input with `BUFFER_TOO_SMALL` (changing
/// nothing) while the ring has less room than the most events that input could emit
/// (`fencelock_service_max_events`): drain the ring and send it again. An empty ring
/// always has room. Size `mem` with `fencelock_service_layout_watchers` for the config's
/// `max_watchers` (`fencelock_service_layout` for the default).
///
/// The memory must stay valid, unmoved and untouched until `fencelock_service_free`.
/// A block whose bytes the service would take (the layout's size from `mem`) hold a live
/// placed service (not freed), at `mem` or further in, or reach into the bytes one took,
/// is refused with `INVALID_ARGUMENT` before anything is written, here and by
/// `fencelock_service_restore_in`, so a refused call leaves that service as it was; the
/// rest of a longer block stays the caller's, and may hold another service. (The library
/// keeps the address and size of each placed service not freed, so `mem` may be
/// uninitialised.)
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT` (`mem_len` past `PTRDIFF_MAX`,
/// `out_service` inside `mem[..mem_len]`, where the service would overwrite it, or a
/// live service's bytes overlapping the ones it would take),
/// `BAD_CONFIG` (as `fencelock_service_new`), `MISALIGNED_MEMORY`, `BUFFER_TOO_SMALL`
/// (`mem_len` below the layout's size for the config's `max_watchers`).
/// Cost: O(capacity).
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
            place(
                mem,
                mem_len,
                dst,
                &config.capacity,
                Some(config.max_watchers),
                || judge_config(&config),
                |s| LockService::new(s, config.core()),
            )
        }?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { put(dst, h) };
        Ok(())
    })
}

/// Creates a service from snapshot bytes (`fencelock_service_snapshot`) with tables of
/// `capacity`; lock-delay and the name limit come from the snapshot. Every invariant is
/// checked before the bytes are accepted. The bytes carry no checksum: store them with
/// one of your own (a revision lowered by damage restores as a consistent state).
///
/// Errors, in the core's order: `NULL_PARAMETER`, `BAD_MAGIC`, `UNSUPPORTED_VERSION`,
/// `CORRUPT_SNAPSHOT` (a version that is no `u16`, or a header cut short or bad), `BAD_CONFIG`
/// (its config, then a table of more than 2^31 − 1 rows, or not enough memory),
/// `CAPACITY_EXCEEDED` (the snapshot
/// does not fit), `CORRUPT_SNAPSHOT` (a record breaks an invariant, is cut short or is bad).
/// Nothing is created on error. Cost: O(capacity + snapshot length).
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
    // SAFETY: forwarded contract.
    ffi_panic_boundary!({ unsafe { restore(capacity, snapshot, len, || Ok(None), out_service) } })
}

/// The body of `fencelock_service_restore` and `_restore_keyed`: the arguments in their
/// order (`key` before the out-pointer, as the keyed function takes them), the snapshot's header, then the tables made and
/// the snapshot restored into them, keyed when `key` gives one.
///
/// # Safety
/// As `fencelock_service_restore`; `key` reads only what its caller may.
unsafe fn restore(
    capacity: *const fencelock_capacity,
    snapshot: *const u8,
    len: usize,
    key: impl FnOnce() -> Result<Option<fencelock::NameKey>, Fail>,
    out_service: *mut *mut fencelock_service,
) -> Result<(), Fail> {
    // SAFETY: NULL or valid (contract).
    let cap = unsafe { arg(capacity) }?;
    // SAFETY: NULL or valid for len bytes (contract).
    let bytes = unsafe { bytes(snapshot, len) }?;
    let key = key()?;
    let dst = out(out_service)?;
    judge_snapshot(bytes)?;
    let h = create(cap, |s| {
        match key {
            Some(key) => LockService::restore_keyed(s, bytes, key),
            None => LockService::restore(s, bytes),
        }
        .map_err(|(_, e)| e)
    })?;
    // SAFETY: checked non-NULL, writable (contract).
    unsafe { put(dst, h) };
    Ok(())
}

/// `fencelock_service_restore` with the service's indexes keyed by `key[..key_len]`
/// (exactly `FENCELOCK_NAME_KEY_LEN` bytes, from a random source; keep it secret) as its
/// rows are loaded: the core's `restore_keyed`. The way to restore bytes of a source that
/// may choose them: lock names, or session ids, chosen to share one probe run of an index
/// make an unkeyed restore O(n²) (and `fencelock_service_set_name_key` after it comes too
/// late for that). The service answers as one restored unkeyed and then keyed.
///
/// Errors: the arguments', one by one in their order (`NULL_PARAMETER` for a NULL
/// pointer, `INVALID_ARGUMENT` for a snapshot length past `PTRDIFF_MAX` or a key of
/// another length), then the snapshot's, as `fencelock_service_restore` judges them.
/// Nothing is created on error. Cost: as
/// `fencelock_service_restore`, with each name, each session away from its home row and
/// each claim of a lock with two or more hashed by SipHash-1-3.
///
/// # Safety
/// As `fencelock_service_restore`; `key` NULL or valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_restore_keyed(
    capacity: *const fencelock_capacity,
    snapshot: *const u8,
    len: usize,
    key: *const u8,
    key_len: usize,
    out_service: *mut *mut fencelock_service,
) -> fencelock_result {
    ffi_panic_boundary!({
        // SAFETY: forwarded contract; `key` NULL or valid for `key_len` bytes (contract).
        unsafe {
            restore(
                capacity,
                snapshot,
                len,
                || name_key(key, key_len).map(Some),
                out_service,
            )
        }
    })
}

/// `fencelock_service_restore` into caller memory (see `fencelock_service_init_in`).
/// The event ring takes all of `mem` after the tables; it must hold the bound for the
/// snapshot's `max_watchers` (size `mem` with `fencelock_service_layout_watchers`),
/// else `BUFFER_TOO_SMALL` once the snapshot is read (nothing is created).
/// The snapshot must not lie in `mem[..mem_len]` (which is overwritten while the
/// snapshot is read): overlapping ranges are refused with `INVALID_ARGUMENT`, as is an
/// `out_service` inside `mem[..mem_len]`.
///
/// Errors: those of both, and `INVALID_ARGUMENT`. Cost: O(`mem_len` + snapshot length):
/// every slot of the ring, all of `mem` after the tables, is written (give it what the
/// layout asks for, not more).
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
            place(
                mem,
                mem_len,
                dst,
                &cap,
                None,
                || judge_snapshot(bytes),
                |s| LockService::restore(s, bytes).map_err(|(_, e)| e),
            )
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
// Every input carries the host's `now` (the service's tick) and writes the caller's reply
// to `*reply`. Before applying it the core advances to `now` exactly as
// `fencelock_service_tick` would; the events of that advance (expiries, timeouts, grants)
// are queued and STAND even if the input itself is then refused. Errors, in the core's
// order (docs/SPEC.md §5): `TIME_WENT_BACKWARDS` (now earlier than the service's; nothing
// changes), `BUFFER_TOO_SMALL` (the event queue has less room than the input could
// need: its limit, or a placed service's ring, minus the events queued; nothing changes),
// then — after the advance — the input's own checks.
// A refused input changes nothing beyond the advance to `now`.
//
// The ABI's own refusals come before the core sees anything, and change nothing (not
// even time): `NULL_PARAMETER` (NULL handle, `reply` or name), `INVALID_UTF8` (a name
// that is not UTF-8), `INVALID_ARGUMENT` (a mode or wait outside its enum, a length past
// `PTRDIFF_MAX`) — inputs the core cannot even be given — and `PANIC` (poisoned handle).
//
// `*reply` is written on every return once `reply` is checked non-NULL: the reply on
// `OK`, a zeroed one (kind `NONE`) on any error. `request` is the idempotent-retry
// number, 0 = none: a repeat of the session's latest number applies nothing twice and
// replies as the original did (an acquire's brought up to date).

/// Opens a session expiring `ttl` ticks after `now`. Replies `OPENED` (`session`,
/// `expires_at`).
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `BAD_TTL` (0),
/// `DEADLINE_OVERFLOW`, `CAPACITY_EXCEEDED`. Cost: the advance, then O(log sessions).
///
/// # Safety
/// `svc` NULL or a live handle; `reply` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_open_session(
    svc: *mut fencelock_service,
    now: u64,
    ttl: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `reply` checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || Ok(()),
            |s, q, ()| s.open_session(Tick(now), ttl, q),
        )
    }
}

/// Opens a session labelled `label[..label_len]` (UTF-8, at most `FENCELOCK_MAX_LABEL_LEN`
/// bytes; empty = no label, but `label` is not NULL even then: `NULL_PARAMETER`), expiring
/// `ttl` ticks after `now`. The label is shown with
/// the session (`fencelock_service_session`), its holds and waits (`_holders`,
/// `_waiters`) and in the `HOLDER_CHANGED` events its holds cause. Replies `OPENED`
/// (`session`, `expires_at`).
///
/// Errors: `NULL_PARAMETER`, `INVALID_UTF8` and `LABEL_TOO_LONG` (the label is judged
/// before the core is given the input, so these change nothing, not even time), then as
/// `fencelock_service_open_session`. Cost: O(label length), then as open_session.
///
/// # Safety
/// `svc` NULL or a live handle; `label` NULL or valid for `label_len` bytes; `reply`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_open_labeled(
    svc: *mut fencelock_service,
    now: u64,
    ttl: u64,
    label: *const u8,
    label_len: usize,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `label` NULL or valid for `label_len` bytes (read and
    // copied into the core's `Label` before anything is written); `reply` checked, then
    // writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || Ok(Label::new(name(label, label_len)?)?),
            |s, q, label| s.open_labeled(Tick(now), ttl, label, q),
        )
    }
}

/// Keeps a session alive: its deadline becomes `now` + its ttl. Replies `KEPT_ALIVE`
/// (`expires_at`), the client's acknowledgement (`fencelock_keeper_keep_alive_acked`).
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `UNKNOWN_SESSION`,
/// `STALE_REQUEST`, `REQUEST_REUSED`, `DEADLINE_OVERFLOW`. Cost: the advance, then
/// O(log sessions).
///
/// # Safety
/// `svc` NULL or a live handle; `reply` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_keep_alive(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `reply` checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || Ok(()),
            |s, q, ()| s.keep_alive(Tick(now), SessionId(session), request(request_number), q),
        )
    }
}

/// Closes a session. Replies `CLOSED`; queues `RELEASED` (reason `CLOSED`) per hold,
/// then the `GRANTED`s this frees; a watched lock's watchers get `HOLDER_CHANGED` after
/// each.
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `UNKNOWN_SESSION`,
/// `STALE_REQUEST`, `REQUEST_REUSED`. Cost: the advance, then O(its claims + events).
///
/// # Safety
/// `svc` NULL or a live handle; `reply` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_close_session(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `reply` checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || Ok(()),
            |s, q, ()| s.close_session(Tick(now), SessionId(session), request(request_number), q),
        )
    }
}

/// Acquires the lock named by `lock[..lock_len]` (UTF-8) in `mode` (a `fencelock_mode`),
/// waiting as `wait` (a `fencelock_wait`) says; `wait_until` is the deadline tick for
/// `FENCELOCK_WAIT_UNTIL` and ignored otherwise. Replies `GRANTED` (`mode`, the fencing
/// `token`), `QUEUED` (`mode`, `position`) or `BUSY`; a repeated request number may
/// also reply `HOLD_ENDED` or `WAIT_ENDED`. Queues nothing for the caller; a grant at
/// once queues `HOLDER_CHANGED` (`GRANTED`) to each watcher of the lock.
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `UNKNOWN_SESSION`,
/// `EMPTY_NAME`, `NAME_TOO_LONG`, `STALE_REQUEST`, `REQUEST_REUSED`, `LIMIT_MISMATCH`
/// (the name is a live semaphore), `ALREADY_QUEUED`, `MODE_MISMATCH`,
/// `CAPACITY_EXCEEDED`, in that order; `INVALID_ARGUMENT` before the core for a mode
/// other than `EXCLUSIVE` / `SHARED` (`PERMITS` needs `fencelock_service_acquire_permits`).
/// Cost: the advance, then O(name length + log claims).
///
/// # Safety
/// `svc` NULL or a live handle; `lock` NULL or valid for `lock_len` bytes; `reply` NULL
/// or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fencelock_service_acquire(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    mode: u32,
    wait: u32,
    wait_until: u64,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `reply`
    // checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || {
                Ok((
                    name(lock, lock_len)?,
                    mode_arg(mode)?,
                    wait_arg(wait, wait_until)?,
                ))
            },
            |s, q, (lock, mode, wait)| {
                s.acquire(
                    Tick(now),
                    SessionId(session),
                    lock,
                    mode,
                    wait,
                    request(request_number),
                    q,
                )
            },
        )
    }
}

/// Acquires `count` of the `limit` permits of the semaphore named by `lock[..lock_len]`
/// (UTF-8), waiting as `wait` says (as `fencelock_service_acquire`). A name is a
/// semaphore while it has live holds or waits from a permits acquire; its limit is
/// theirs, and travels with every acquire (nothing is declared or remembered once the
/// name is idle). Grants are strict FIFO: the head waiter is granted when its count fits
/// the permits not in use; a large request at the head is never overtaken. Every grant
/// gets its own fencing token. Replies `GRANTED` / `QUEUED` with `mode` `PERMITS` and
/// the reply's `count` and `limit`, or `BUSY`; a repeated request number may also reply
/// `HOLD_ENDED` or `WAIT_ENDED`. Queues nothing for the caller; a grant at once queues
/// `HOLDER_CHANGED` (`GRANTED`) to each watcher of the lock.
///
/// Errors, in the core's order: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then
/// `UNKNOWN_SESSION`, `EMPTY_NAME`, `NAME_TOO_LONG`, `BAD_PERMITS` (not 1 <= `count` <=
/// `limit`), `STALE_REQUEST`, `REQUEST_REUSED`, `LIMIT_MISMATCH` (the name is a
/// semaphore of another limit, or a plain lock in use), `ALREADY_QUEUED`,
/// `MODE_MISMATCH` (the session holds it with another count), `CAPACITY_EXCEEDED`.
/// Before the core: `NULL_PARAMETER`, `INVALID_UTF8`, `INVALID_ARGUMENT` (a wait outside
/// its enum). Cost: the advance, then O(name length + log claims).
///
/// # Safety
/// As `fencelock_service_acquire`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fencelock_service_acquire_permits(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    count: u32,
    limit: u32,
    wait: u32,
    wait_until: u64,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `reply`
    // checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || Ok((name(lock, lock_len)?, wait_arg(wait, wait_until)?)),
            |s, q, (lock, wait)| {
                s.acquire(
                    Tick(now),
                    SessionId(session),
                    lock,
                    Mode::Permits { count, limit },
                    wait,
                    request(request_number),
                    q,
                )
            },
        )
    }
}

/// Starts watching the holders of the lock named by `lock[..lock_len]` (UTF-8) for
/// `session`. Replies `WATCHING` (`holders`); queues, for the watcher itself, one
/// `HOLDER_CHANGED` event (change `HOLDING`) per current holder in grant order, and from
/// then on one per holder change of that lock (`GRANTED`, `RELEASED`, `CLOSED`,
/// `EXPIRED`), each right after the event that tells the holder, until the session
/// unwatches, closes or expires. A watch takes a claim row; a session may watch a name it
/// holds or waits for, and acquire a name it watches. An election is watched by its name.
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `UNKNOWN_SESSION`,
/// `EMPTY_NAME`, `NAME_TOO_LONG`, `STALE_REQUEST`, `REQUEST_REUSED`, `ALREADY_WATCHING`,
/// `CAPACITY_EXCEEDED` (the lock's `max_watchers`, 0 = watches off; then the claims
/// table, then the locks table), in the core's order. Cost: the advance, then O(name
/// length + holders of the lock).
///
/// # Safety
/// As `fencelock_service_release`.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_watch(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `reply`
    // checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || name(lock, lock_len),
            |s, q, lock| {
                s.watch(
                    Tick(now),
                    SessionId(session),
                    lock,
                    request(request_number),
                    q,
                )
            },
        )
    }
}

/// Stops `session` watching the lock named by `lock[..lock_len]`. Replies `UNWATCHED`;
/// no `HOLDER_CHANGED` for that lock reaches the session afterwards.
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `UNKNOWN_SESSION`,
/// `EMPTY_NAME`, `NAME_TOO_LONG`, `STALE_REQUEST`, `REQUEST_REUSED`, `NOT_WATCHING`.
/// Cost: the advance, then O(name length + log claims).
///
/// # Safety
/// As `fencelock_service_release`.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_unwatch(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `reply`
    // checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || name(lock, lock_len),
            |s, q, lock| {
                s.unwatch(
                    Tick(now),
                    SessionId(session),
                    lock,
                    request(request_number),
                    q,
                )
            },
        )
    }
}

/// Releases a held lock. Replies `RELEASED` (`token`, no longer good); queues `GRANTED`
/// to the head of its queue. A watched lock's watchers get `HOLDER_CHANGED`
/// (`RELEASED`) first, then one (`GRANTED`) after each grant.
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `UNKNOWN_SESSION`,
/// `EMPTY_NAME`, `NAME_TOO_LONG`, `STALE_REQUEST`, `REQUEST_REUSED`, `NOT_HOLDER`.
/// Cost: the advance, then O(name length + log claims + events).
///
/// # Safety
/// `svc` NULL or a live handle; `lock` NULL or valid for `lock_len` bytes; `reply` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_release(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `reply`
    // checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || name(lock, lock_len),
            |s, q, lock| {
                s.release(
                    Tick(now),
                    SessionId(session),
                    lock,
                    request(request_number),
                    q,
                )
            },
        )
    }
}

/// Releases `session`'s hold on the lock named by `lock[..lock_len]` only if it is the
/// hold granted with `token`, exactly as `fencelock_service_release` would (the same
/// `RELEASED` reply and events). A session holds a lock at most once, so the token names
/// one hold: if the session holds the lock with another token (it took the lock again
/// after that hold ended), that hold stays and the call is refused with `NOT_HOLDER`.
/// For a caller that names a hold by its token (an operator forcing out a hold read from
/// `fencelock_service_holders`, a retry without a request number), so that a repeat
/// cannot release the session's next hold. A request number used for it covers the
/// token: the same number on a `release` of the lock or a `release_hold` with another
/// token is `REQUEST_REUSED`; its repeat replays the recorded `RELEASED`.
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `UNKNOWN_SESSION`,
/// `EMPTY_NAME`, `NAME_TOO_LONG`, `STALE_REQUEST`, `REQUEST_REUSED`, `NOT_HOLDER` (also
/// when the session holds the lock with another token), as release. Cost: as release.
///
/// # Safety
/// As `fencelock_service_release`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fencelock_service_release_hold(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    token: u64,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `reply`
    // checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || name(lock, lock_len),
            |s, q, lock| {
                s.release_hold(
                    Tick(now),
                    SessionId(session),
                    lock,
                    Token(token),
                    request(request_number),
                    q,
                )
            },
        )
    }
}

/// Withdraws a queued acquire. Replies `CANCELLED`; queues any `GRANTED` it unblocks,
/// each followed by `HOLDER_CHANGED` (`GRANTED`) to the lock's watchers.
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL`, then `UNKNOWN_SESSION`,
/// `EMPTY_NAME`, `NAME_TOO_LONG`, `STALE_REQUEST`, `REQUEST_REUSED`, `NOT_QUEUED`.
/// Cost: the advance, then O(name length + log claims + events).
///
/// # Safety
/// `svc` NULL or a live handle; `lock` NULL or valid for `lock_len` bytes; `reply` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_cancel(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `reply`
    // checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || name(lock, lock_len),
            |s, q, lock| {
                s.cancel(
                    Tick(now),
                    SessionId(session),
                    lock,
                    request(request_number),
                    q,
                )
            },
        )
    }
}

/// Advances logical time to `now`: expiries (`SESSION_EXPIRED`, `RELEASED`), wait
/// timeouts (`WAIT_TIMED_OUT`), the end of lock-delays, then grants (`GRANTED`), in that
/// order — what every other input does first. Call it when
/// `fencelock_service_poll_timeout`'s tick comes due; earlier or repeated calls are
/// harmless. It has no reply (its frame, through `fencelock_service_handle_frame`,
/// replies `TICKED`).
///
/// Errors: `TIME_WENT_BACKWARDS`, `BUFFER_TOO_SMALL` (nothing changed). Cost: O(1) with
/// nothing due, else O(log n) per due deadline plus the events.
///
/// # Safety
/// `svc` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_tick(
    svc: *mut fencelock_service,
    now: u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live (contract).
    unsafe {
        service_call(
            svc,
            || Ok(()),
            |h: &mut fencelock_service, ()| Ok(h.svc.tick(Tick(now), &mut h.queue)?),
        )
    }
}

/// Stands `session` as a candidate in `election` (an exclusive acquire that waits
/// forever): replies `GRANTED` = it leads, the token is its epoch; `QUEUED` = it waits in
/// line, and a `GRANTED` event promotes it. A repeated request number whose claim has
/// ended since replies `HOLD_ENDED` or `WAIT_ENDED`, as an acquire's does.
///
/// Errors: those of `fencelock_service_acquire`. Cost: as acquire.
///
/// # Safety
/// `svc` NULL or a live handle; `election` NULL or valid for `election_len` bytes;
/// `reply` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_campaign(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    election: *const u8,
    election_len: usize,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `election` NULL or valid for `election_len` bytes;
    // `reply` checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || name(election, election_len),
            |s, q, election| {
                s.campaign(
                    Tick(now),
                    SessionId(session),
                    election,
                    request(request_number),
                    q,
                )
            },
        )
    }
}

/// Withdraws `session` from `election` (whether it leads is decided at `now`): steps
/// down if it leads (replies `RELEASED`; the next candidate is granted a higher epoch),
/// else leaves the queue (replies `CANCELLED`).
///
/// Errors: those of release / cancel (`NOT_QUEUED` if it is neither leader nor
/// candidate). Cost: as release.
///
/// # Safety
/// `svc` NULL or a live handle; `election` NULL or valid for `election_len` bytes;
/// `reply` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_resign(
    svc: *mut fencelock_service,
    now: u64,
    session: u64,
    election: *const u8,
    election_len: usize,
    request_number: u64,
    reply: *mut fencelock_reply,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `election` NULL or valid for `election_len` bytes;
    // `reply` checked, then writable (contract).
    unsafe {
        service_input(
            svc,
            reply,
            || name(election, election_len),
            |s, q, election| {
                s.resign(
                    Tick(now),
                    SessionId(session),
                    election,
                    request(request_number),
                    q,
                )
            },
        )
    }
}

// ===================================================================== batches

/// Kinds of `fencelock_op`, as the numbers a C caller writes.
const OP_OPEN_SESSION: u32 = fencelock_op_kind::OpenSession as u32;
const OP_KEEP_ALIVE: u32 = fencelock_op_kind::KeepAlive as u32;
const OP_CLOSE_SESSION: u32 = fencelock_op_kind::CloseSession as u32;
const OP_ACQUIRE: u32 = fencelock_op_kind::Acquire as u32;
const OP_RELEASE: u32 = fencelock_op_kind::Release as u32;
const OP_CANCEL: u32 = fencelock_op_kind::Cancel as u32;
const OP_WATCH: u32 = fencelock_op_kind::Watch as u32;
const OP_UNWATCH: u32 = fencelock_op_kind::Unwatch as u32;
const OP_CAMPAIGN: u32 = fencelock_op_kind::Campaign as u32;
const OP_RESIGN: u32 = fencelock_op_kind::Resign as u32;
const OP_RELEASE_HOLD: u32 = fencelock_op_kind::ReleaseHold as u32;

// `n` is judged against the op, the largest of the three elements.
const _: () = assert!(
    core::mem::size_of::<fencelock_reply>() <= core::mem::size_of::<fencelock_op>()
        && core::mem::size_of::<fencelock_result>() <= core::mem::size_of::<fencelock_op>()
);

/// One op of a batch: its arguments checked and converted in the order its typed function
/// checks them (the name, then mode, then wait), then the core, at `now`.
///
/// # Safety
/// `op` valid for reading the fields its `kind` uses (the others may be uninitialized:
/// each field is read on its own, never the whole struct); `lock` NULL or valid for
/// `lock_len` bytes when `kind` names a lock.
unsafe fn apply_op(
    s: &mut Service,
    q: &mut Queue,
    now: Tick,
    op: *const fencelock_op,
) -> Result<Reply, Fail> {
    // Each field is read only by the kinds that use it: the others are documented as
    // ignored, so a caller may leave them unset — and a typed copy of the whole struct
    // would read those (undefined behaviour for an integer or pointer left unset).
    macro_rules! field {
        ($f:ident) => {
            // SAFETY: `op` valid for its kind's fields (the caller's contract), read in
            // place without a reference to the whole struct.
            unsafe { core::ptr::addr_of!((*op).$f).read() }
        };
    }
    let session = || SessionId(field!(session));
    let req = || request(field!(request_number));
    let lock = || {
        let (at, len) = (field!(lock), field!(lock_len));
        // SAFETY: read only for the kinds that name a lock (the caller's contract).
        unsafe { name(at, len) }
    };
    let reply = match field!(kind) {
        OP_OPEN_SESSION => s.open_session(now, field!(ttl), q),
        OP_KEEP_ALIVE => s.keep_alive(now, session(), req(), q),
        OP_CLOSE_SESSION => s.close_session(now, session(), req(), q),
        OP_ACQUIRE => {
            let lock = lock()?;
            // `count` and `limit` only with `PERMITS`, `wait_until` only with `UNTIL`.
            let mode = match field!(mode) {
                m if m == crate::types::fencelock_mode::Permits as u32 => {
                    op_mode(m, field!(count), field!(limit))?
                }
                m => op_mode(m, 0, 0)?,
            };
            let wait = match field!(wait) {
                w if w == crate::types::fencelock_wait::Until as u32 => {
                    wait_arg(w, field!(wait_until))?
                }
                w => wait_arg(w, 0)?,
            };
            s.acquire(now, session(), lock, mode, wait, req(), q)
        }
        OP_RELEASE => s.release(now, session(), lock()?, req(), q),
        OP_CANCEL => s.cancel(now, session(), lock()?, req(), q),
        OP_WATCH => s.watch(now, session(), lock()?, req(), q),
        OP_UNWATCH => s.unwatch(now, session(), lock()?, req(), q),
        OP_CAMPAIGN => s.campaign(now, session(), lock()?, req(), q),
        OP_RESIGN => s.resign(now, session(), lock()?, req(), q),
        OP_RELEASE_HOLD => s.release_hold(now, session(), lock()?, Token(field!(token)), req(), q),
        _ => return Err(fencelock_result::InvalidArgument.into()),
    };
    Ok(reply?)
}

/// Applies `ops[0..n]` in order at `now`, in one call: each exactly as its typed function
/// would (`fencelock_op_kind` names it) — the same checks in the same order, the same
/// reply, the same events queued — with its result in `results[i]` and its reply in
/// `replies[i]` (`pending` the events queued once it is applied; zeroed when refused). A
/// refused op changes what its typed call would (nothing beyond the advance to `now`),
/// and the batch goes on with the next: refusals are per op, as `BUSY` is.
///
/// The boundary (the handle and pointer checks, the panic boundary) is paid once per
/// batch instead of once per input, which is what a host with many inputs at hand (a
/// network read's worth, a Python loop) saves; see ffi/README.md, "What a call costs".
///
/// **The batch stops** before changing anything more at an op refused with
/// `BUFFER_TOO_SMALL` (the event queue has no room for what it could emit: drain, then
/// submit `ops + *done` again) or `TIME_WENT_BACKWARDS` (every later op would be too):
/// that op's `results[*done]` is the code and its reply is zeroed, the ops after it are
/// not looked at (their slots are not written), and the call returns that code. The ops
/// before it stand.
///
/// `*done` is how many ops were applied or refused without stopping: `n` when the call
/// returns `OK`. Returns `OK` whatever the single ops' results (read `results`), or:
/// `NULL_PARAMETER` (`svc` or `done` NULL; `ops`, `replies` or `results` NULL with
/// `n` > 0), `INVALID_ARGUMENT` (`n` too large for any array), with `*done` 0 and
/// nothing applied; `BUFFER_TOO_SMALL` / `TIME_WENT_BACKWARDS` (stopped, above);
/// `PANIC` (an op of this batch panicked and poisoned the handle: `*done` is 0 and the
/// slots say nothing, though ops before the one that panicked may have been applied; on
/// a handle poisoned before, nothing is written, `*done` included — where a single
/// input's function zeroes its `*reply`).
/// `fencelock_service_last_error` describes the latest refused op (or the batch's own
/// failure). An op of a kind outside the enum is refused with `INVALID_ARGUMENT`.
/// Cost: O(n) calls, each its typed function's cost less the boundary's.
///
/// # Safety
/// `svc` NULL or a live handle; `ops` NULL or valid for reading `n` ops, each op's `lock`
/// NULL or valid for `lock_len` bytes when its kind names a lock; `replies` and
/// `results` NULL or valid for writing `n` elements (not read); `done` NULL or writable.
/// The arrays, `done` and the names do not overlap (each op is read before its reply is
/// written, but a reply written over a later op or name would change that input). An
/// op's fields its kind does not use may be left uninitialized: they are not read.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_submit(
    svc: *mut fencelock_service,
    now: u64,
    ops: *const fencelock_op,
    n: usize,
    replies: *mut fencelock_reply,
    results: *mut fencelock_result,
    done: *mut usize,
) -> fencelock_result {
    let args = || -> Result<_, Fail> {
        let done = out(done)?;
        // SAFETY: checked non-NULL, writable (contract).
        unsafe { put(done, 0) };
        if n != 0 && (ops.is_null() || replies.is_null() || results.is_null()) {
            return Err(fencelock_result::NullParameter.into());
        }
        aligned(ops)?;
        aligned(replies)?;
        aligned(results)?;
        // No array of the largest element (an op; the const assertion below) can be
        // longer.
        if n > isize::MAX as usize / core::mem::size_of::<fencelock_op>() {
            return Err(fencelock_result::InvalidArgument.into());
        }
        Ok(done)
    };
    // SAFETY: `svc` NULL or live; `done` checked, then writable; `ops`, `replies` and
    // `results` non-NULL whenever n > 0 and valid for n elements (contract), each
    // element read or written once, at i < n.
    unsafe {
        service_call(svc, args, |h: &mut fencelock_service, done| {
            for i in 0..n {
                // Its fields are read as its kind uses them, before its slots are
                // written: nothing borrowed from the caller's array meanwhile.
                match apply_op(&mut h.svc, &mut h.queue, Tick(now), ops.add(i)) {
                    Ok(r) => {
                        put(replies.add(i), reply_out(&r, &h.queue));
                        put(results.add(i), fencelock_result::Ok);
                    }
                    Err(fail) => {
                        let code = fail.code();
                        put(replies.add(i), fencelock_reply::NONE);
                        put(results.add(i), code);
                        if matches!(
                            code,
                            fencelock_result::BufferTooSmall | fencelock_result::TimeWentBackwards
                        ) {
                            put(done, i);
                            return Err(fail);
                        }
                        h.state.record(fail);
                    }
                }
            }
            put(done, n);
            Ok(())
        })
    }
}

/// The byte-level entry point: decodes one postcard input frame (its `now` inside) and
/// applies it like the typed functions: the reply goes to `*reply`, and — if
/// `reply_frame` has room — its postcard frame to `reply_frame[..*reply_len]`; the
/// events are queued (drain them with `fencelock_service_drain_frames` or
/// `fencelock_service_drain_events`), the advance's even when the input is refused.
///
/// * `reply_cap` 0 (then `reply_frame` may be NULL): no reply frame is written. Else
///   `reply_frame` needs `FENCELOCK_MAX_FRAME_LEN` bytes (any reply fits): a smaller
///   one is `BUFFER_TOO_SMALL` with `*reply_len` = `FENCELOCK_MAX_FRAME_LEN`, before
///   anything is decoded or applied.
/// * `reply_len` may be NULL; it gets the reply frame's length (0 when none is written,
///   and on any refusal but the short `reply_frame` above, which gets the size needed).
/// * The input frame is copied before anything is written, so `frame` and `reply_frame`
///   may be the same buffer (or overlap). A frame longer than `FENCELOCK_MAX_FRAME_LEN`
///   is `BAD_FRAME` (no valid input is longer).
///
/// Errors: the ABI's (`NULL_PARAMETER`: handle, `reply` or `frame`; `BUFFER_TOO_SMALL`
/// as above), `BAD_FRAME` (nothing changed), then the input's, as its typed function.
/// Cost: O(frame length) + the input's cost.
///
/// # Safety
/// `svc` NULL or a live handle; `frame` NULL or valid for `frame_len` bytes; `reply`
/// NULL or writable; `reply_frame` NULL or valid for `reply_cap` bytes (it may overlap
/// `frame`); `reply_len` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fencelock_service_handle_frame(
    svc: *mut fencelock_service,
    frame: *const u8,
    frame_len: usize,
    reply: *mut fencelock_reply,
    reply_frame: *mut u8,
    reply_cap: usize,
    reply_len: *mut usize,
) -> fencelock_result {
    if !reply_len.is_null() && reply_len.is_aligned() {
        // SAFETY: non-NULL, aligned and writable (contract).
        unsafe { reply_len.write(0) };
    }
    let args = || -> Result<_, Fail> {
        aligned(reply_len)?;
        if frame.is_null() {
            return Err(fencelock_result::NullParameter.into());
        }
        // Copy the input out of the caller's memory before anything is written: the
        // caller may reuse one buffer for the request and the reply. No valid input
        // frame is longer than FENCELOCK_MAX_FRAME_LEN, so a longer one is BAD_FRAME
        // (decided by the core's decoder, below); its bytes are never read.
        let mut input = [0u8; FENCELOCK_MAX_FRAME_LEN];
        let copied = frame_len <= input.len();
        if copied {
            // SAFETY: `frame` is non-NULL and valid for frame_len bytes (contract), which
            // fit `input`, a local that cannot overlap the caller's memory.
            unsafe { ptr::copy_nonoverlapping(frame, input.as_mut_ptr(), frame_len) };
        }
        // SAFETY: NULL or valid for reply_cap bytes (contract); no reference into the
        // input frame is alive any more.
        let dst = unsafe { buf(reply_frame, reply_cap) }?;
        if !dst.is_empty() && dst.len() < FENCELOCK_MAX_FRAME_LEN {
            if !reply_len.is_null() {
                // SAFETY: non-NULL and writable (contract).
                unsafe { reply_len.write(FENCELOCK_MAX_FRAME_LEN) };
            }
            return Err(fencelock_result::BufferTooSmall.into());
        }
        Ok((input, copied, dst))
    };
    // SAFETY: `svc` NULL or live; `reply` checked, then writable (contract).
    unsafe {
        service_input(svc, reply, args, |s, q, (input, copied, dst)| {
            // An input frame longer than any valid one decodes as the empty frame would
            // not: hand the decoder a byte string it refuses (BAD_FRAME, nothing applied).
            let frame: &[u8] = if copied { &input[..frame_len] } else { &[] };
            let r = s.handle_frame(frame, q)?;
            if !dst.is_empty() {
                // Fits: a MAX_FRAME_LEN buffer holds every reply (checked above).
                let n = r.to_frame(dst)?;
                if !reply_len.is_null() {
                    // Non-NULL and writable (contract), inside the outer `unsafe`.
                    reply_len.write(n);
                }
            }
            Ok(r)
        })
    }
}

/// Writes every queued event as `[length: u16 little-endian][postcard frame]` records,
/// oldest first, all or nothing. `*out_len` gets the bytes written, or with
/// `BUFFER_TOO_SMALL` the size needed (nothing is dequeued). Nothing queued: `OK` with
/// `*out_len` = 0. A buffer of `fencelock_service_max_events` (read before the input) ×
/// (`FENCELOCK_FRAME_PREFIX_LEN` + `FENCELOCK_MAX_FRAME_LEN`) bytes always fits one
/// input's events.
///
/// Errors: `NULL_PARAMETER`, `BUFFER_TOO_SMALL`, `PANIC`. Cost: O(queued events).
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
            |h: &mut fencelock_service, (dst, len)| {
                let (n, r) = match h.drain_frames(dst) {
                    Ok(n) => (n, Ok(())),
                    Err((need, fail)) => (need, Err(fail)),
                };
                put(len, n);
                r
            },
        )
    }
}

// ======================================================================== events

/// Moves the oldest queued event into `*output`: `OK`, or `DONE` when none is left (then
/// `output->kind` is `FENCELOCK_OUTPUT_KIND_NONE`). Each event names the session the host
/// must tell; none may be dropped. Events are what inputs cause for sessions other than
/// the caller (and what time causes): the caller's own answer is its reply.
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
            |h: &mut fencelock_service, dst| {
                let Some(o) = h.queue.get(0) else {
                    put(dst, fencelock_output::NONE);
                    return Err(fencelock_result::Done.into());
                };
                // SAFETY: `dst` checked non-NULL, writable (contract).
                fencelock_output::write_core(dst, o);
                h.queue.discard_front();
                Ok(())
            },
        )
    }
}

/// Moves every queued event, oldest first, into the caller's array `events[..cap]` in one
/// call, all or nothing: `*count` gets how many were written. With fewer than that many
/// slots it is `BUFFER_TOO_SMALL`, `*count` gets the number queued (the size needed) and
/// nothing is written or dequeued, so nothing is lost: call again with a larger array.
/// Nothing queued: `OK` with `*count` = 0 (no `DONE`: one call per input suffices).
/// `events` NULL with `cap` 0 is a count query (`BUFFER_TOO_SMALL` if any are queued).
///
/// The events of one input never outnumber `fencelock_service_max_events` read before
/// it, nor the core's bound at capacity (S + 2·C + (2·C + 1)·min(max_watchers, C) for S
/// sessions and C claims; S + 2·C with watches off), so an array of that many slots,
/// drained after every input, never comes back too small. Each event is written
/// once, straight from the queue into its slot; nothing is allocated.
///
/// This replaces a `fencelock_service_poll_output` loop (one call per event plus one for
/// `DONE`) with a single call.
///
/// Errors: `NULL_PARAMETER` (`svc` or `count`, or `events` with `cap` > 0),
/// `INVALID_ARGUMENT` (`cap` events past `PTRDIFF_MAX` bytes), `BUFFER_TOO_SMALL`,
/// `PANIC`. Cost: O(events drained).
///
/// # Safety
/// `svc` NULL or a live handle; `events` NULL or valid for writing `cap` elements (their
/// prior contents are not read); `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_drain_events(
    svc: *mut fencelock_service,
    events: *mut fencelock_output,
    cap: usize,
    count: *mut usize,
) -> fencelock_result {
    let args = || -> Result<_, Fail> {
        let count = out(count)?;
        if events.is_null() && cap != 0 {
            return Err(fencelock_result::NullParameter.into());
        }
        aligned(events)?;
        check_array_len::<fencelock_output>(cap)?;
        Ok(count)
    };
    // SAFETY: `svc` NULL or live; `count` checked, then writable; `events` non-NULL
    // whenever it is written (n <= cap > 0) and valid for `cap` elements (contract).
    unsafe {
        service_call(svc, args, |h: &mut fencelock_service, count| {
            let n = h.queue.len();
            put(count, n);
            if n > cap {
                return Err(fencelock_result::BufferTooSmall.into());
            }
            // i < n <= cap: the queue holds n events and nothing adds to it here; each
            // is written in place, straight into the caller's slot.
            // SAFETY: `events` valid for `cap` elements (contract).
            h.queue
                .drain_each(|i, o| fencelock_output::write_core(events.add(i), o));
            Ok(())
        })
    }
}

/// How many events are queued. Errors: `NULL_PARAMETER`, `PANIC`. Cost: O(1).
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

/// The most events the queue may hold (`*limit`): an input is refused with
/// `BUFFER_TOO_SMALL`, changing nothing, while the room left (this minus
/// `fencelock_service_pending`) is below `fencelock_service_max_events`. For a service
/// from `fencelock_service_new` or `_restore`, twice the core's bound at capacity by
/// default (2 × (S + 2·C + (2·C + 1)·min(max_watchers, C)) for S sessions and C claims;
/// 2 × (S + 2·C) with watches off), or what `fencelock_service_set_event_limit` set; for
/// a placed one (`_init_in`, `_restore_in`), its ring's size. Errors: `NULL_PARAMETER`,
/// `PANIC`. Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `limit` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_event_limit(
    svc: *const fencelock_service,
    limit: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `limit` checked, then writable (contract).
    unsafe { service_call(svc, || out(limit), |h, dst| set(dst, h.queue.limit())) }
}

/// Sets the most events the queue of a service from `fencelock_service_new` or
/// `_restore` may hold (see `fencelock_service_event_limit`). `limit` must be at least
/// the core's bound at capacity, S + 2·C + (2·C + 1)·min(max_watchers, C) (S + 2·C with
/// watches off), so an empty queue always has room for any input; `SIZE_MAX` lets the
/// queue grow as far as memory allows. A limit below the events queued now is accepted:
/// inputs are refused until the host drains. The limit is not part of a snapshot (a
/// restored service starts with the default). A placed service's limit is its ring's
/// fixed size: only that value is accepted (changing nothing).
///
/// Errors: `NULL_PARAMETER`, `INVALID_ARGUMENT` (a limit below the bound, or another
/// size for a placed service's ring; nothing changes), `PANIC`. Cost: O(1); nothing is
/// allocated.
///
/// # Safety
/// `svc` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_set_event_limit(
    svc: *mut fencelock_service,
    limit: usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live (contract).
    unsafe {
        service_call(
            svc,
            || Ok(()),
            |h: &mut fencelock_service, ()| h.queue.set_limit(limit),
        )
    }
}

/// Sets the secret key the service's indexes hash with (`key[..key_len]`, exactly
/// `FENCELOCK_NAME_KEY_LEN` bytes, from a random source; keep it secret), the core's
/// `set_name_key`: a host that serves lock names others choose (a shared server's
/// clients) calls it after creating the service, so that names chosen to share a probe
/// run cannot slow every input; the session and claim indexes are keyed too (a
/// snapshot's author chooses its session ids: restore such bytes with
/// `fencelock_service_restore_keyed`). Nothing observable changes: replies, events,
/// queries and snapshots are the same whatever the key. It may be called again; it is
/// not in snapshots.
///
/// Errors (nothing changes): `NULL_PARAMETER`, `INVALID_ARGUMENT` (another length),
/// `PANIC`. Cost: O(capacity of the three tables), to rebuild the indexes; afterwards
/// each input that names a lock hashes it with SipHash-1-3 (some 60 instructions more for
/// a short name), as does a lookup of a session away from its home row, a watch, or a
/// hold or wait on a lock with two or more.
///
/// # Safety
/// `svc` NULL or a live handle; `key` NULL or valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_set_name_key(
    svc: *mut fencelock_service,
    key: *const u8,
    key_len: usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `key` NULL or valid for `key_len` bytes (contract).
    unsafe {
        service_call(
            svc,
            || name_key(key, key_len),
            |h: &mut fencelock_service, key| {
                h.svc.set_name_key(key);
                Ok(())
            },
        )
    }
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

/// Whether lock names are hashed under a key (`*keyed`,
/// `fencelock_service_set_name_key`). Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `keyed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_is_name_keyed(
    svc: *const fencelock_service,
    keyed: *mut bool,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `keyed` checked, then writable (contract).
    unsafe { service_call(svc, || out(keyed), |h, dst| set(dst, h.svc.is_name_keyed())) }
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
                        max_watchers: c.max_watchers,
                    },
                )
            },
        )
    }
}

/// Rows in use per table (open sessions, live lock entries, holds + waits + watches).
/// Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `usage` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_usage(
    svc: *const fencelock_service,
    usage: *mut fencelock_usage,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `usage` checked, then writable (contract).
    unsafe { service_call(svc, || out(usage), |h, dst| set(dst, h.svc.usage().into())) }
}

/// The most events one input can emit now (the core's `max_events`: S + 2·H + (2·H +
/// 1)·min(max_watchers, W) for S open sessions, H holds and waits, W watches; S + 2·H
/// with no watch in use). A service refuses an input with `BUFFER_TOO_SMALL` while its
/// event queue has less room than this (`fencelock_service_event_limit` minus
/// `fencelock_service_pending`). Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_max_events(
    svc: *const fencelock_service,
    count: *mut usize,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `count` checked, then writable (contract).
    unsafe { service_call(svc, || out(count), |h, dst| set(dst, h.svc.max_events())) }
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
                let (label_len, label) = label_buf(s.label.as_str());
                set(
                    dst,
                    fencelock_session_info {
                        id: s.id.0,
                        ttl: s.ttl,
                        expires_at: s.expires_at.0,
                        last_request: s.last_request,
                        holds: s.holds,
                        waits: s.waits,
                        watches: s.watches,
                        label_len,
                        label,
                    },
                )
            },
        )
    }
}

/// Open session ids in id order, into `ids[..cap]`; `*count` = how many there are.
/// `BUFFER_TOO_SMALL` (nothing written) if more than `cap`; `ids` may be NULL when `cap`
/// is 0; `INVALID_ARGUMENT` (nothing written) for a `cap` past `PTRDIFF_MAX` bytes.
/// Cost: O(sessions).
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
            || list_out(ids, cap, count),
            |h, dst| write_list(dst, || h.svc.sessions().map(|s| s.0)),
        )
    }
}

/// Lock entries (held, awaited, watched or in lock-delay) in creation order, as
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
            || list_out(names, cap, count),
            |h, dst| {
                write_list(dst, || {
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
/// copied first, so it may overlap the out-values).
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
            || Ok((name_copy(lock, lock_len)?, list_out(holders, cap, count)?)),
            |h, (lock, dst)| {
                write_list(dst, || {
                    let lock = lock.get();
                    lock.into_iter()
                        .flat_map(|l| h.svc.holders(l))
                        .map(|x| holder_out(&x))
                })
            },
        )
    }
}

/// `session`'s hold of the lock named by `lock[..lock_len]`: `*held` true and `*holder`
/// the hold (as `fencelock_service_holders` writes one) while the session holds it; false
/// and the fields of `*holder` zeroed (`mode` `NONE`) otherwise (no such hold, a wait or
/// watch only, or a session or lock that is not open). For a holder that wants to know
/// whether it still holds one lock without listing every holder of a semaphore. Errors
/// add `INVALID_UTF8`. Cost: O(name length).
///
/// # Safety
/// `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes (it is copied first, so
/// it may overlap the out-values); `held` and `holder` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_hold(
    svc: *const fencelock_service,
    session: u64,
    lock: *const u8,
    lock_len: usize,
    held: *mut bool,
    holder: *mut fencelock_holder,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes, copied before
    // the out-values (which may overlap it) are written; `held` and `holder` checked, then
    // writable (contract).
    unsafe {
        service_call(
            svc,
            || Ok((name_copy(lock, lock_len)?, out(held)?, out(holder)?)),
            |h, (lock, is, dst)| {
                let x = lock.get().and_then(|l| h.svc.hold(SessionId(session), l));
                put(is, x.is_some());
                set(dst, x.as_ref().map_or_else(no_holder, holder_out))
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
            || Ok((name_copy(lock, lock_len)?, list_out(waiters, cap, count)?)),
            |h, (lock, dst)| {
                write_list(dst, || {
                    let lock = lock.get();
                    lock.into_iter().flat_map(|l| h.svc.waiters(l)).map(|w| {
                        let (mode, count, limit) = mode_out(w.mode);
                        let (label_len, label) = label_buf(w.label.as_str());
                        fencelock_waiter {
                            session: w.session.0,
                            deadline: w.deadline.map_or(0, |t| t.0),
                            mode,
                            has_deadline: w.deadline.is_some(),
                            count,
                            limit,
                            label_len,
                            label,
                        }
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

/// The permits of the semaphore named by `lock[..lock_len]`: `*is_semaphore` true and
/// `*permits` its `in_use` and `limit` while the name has live holds or waits from a
/// permits acquire; false and zeroed otherwise (a plain lock, or an idle or unknown
/// name). Errors add `INVALID_UTF8`. Cost: O(name length).
///
/// # Safety
/// `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `is_semaphore` and
/// `permits` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_permits(
    svc: *const fencelock_service,
    lock: *const u8,
    lock_len: usize,
    is_semaphore: *mut bool,
    permits: *mut fencelock_permits,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `lock` NULL or valid for `lock_len` bytes; `is_semaphore`
    // and `permits` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || Ok((name(lock, lock_len)?, out(is_semaphore)?, out(permits)?)),
            |h, (lock, is, dst)| {
                let p = h.svc.permits(lock);
                put(is, p.is_some());
                set(
                    dst,
                    fencelock_permits {
                        in_use: p.map_or(0, |p| p.in_use),
                        limit: p.map_or(0, |p| p.limit),
                    },
                )
            },
        )
    }
}

/// Raises the fencing revision to at least `floor`, so the next grant's token is above
/// `floor` and above every token granted before (a lower `floor` changes nothing); for a
/// service recovered from a copy that may have missed grants. Holds, queues and sessions
/// keep their tokens. `*revision` gets the revision now. Not an input: no `now`, no
/// reply, no events.
///
/// Errors: `NULL_PARAMETER`, `BAD_CONFIG` (a `floor` above 2^62; nothing changes),
/// `PANIC`. Cost: O(1).
///
/// # Safety
/// `svc` NULL or a live handle; `revision` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_raise_revision(
    svc: *mut fencelock_service,
    floor: u64,
    revision: *mut u64,
) -> fencelock_result {
    // SAFETY: `svc` NULL or live; `revision` checked, then writable (contract).
    unsafe {
        service_call(
            svc,
            || out(revision),
            |h: &mut fencelock_service, dst| set(dst, h.svc.raise_revision(floor)?),
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

/// Writes the canonical snapshot of the service's state (not its queued events) into
/// `buf[..cap]`; `*len` = bytes written, or with `BUFFER_TOO_SMALL` the size needed
/// (and nothing written to `buf`). `buf` may be NULL when `cap` is 0 (a size query).
/// Cost: O(sessions + locks + claims), twice when `buf` is given.
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
            |h, (dst, len)| {
                // Sized first: the core's snapshot writes the prefix that fits, and a
                // short buffer must get nothing but the size.
                let need = h.svc.snapshot_len();
                if dst.len() < need {
                    put(len, need);
                    return Err(fencelock_result::BufferTooSmall.into());
                }
                set(len, h.svc.snapshot(dst)?)
            },
        )
    }
}

// ======================================================================== errors

/// Writes the detailed message of the most recent failed call on this handle (the
/// core's text, with its numbers: "name too long: 70 bytes, at most 64"), or "ok" if
/// none failed yet. Buffer rules as `fencelock_result_message`; a poisoned handle still
/// answers. Errors: `NULL_PARAMETER`, `BUFFER_TOO_SMALL` (truncated). Cost: O(message
/// length).
///
/// # Safety
/// `svc` NULL or a live handle; `buf` NULL or valid for `len` bytes; `out_len` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn fencelock_service_last_error(
    svc: *const fencelock_service,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> fencelock_result {
    // SAFETY: forwarded contract.
    unsafe { last_error(svc, buf, len, out_len) }
}
