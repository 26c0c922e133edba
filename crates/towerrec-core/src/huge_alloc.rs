//! A global allocator that puts every allocation of 2 MiB or more on transparent huge
//! pages, for the binaries to install with `#[global_allocator]`.
//!
//! The sharded runtime's batch-sized buffers (a rank's feature rows and their
//! gradient, the exchanges' send and receive buffers) are megabytes each, and its
//! stages walk them a row at a time in the order of a store's bags, not of the
//! samples: on 4 KiB pages nearly every such row lands on a page whose translation
//! has left the TLB, and a software prefetch of it waits for the page walk. On 2 MiB
//! pages a few TLB entries cover a whole buffer. The embedding tables already live on
//! huge pages ([`crate::probe::HugePageBuf`]); this gives the same to the buffers that
//! grow as `Vec`s. Smaller allocations, and every allocation off Linux, go to the
//! system allocator unchanged.

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations of at least this many bytes get their own 2 MiB-aligned mapping.
const LARGE_BYTES: usize = crate::probe::HUGE_PAGE_BYTES;

/// The system allocator, with allocations of 2 MiB or more (and alignment of at most
/// 2 MiB) mapped on their own, 2 MiB-aligned and advised `MADV_HUGEPAGE`.
pub struct LargeOnHugePages;

/// Whether an allocation of `layout` gets its own mapping.
fn is_large(layout: Layout) -> bool {
    cfg!(target_os = "linux")
        && layout.size() >= LARGE_BYTES
        && layout.align() <= crate::probe::HUGE_PAGE_BYTES
}

/// A fresh zeroed mapping for a large `layout`, or null where the system refuses it.
#[cfg(target_os = "linux")]
fn map_large(layout: Layout) -> *mut u8 {
    crate::probe::map_aligned(layout.size(), crate::probe::Pages::Huge)
        .map_or(std::ptr::null_mut(), |(p, _, _)| p.as_ptr())
}

#[cfg(not(target_os = "linux"))]
fn map_large(_layout: Layout) -> *mut u8 {
    unreachable!("no allocation is large off Linux")
}

/// Unmaps what [`map_large`] mapped for `layout`.
///
/// # Safety
/// `ptr` must come from `map_large(layout)` and not have been unmapped.
#[cfg(target_os = "linux")]
unsafe fn unmap_large(ptr: *mut u8, layout: Layout) {
    let len = layout
        .size()
        .next_multiple_of(crate::probe::HUGE_PAGE_BYTES);
    // SAFETY: the caller's obligation; `map_aligned` mapped exactly `len` bytes here.
    unsafe { libc::munmap(ptr.cast(), len) };
}

#[cfg(not(target_os = "linux"))]
unsafe fn unmap_large(_ptr: *mut u8, _layout: Layout) {
    unreachable!("no allocation is large off Linux")
}

// SAFETY: every block comes either from `System` with the caller's layout or from its
// own mapping of at least `layout.size()` bytes aligned to 2 MiB (so to
// `layout.align()`); which one is decided by the layout alone, and a block is given
// back by the layout it was allocated with, so it always returns to where it came from.
unsafe impl GlobalAlloc for LargeOnHugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            map_large(layout)
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            // A fresh anonymous mapping is zero.
            map_large(layout)
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout) {
            // SAFETY: a large layout's block came from `map_large`.
            unsafe { unmap_large(ptr, layout) }
        } else {
            // SAFETY: a small layout's block came from `System`.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `GlobalAlloc::realloc`'s contract makes this layout valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !is_large(layout) && !is_large(new_layout) {
            // SAFETY: a small block stays with `System`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `new_layout` has a non-zero size (the contract); both blocks are
        // valid for the copied bytes, and the old one is given back as it came.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_hold_their_bytes_across_the_threshold() {
        let a = LargeOnHugePages;
        for (from, to) in [
            (64, 4 << 20),
            (4 << 20, 9 << 20),
            (9 << 20, 100),
            (3 << 20, 5 << 20),
        ] {
            let layout = Layout::from_size_align(from, 8).unwrap();
            // SAFETY: non-zero sizes; every block is freed with the layout it has.
            unsafe {
                let p = a.alloc(layout);
                assert!(!p.is_null());
                for i in 0..from {
                    *p.add(i) = (i % 251) as u8;
                }
                let q = a.realloc(p, layout, to);
                assert!(!q.is_null());
                for i in 0..from.min(to) {
                    assert_eq!(*q.add(i), (i % 251) as u8, "byte {i} of {from} -> {to}");
                }
                a.dealloc(q, Layout::from_size_align(to, 8).unwrap());
            }
        }
    }

    #[test]
    fn large_blocks_are_aligned_to_huge_pages_and_zeroed() {
        let a = LargeOnHugePages;
        let layout = Layout::from_size_align(5 << 20, 64).unwrap();
        // SAFETY: a non-zero size, freed with its layout.
        unsafe {
            let p = a.alloc_zeroed(layout);
            assert!(!p.is_null());
            if cfg!(target_os = "linux") {
                assert_eq!(p as usize % crate::probe::HUGE_PAGE_BYTES, 0);
            }
            assert!((0..layout.size()).step_by(4093).all(|i| *p.add(i) == 0));
            a.dealloc(p, layout);
        }
    }
}
