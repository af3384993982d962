//! A try-lock for the per-object state of the Python classes.
//!
//! `std::sync::Mutex` costs two atomic read-modify-writes per call, and on this path even one
//! is a large share of the cost: `perf annotate` put a quarter of a `wrap` step on a single
//! `lock cmpxchg`. Under the GIL the interpreter lock already serializes every caller, so the
//! flag here is a plain `Cell` there and taking the lock is a load and a store; only the
//! free-threaded build (`Py_GIL_DISABLED`) pays for an atomic compare-exchange.
//!
//! Soundness rests on two rules that callers keep (`py/mod.rs` wraps `try_acquire` in a function
//! that takes a `Python` token):
//! * under the GIL, only the thread holding the GIL touches the flag: a guard is taken with a
//!   `Python` token, and dropped by a thread that holds the GIL again. A guard may be carried
//!   across `Python::detach` (`feed_batch` does the Rust work of a whole batch detached, its
//!   filters locked), but it is dropped only after re-attaching;
//! * the value is reached only through the one guard, so while a detached thread works on it
//!   every other caller finds the flag set and gets no guard.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

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

    /// The value, if nobody holds the lock. (The guard is built only once the lock is taken:
    /// building it eagerly, as `then_some` would, and dropping it on failure would release the
    /// holder's lock.)
    ///
    /// # Safety
    ///
    /// In a GIL build the calling thread must hold the GIL (for instance, own a `Python` token or
    /// run inside `tp_traverse`), and must drop the guard while still holding it.
    #[inline]
    pub(crate) unsafe fn try_acquire(&self) -> Option<Guard<'_, T>> {
        self.locked.acquire().then(|| Guard { lock: self })
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

/// Takes every lock of `locks`, or none: a lock given twice shares its first guard, and
/// `slots[i]` is set to the index of lock `i`'s guard. `Err(i)` when lock `i` is held elsewhere;
/// every guard taken is dropped then.
///
/// # Safety
///
/// As for [`TryLock::try_acquire`].
pub(crate) unsafe fn lock_all<'a, T>(
    locks: &[&'a TryLock<T>],
    slots: &mut [usize],
) -> Result<Vec<Guard<'a, T>>, usize> {
    let mut guards: Vec<Guard<'a, T>> = Vec::with_capacity(locks.len());
    for (i, &lock) in locks.iter().enumerate() {
        // SAFETY: the caller's.
        if let Some(g) = unsafe { lock.try_acquire() } {
            slots[i] = guards.len();
            guards.push(g);
        } else if let Some(earlier) = locks[..i].iter().position(|&l| std::ptr::eq(l, lock)) {
            // Taken by this very call: the lock is given twice.
            slots[i] = slots[earlier];
        } else {
            return Err(i);
        }
    }
    Ok(guards)
}

#[cfg(test)]
mod tests {
    use super::{lock_all, TryLock};

    #[test]
    fn all_or_none() {
        let (a, b) = (TryLock::new(0), TryLock::new(1));
        let mut slots = [9; 3];
        // SAFETY: single-threaded test.
        let guards = unsafe { lock_all(&[&a, &b, &a], &mut slots) }.unwrap();
        assert_eq!((guards.len(), slots), (2, [0, 1, 0]));
        drop(guards);
        let held = unsafe { b.try_acquire() }.unwrap();
        assert_eq!(unsafe { lock_all(&[&a, &b], &mut slots) }.err(), Some(1));
        assert!(unsafe { a.try_acquire() }.is_some(), "a failed call kept a lock");
        drop(held);
    }

    #[test]
    fn a_failed_attempt_leaves_the_holder_locked() {
        let lock = TryLock::new(1);
        // SAFETY: single-threaded test.
        let mut first = unsafe { lock.try_acquire() }.unwrap();
        assert!(unsafe { lock.try_acquire() }.is_none());
        assert!(unsafe { lock.try_acquire() }.is_none(), "a failed attempt released the lock");
        *first += 1;
        drop(first);
        assert_eq!(*unsafe { lock.try_acquire() }.unwrap(), 2);
    }
}
