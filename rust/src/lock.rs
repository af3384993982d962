//! A try-lock for the per-object state of the Python classes.
//!
//! `std::sync::Mutex` costs two atomic read-modify-writes per call, and on this path even one
//! is a large share of the cost: `perf annotate` put a quarter of a `wrap` step on a single
//! `lock cmpxchg`. Under the GIL the interpreter lock already serializes every caller, so the
//! flag here is a plain `Cell` there and taking the lock is a load and a store; only the
//! free-threaded build (`Py_GIL_DISABLED`) pays for an atomic compare-exchange.
//!
//! Soundness rests on two rules that the API enforces or this crate keeps:
//! * `try_lock` takes a `Python` token, so under the GIL only the thread holding the GIL can
//!   touch the flag or the value;
//! * a guard is never held across `Python::detach` (the crate only detaches while holding no
//!   guard), so the flag is released by a thread that still holds the GIL.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

use pyo3::Python;

#[cfg(not(Py_GIL_DISABLED))]
struct Flag(std::cell::Cell<bool>);

#[cfg(not(Py_GIL_DISABLED))]
impl Flag {
    const fn new() -> Flag {
        Flag(std::cell::Cell::new(false))
    }

    #[inline]
    fn acquire(&self) -> bool {
        !self.0.replace(true)
    }

    #[inline]
    fn release(&self) {
        self.0.set(false);
    }
}

#[cfg(Py_GIL_DISABLED)]
struct Flag(std::sync::atomic::AtomicBool);

#[cfg(Py_GIL_DISABLED)]
impl Flag {
    const fn new() -> Flag {
        Flag(std::sync::atomic::AtomicBool::new(false))
    }

    #[inline]
    fn acquire(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.0.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    #[inline]
    fn release(&self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// Exclusive access to a `T` through a non-blocking lock.
pub(crate) struct TryLock<T> {
    locked: Flag,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `Guard`, and at most one guard exists at a time:
// with the GIL, `try_lock` needs the token of the one thread that holds it and the guard is
// released before the GIL is (see the module comment); without it, the compare-exchange admits
// one owner. Sharing the lock is then like sharing a `Mutex<T>`, which is `Sync` for `T: Send`.
unsafe impl<T: Send> Sync for TryLock<T> {}

impl<T> TryLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        TryLock { locked: Flag::new(), value: UnsafeCell::new(value) }
    }

    /// The value, if nobody holds the lock.
    #[inline]
    pub(crate) fn try_lock(&self, _py: Python<'_>) -> Option<Guard<'_, T>> {
        self.locked.acquire().then_some(Guard { lock: self })
    }

    /// `try_lock` for the garbage collector's traversal, where PyO3 hands out no token.
    ///
    /// # Safety
    ///
    /// The calling thread must be attached to the interpreter (holding the GIL in a GIL
    /// build), as it is inside `tp_traverse`.
    #[inline]
    pub(crate) unsafe fn try_lock_attached(&self) -> Option<Guard<'_, T>> {
        self.locked.acquire().then_some(Guard { lock: self })
    }
}

/// Exclusive access to the value until dropped.
pub(crate) struct Guard<'a, T> {
    lock: &'a TryLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one, so no `&mut T` exists meanwhile.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, and `&mut self` makes this borrow unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.release();
    }
}
