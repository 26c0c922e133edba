//! A global allocator that refuses allocations a parser of small inputs has no reason
//! to make. A refused allocation aborts the process ("memory allocation of N bytes
//! failed"); under [`crate::config`] proptest reports the case that was running.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The largest single allocation allowed: 64 MiB, far above what the fuzz inputs (at
/// most a few MiB) can justify.
pub const MAX_ALLOCATION: usize = 64 << 20;

/// The most bytes allowed live at once in the test process: 1 GiB.
pub const MAX_LIVE: usize = 1 << 30;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, with the limits above. Install it in a test binary with
/// `#[global_allocator] static ALLOC: AllocGuard = AllocGuard;`.
pub struct AllocGuard;

/// Accounts for `n` more live bytes, unless that passes a limit.
fn reserve(n: usize) -> bool {
    if n > MAX_ALLOCATION {
        return false;
    }
    let before = LIVE.fetch_add(n, Ordering::Relaxed);
    if before + n > MAX_LIVE {
        LIVE.fetch_sub(n, Ordering::Relaxed);
        return false;
    }
    true
}

fn release(n: usize) {
    LIVE.fetch_sub(n, Ordering::Relaxed);
}

// Safety: every call is forwarded to `System` with the caller's own arguments; the
// wrapper only refuses (returns null, which callers must handle) and counts.
unsafe impl GlobalAlloc for AllocGuard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            release(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            release(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        release(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old && (new_size > MAX_ALLOCATION || !reserve(new_size - old)) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        match (p.is_null(), new_size > old) {
            // Failed growth: the old block stays, and so does its count.
            (true, true) => release(new_size - old),
            (true, false) => {}
            (false, true) => {}
            (false, false) => release(old - new_size),
        }
        p
    }
}
