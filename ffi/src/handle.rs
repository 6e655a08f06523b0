//! The one call framework of every extern function on a handle (service, gate, keeper):
//! the panic boundary, a poisoned handle refused first, then the argument checks, then
//! the NULL check, and the record of the last failure for the handle's `last_error`.

use core::cell::Cell;
use core::ffi::c_char;
use core::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::result::{fencelock_result, ffi_panic_boundary, Fail};
use crate::types::write_message;

/// What every handle carries besides its object: its last failure and whether a caught
/// panic poisoned it. `Cell`s, so getters (which take a `const` handle) record too.
#[derive(Default)]
pub(crate) struct HandleState {
    last: Cell<Option<Fail>>,
    poisoned: Cell<bool>,
}

impl HandleState {
    /// Records `fail` as the handle's latest failure without failing the call: a batch's
    /// refused input, when the batch goes on.
    pub(crate) fn record(&self, fail: Fail) {
        self.last.set(Some(fail));
    }
}

/// A handle kind: gives access to its [`HandleState`].
pub(crate) trait Handle: 'static {
    fn state(&self) -> &HandleState;
}

/// How an extern function receives its handle: `*mut` (inputs, drains, changes) lends
/// the body a `&mut`, `*const` (getters) a `&`.
pub(crate) trait HandlePtr: Copy {
    /// The handle type.
    type Target: Handle;
    /// What the body gets.
    type Ref<'a>: Deref<Target = Self::Target>;

    /// The handle behind the pointer, `None` for NULL.
    ///
    /// # Safety
    /// `self` is NULL or a live handle that no other call uses (for `*const`: mutates)
    /// during `'a`.
    unsafe fn get<'a>(self) -> Option<Self::Ref<'a>>;

    /// `h` lent for a shorter time, usable again afterwards.
    fn reborrow<'b>(h: &'b mut Self::Ref<'_>) -> Self::Ref<'b>;
}

impl<T: Handle> HandlePtr for *mut T {
    type Target = T;
    type Ref<'a> = &'a mut T;

    unsafe fn get<'a>(self) -> Option<&'a mut T> {
        // SAFETY: the caller's contract: NULL or live and unaliased.
        unsafe { self.as_mut() }
    }

    fn reborrow<'b>(h: &'b mut &mut T) -> &'b mut T {
        h
    }
}

impl<T: Handle> HandlePtr for *const T {
    type Target = T;
    type Ref<'a> = &'a T;

    unsafe fn get<'a>(self) -> Option<&'a T> {
        // SAFETY: the caller's contract: NULL or live and not mutated meanwhile.
        unsafe { self.as_ref() }
    }

    fn reborrow<'b>(h: &'b mut &T) -> &'b T {
        h
    }
}

/// Runs `f` on a live handle: `NULL_PARAMETER` for NULL, `PANIC` for a poisoned one.
/// A panic inside `f` poisons the handle.
///
/// # Safety
/// `p` is NULL or a live handle not used (for `*const`: not mutated) by another call at
/// the same time.
pub(crate) unsafe fn with_handle<P: HandlePtr>(
    p: P,
    f: impl FnOnce(P::Ref<'_>) -> Result<(), Fail>,
) -> Result<(), Fail> {
    // SAFETY: the caller's contract.
    let mut h = unsafe { p.get() }.ok_or(Fail::Code(fencelock_result::NullParameter))?;
    if h.state().poisoned.get() {
        return Err(fencelock_result::Panic.into());
    }
    match catch_unwind(AssertUnwindSafe(|| f(P::reborrow(&mut h)))) {
        Ok(r) => r,
        Err(_) => {
            h.state().poisoned.set(true);
            Err(fencelock_result::Panic.into())
        }
    }
}

/// The body of every extern function on a handle, inside the panic boundary: a poisoned
/// handle is `PANIC` before anything else; then `args` checks and converts the other
/// arguments (before a NULL handle is refused), then `body` runs on the handle through
/// [`with_handle`]. Returns the result code, and remembers a
/// failure (argument checks included; `DONE` is none) for the handle's `last_error`.
///
/// # Safety
/// As [`with_handle`].
pub(crate) unsafe fn call<P: HandlePtr, A>(
    p: P,
    args: impl FnOnce() -> Result<A, Fail>,
    body: impl FnOnce(P::Ref<'_>, A) -> Result<(), Fail>,
) -> fencelock_result {
    let run = || -> Result<(), Fail> {
        // SAFETY: `p` is NULL or a live handle (the contract); the reference ends here.
        if unsafe { p.get() }.is_some_and(|h| h.state().poisoned.get()) {
            return Err(fencelock_result::Panic.into());
        }
        let a = args()?;
        // SAFETY: forwarded contract.
        unsafe { with_handle(p, |h| body(h, a)) }
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => fencelock_result::Ok,
        Ok(Err(fail)) => {
            if !matches!(fail, Fail::Code(fencelock_result::Done)) {
                // SAFETY: `p` is NULL or a live handle (the contract), and the one lent
                // to `body` is gone.
                if let Some(h) = unsafe { p.get() } {
                    h.state().last.set(Some(fail));
                }
            }
            fail.code()
        }
        Err(_) => fencelock_result::Panic,
    }
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
        // SAFETY: NULL or live (contract).
        let h = unsafe { h.as_ref() }.ok_or(fencelock_result::NullParameter)?;
        let msg = match h.state().last.get() {
            None => fencelock_result::Ok.message(),
            Some(fail) => fail.message(),
        };
        // SAFETY: forwarded contract.
        unsafe { write_message(&msg, buf, len, out_len) }
    })
}
