//! Growable arrays in mmap'd memory for the symbolizer's caches (never the exported malloc, which
//! would re-enter the library, nor the native one, whose lock a caller of malloc may hold).

use crate::pages;
use core::ptr::NonNull;

/// A vector of plain-data values (all-zero bytes must be a valid `T`) in pages of its own,
/// doubled when full. Pushing fails (returns `None`) when memory runs out; nothing panics.
pub struct PageVec<T: Copy> {
    ptr: NonNull<T>,
    /// Bytes mapped (0 = nothing mapped yet).
    bytes: usize,
    len: usize,
}

// SAFETY: the pages are owned by the value and reached only through it.
unsafe impl<T: Copy + Send> Send for PageVec<T> {}

impl<T: Copy> PageVec<T> {
    pub const fn new() -> Self {
        PageVec {
            ptr: NonNull::dangling(),
            bytes: 0,
            len: 0,
        }
    }

    /// An array of `n` zeroed values.
    pub fn zeroed(n: usize) -> Option<Self> {
        let mut v = Self::new();
        v.reserve(n)?;
        v.len = n;
        Some(v)
    }

    fn capacity(&self) -> usize {
        self.bytes / core::mem::size_of::<T>().max(1)
    }

    /// An empty array with room for `n` values, in pages the kernel provides in the one `mmap`
    /// call (`pages::map_filled`) rather than one fault at a time: for arrays about to be
    /// written whole, such as a symbol index (docs/performance.md, "Leak reports, 2026-11-26
    /// fourth session").
    pub fn with_capacity_filled(n: usize) -> Option<Self> {
        let mut v = Self::new();
        v.grow_to(n, true)?;
        Some(v)
    }

    /// [`Self::zeroed`] in populated pages.
    pub fn zeroed_filled(n: usize) -> Option<Self> {
        let mut v = Self::with_capacity_filled(n)?;
        v.len = n;
        Some(v)
    }

    /// Makes room for `extra` more values.
    pub fn reserve(&mut self, extra: usize) -> Option<()> {
        let need = self.len.checked_add(extra)?;
        if need <= self.capacity() {
            return Some(());
        }
        let want = need.max(self.capacity().saturating_mul(2)).max(64);
        self.grow_to(want, false)
    }

    fn grow_to(&mut self, want: usize, populated: bool) -> Option<()> {
        let bytes = want.max(1).checked_mul(core::mem::size_of::<T>().max(1))?;
        let fresh = if populated {
            pages::map_filled(bytes)
        } else {
            pages::map(bytes)
        }?
        .cast::<T>();
        if self.bytes != 0 {
            // SAFETY: both regions hold at least `len` values and do not overlap.
            unsafe { core::ptr::copy_nonoverlapping(self.ptr.as_ptr(), fresh.as_ptr(), self.len) };
            // SAFETY: the old region came from pages::map(self.bytes) and is no longer used.
            unsafe { pages::unmap(self.ptr.cast(), self.bytes) };
        }
        self.ptr = fresh;
        self.bytes = bytes;
        Some(())
    }

    pub fn push(&mut self, value: T) -> Option<usize> {
        self.reserve(1)?;
        // SAFETY: len < capacity after reserve.
        unsafe { self.ptr.as_ptr().add(self.len).write(value) };
        self.len += 1;
        Some(self.len - 1)
    }

    /// Appends a copy of `values`; returns the index of the first.
    pub fn extend(&mut self, values: &[T]) -> Option<usize> {
        self.reserve(values.len())?;
        let at = self.len;
        // SAFETY: room for values.len() more after reserve; the source is not our memory.
        unsafe {
            core::ptr::copy_nonoverlapping(values.as_ptr(), self.ptr.as_ptr().add(at), values.len())
        };
        self.len += values.len();
        Some(at)
    }

    pub fn as_slice(&self) -> &[T] {
        if self.bytes == 0 {
            return &[];
        }
        // SAFETY: the first `len` values are initialized (zeroed pages or written).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        if self.bytes == 0 {
            return &mut [];
        }
        // SAFETY: as above, exclusive through &mut self.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Forgets the values after the first `n`.
    #[cfg_attr(target_os = "android", allow(dead_code))]
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl<T: Copy> Drop for PageVec<T> {
    fn drop(&mut self) {
        if self.bytes != 0 {
            // SAFETY: the region came from pages::map(self.bytes); nothing borrows it past self.
            unsafe { pages::unmap(self.ptr.cast(), self.bytes) };
        }
    }
}

impl<T: Copy> Default for PageVec<T> {
    fn default() -> Self {
        Self::new()
    }
}
