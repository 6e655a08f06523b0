//! The plain-data types that cross the ABI, and the pointer checks every function shares.

use core::ffi::c_char;
use core::ptr::addr_of_mut;

use fencelock::{
    Change, Holder, Lease, Mode, Output, ReleaseReason, Reply, Wait, MAX_LABEL_LEN, MAX_NAME_LEN,
};

use crate::result::{fencelock_result, Fail};

/// The longest lock or resource name, in bytes (the core's `MAX_NAME_LEN`).
pub const FENCELOCK_MAX_NAME_LEN: usize = 64;
/// The largest encoded input, reply or event frame, in bytes (the core's `MAX_FRAME_LEN`).
pub const FENCELOCK_MAX_FRAME_LEN: usize = 176;
/// Bytes in a name buffer of an event or name struct: the longest name plus its NUL.
pub const FENCELOCK_NAME_BUF_LEN: usize = 65;
/// The longest holder label, in bytes (the core's `MAX_LABEL_LEN`).
pub const FENCELOCK_MAX_LABEL_LEN: usize = 64;
/// Bytes in a label buffer of an event or introspection struct: the longest label plus
/// its NUL.
pub const FENCELOCK_LABEL_BUF_LEN: usize = 65;
/// Bytes in front of every event frame `fencelock_service_drain_frames` writes: its
/// length, little-endian.
pub const FENCELOCK_FRAME_PREFIX_LEN: usize = 2;

/// Bytes in a name key (`fencelock_service_set_name_key`, `fencelock_gate_set_name_key`):
/// the core's `NameKey::from_bytes`, two 64-bit words, little-endian (`NameKey::LEN`).
pub const FENCELOCK_NAME_KEY_LEN: usize = 16;

/// How many recent keep-alive send times a keeper remembers to match acknowledgements
/// against (the core's `KEEPER_MEMORY`).
pub const FENCELOCK_KEEPER_MEMORY: usize = 8;

const _: () = assert!(FENCELOCK_MAX_NAME_LEN == MAX_NAME_LEN);
const _: () = assert!(FENCELOCK_NAME_KEY_LEN == fencelock::NameKey::LEN);
const _: () = assert!(FENCELOCK_KEEPER_MEMORY == fencelock::KEEPER_MEMORY);
const _: () = assert!(FENCELOCK_NAME_BUF_LEN == FENCELOCK_MAX_NAME_LEN + 1);
const _: () = assert!(FENCELOCK_MAX_LABEL_LEN == MAX_LABEL_LEN);
const _: () = assert!(FENCELOCK_LABEL_BUF_LEN == FENCELOCK_MAX_LABEL_LEN + 1);
const _: () = assert!(FENCELOCK_MAX_FRAME_LEN == fencelock::MAX_FRAME_LEN);
const _: () = assert!(FENCELOCK_MAX_FRAME_LEN <= u16::MAX as usize);

/// Capacities of a service's three fixed tables (the core's `Capacity`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_capacity {
    /// Sessions open at once.
    pub sessions: u32,
    /// Locks held, awaited, watched or in lock-delay at once.
    pub locks: u32,
    /// Holds, waits and watches over all sessions and locks.
    pub claims: u32,
}

impl From<fencelock_capacity> for fencelock::Capacity {
    fn from(c: fencelock_capacity) -> Self {
        fencelock::Capacity {
            sessions: c.sessions,
            locks: c.locks,
            claims: c.claims,
        }
    }
}

impl From<fencelock::Capacity> for fencelock_capacity {
    fn from(c: fencelock::Capacity) -> Self {
        fencelock_capacity {
            sessions: c.sessions,
            locks: c.locks,
            claims: c.claims,
        }
    }
}

/// Rows in use in each of a service's three tables (the core's `Usage`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_usage {
    /// Open sessions.
    pub sessions: u32,
    /// Live lock entries (held, awaited, watched or in lock-delay).
    pub locks: u32,
    /// Holds, waits and watches.
    pub claims: u32,
}

impl From<fencelock::Usage> for fencelock_usage {
    fn from(u: fencelock::Usage) -> Self {
        fencelock_usage {
            sessions: u.sessions,
            locks: u.locks,
            claims: u.claims,
        }
    }
}

/// Everything a new service needs. Capacities are fixed for the service's life.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_config {
    /// Table sizes.
    pub capacity: fencelock_capacity,
    /// Ticks during which a lock whose holder's session *expired* is not granted again.
    /// 0 turns lock-delay off.
    pub lock_delay: u64,
    /// The longest lock name accepted: 1 to `FENCELOCK_MAX_NAME_LEN` (0 is `BAD_CONFIG`).
    pub max_name_len: u32,
    /// The most sessions that may watch one lock at once (`fencelock_service_watch`); 0
    /// turns watches off (every watch is `CAPACITY_EXCEEDED`). The core's default is 4
    /// (`FENCELOCK_DEFAULT_MAX_WATCHERS`); a zeroed struct has 0. Fills what was padding,
    /// so the struct's size and other offsets are unchanged.
    pub max_watchers: u32,
}

/// The core's default `max_watchers` (`Config::default()`): what to put in
/// `fencelock_config.max_watchers` for watches as the other bindings have them.
pub const FENCELOCK_DEFAULT_MAX_WATCHERS: u32 = 4;

impl fencelock_config {
    pub(crate) fn core(&self) -> fencelock::Config {
        fencelock::Config {
            lock_delay: self.lock_delay,
            max_name_len: self.max_name_len,
            max_watchers: self.max_watchers,
        }
    }
}

/// How a lock is held. 0 is not a mode (so a zeroed argument is refused).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_mode {
    /// Not a mode: the value of this field in replies and events that carry none.
    None = 0,
    /// One holder at a time.
    Exclusive = 1,
    /// Any number of shared holders while there is no exclusive one.
    Shared = 2,
    /// `count` of a semaphore's `limit` permits (the struct's `count` and `limit`
    /// fields say which). Asked for with `fencelock_service_acquire_permits`, never with
    /// `fencelock_service_acquire` (which has no count or limit: `INVALID_ARGUMENT`).
    Permits = 3,
}

/// A core mode as the C enum and its `count` / `limit` (0 and 0 unless `PERMITS`).
pub(crate) fn mode_out(m: Mode) -> (fencelock_mode, u32, u32) {
    match m {
        Mode::Exclusive => (fencelock_mode::Exclusive, 0, 0),
        Mode::Shared => (fencelock_mode::Shared, 0, 0),
        Mode::Permits { count, limit } => (fencelock_mode::Permits, count, limit),
    }
}

/// The mode argument of `fencelock_service_acquire`: `EXCLUSIVE` or `SHARED` (`PERMITS`
/// needs a count and a limit, which only `fencelock_service_acquire_permits` takes).
pub(crate) fn mode_arg(mode: u32) -> Result<Mode, Fail> {
    match mode {
        1 => Ok(Mode::Exclusive),
        2 => Ok(Mode::Shared),
        _ => Err(fencelock_result::InvalidArgument.into()),
    }
}

/// What a `HOLDER_CHANGED` event tells a watcher about a holder of the lock it watches
/// (the core's `Change`; the number is its variant index + 1).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_change {
    /// Not a change: the value of this field in every other event.
    None = 0,
    /// The session held the lock when the watch began (one per holder, in grant order).
    Holding = 1,
    /// The session was granted the lock.
    Granted = 2,
    /// The session released the lock.
    Released = 3,
    /// The session's hold ended with its close.
    Closed = 4,
    /// The session's hold ended with its expiry.
    Expired = 5,
}

impl From<Change> for fencelock_change {
    fn from(c: Change) -> Self {
        match c {
            Change::Holding => fencelock_change::Holding,
            Change::Granted => fencelock_change::Granted,
            Change::Released => fencelock_change::Released,
            Change::Closed => fencelock_change::Closed,
            Change::Expired => fencelock_change::Expired,
        }
    }
}

/// What an acquire does when the lock is not free. 0 is not a wait.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_wait {
    /// Try-lock: reply `BUSY`, queue nothing.
    None = 1,
    /// Queue until granted, cancelled, or the session ends.
    Forever = 2,
    /// Queue until the tick given as `wait_until`, then a `WAIT_TIMED_OUT` event (a
    /// deadline not after `now` is a try-lock).
    Until = 3,
}

pub(crate) fn wait_arg(wait: u32, until: u64) -> Result<Wait, Fail> {
    match wait {
        1 => Ok(Wait::None),
        2 => Ok(Wait::Forever),
        3 => Ok(Wait::Until(fencelock::Tick(until))),
        _ => Err(fencelock_result::InvalidArgument.into()),
    }
}

/// Which input a `fencelock_op` is (`fencelock_service_submit`); each is the typed
/// function of the same name, with the batch's `now`. 0 is not an input (a zeroed op is
/// refused with `INVALID_ARGUMENT`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_op_kind {
    /// `fencelock_service_open_session`: `ttl`.
    OpenSession = 1,
    /// `fencelock_service_keep_alive`: `session`, `request_number`.
    KeepAlive = 2,
    /// `fencelock_service_close_session`: `session`, `request_number`.
    CloseSession = 3,
    /// `fencelock_service_acquire` (`mode` `EXCLUSIVE` or `SHARED`) or
    /// `fencelock_service_acquire_permits` (`mode` `PERMITS`, with `count` and `limit`):
    /// `session`, `lock`, `lock_len`, `mode`, `wait`, `wait_until`, `request_number`.
    Acquire = 4,
    /// `fencelock_service_release`: `session`, `lock`, `lock_len`, `request_number`.
    Release = 5,
    /// `fencelock_service_cancel`: as `RELEASE`.
    Cancel = 6,
    /// `fencelock_service_watch`: as `RELEASE`.
    Watch = 7,
    /// `fencelock_service_unwatch`: as `RELEASE`.
    Unwatch = 8,
    /// `fencelock_service_campaign`: as `RELEASE` (`lock` names the election).
    Campaign = 9,
    /// `fencelock_service_resign`: as `CAMPAIGN`.
    Resign = 10,
    /// `fencelock_service_release_hold`: as `RELEASE`, with `token`.
    ReleaseHold = 11,
}

/// One input of a batch (`fencelock_service_submit`): the arguments of the typed function
/// its `kind` names, as fields. Fields that kind does not use are ignored and never read,
/// so they may be left unset (`count` and `limit` are used only in mode `PERMITS`,
/// `wait_until` only with wait `UNTIL`); zeroing them (`fencelock_op op = { .kind = ...,
/// ... }`) is fine too. Read only; the library keeps no pointer to it after the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct fencelock_op {
    /// A `fencelock_op_kind`.
    pub kind: u32,
    /// `ACQUIRE`: a `fencelock_mode` (`EXCLUSIVE`, `SHARED` or `PERMITS`).
    pub mode: u32,
    /// `ACQUIRE`: a `fencelock_wait`.
    pub wait: u32,
    /// `ACQUIRE` in mode `PERMITS`: the permits asked for.
    pub count: u32,
    /// `ACQUIRE` in mode `PERMITS`: the semaphore's limit.
    pub limit: u32,
    /// The session (every kind but `OPEN_SESSION`).
    pub session: u64,
    /// `OPEN_SESSION`: the session's time to live in ticks.
    pub ttl: u64,
    /// `ACQUIRE` with wait `UNTIL`: the deadline tick.
    pub wait_until: u64,
    /// The idempotent-retry number, 0 = none (every kind but `OPEN_SESSION`).
    pub request_number: u64,
    /// The lock (or election) name, UTF-8, `lock_len` bytes, no NUL needed (`ACQUIRE`,
    /// `RELEASE`, `CANCEL`, `WATCH`, `UNWATCH`, `CAMPAIGN`, `RESIGN`, `RELEASE_HOLD`).
    pub lock: *const u8,
    /// Bytes at `lock`.
    pub lock_len: usize,
    /// `RELEASE_HOLD`: the token of the hold to release. Appended, so the earlier fields
    /// keep their offsets; the struct grew by 8 bytes, and so did the stride of a
    /// `fencelock_service_submit` array: a host built against an earlier header must be
    /// rebuilt.
    pub token: u64,
}

// The layout C callers compile against (64-bit targets): `token` was appended, so every
// earlier field keeps the offset it had before it.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(offset_of!(fencelock_op, session) == 24);
    assert!(offset_of!(fencelock_op, request_number) == 48);
    assert!(offset_of!(fencelock_op, lock) == 56);
    assert!(offset_of!(fencelock_op, lock_len) == 64);
    assert!(offset_of!(fencelock_op, token) == 72);
    assert!(size_of::<fencelock_op>() == 80);
};

/// The mode of an acquire op: `EXCLUSIVE`, `SHARED`, or `PERMITS` with its count and
/// limit (the core judges them: `BAD_PERMITS`).
pub(crate) fn op_mode(mode: u32, count: u32, limit: u32) -> Result<Mode, Fail> {
    if mode == fencelock_mode::Permits as u32 {
        return Ok(Mode::Permits { count, limit });
    }
    mode_arg(mode)
}

/// Why a hold ended (`RELEASED` events). Events carry only `CLOSED` or `EXPIRED`: a
/// release the holder asked for is its own reply (`FENCELOCK_REPLY_KIND_RELEASED`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_release_reason {
    /// Not a reason: the value of this field in every other event.
    None = 0,
    /// The holder released it (never in an event; kept so the numbers stay the core's).
    Released = 1,
    /// The holder closed its session.
    Closed = 2,
    /// The holder's session expired (lock-delay applies).
    Expired = 3,
}

/// Which event a `fencelock_output` is: what an input caused for a session other than
/// the caller's, or what time caused. Each names the session the host must tell.
/// (The number is the core's event variant index + 1.)
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_output_kind {
    /// No event (what a `DONE` poll leaves in the struct).
    None = 0,
    /// A waiter now holds the lock; every action on the resource must carry `token`:
    /// `session`, `lock`, `mode`, `token`.
    Granted = 1,
    /// A hold ended by its session's close or expiry; its token is no longer good:
    /// `session`, `lock`, `token`, `reason` (`CLOSED` or `EXPIRED`).
    Released = 2,
    /// A session's deadline passed; it lost everything: `session`.
    SessionExpired = 3,
    /// A timed wait reached its deadline ungranted: `session`, `lock`.
    WaitTimedOut = 4,
    /// A holder of a lock that `session` watches changed (`fencelock_service_watch`):
    /// `session` (the watcher), `lock`, `holder` (the holding session), `mode` (with
    /// `count` / `limit` for `PERMITS`), `token` (the holder's), `change`, `label` (the
    /// holder's; empty if it has none).
    HolderChanged = 5,
}

/// One event, copied out of the service (it owns no memory). Fields an event kind does
/// not use are zero (`mode` `NONE`, `reason` `NONE`, `change` `NONE`, `token` 0,
/// `lock_len` 0, `lock` all NUL, …). The fields after `lock` were appended for watches
/// and semaphores: the earlier ones keep their offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct fencelock_output {
    /// Which event.
    pub kind: fencelock_output_kind,
    /// The mode granted (`GRANTED`).
    pub mode: fencelock_mode,
    /// Why a hold ended (`RELEASED`).
    pub reason: fencelock_release_reason,
    /// The session to tell.
    pub session: u64,
    /// The fencing token (`GRANTED`, `RELEASED`).
    pub token: u64,
    /// Length of `lock` in bytes, without the NUL.
    pub lock_len: usize,
    /// The lock's name, NUL-terminated (a name may itself contain NUL bytes: trust
    /// `lock_len`).
    pub lock: [c_char; FENCELOCK_NAME_BUF_LEN],
    /// Permits of the claim when `mode` is `PERMITS` (`GRANTED`, `HOLDER_CHANGED`).
    pub count: u32,
    /// The semaphore's limit when `mode` is `PERMITS`.
    pub limit: u32,
    /// What changed (`HOLDER_CHANGED`).
    pub change: fencelock_change,
    /// The holding session (`HOLDER_CHANGED`).
    pub holder: u64,
    /// Length of `label` in bytes, without the NUL (`HOLDER_CHANGED`).
    pub label_len: usize,
    /// The holder's label, NUL-terminated (trust `label_len`) (`HOLDER_CHANGED`).
    pub label: [c_char; FENCELOCK_LABEL_BUF_LEN],
}

pub(crate) fn name_buf(name: &str) -> (usize, [c_char; FENCELOCK_NAME_BUF_LEN]) {
    let mut buf = [0 as c_char; FENCELOCK_NAME_BUF_LEN];
    let bytes = name.as_bytes();
    let n = bytes.len().min(FENCELOCK_MAX_NAME_LEN);
    for (d, s) in buf.iter_mut().zip(&bytes[..n]) {
        *d = *s as c_char;
    }
    (n, buf)
}

/// A label as a label buffer and its length (the same shape as a name's).
pub(crate) fn label_buf(label: &str) -> (usize, [c_char; FENCELOCK_LABEL_BUF_LEN]) {
    name_buf(label)
}

/// Writes `s` (at most [`FENCELOCK_MAX_NAME_LEN`] bytes of it) into the name or label
/// buffer at `dst`, then NULs to its end, as [`name_buf`] builds one; returns the bytes
/// written before the NULs.
///
/// # Safety
/// `dst` is valid for writing one buffer (its prior contents are not read).
unsafe fn put_buf(dst: *mut [c_char; FENCELOCK_NAME_BUF_LEN], s: &str) -> usize {
    let bytes = s.as_bytes();
    let n = bytes.len().min(FENCELOCK_MAX_NAME_LEN);
    let d = dst.cast::<u8>();
    // SAFETY: the buffer zeroed, then n <= MAX_NAME_LEN < NAME_BUF_LEN bytes from `bytes`
    // into it: both inside it; the source is a distinct borrow.
    // A whole zeroed buffer is a few fixed stores, where zeroing only the tail was a
    // `memset` call; an empty label (the usual case) then needs no copy at all.
    unsafe {
        dst.write([0; FENCELOCK_NAME_BUF_LEN]);
        if n > 0 {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), d, n);
        }
    }
    n
}

impl fencelock_output {
    /// The empty event (`kind` `NONE`, everything zero).
    pub(crate) const NONE: fencelock_output = fencelock_output {
        kind: fencelock_output_kind::None,
        mode: fencelock_mode::None,
        reason: fencelock_release_reason::None,
        session: 0,
        token: 0,
        lock_len: 0,
        lock: [0; FENCELOCK_NAME_BUF_LEN],
        count: 0,
        limit: 0,
        change: fencelock_change::None,
        holder: 0,
        label_len: 0,
        label: [0; FENCELOCK_LABEL_BUF_LEN],
    };

    /// The C form of `o` (as [`write_core`](Self::write_core) writes it). Cost: O(1).
    #[cfg(test)]
    pub(crate) fn from_core(o: &Output) -> Self {
        let mut r = core::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: a local, aligned and writable; write_core writes every field.
        unsafe {
            Self::write_core(r.as_mut_ptr(), o);
            r.assume_init()
        }
    }

    /// Writes the C form of `o` into `*dst` field by field, in place: no event-sized
    /// temporary, no copy of one (208 bytes; with the event read from the queue by
    /// reference, about 57 instructions less per drained hand-off under callgrind). Every field is written; the
    /// name and label buffers get their bytes and NULs to the end. Cost: O(1).
    ///
    /// # Safety
    /// `dst` is non-NULL, aligned and valid for writing one `fencelock_output` (its prior
    /// contents are not read: it may be uninitialised).
    pub(crate) unsafe fn write_core(dst: *mut Self, o: &Output) {
        use fencelock_output_kind as K;
        let (mut kind, mut mode, mut reason) = (
            K::None,
            fencelock_mode::None,
            fencelock_release_reason::None,
        );
        let (mut token, mut count, mut limit) = (0, 0, 0);
        let (mut change, mut holder) = (fencelock_change::None, 0);
        let (mut lock, mut label) = ("", "");
        match o {
            Output::Granted {
                lock: l,
                mode: m,
                token: t,
                ..
            } => {
                kind = K::Granted;
                (mode, count, limit) = mode_out(*m);
                token = t.0;
                lock = l.as_str();
            }
            Output::Released {
                lock: l,
                token: t,
                reason: why,
                ..
            } => {
                kind = K::Released;
                token = t.0;
                reason = match why {
                    ReleaseReason::Released => fencelock_release_reason::Released,
                    ReleaseReason::Closed => fencelock_release_reason::Closed,
                    ReleaseReason::Expired => fencelock_release_reason::Expired,
                };
                lock = l.as_str();
            }
            Output::SessionExpired { .. } => kind = K::SessionExpired,
            Output::WaitTimedOut { lock: l, .. } => {
                kind = K::WaitTimedOut;
                lock = l.as_str();
            }
            Output::HolderChanged {
                lock: l,
                holder: h,
                mode: m,
                token: t,
                change: c,
                label: lb,
                ..
            } => {
                kind = K::HolderChanged;
                (mode, count, limit) = mode_out(*m);
                token = t.0;
                holder = h.0;
                change = (*c).into();
                label = lb.as_str();
                lock = l.as_str();
            }
            // The core's Output is non_exhaustive; a new kind would need a new code here
            // (a test decodes every event variant and checks none maps to NONE).
            _ => {}
        }
        // SAFETY: `dst` valid for writing one output (contract); each pointer below is a
        // field of it, and each buffer write stays inside its field (`put_buf`).
        unsafe {
            addr_of_mut!((*dst).kind).write(kind);
            addr_of_mut!((*dst).mode).write(mode);
            addr_of_mut!((*dst).reason).write(reason);
            addr_of_mut!((*dst).session).write(o.session().0);
            addr_of_mut!((*dst).token).write(token);
            addr_of_mut!((*dst).count).write(count);
            addr_of_mut!((*dst).limit).write(limit);
            addr_of_mut!((*dst).change).write(change);
            addr_of_mut!((*dst).holder).write(holder);
            let n = put_buf(addr_of_mut!((*dst).lock), lock);
            addr_of_mut!((*dst).lock_len).write(n);
            let n = put_buf(addr_of_mut!((*dst).label), label);
            addr_of_mut!((*dst).label_len).write(n);
        }
    }
}

/// Which answer a `fencelock_reply` is: the caller's own answer to its input (the
/// core's `Reply`; the number is its variant index + 1).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_reply_kind {
    /// No reply: what a refused call leaves in the struct.
    None = 0,
    /// The session was opened: `session`, `expires_at`.
    Opened = 1,
    /// The keep-alive was applied (the client's acknowledgement): `expires_at`.
    KeptAlive = 2,
    /// The session was closed; its holds were released (`RELEASED` events).
    Closed = 3,
    /// The session holds the lock; carry `token` with every action on the resource:
    /// `mode`, `token`.
    Granted = 4,
    /// The acquire waits in the queue (1 = next in line); a `GRANTED` or
    /// `WAIT_TIMED_OUT` event for this session follows, or the session ends: `mode`,
    /// `position`.
    Queued = 5,
    /// A try-lock (or a deadline not after now) found the lock taken; nothing queued.
    Busy = 6,
    /// The hold ended; `token` is no longer good: `token`.
    Released = 7,
    /// The queued acquire was withdrawn.
    Cancelled = 8,
    /// Only as the repeat of an acquire that was granted: that hold has since ended:
    /// `token`.
    HoldEnded = 9,
    /// Only as the repeat of an acquire that was queued: the wait is over (timed out or
    /// cancelled, or granted and that hold ended since); nothing of it is held.
    WaitEnded = 10,
    /// The answer to a tick input frame: time is now `now`.
    Ticked = 11,
    /// The watch began: `holders` `HOLDER_CHANGED` events (change `HOLDING`), one per
    /// current holder, are queued for the watcher itself, and one follows each later
    /// holder change until it unwatches, closes or expires: `holders`.
    Watching = 12,
    /// The watch ended; no more `HOLDER_CHANGED` events reach the session for that lock.
    Unwatched = 13,
}

/// The caller's reply to one input, copied out (it owns no memory). Fields a reply kind
/// does not use are zero (`mode` `NONE`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_reply {
    /// Which reply.
    pub kind: fencelock_reply_kind,
    /// The mode held or asked for (`GRANTED`, `QUEUED`).
    pub mode: fencelock_mode,
    /// Place in the queue, 1 = next (`QUEUED`).
    pub position: u32,
    /// How many events are queued once this input is applied (the input's own, plus any
    /// not drained before it): 0 means there is nothing to drain, so the host can skip
    /// the drain call; otherwise `fencelock_service_drain_events` with this many slots
    /// takes them all (it saturates at 2^32 − 1, for a host that never drains). Set for
    /// every reply kind; 0 in a refused call's zeroed reply (a
    /// refused input's advance may still have queued events: drain after a refusal).
    /// Fills what was padding, so the struct's size and other offsets are unchanged.
    pub pending: u32,
    /// The new session (`OPENED`).
    pub session: u64,
    /// The session's deadline (`OPENED`, `KEPT_ALIVE`).
    pub expires_at: u64,
    /// The fencing token (`GRANTED`, `RELEASED`, `HOLD_ENDED`).
    pub token: u64,
    /// The current tick (`TICKED`).
    pub now: u64,
    /// Permits of the claim when `mode` is `PERMITS` (`GRANTED`, `QUEUED`). Appended, as
    /// are `limit` and `holders`: the earlier fields keep their offsets.
    pub count: u32,
    /// The semaphore's limit when `mode` is `PERMITS`.
    pub limit: u32,
    /// The lock's holders when the watch began (`WATCHING`).
    pub holders: u32,
}

impl fencelock_reply {
    /// The empty reply (`kind` `NONE`, everything zero).
    pub(crate) const NONE: fencelock_reply = fencelock_reply {
        kind: fencelock_reply_kind::None,
        mode: fencelock_mode::None,
        position: 0,
        pending: 0,
        session: 0,
        expires_at: 0,
        token: 0,
        now: 0,
        count: 0,
        limit: 0,
        holders: 0,
    };

    pub(crate) fn from_core(r: &Reply) -> Self {
        use fencelock_reply_kind as K;
        let mut out = Self::NONE;
        match *r {
            Reply::Opened {
                session,
                expires_at,
            } => {
                out.kind = K::Opened;
                out.session = session.0;
                out.expires_at = expires_at.0;
            }
            Reply::KeptAlive { expires_at } => {
                out.kind = K::KeptAlive;
                out.expires_at = expires_at.0;
            }
            Reply::Closed => out.kind = K::Closed,
            Reply::Granted { mode, token } => {
                out.kind = K::Granted;
                (out.mode, out.count, out.limit) = mode_out(mode);
                out.token = token.0;
            }
            Reply::Queued { mode, position } => {
                out.kind = K::Queued;
                (out.mode, out.count, out.limit) = mode_out(mode);
                out.position = position;
            }
            Reply::Busy => out.kind = K::Busy,
            Reply::Released { token } => {
                out.kind = K::Released;
                out.token = token.0;
            }
            Reply::Cancelled => out.kind = K::Cancelled,
            Reply::HoldEnded { token } => {
                out.kind = K::HoldEnded;
                out.token = token.0;
            }
            Reply::WaitEnded => out.kind = K::WaitEnded,
            Reply::Ticked { now } => {
                out.kind = K::Ticked;
                out.now = now.0;
            }
            Reply::Watching { holders } => {
                out.kind = K::Watching;
                out.holders = holders;
            }
            Reply::Unwatched => out.kind = K::Unwatched,
            // The core's Reply is non_exhaustive; a new kind would need a new code here
            // (a test decodes every reply variant and checks none maps to NONE).
            _ => {}
        }
        out
    }
}

/// A live session's state.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct fencelock_session_info {
    /// Its id.
    pub id: u64,
    /// Its time to live in ticks.
    pub ttl: u64,
    /// It expires at this tick unless kept alive.
    pub expires_at: u64,
    /// Its latest idempotent-retry request number (0 = none yet).
    pub last_request: u64,
    /// Locks it holds.
    pub holds: u32,
    /// Locks it waits for.
    pub waits: u32,
    /// Locks it watches (`fencelock_service_watch`).
    pub watches: u32,
    /// Length of `label` in bytes, without the NUL (0: no label).
    pub label_len: usize,
    /// Its label (`fencelock_service_open_labeled`), NUL-terminated (trust `label_len`).
    pub label: [c_char; FENCELOCK_LABEL_BUF_LEN],
}

/// One holder of a lock.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct fencelock_holder {
    /// The holding session.
    pub session: u64,
    /// Its fencing token.
    pub token: u64,
    /// Its mode.
    pub mode: fencelock_mode,
    /// Its permits when `mode` is `PERMITS` (else 0).
    pub count: u32,
    /// The semaphore's limit when `mode` is `PERMITS` (else 0).
    pub limit: u32,
    /// Length of `label` in bytes, without the NUL (0: no label).
    pub label_len: usize,
    /// The holder's session label, NUL-terminated (trust `label_len`).
    pub label: [c_char; FENCELOCK_LABEL_BUF_LEN],
}

/// A core hold as the C struct (`holders`, `hold`). Cost: O(label length).
pub(crate) fn holder_out(x: &Holder) -> fencelock_holder {
    let (mode, count, limit) = mode_out(x.mode);
    let (label_len, label) = label_buf(x.label.as_str());
    fencelock_holder {
        session: x.session.0,
        token: x.token.0,
        mode,
        count,
        limit,
        label_len,
        label,
    }
}

/// No hold (`hold` of a session that holds no such lock): every field zero, `mode` `NONE`.
pub(crate) fn no_holder() -> fencelock_holder {
    let (label_len, label) = label_buf("");
    fencelock_holder {
        session: 0,
        token: 0,
        mode: fencelock_mode::None,
        count: 0,
        limit: 0,
        label_len,
        label,
    }
}

/// One waiter for a lock.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct fencelock_waiter {
    /// The waiting session.
    pub session: u64,
    /// When the wait times out; meaningful only if `has_deadline`.
    pub deadline: u64,
    /// The mode asked for.
    pub mode: fencelock_mode,
    /// False: it waits forever.
    pub has_deadline: bool,
    /// The permits asked for when `mode` is `PERMITS` (else 0).
    pub count: u32,
    /// The semaphore's limit when `mode` is `PERMITS` (else 0).
    pub limit: u32,
    /// Length of `label` in bytes, without the NUL (0: no label).
    pub label_len: usize,
    /// The waiter's session label, NUL-terminated (trust `label_len`).
    pub label: [c_char; FENCELOCK_LABEL_BUF_LEN],
}

/// A live semaphore's permits (`fencelock_service_permits`; the core's `Permits`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_permits {
    /// Permits held now (the sum of its holders' counts).
    pub in_use: u32,
    /// The semaphore's limit.
    pub limit: u32,
}

/// The leader of an election.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_leader {
    /// The leader's session.
    pub session: u64,
    /// Its epoch: the token of its grant.
    pub epoch: u64,
}

/// A name copied out of a service or gate, with its highest token for gate entries.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct fencelock_name {
    /// For `fencelock_gate_entries`: the highest token admitted. Otherwise 0.
    pub highest: u64,
    /// Length in bytes, without the NUL.
    pub len: usize,
    /// The name, NUL-terminated.
    pub name: [c_char; FENCELOCK_NAME_BUF_LEN],
}

impl fencelock_name {
    pub(crate) fn new(name: &str, highest: u64) -> Self {
        let (len, name) = name_buf(name);
        fencelock_name { highest, len, name }
    }
}

/// What a client may do now, by its own clock (`fencelock_keeper_lease`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_lease_state {
    /// No keep-alive (or open) has been acknowledged yet: the client holds nothing.
    Unconfirmed = 1,
    /// Certainly valid: act freely until `until`.
    Safe = 2,
    /// Within the margin of possible expiry: stop acting now, keep sending keep-alives.
    Jeopardy = 3,
    /// The lease may have expired: everything held is lost.
    Expired = 4,
}

/// A lease as the keeper sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_lease {
    /// Which state.
    pub state: fencelock_lease_state,
    /// `SAFE`: act until this instant (else 0).
    pub until: u64,
    /// `JEOPARDY`: the session may be gone from this instant (else 0).
    pub expires_at: u64,
}

impl From<Lease> for fencelock_lease {
    fn from(l: Lease) -> Self {
        let (state, until, expires_at) = match l {
            Lease::Unconfirmed => (fencelock_lease_state::Unconfirmed, 0, 0),
            Lease::Safe { until } => (fencelock_lease_state::Safe, until, 0),
            Lease::Jeopardy { expires_at } => (fencelock_lease_state::Jeopardy, 0, expires_at),
            Lease::Expired => (fencelock_lease_state::Expired, 0, 0),
        };
        fencelock_lease {
            state,
            until,
            expires_at,
        }
    }
}

// ------------------------------------------------------------ pointer checks

/// `MISALIGNED_MEMORY` for a pointer that is not NULL and not aligned for a `T`: checked
/// before anything is read or written through it (a misaligned access is undefined
/// behaviour in Rust, and faults on strict-alignment targets). Cost: O(1).
pub(crate) fn aligned<T>(p: *const T) -> Result<(), Fail> {
    if p.is_null() || p.is_aligned() {
        Ok(())
    } else {
        Err(fencelock_result::MisalignedMemory.into())
    }
}

/// `p` as a shared reference, or `NULL_PARAMETER`, or `MISALIGNED_MEMORY`.
///
/// # Safety
/// `p` is NULL or points to a valid `T` that lives as long as `'a` and is not mutated.
pub(crate) unsafe fn arg<'a, T>(p: *const T) -> Result<&'a T, Fail> {
    aligned(p)?;
    // SAFETY: the caller's contract: NULL or valid; aligned (checked); as_ref checks NULL.
    unsafe { p.as_ref() }.ok_or(Fail::Code(fencelock_result::NullParameter))
}

/// A required out-pointer, checked for NULL, then alignment. Written with `ptr::write`
/// only, so the caller's memory may be uninitialised.
pub(crate) fn out<T>(p: *mut T) -> Result<*mut T, Fail> {
    if p.is_null() {
        return Err(fencelock_result::NullParameter.into());
    }
    aligned(p)?;
    Ok(p)
}

/// Writes `v` through an out-pointer already checked by [`out`].
///
/// # Safety
/// `p` is non-NULL, aligned and valid for writing one `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: the caller's contract (checked non-NULL by `out`).
    unsafe { p.write(v) }
}

/// [`put`] as the `Ok(())` of a body that ends by writing one out-value.
///
/// # Safety
/// As [`put`].
pub(crate) unsafe fn set<T>(p: *mut T, v: T) -> Result<(), Fail> {
    // SAFETY: forwarded contract.
    unsafe { put(p, v) };
    Ok(())
}

/// The longest caller buffer there can be: no object spans more than `isize::MAX`
/// (C's `PTRDIFF_MAX`) bytes, and a slice that long may not even be formed.
const MAX_BUF_LEN: usize = isize::MAX as usize;

/// A length no caller buffer can have (`(size_t)-1` from an error code, say) is
/// `INVALID_ARGUMENT`, before any slice is formed over it: reading or writing that many
/// bytes would run past the caller's memory (and forming the slice aborts a debug build).
pub(crate) fn buf_len(len: usize) -> Result<usize, Fail> {
    if len > MAX_BUF_LEN {
        return Err(fencelock_result::InvalidArgument.into());
    }
    Ok(len)
}

/// Caller bytes: `NULL_PARAMETER` for NULL (whatever `len`), then `INVALID_ARGUMENT` for
/// a length past `PTRDIFF_MAX`.
///
/// # Safety
/// `p` is NULL or valid for reading `len` bytes during `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], Fail> {
    if p.is_null() {
        return Err(fencelock_result::NullParameter.into());
    }
    let len = buf_len(len)?;
    // SAFETY: non-NULL, at most isize::MAX bytes, and the caller promises `len` readable
    // bytes.
    Ok(unsafe { core::slice::from_raw_parts(p, len) })
}

/// A caller's name key: `NULL_PARAMETER`, then `INVALID_ARGUMENT` unless `len` is
/// `FENCELOCK_NAME_KEY_LEN`.
///
/// # Safety
/// As [`bytes`].
pub(crate) unsafe fn name_key(p: *const u8, len: usize) -> Result<fencelock::NameKey, Fail> {
    // SAFETY: NULL or valid for `len` bytes (the caller's contract).
    let key = unsafe { bytes(p, len) }?;
    let key: [u8; FENCELOCK_NAME_KEY_LEN] = key
        .try_into()
        .map_err(|_| Fail::from(fencelock_result::InvalidArgument))?;
    Ok(fencelock::NameKey::from_bytes(key))
}

/// A caller name: `NULL_PARAMETER`, then `INVALID_UTF8`. Emptiness and length are the
/// core's to judge (`EMPTY_NAME`, `NAME_TOO_LONG`).
///
/// # Safety
/// As [`bytes`].
pub(crate) unsafe fn name<'a>(p: *const u8, len: usize) -> Result<&'a str, Fail> {
    // SAFETY: forwarded contract.
    let b = unsafe { bytes(p, len) }?;
    // Lock names are nearly always ASCII: checking that a word at a time costs a fraction
    // of the general UTF-8 validation (a tenth of an acquire + release through this ABI,
    // measured with callgrind), and the result is the same.
    if ascii(b) {
        // SAFETY: every ASCII byte string is valid UTF-8.
        return Ok(unsafe { core::str::from_utf8_unchecked(b) });
    }
    core::str::from_utf8(b).map_err(|_| fencelock_result::InvalidUtf8.into())
}

/// Whether every byte of `b` is ASCII, a word at a time with no byte-by-byte tail: the
/// last (possibly overlapping) word covers the bytes the whole words leave, and a name
/// shorter than a word is read as two overlapping half-words (or bytes). The same answer
/// as `<[u8]>::is_ascii`, in about 15 fewer instructions for a 13-byte name (whose
/// tail that function checks a byte at a time). Cost: O(len).
#[inline]
fn ascii(b: &[u8]) -> bool {
    const HI8: u64 = 0x8080_8080_8080_8080;
    const HI4: u32 = 0x8080_8080;
    let n = b.len();
    let w8 = |i: usize| {
        b.get(i..i + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map_or(HI8, u64::from_le_bytes)
    };
    let w4 = |i: usize| {
        b.get(i..i + 4)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .map_or(HI4, u32::from_le_bytes)
    };
    if n >= 8 {
        let mut acc = 0u64;
        let mut i = 0;
        while i + 8 <= n {
            acc |= w8(i);
            i += 8;
        }
        (acc | w8(n - 8)) & HI8 == 0
    } else if n >= 4 {
        (w4(0) | w4(n - 4)) & HI4 == 0
    } else {
        b.iter().all(|c| *c < 0x80)
    }
}

/// A caller name copied out of the caller's memory, for functions that write out-values
/// while they still need the name (the out-values may then overlap the name's bytes).
pub(crate) struct NameCopy {
    /// `None`: longer than any name can be, so it names nothing.
    len: Option<usize>,
    buf: [u8; FENCELOCK_MAX_NAME_LEN],
}

impl NameCopy {
    /// The name, or `None` if it is longer than any name can be.
    pub(crate) fn get(&self) -> Option<&str> {
        // Always valid UTF-8 (checked when copied); `.ok()` keeps this panic-free.
        self.len
            .and_then(|n| core::str::from_utf8(&self.buf[..n]).ok())
    }
}

/// [`name`], copied: `NULL_PARAMETER`, then `INVALID_UTF8`.
///
/// # Safety
/// As [`bytes`].
pub(crate) unsafe fn name_copy(p: *const u8, len: usize) -> Result<NameCopy, Fail> {
    // SAFETY: forwarded contract.
    let s = unsafe { name(p, len) }?;
    let mut buf = [0u8; FENCELOCK_MAX_NAME_LEN];
    let len = buf.get_mut(..s.len()).map(|d| {
        d.copy_from_slice(s.as_bytes());
        s.len()
    });
    Ok(NameCopy { len, buf })
}

/// A caller output byte buffer: NULL is allowed only with `cap == 0` (a size query); a
/// capacity past `PTRDIFF_MAX` is `INVALID_ARGUMENT`.
///
/// # Safety
/// `p` is NULL or valid for writing `cap` bytes during `'a`.
pub(crate) unsafe fn buf<'a>(p: *mut u8, cap: usize) -> Result<&'a mut [u8], Fail> {
    if p.is_null() {
        return if cap == 0 {
            Ok(&mut [])
        } else {
            Err(fencelock_result::NullParameter.into())
        };
    }
    let cap = buf_len(cap)?;
    // SAFETY: non-NULL, at most isize::MAX bytes, and the caller promises `cap` writable
    // bytes. Their previous content is irrelevant: they are only written.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, cap) })
}

/// Refuses an array capacity no memory can have: `cap` elements of `T` past
/// `PTRDIFF_MAX` bytes (a `(size_t)-1` from an error code, say) is `INVALID_ARGUMENT`.
pub(crate) fn check_array_len<T>(cap: usize) -> Result<(), Fail> {
    if cap > MAX_BUF_LEN / core::mem::size_of::<T>().max(1) {
        return Err(fencelock_result::InvalidArgument.into());
    }
    Ok(())
}

/// A caller's array `p[..cap]` and its count out-pointer, checked by [`list_out`] with
/// the other arguments, before the handle.
pub(crate) struct ListOut<T> {
    p: *mut T,
    cap: usize,
    count: *mut usize,
}

/// Checks a caller's list arguments: `count` NULL is `NULL_PARAMETER`, and so is a NULL
/// `p` with `cap` > 0 (NULL with `cap` 0 is a count query); a `cap` past `PTRDIFF_MAX`
/// bytes is `INVALID_ARGUMENT` ([`check_array_len`]). Nothing is written. Cost: O(1).
pub(crate) fn list_out<T>(p: *mut T, cap: usize, count: *mut usize) -> Result<ListOut<T>, Fail> {
    let count = out(count)?;
    if p.is_null() && cap != 0 {
        return Err(fencelock_result::NullParameter.into());
    }
    aligned(p)?;
    check_array_len::<T>(cap)?;
    Ok(ListOut { p, cap, count })
}

/// Writes the items of `items` to the caller array checked by [`list_out`], all or
/// nothing: sets `*count` to how many there are, and fails with `BUFFER_TOO_SMALL`
/// (writing none) when they do not fit.
///
/// # Safety
/// `dst.p` is NULL or valid for writing `dst.cap` `T`s; `dst.count` is valid for writing.
pub(crate) unsafe fn write_list<T, I>(dst: ListOut<T>, items: impl Fn() -> I) -> Result<(), Fail>
where
    I: Iterator<Item = T>,
{
    let n = items().count();
    // SAFETY: checked non-NULL by `list_out`; the caller promises it is writable.
    unsafe { put(dst.count, n) };
    if n > dst.cap {
        return Err(fencelock_result::BufferTooSmall.into());
    }
    for (i, item) in items().enumerate() {
        // SAFETY: i < n <= cap, and the caller promises `cap` writable elements.
        unsafe { dst.p.add(i).write(item) };
    }
    Ok(())
}

/// Writes `msg` NUL-terminated into `buf[..len]` (truncating, like `snprintf`), sets
/// `*out_len` (if not NULL) to the message length without the NUL, and returns
/// `BUFFER_TOO_SMALL` if it was truncated.
///
/// # Safety
/// `buf` is NULL or valid for writing `len` bytes; `out_len` NULL or writable.
pub(crate) unsafe fn write_message(
    msg: &str,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> Result<(), Fail> {
    // SAFETY: forwarded contract (c_char and u8 have the same layout).
    let dst = unsafe { self::buf(buf.cast::<u8>(), len) }?;
    aligned(out_len)?;
    // Written only once the buffer is judged: a NULL or oversized buffer writes nothing.
    if !out_len.is_null() {
        // SAFETY: non-NULL and the caller promises it is writable.
        unsafe { out_len.write(msg.len()) };
    }
    let Some(room) = dst.len().checked_sub(1) else {
        return Err(fencelock_result::BufferTooSmall.into());
    };
    let n = msg.len().min(room);
    dst[..n].copy_from_slice(&msg.as_bytes()[..n]);
    dst[n] = 0;
    if n < msg.len() {
        return Err(fencelock_result::BufferTooSmall.into());
    }
    Ok(())
}

/// Boxes a handle into `*dst`.
///
/// # Safety
/// `dst` was checked non-NULL by [`out`] and is writable.
pub(crate) unsafe fn give<T: crate::handle::Handle>(dst: *mut *mut T, h: T) {
    let p = Box::into_raw(Box::new(h));
    // SAFETY: just boxed, in place for good; forwarded contract for `dst`.
    unsafe {
        crate::handle::settle(p);
        put(dst, p)
    }
}

/// Frees a handle made by [`give`], marked ended first. NULL is fine, and so is anything
/// [`check`](crate::handle::check) refuses (another kind of handle): nothing is freed
/// then.
///
/// # Safety
/// `p` is NULL or a handle of this library's; a live one of kind `T` came from [`give`].
pub(crate) unsafe fn take<T: crate::handle::Handle>(p: *mut T) {
    // SAFETY: forwarded contract.
    if unsafe { crate::handle::check::<T>(p) }.is_ok() {
        // SAFETY: a live `T` (checked), from Box::into_raw; ended before it is freed, so a
        // second `take` finds no tag (while the memory is not reused).
        crate::handle::end(unsafe { &*p });
        // SAFETY: as above; freed once.
        drop(unsafe { Box::from_raw(p) });
    }
}

#[cfg(test)]
mod tests {
    use super::ascii;

    /// `ascii` agrees with `<[u8]>::is_ascii` for every length up to five words, with no
    /// high byte and with one at each position (the word-boundary and overlap cases).
    #[test]
    fn ascii_agrees_with_is_ascii() {
        for n in 0..40 {
            let mut b = vec![b'a'; n];
            assert!(ascii(&b), "all ASCII, len {n}");
            for at in 0..n {
                b[at] = 0xC3;
                assert_eq!(ascii(&b), b.is_ascii(), "len {n}, high byte at {at}");
                assert!(!ascii(&b));
                b[at] = b'a';
            }
        }
    }
}
