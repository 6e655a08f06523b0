//! The one call framework of every extern function on a handle (service, gate, keeper):
//! the panic boundary, a poisoned handle refused first, then the argument checks, then
//! the handle check (NULL, or not a live handle of the function's kind), and the record
//! of the last failure for the handle's `last_error`.
//!
//! **Handle kinds are checked.** C hands every handle around as a pointer, and a Python
//! host through `ctypes` as a bare `c_void_p`, so a gate passed where a service is due
//! type-checks there. The first eight bytes of every handle are a tag naming its kind
//! ([`Handle::TAG`]), overwritten with [`FREED`] when the handle ends; every function
//! reads the tag before it touches the handle (where it checks for NULL: after the
//! other arguments) and refuses any other with `INVALID_HANDLE`, changing nothing
//! (SQLite checks its connection handles the same way, with a magic number, to report
//! misuse instead of corrupting memory). What this catches: a live handle of another
//! kind, a pointer not aligned as the kind's handles are, a service placed in the
//! caller's memory (`fencelock_service_init_in`) after its `_free`, and a byte copy of a
//! handle at another address (each handle keeps its own address beside its tag: a placed
//! service's block copied or moved still points into the original). What it does not:
//! a handle this library allocated, used after its `_free` — the memory may be
//! unmapped (a large service's is) or reused, so reading the tag is itself undefined
//! behaviour and may crash; that stays the caller's error.

use core::cell::Cell;
use core::ffi::c_char;
use core::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::result::{fencelock_result, ffi_panic_boundary, Fail};
use crate::types::write_message;

/// The tag of a handle that has ended (`_free`): no kind has it.
pub(crate) const FREED: u64 = u64::from_le_bytes(*b"fl:freed");

/// What every handle carries besides its object, as its first field: its kind's tag, its
/// last failure and whether a caught panic poisoned it. `Cell`s, so getters (which take a
/// `const` handle) record too.
#[repr(C)]
pub(crate) struct HandleState {
    /// `T::TAG` of the handle's type while it lives, [`FREED`] after. First, at offset 0
    /// of the handle (checked at compile time by [`tag_first`]), so it can be read through
    /// a pointer to any handle kind.
    tag: Cell<u64>,
    /// The handle's own address once it is in place ([`settle`]): a byte-for-byte copy of
    /// a handle (a placed service's block copied or moved by the host) carries its
    /// original's, and [`check`] refuses it. Second, at offset 8 (asserted below).
    home: Cell<usize>,
    last: Cell<Option<Fail>>,
    poisoned: Cell<bool>,
}

const _: () = assert!(core::mem::offset_of!(HandleState, home) == 8);

impl HandleState {
    /// The state of a new handle of kind `T`, not in place yet (its home is set by
    /// [`settle`] where the handle ends up).
    pub(crate) fn new<T: Handle>() -> Self {
        HandleState {
            tag: Cell::new(T::TAG),
            home: Cell::new(0),
            last: Cell::new(None),
            poisoned: Cell::new(false),
        }
    }

    /// Records `fail` as the handle's latest failure without failing the call: a batch's
    /// refused input, when the batch goes on.
    pub(crate) fn record(&self, fail: Fail) {
        self.last.set(Some(fail));
    }
}

/// A handle kind: gives access to its [`HandleState`], which must be its first field
/// (`#[repr(C)]`, asserted with [`tag_first`]).
pub(crate) trait Handle: 'static {
    /// The kind's tag: eight bytes no other kind (and not [`FREED`]) has.
    const TAG: u64;
    fn state(&self) -> &HandleState;
}

/// Whether a handle type's tag is its first eight bytes: `offset` is
/// `offset_of!(Type, state)`. For a compile-time assertion beside each handle type.
pub(crate) const fn tag_first(offset: usize) -> bool {
    offset == 0 && core::mem::offset_of!(HandleState, tag) == 0
}

/// `p` checked: `NULL_PARAMETER` for NULL, `INVALID_HANDLE` for a pointer not aligned as
/// a `T` is, whose first eight bytes are not `T`'s tag (another kind of handle, an
/// ended placed service), or whose next word is not `p` itself (a copy of a handle made
/// elsewhere: a placed service's block copied or moved). Reads those bytes only.
/// Cost: O(1).
///
/// # Safety
/// `p` is NULL or points to at least eight readable bytes, as every live handle of this
/// library does (the caller's contract: a handle pointer is one this library gave).
pub(crate) unsafe fn check<T: Handle>(p: *const T) -> Result<(), Fail> {
    if p.is_null() {
        return Err(fencelock_result::NullParameter.into());
    }
    // SAFETY: non-NULL and aligned as a `T` (checked first; a `T` is at least as aligned
    // as its `u64` tag), eight readable bytes (contract).
    if !p.is_aligned() || unsafe { p.cast::<u64>().read() } != T::TAG {
        return Err(fencelock_result::InvalidHandle.into());
    }
    // SAFETY: a live handle of kind `T` (its tag), so its state's `home` word is at
    // offset 8 (asserted above), aligned as the handle is.
    if unsafe { p.cast::<u8>().add(8).cast::<usize>().read() } != p as usize {
        return Err(fencelock_result::InvalidHandle.into());
    }
    Ok(())
}

/// Records where the handle `p` lives, once it is there for good (boxed, or written into
/// its block): from then on [`check`] refuses a copy of it elsewhere. Cost: O(1).
///
/// # Safety
/// `p` points to a live handle of kind `T`, used by no other call.
pub(crate) unsafe fn settle<T: Handle>(p: *mut T) {
    // SAFETY: a live handle (contract).
    unsafe { &*p }.state().home.set(p as usize);
}

/// Marks a handle ended, just before it is dropped: from now on [`check`] refuses it
/// while its memory is the caller's, as a placed service's is (a handle this library
/// allocated is freed: using it again is the caller's undefined behaviour). Cost: O(1).
pub(crate) fn end<T: Handle>(h: &T) {
    h.state().tag.set(FREED);
}

/// How an extern function receives its handle: `*mut` (inputs, drains, changes) lends
/// the body a `&mut`, `*const` (getters) a `&`.
pub(crate) trait HandlePtr: Copy {
    /// The handle type.
    type Target: Handle;
    /// What the body gets.
    type Ref<'a>: Deref<Target = Self::Target>;

    /// The handle behind the pointer, once [`check`]ed: `NULL_PARAMETER` for NULL,
    /// `INVALID_HANDLE` for one that is not a live handle of this kind.
    ///
    /// # Safety
    /// `self` is NULL or a handle of this library's (of any kind, for the check to refuse
    /// a wrong one), and a live one of this kind is used by no other call during `'a`
    /// (`*const` calls included: a failure is recorded in the handle).
    unsafe fn get<'a>(self) -> Result<Self::Ref<'a>, Fail>;
}

impl<T: Handle> HandlePtr for *mut T {
    type Target = T;
    type Ref<'a> = &'a mut T;

    unsafe fn get<'a>(self) -> Result<&'a mut T, Fail> {
        // SAFETY: the caller's contract.
        unsafe { check::<T>(self) }?;
        // SAFETY: non-NULL and tagged as a live `T` (checked); unaliased (contract).
        Ok(unsafe { &mut *self })
    }
}

impl<T: Handle> HandlePtr for *const T {
    type Target = T;
    type Ref<'a> = &'a T;

    unsafe fn get<'a>(self) -> Result<&'a T, Fail> {
        // SAFETY: the caller's contract.
        unsafe { check::<T>(self) }?;
        // SAFETY: non-NULL and tagged as a live `T` (checked); not mutated (contract).
        Ok(unsafe { &*self })
    }
}

/// The body of every extern function on a handle, inside one panic boundary: the handle
/// is looked up once (NULL, or not a live handle of its kind, is refused — but only after
/// the other arguments); a poisoned handle is `PANIC` before anything else; then `args`
/// checks and converts the other arguments, then `body` runs on the handle. A panic inside
/// `body` poisons the handle (one inside `args` does not: the handle was not changed).
/// Returns the result code, and remembers a failure (argument checks included; `DONE` is
/// none) for the handle's `last_error`.
///
/// # Safety
/// `p` is NULL or a live handle not used by another call at the same time (`*const`
/// calls included: a failure is recorded in the handle).
pub(crate) unsafe fn call<P: HandlePtr, A>(
    p: P,
    args: impl FnOnce() -> Result<A, Fail>,
    body: impl FnOnce(P::Ref<'_>, A) -> Result<(), Fail>,
) -> fencelock_result {
    let in_body = Cell::new(false);
    let run = || -> Result<(), Fail> {
        // SAFETY: `p` is NULL or a live handle (the contract); the reference ends with
        // this closure.
        let h = unsafe { p.get() };
        if h.as_ref().is_ok_and(|h| h.state().poisoned.get()) {
            return Err(fencelock_result::Panic.into());
        }
        let a = args()?;
        let h = h?;
        in_body.set(true);
        body(h, a)
    };
    let fail = match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => return fencelock_result::Ok,
        Ok(Err(fail)) => fail,
        Err(payload) => {
            crate::result::drop_panic(payload);
            // A panic in `args` leaves the handle untouched: not poisoned, but the
            // failure is still its latest, for `last_error` (which says so).
            if !in_body.get() {
                Fail::PanicInArguments
            } else {
                // SAFETY: as below; a handle that panicked is poisoned for good.
                if let Ok(h) = unsafe { p.get() } {
                    h.state().poisoned.set(true);
                }
                fencelock_result::Panic.into()
            }
        }
    };
    if !matches!(fail, Fail::Code(fencelock_result::Done)) {
        // SAFETY: `p` is NULL or a handle (the contract), and the one lent to `body` is
        // gone. A pointer that is not a live handle of this kind is not written to.
        if let Ok(h) = unsafe { p.get() } {
            h.state().last.set(Some(fail));
        }
    }
    fail.code()
}

/// The body of `fencelock_{service,gate,keeper}_last_error`: writes the detailed message
/// of the handle's latest failure ("ok" if none yet) like `fencelock_result_message`.
/// A poisoned handle still answers.
///
/// # Safety
/// `h` NULL or a live handle; `buf` NULL or valid for `len` bytes; `out_len` NULL or
/// writable.
pub(crate) unsafe fn last_error<T: Handle>(
    h: *const T,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> fencelock_result {
    ffi_panic_boundary!({
        // The arguments first, then the handle, as every call checks them: a call wrong
        // in both ways gets the argument's error. (The buffer is judged again, and
        // written, below.)
        // SAFETY: forwarded contract (c_char and u8 have the same layout).
        unsafe { crate::types::buf(buf.cast::<u8>(), len) }?;
        crate::types::aligned(out_len)?;
        // SAFETY: NULL or a handle (contract).
        unsafe { check(h) }?;
        // SAFETY: non-NULL and tagged as a live `T` (checked).
        let h = unsafe { &*h };
        let msg = match h.state().last.get() {
            None => fencelock_result::Ok.message(),
            Some(fail) => fail.message(),
        };
        // SAFETY: forwarded contract.
        unsafe { write_message(&msg, buf, len, out_len) }
    })
}
