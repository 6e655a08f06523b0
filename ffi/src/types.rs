//! The plain-data types that cross the ABI, and the pointer checks every function shares.

use core::ffi::c_char;

use fencelock::{Lease, Mode, Output, ReleaseReason, Wait, MAX_NAME_LEN};

use crate::result::{fencelock_result, ffi_panic_boundary, Fail};

/// The longest lock or resource name, in bytes (the core's `MAX_NAME_LEN`).
pub const FENCELOCK_MAX_NAME_LEN: usize = 64;
/// The largest encoded input or output frame, in bytes (the core's `MAX_FRAME_LEN`).
pub const FENCELOCK_MAX_FRAME_LEN: usize = 128;
/// Bytes in a name buffer of an output struct: the longest name plus its NUL.
pub const FENCELOCK_NAME_BUF_LEN: usize = 65;
/// Bytes in front of every frame `fencelock_service_handle_frame` writes: its length,
/// little-endian.
pub const FENCELOCK_FRAME_PREFIX_LEN: usize = 2;

const _: () = assert!(FENCELOCK_MAX_NAME_LEN == MAX_NAME_LEN);
const _: () = assert!(FENCELOCK_NAME_BUF_LEN == FENCELOCK_MAX_NAME_LEN + 1);
const _: () = assert!(FENCELOCK_MAX_FRAME_LEN == fencelock::MAX_FRAME_LEN);
const _: () = assert!(FENCELOCK_MAX_FRAME_LEN <= u16::MAX as usize);

/// Capacities of a service's three fixed tables (the core's `Capacity`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_capacity {
    /// Sessions open at once.
    pub sessions: u32,
    /// Locks held, awaited or in lock-delay at once.
    pub locks: u32,
    /// Holds plus waits over all sessions and locks.
    pub claims: u32,
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
}

impl fencelock_config {
    pub(crate) fn core(&self) -> fencelock::Config {
        fencelock::Config {
            lock_delay: self.lock_delay,
            max_name_len: self.max_name_len,
        }
    }
}

/// How a lock is held. 0 is not a mode (so a zeroed argument is refused).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_mode {
    /// Not a mode: the value of this field in outputs that carry none.
    None = 0,
    /// One holder at a time.
    Exclusive = 1,
    /// Any number of shared holders while there is no exclusive one.
    Shared = 2,
}

impl From<Mode> for fencelock_mode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Exclusive => fencelock_mode::Exclusive,
            Mode::Shared => fencelock_mode::Shared,
        }
    }
}

pub(crate) fn mode_arg(mode: u32) -> Result<Mode, Fail> {
    match mode {
        1 => Ok(Mode::Exclusive),
        2 => Ok(Mode::Shared),
        _ => Err(fencelock_result::InvalidArgument.into()),
    }
}

/// What an acquire does when the lock is not free. 0 is not a wait.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_wait {
    /// Try-lock: answer `BUSY`, queue nothing.
    None = 1,
    /// Queue until granted, cancelled, or the session ends.
    Forever = 2,
    /// Queue until the tick given as `wait_until`, then `WAIT_TIMED_OUT`.
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

/// Why a hold ended (`RELEASED` outputs only).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_release_reason {
    /// Not a reason: the value of this field in every other output.
    None = 0,
    /// The holder released it.
    Released = 1,
    /// The holder closed its session.
    Closed = 2,
    /// The holder's session expired (lock-delay applies).
    Expired = 3,
}

/// Which event a `fencelock_output` is. Each names the session the host must tell.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum fencelock_output_kind {
    /// No output (what a `DONE` poll leaves in the struct).
    None = 0,
    /// A session was opened: `session`, `expires_at`.
    SessionOpened = 1,
    /// A keep-alive was applied (the heartbeat's ack): `session`, `expires_at`.
    SessionRenewed = 2,
    /// A session was closed at its client's request: `session`.
    SessionClosed = 3,
    /// A session's deadline passed; it lost everything: `session`.
    SessionExpired = 4,
    /// The session now holds the lock; every action on the resource must carry `token`:
    /// `session`, `lock`, `mode`, `token`.
    Granted = 5,
    /// The acquire was queued (1 = next in line): `session`, `lock`, `mode`, `position`.
    Queued = 6,
    /// A try-lock found the lock taken; nothing queued: `session`, `lock`.
    Busy = 7,
    /// A hold ended; its token is no longer good: `session`, `lock`, `token`, `reason`.
    Released = 8,
    /// A timed wait reached its deadline ungranted: `session`, `lock`.
    WaitTimedOut = 9,
    /// A queued acquire was withdrawn: `session`, `lock`.
    WaitCancelled = 10,
}

/// One output, copied out of the service (it owns no memory). Fields an output kind does
/// not use are zero (`mode` `NONE`, `reason` `NONE`, `lock_len` 0, `lock` all NUL).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct fencelock_output {
    /// Which event.
    pub kind: fencelock_output_kind,
    /// The mode granted or asked for (`GRANTED`, `QUEUED`).
    pub mode: fencelock_mode,
    /// Why a hold ended (`RELEASED`).
    pub reason: fencelock_release_reason,
    /// Place in the queue, 1 = next (`QUEUED`).
    pub position: u32,
    /// The session to tell.
    pub session: u64,
    /// The session's deadline (`SESSION_OPENED`, `SESSION_RENEWED`).
    pub expires_at: u64,
    /// The fencing token (`GRANTED`, `RELEASED`).
    pub token: u64,
    /// Length of `lock` in bytes, without the NUL.
    pub lock_len: usize,
    /// The lock's name, NUL-terminated (a name may itself contain NUL bytes: trust
    /// `lock_len`).
    pub lock: [c_char; FENCELOCK_NAME_BUF_LEN],
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

impl fencelock_output {
    /// The empty output (`kind` `NONE`, everything zero).
    pub(crate) const NONE: fencelock_output = fencelock_output {
        kind: fencelock_output_kind::None,
        mode: fencelock_mode::None,
        reason: fencelock_release_reason::None,
        position: 0,
        session: 0,
        expires_at: 0,
        token: 0,
        lock_len: 0,
        lock: [0; FENCELOCK_NAME_BUF_LEN],
    };

    pub(crate) fn from_core(o: &Output) -> Self {
        use fencelock_output_kind as K;
        let mut r = fencelock_output {
            session: o.session().0,
            ..Self::NONE
        };
        let mut lock = None;
        match o {
            Output::SessionOpened { expires_at, .. } => {
                r.kind = K::SessionOpened;
                r.expires_at = expires_at.0;
            }
            Output::SessionRenewed { expires_at, .. } => {
                r.kind = K::SessionRenewed;
                r.expires_at = expires_at.0;
            }
            Output::SessionClosed { .. } => r.kind = K::SessionClosed,
            Output::SessionExpired { .. } => r.kind = K::SessionExpired,
            Output::Granted {
                lock: l,
                mode,
                token,
                ..
            } => {
                r.kind = K::Granted;
                r.mode = (*mode).into();
                r.token = token.0;
                lock = Some(l);
            }
            Output::Queued {
                lock: l,
                mode,
                position,
                ..
            } => {
                r.kind = K::Queued;
                r.mode = (*mode).into();
                r.position = *position;
                lock = Some(l);
            }
            Output::Busy { lock: l, .. } => {
                r.kind = K::Busy;
                lock = Some(l);
            }
            Output::Released {
                lock: l,
                token,
                reason,
                ..
            } => {
                r.kind = K::Released;
                r.token = token.0;
                r.reason = match reason {
                    ReleaseReason::Released => fencelock_release_reason::Released,
                    ReleaseReason::Closed => fencelock_release_reason::Closed,
                    ReleaseReason::Expired => fencelock_release_reason::Expired,
                };
                lock = Some(l);
            }
            Output::WaitTimedOut { lock: l, .. } => {
                r.kind = K::WaitTimedOut;
                lock = Some(l);
            }
            Output::WaitCancelled { lock: l, .. } => {
                r.kind = K::WaitCancelled;
                lock = Some(l);
            }
            // The core's Output is non_exhaustive; a new kind would need a new code here.
            _ => r.kind = K::None,
        }
        if let Some(l) = lock {
            (r.lock_len, r.lock) = name_buf(l.as_str());
        }
        r
    }
}

/// A live session's state.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

/// One holder of a lock.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct fencelock_holder {
    /// The holding session.
    pub session: u64,
    /// Its fencing token.
    pub token: u64,
    /// Its mode.
    pub mode: fencelock_mode,
}

/// One waiter for a lock.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// No heartbeat has been acknowledged yet: the client holds nothing.
    Unconfirmed = 1,
    /// Certainly valid: act freely until `until`.
    Safe = 2,
    /// Within the margin of possible expiry: stop acting now, keep heartbeating.
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

/// `p` as a shared reference, or `NULL_PARAMETER`.
///
/// # Safety
/// `p` is NULL or points to a valid `T` that lives as long as `'a` and is not mutated.
pub(crate) unsafe fn arg<'a, T>(p: *const T) -> Result<&'a T, Fail> {
    // SAFETY: the caller's contract: NULL or valid; as_ref checks NULL.
    unsafe { p.as_ref() }.ok_or(Fail::Code(fencelock_result::NullParameter))
}

/// A required out-pointer, checked for NULL. Written with `ptr::write` only, so the
/// caller's memory may be uninitialised.
pub(crate) fn out<T>(p: *mut T) -> Result<*mut T, Fail> {
    if p.is_null() {
        Err(fencelock_result::NullParameter.into())
    } else {
        Ok(p)
    }
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

/// Caller bytes: `NULL_PARAMETER` for NULL (whatever `len`).
///
/// # Safety
/// `p` is NULL or valid for reading `len` bytes during `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], Fail> {
    if p.is_null() {
        return Err(fencelock_result::NullParameter.into());
    }
    // SAFETY: non-NULL, and the caller promises `len` readable bytes.
    Ok(unsafe { core::slice::from_raw_parts(p, len) })
}

/// A caller name: `NULL_PARAMETER`, then `INVALID_UTF8`. Emptiness and length are the
/// core's to judge (`EMPTY_NAME`, `NAME_TOO_LONG`).
///
/// # Safety
/// As [`bytes`].
pub(crate) unsafe fn name<'a>(p: *const u8, len: usize) -> Result<&'a str, Fail> {
    // SAFETY: forwarded contract.
    let b = unsafe { bytes(p, len) }?;
    core::str::from_utf8(b).map_err(|_| fencelock_result::InvalidUtf8.into())
}

/// A caller name copied out of the caller's memory, for functions that write outputs
/// while they still need the name (the outputs may then overlap the name's bytes).
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

/// A caller output byte buffer: NULL is allowed only with `cap == 0` (a size query).
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
    // SAFETY: non-NULL and the caller promises `cap` writable bytes. Their previous
    // content is irrelevant: they are only written.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, cap) })
}

/// Writes the items of `items` to the caller array `p[..cap]` all or nothing: sets
/// `*count` to how many there are, and fails with `BUFFER_TOO_SMALL` (writing none) when
/// they do not fit. NULL `p` is allowed with `cap == 0` (a count query).
///
/// # Safety
/// `p` is NULL or valid for writing `cap` `T`s; `count` is NULL or valid for writing.
pub(crate) unsafe fn write_list<T, I>(
    p: *mut T,
    cap: usize,
    count: *mut usize,
    items: impl Fn() -> I,
) -> Result<(), Fail>
where
    I: Iterator<Item = T>,
{
    let count = out(count)?;
    if p.is_null() && cap != 0 {
        return Err(fencelock_result::NullParameter.into());
    }
    let n = items().count();
    // SAFETY: checked non-NULL; the caller promises it is writable.
    unsafe { put(count, n) };
    if n > cap {
        return Err(fencelock_result::BufferTooSmall.into());
    }
    for (i, item) in items().enumerate() {
        // SAFETY: i < n <= cap, and the caller promises `cap` writable elements.
        unsafe { p.add(i).write(item) };
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
    if !out_len.is_null() {
        // SAFETY: non-NULL and the caller promises it is writable.
        unsafe { out_len.write(msg.len()) };
    }
    // SAFETY: forwarded contract (c_char and u8 have the same layout).
    let dst = unsafe { self::buf(buf.cast::<u8>(), len) }?;
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

/// A handle that a caught panic poisons (gate, keeper).
pub(crate) trait Poisonable {
    fn poisoned(&mut self) -> &mut bool;
}

/// Runs `f` on a live handle: `NULL_PARAMETER` for NULL, `PANIC` if poisoned; a panic in
/// `f` poisons it.
///
/// # Safety
/// `p` is NULL or a live handle not used by another call at the same time.
pub(crate) unsafe fn with_handle<T: Poisonable>(
    p: *mut T,
    f: impl FnOnce(&mut T) -> Result<(), Fail>,
) -> Result<(), Fail> {
    // SAFETY: the caller's contract: NULL or live and unaliased.
    let h = unsafe { p.as_mut() }.ok_or(Fail::Code(fencelock_result::NullParameter))?;
    if *h.poisoned() {
        return Err(fencelock_result::Panic.into());
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *h))) {
        Ok(r) => r,
        Err(_) => {
            *h.poisoned() = true;
            Err(fencelock_result::Panic.into())
        }
    }
}

/// The body of every extern function on a gate or keeper handle, inside the panic
/// boundary: `args` checks and converts the other arguments (before the handle is looked
/// at), then `body` runs on the handle through [`with_handle`].
///
/// # Safety
/// As [`with_handle`].
pub(crate) unsafe fn handle_call<T: Poisonable, A>(
    p: *mut T,
    args: impl FnOnce() -> Result<A, Fail>,
    body: impl FnOnce(&mut T, A) -> Result<(), Fail>,
) -> fencelock_result {
    ffi_panic_boundary!({
        let a = args()?;
        // SAFETY: forwarded contract.
        unsafe { with_handle(p, |h| body(h, a)) }
    })
}

/// Boxes a handle into `*dst`.
///
/// # Safety
/// `dst` was checked non-NULL by [`out`] and is writable.
pub(crate) unsafe fn give<T>(dst: *mut *mut T, h: T) {
    // SAFETY: forwarded contract.
    unsafe { put(dst, Box::into_raw(Box::new(h))) }
}

/// Frees a handle made by [`give`]. NULL is fine.
///
/// # Safety
/// `p` is NULL or came from [`give`] and was not freed yet.
pub(crate) unsafe fn take<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: from Box::into_raw, freed once (contract).
        drop(unsafe { Box::from_raw(p) });
    }
}
