//! A futex-based mutex that never allocates and can be force-reset in a fork child.
//!
//! `spin` locks burn the other core while a holder is descheduled, and `pthread_mutex_t` cannot
//! be re-initialised portably after fork; this is the classic three-state futex lock
//! (0 = free, 1 = held, 2 = held with waiters).

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU32, Ordering};

pub struct Mutex<T> {
    state: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `state`.
unsafe impl<T: Send> Sync for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Mutex<T> {}

const FREE: u32 = 0;
const HELD: u32 = 1;
const CONTENDED: u32 = 2;

impl<T> Mutex<T> {
    pub const fn new(value: T) -> Self {
        Mutex {
            state: AtomicU32::new(FREE),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        if self
            .state
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        MutexGuard { mutex: self }
    }

    /// Takes the lock if it is free, never waiting.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.state
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(MutexGuard { mutex: self })
    }

    #[cold]
    fn lock_contended(&self) {
        // A short spin first: most holders release within a few hundred cycles.
        for _ in 0..100 {
            core::hint::spin_loop();
            if self.state.load(Ordering::Relaxed) == FREE
                && self
                    .state
                    .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        while self.state.swap(CONTENDED, Ordering::Acquire) != FREE {
            futex_wait(&self.state, CONTENDED);
        }
    }

    /// Takes the lock without a guard (fork prepare); paired with `force_unlock`.
    pub fn lock_raw(&self) {
        core::mem::forget(self.lock());
    }

    /// Releases a lock taken with `lock_raw` (fork parent), or resets it in a fork child, where
    /// the thread that held it no longer exists.
    pub fn force_unlock(&self) {
        if self.state.swap(FREE, Ordering::Release) == CONTENDED {
            futex_wake(&self.state);
        }
    }

    /// Access without locking.
    ///
    /// # Safety
    /// The caller must hold the lock (taken with `lock_raw`) or otherwise exclude all other
    /// users (e.g. in a fork child).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_unlocked(&self) -> &mut T {
        // SAFETY: forwarded to the caller.
        unsafe { &mut *self.value.get() }
    }
}

pub struct MutexGuard<'a, T> {
    mutex: &'a Mutex<T>,
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held.
        unsafe { &*self.mutex.value.get() }
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves the lock is held exclusively.
        unsafe { &mut *self.mutex.value.get() }
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.mutex.state.swap(FREE, Ordering::Release) == CONTENDED {
            futex_wake(&self.mutex.state);
        }
    }
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT on a valid aligned u32; spurious wake-ups are handled by the caller.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            core::ptr::null::<libc::timespec>(),
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_under_contention() {
        static M: Mutex<u64> = Mutex::new(0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..100_000 {
                        *M.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*M.lock(), 400_000);
    }

    #[test]
    fn force_unlock_resets() {
        let m = Mutex::new(1);
        m.lock_raw();
        m.force_unlock();
        assert_eq!(*m.lock(), 1);
    }
}
