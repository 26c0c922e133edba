//! Measures the machine's limits: what a kernel could reach at best on this machine.
//!
//! `towerrec bench kernels` prints these beside our kernels' speeds, and
//! `towerrec calibrate` will reuse them. Three probes:
//!
//! - [`copy_bandwidth`]: a large `memcpy` split over threads (streaming bandwidth).
//! - [`gather_bandwidth`]: random rows of a large table summed into an accumulator, the
//!   access pattern of an embedding lookup, with or without 2 MiB pages and software
//!   prefetch.
//! - [`gemm_gflops`]: an `n × n × n` f32 GEMM through [`crate::matmul::matmul`].
//!
//! Each probe runs repetitions until a time budget is spent (at least [`MIN_REPS`]) and
//! returns the **best** repetition: a limit is what the machine can reach, and on a
//! shared machine the best repetition is the one least disturbed by other work.
//!
//! [`HugePageBuf`] is the 2 MiB-aligned, `MADV_HUGEPAGE`-advised allocation the probes
//! use; it is written to be usable for embedding-table storage too.

use crate::matmul::DensePrecision;
use rayon::prelude::*;
use std::alloc::Layout;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// Size of a transparent huge page on x86-64 and most aarch64 Linux kernels.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Alignment of buffers too small to be worth a huge page: one cache line.
const SMALL_ALIGN: usize = 64;

/// Every probe runs at least this many repetitions, whatever its time budget.
pub const MIN_REPS: usize = 3;

/// And at most this many, so that a tiny probe with a large budget still returns soon.
const MAX_REPS: usize = 10_000;

/// Types for which the all-zero bit pattern is a valid value (zero, for numbers).
///
/// # Safety
/// Implement only for types where every byte being 0 is a valid value.
pub unsafe trait Zeroable: Copy {}

macro_rules! zeroable {
    ($($t:ty),*) => { $(
        // SAFETY: all-zero bits are the number zero.
        unsafe impl Zeroable for $t {}
    )* };
}
zeroable!(f32, f64, u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

/// Which pages to ask the kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// 2 MiB transparent huge pages (`madvise(MADV_HUGEPAGE)`): one TLB entry covers
    /// 512 times more memory, which is what random gathers over a large table need.
    Huge,
    /// Ordinary 4 KiB pages (`madvise(MADV_NOHUGEPAGE)`, so that a system with THP set
    /// to `always` still gives small pages: the probes compare the two).
    Small,
}

/// How a [`HugePageBuf`]'s memory was obtained (and how it is given back).
pub(crate) enum Backing {
    /// Nothing allocated (no elements, or zero-sized elements).
    None,
    /// `std::alloc` with this layout.
    Heap(Layout),
    /// An anonymous mapping of this many bytes (a multiple of [`HUGE_PAGE_BYTES`]).
    #[cfg(target_os = "linux")]
    Mmap(usize),
}

/// A fixed-length buffer of `T` aligned to 2 MiB and advised to use transparent huge
/// pages (on Linux; elsewhere a plain 2 MiB-aligned allocation).
///
/// Buffers of at least [`HUGE_PAGE_BYTES`] are anonymous mappings rounded up to whole
/// 2 MiB pages: their memory is zero and only becomes resident when first touched, so
/// [`HugePageBuf::new_zeroed`] of 4 GiB costs nothing until it is written. Smaller
/// buffers are ordinary cache-line-aligned heap allocations (a huge page would waste
/// most of itself), and [`HugePageBuf::huge_pages`] says so.
///
/// Derefs to `[T]`.
pub struct HugePageBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    backing: Backing,
    /// Whether the kernel accepted `MADV_HUGEPAGE` for this buffer.
    huge: bool,
    pages: Pages,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns its elements exclusively, like a `Box<[T]>`.
unsafe impl<T: Copy + Send> Send for HugePageBuf<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: Copy + Sync> Sync for HugePageBuf<T> {}

/// `len` elements of `T` as bytes, if that fits in `usize`.
fn byte_len<T>(len: usize) -> Option<usize> {
    len.checked_mul(size_of::<T>())
}

impl<T: Copy> HugePageBuf<T> {
    /// `len` zeros on huge pages.
    pub fn new_zeroed(len: usize) -> Self
    where
        T: Zeroable,
    {
        Self::zeroed_with(len, Pages::Huge)
    }

    /// `len` zeros on the given pages.
    pub fn zeroed_with(len: usize, pages: Pages) -> Self
    where
        T: Zeroable,
    {
        // SAFETY: the memory is zeroed and all-zero bits are a valid `T`.
        unsafe { Self::alloc_zeroed(len, pages) }
    }

    /// [`HugePageBuf::zeroed_with`], or `None` where the memory cannot be had (the size
    /// overflows, or the system refuses the mapping), instead of aborting.
    pub fn try_zeroed_with(len: usize, pages: Pages) -> Option<Self>
    where
        T: Zeroable,
    {
        // SAFETY: the memory is zeroed and all-zero bits are a valid `T`.
        unsafe { Self::try_alloc_zeroed(len, pages) }
    }

    /// [`HugePageBuf::from_elem`], or `None` where the memory cannot be had.
    pub fn try_from_elem(len: usize, value: T) -> Option<Self> {
        // SAFETY: every element is written by `fill` before any is read.
        let buf = unsafe { Self::try_alloc_zeroed(len, Pages::Huge) }?;
        Some(buf.fill(value))
    }

    /// Writes `value` into every element.
    fn fill(self, value: T) -> Self {
        let p = self.ptr.as_ptr();
        for i in 0..self.len {
            // SAFETY: `i < len`, inside the allocation; raw writes never read the
            // (possibly invalid) zero bits underneath.
            unsafe { p.add(i).write(value) };
        }
        self
    }

    /// `len` copies of `value` on huge pages. Filling touches every page, so the
    /// buffer is resident when this returns.
    pub fn from_elem(len: usize, value: T) -> Self {
        Self::from_elem_with(len, value, Pages::Huge)
    }

    /// `len` copies of `value` on the given pages.
    pub fn from_elem_with(len: usize, value: T, pages: Pages) -> Self {
        // SAFETY: every element is written by `fill` before any is read.
        let buf = unsafe { Self::alloc_zeroed(len, pages) };
        buf.fill(value)
    }

    /// `len` copies of `T::default()` on huge pages.
    pub fn new_default(len: usize) -> Self
    where
        T: Default,
    {
        Self::from_elem(len, T::default())
    }

    /// A copy of `src` on the given pages.
    pub fn from_slice_with(src: &[T], pages: Pages) -> Self {
        // SAFETY: every element is written below before any is read.
        let buf = unsafe { Self::alloc_zeroed(src.len(), pages) };
        // SAFETY: both regions hold `src.len()` elements and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf.ptr.as_ptr(), src.len()) };
        buf
    }

    /// A copy of `src` on huge pages.
    pub fn from_slice(src: &[T]) -> Self {
        Self::from_slice_with(src, Pages::Huge)
    }

    /// The pages this buffer asked for.
    pub fn pages(&self) -> Pages {
        self.pages
    }

    /// Whether the kernel accepted the huge-page advice (false for small buffers, for
    /// [`Pages::Small`], off Linux, and where THP is disabled).
    pub fn huge_pages(&self) -> bool {
        self.huge
    }

    /// Zeroed memory for `len` elements, advised as `pages`; aborts the process (as
    /// `Vec` does) where the memory cannot be had.
    ///
    /// # Safety
    /// The caller must write every element before reading it unless all-zero bits are
    /// a valid `T`.
    unsafe fn alloc_zeroed(len: usize, pages: Pages) -> Self {
        // SAFETY: the caller's obligation.
        unsafe { Self::try_alloc_zeroed(len, pages) }.unwrap_or_else(|| {
            let bytes = len.saturating_mul(size_of::<T>());
            std::alloc::handle_alloc_error(
                Layout::from_size_align(bytes, HUGE_PAGE_BYTES).unwrap_or(Layout::new::<u8>()),
            )
        })
    }

    /// [`HugePageBuf::alloc_zeroed`], or `None` where the memory cannot be had.
    ///
    /// # Safety
    /// As for `alloc_zeroed`.
    unsafe fn try_alloc_zeroed(len: usize, pages: Pages) -> Option<Self> {
        let bytes = byte_len::<T>(len)?;
        let mut buf = Self {
            ptr: NonNull::dangling(),
            len,
            backing: Backing::None,
            huge: false,
            pages,
            _owns: PhantomData,
        };
        if bytes == 0 {
            return Some(buf);
        }
        let align = align_of::<T>().max(SMALL_ALIGN);
        if bytes < HUGE_PAGE_BYTES || align > HUGE_PAGE_BYTES {
            let layout = Layout::from_size_align(bytes, align).ok()?;
            // SAFETY: `layout` has a non-zero size.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            buf.ptr = NonNull::new(p.cast())?;
            buf.backing = Backing::Heap(layout);
            return Some(buf);
        }
        let (p, backing, huge) = map_aligned(bytes, pages)?;
        buf.ptr = p.cast();
        buf.backing = backing;
        buf.huge = huge;
        Some(buf)
    }
}

/// A 2 MiB-aligned anonymous mapping of at least `bytes`, advised as `pages`. Returns
/// the pointer, how to free it, and whether huge pages were accepted; `None` if the
/// system refuses the mapping.
#[cfg(target_os = "linux")]
pub(crate) fn map_aligned(bytes: usize, pages: Pages) -> Option<(NonNull<u8>, Backing, bool)> {
    let len = bytes.checked_next_multiple_of(HUGE_PAGE_BYTES)?;
    let over = len.checked_add(HUGE_PAGE_BYTES)?;
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    // Trim the mapping to a 2 MiB-aligned window of `len` bytes.
    let addr = raw as usize;
    let start = addr.next_multiple_of(HUGE_PAGE_BYTES);
    let head = start - addr;
    let tail = over - head - len;
    // SAFETY: both ranges lie inside the mapping made above and outside the window kept.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
    }
    let advice = match pages {
        Pages::Huge => libc::MADV_HUGEPAGE,
        Pages::Small => libc::MADV_NOHUGEPAGE,
    };
    // SAFETY: advice on our own mapping; failure (THP compiled out) only loses speed.
    let ok = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) } == 0;
    let ptr = NonNull::new(start as *mut u8)?;
    Some((ptr, Backing::Mmap(len), ok && pages == Pages::Huge))
}

/// Off Linux: a 2 MiB-aligned zeroed heap allocation, no advice.
#[cfg(not(target_os = "linux"))]
fn map_aligned(bytes: usize, _pages: Pages) -> Option<(NonNull<u8>, Backing, bool)> {
    let layout = Layout::from_size_align(bytes, HUGE_PAGE_BYTES).ok()?;
    // SAFETY: `layout` has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    Some((NonNull::new(p)?, Backing::Heap(layout), false))
}

impl<T: Copy> Drop for HugePageBuf<T> {
    fn drop(&mut self) {
        match self.backing {
            Backing::None => {}
            // SAFETY: allocated by `alloc_zeroed` with this layout.
            Backing::Heap(layout) => unsafe {
                std::alloc::dealloc(self.ptr.as_ptr().cast(), layout)
            },
            // SAFETY: mapped by `map_aligned` with this length.
            #[cfg(target_os = "linux")]
            Backing::Mmap(len) => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), len);
            },
        }
    }
}

impl<T: Copy> Deref for HugePageBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialized elements (or is dangling with a
        // length whose byte size is 0), owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for HugePageBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Clone for HugePageBuf<T> {
    fn clone(&self) -> Self {
        Self::from_slice_with(self, self.pages)
    }
}

impl<T: Copy> Default for HugePageBuf<T> {
    fn default() -> Self {
        // SAFETY: no elements.
        unsafe { Self::alloc_zeroed(0, Pages::Huge) }
    }
}

impl<T: Copy> fmt::Debug for HugePageBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HugePageBuf")
            .field("len", &self.len)
            .field("pages", &self.pages)
            .field("huge_pages", &self.huge)
            .finish()
    }
}

/// Memory the system could give this process now without swapping (Linux's
/// `MemAvailable`), or `None` where that is not known.
pub fn available_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `len` f32 zeros on huge pages.
pub fn huge_page_vec_f32(len: usize) -> HugePageBuf<f32> {
    HugePageBuf::new_zeroed(len)
}

/// Runs `f` until `budget` is spent, at least `min_reps` times (and at most 10 000),
/// and returns each run's duration. The probes and `bench kernels` time with this.
pub fn timed_reps(budget: Duration, min_reps: usize, mut f: impl FnMut()) -> Vec<Duration> {
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < MAX_REPS && (times.len() < min_reps || start.elapsed() < budget) {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    times
}

/// Which of a probe's repetitions its rate is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// The shortest repetition: what the machine reaches with its cores to itself.
    Best,
    /// The median repetition: a typical one, on a machine with some noise.
    Median,
    /// All repetitions' work over their total time: what a process gets on average
    /// while it shares the cores with others (the MPI ranks of one host measuring at
    /// once). Its best repetition would be a moment the others were off the cores.
    Sustained,
}

impl Rate {
    /// Seconds per repetition of `times` (at least 1 ns, so that rates stay finite).
    pub fn secs(self, times: &[Duration]) -> f64 {
        match self {
            Rate::Best => best_secs(times),
            Rate::Median => median_secs(times),
            Rate::Sustained => {
                let total: f64 = times.iter().map(Duration::as_secs_f64).sum();
                (total / times.len().max(1) as f64).max(1e-9)
            }
        }
    }
}

/// The shortest duration in seconds (at least 1 ns, so that rates stay finite).
fn best_secs(times: &[Duration]) -> f64 {
    times
        .iter()
        .map(Duration::as_secs_f64)
        .fold(f64::INFINITY, f64::min)
        .max(1e-9)
}

/// The median duration in seconds (at least 1 ns).
pub fn median_secs(times: &[Duration]) -> f64 {
    let mut s: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    s.sort_by(f64::total_cmp);
    let m = match s.len() {
        0 => return f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    };
    m.max(1e-9)
}

/// A rayon pool of `threads` workers (0: one per core).
fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("building a probe thread pool")
}

/// Streaming bandwidth in GB/s (10⁹ bytes/s): copies a `bytes`-long buffer into
/// another, split into one contiguous chunk per thread, within `budget`.
///
/// **Convention:** a copy of `bytes` counts as `2 × bytes` moved (read + write),
/// as STREAM's `Copy` does. Both buffers are on huge pages and touched before timing.
/// Returns the repetitions' `rate`.
pub fn copy_bandwidth(bytes: usize, threads: usize, budget: Duration, rate: Rate) -> f64 {
    let len = (bytes / 8).max(1);
    let src = HugePageBuf::<u64>::from_elem(len, 1);
    let mut dst = HugePageBuf::<u64>::from_elem(len, 0);
    let pool = pool(threads);
    let chunk = len.div_ceil(pool.current_num_threads());
    let times = pool.install(|| {
        timed_reps(budget, MIN_REPS, || {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
            std::hint::black_box(&mut *dst);
        })
    });
    (2 * len * 8) as f64 / rate.secs(&times) / 1e9
}

/// A table of at least one row of `row_bytes` (a multiple of 4) filling about
/// `table_bytes`, on the given pages, every page touched.
fn gather_table(table_bytes: usize, row_bytes: usize, pages: Pages) -> HugePageBuf<f32> {
    assert!(
        row_bytes >= 4 && row_bytes & 3 == 0,
        "gather rows must be a positive multiple of 4 bytes, got {row_bytes}"
    );
    let rows = (table_bytes / row_bytes).max(1);
    HugePageBuf::from_elem_with(rows * row_bytes / 4, 1.0f32, pages)
}

/// Random-gather bandwidth in GB/s: random rows of `row_bytes` from a table of about
/// `table_bytes` (allocated on 2 MiB pages if `huge_pages`, else 4 KiB pages) are summed
/// into a per-thread accumulator, as a sum-pooled embedding lookup does. With
/// `prefetch`, each thread issues software prefetches for the row 16 lookups ahead
/// (x86-64 only; a no-op elsewhere). Counts the row bytes read; the 4-byte row indices
/// streamed alongside are not counted. Allocating and touching the table is not timed.
/// Returns the best repetition within `budget`.
pub fn gather_bandwidth(
    table_bytes: usize,
    row_bytes: usize,
    huge_pages: bool,
    prefetch: bool,
    threads: usize,
    budget: Duration,
) -> f64 {
    let pages = if huge_pages {
        Pages::Huge
    } else {
        Pages::Small
    };
    let table = gather_table(table_bytes, row_bytes, pages);
    gather_bandwidth_in(&table, row_bytes, prefetch, threads, budget, Rate::Best)
}

/// Row bytes per repetition of [`gather_bandwidth_in`]: enough (256 MiB) that a
/// repetition outlasts timer noise and the rows it reads outgrow the last-level cache
/// (tables under 64 MiB get 4 times their size, at least 1 MiB).
const GATHER_REP_BYTES: usize = 256 << 20;

/// [`gather_bandwidth`] on an existing table (`table.len() × 4` bytes, rows of
/// `row_bytes`), so that one table can serve several measurements; the repetitions'
/// `rate`.
pub fn gather_bandwidth_in(
    table: &[f32],
    row_bytes: usize,
    prefetch: bool,
    threads: usize,
    budget: Duration,
    rate: Rate,
) -> f64 {
    assert!(
        row_bytes >= 4 && row_bytes & 3 == 0,
        "gather rows must be a positive multiple of 4 bytes, got {row_bytes}"
    );
    let dim = row_bytes / 4;
    let rows = table.len() / dim;
    assert!(rows > 0, "gather table has no row of {row_bytes} bytes");
    let rows = rows.min(u32::MAX as usize);
    // Small (cached) tables in tests get proportionally fewer lookups.
    let rep_bytes = GATHER_REP_BYTES.min((table.len() * 16).max(1 << 20));
    let lookups = (rep_bytes / row_bytes).clamp(1024, 1 << 24);
    // A cheap splitmix64 stream: the indices are uniform over the table.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let idx: Vec<u32> = (0..lookups)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z as u128 * rows as u128) >> 64) as u32
        })
        .collect();
    let pool = pool(threads);
    let chunk = lookups.div_ceil(pool.current_num_threads());
    let times = pool.install(|| {
        timed_reps(budget, MIN_REPS, || {
            let sum: f32 = idx
                .par_chunks(chunk)
                .map(|ids| gather_rows(table, dim, ids, prefetch))
                .sum();
            std::hint::black_box(sum);
        })
    });
    (lookups * row_bytes) as f64 / rate.secs(&times) / 1e9
}

/// How many lookups ahead the gather prefetches.
const PREFETCH_DISTANCE: usize = 16;

/// Sums the rows `ids` of `table` (rows of `dim` floats) and returns the total.
fn gather_rows(table: &[f32], dim: usize, ids: &[u32], prefetch: bool) -> f32 {
    let mut acc = vec![0.0f32; dim];
    for (i, &id) in ids.iter().enumerate() {
        if prefetch {
            if let Some(&ahead) = ids.get(i + PREFETCH_DISTANCE) {
                prefetch_row(table, ahead as usize * dim, dim);
            }
        }
        let r = id as usize * dim;
        for (a, &w) in acc.iter_mut().zip(&table[r..r + dim]) {
            *a += w;
        }
    }
    acc.iter().sum()
}

/// Prefetches every cache line of `table[start..start + dim]` into L1.
#[inline(always)]
fn prefetch_row(table: &[f32], start: usize, dim: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let row = &table[start..start + dim];
        for line in row.chunks(16) {
            // SAFETY: SSE is part of the x86-64 baseline, and a prefetch never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (table, start, dim);
    }
}

/// f32 GEMM throughput in GFLOP/s (10⁹ flop/s, counting `2n³` per multiply):
/// `C = A·B` for `n × n` row-major matrices through [`crate::matmul::matmul`], inside a
/// rayon pool of `threads` workers (0: one per core). Returns the repetitions' `rate`
/// within `budget` (the first, warm-up, repetition included).
pub fn gemm_gflops(n: usize, threads: usize, budget: Duration, rate: Rate) -> f64 {
    gemm_gflops_in(DensePrecision::Fp32, n, threads, budget, rate)
}

/// [`gemm_gflops`] with the operands in `precision` ([`crate::matmul::matmul_in`]: for
/// bf16, this build's bf16 kernel, rounding included).
pub fn gemm_gflops_in(
    precision: DensePrecision,
    n: usize,
    threads: usize,
    budget: Duration,
    rate: Rate,
) -> f64 {
    let n = n.max(1);
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.25 - 0.75).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5 - 1.0).collect();
    let mut c = vec![0.0f32; n * n];
    let mut scratch = crate::matmul::Bf16Scratch::default();
    let times = pool(threads).install(|| {
        timed_reps(budget, MIN_REPS, || {
            let s = &mut scratch;
            crate::matmul::matmul_in(precision, s, n, n, n, &a, false, &b, false, &mut c, false);
            std::hint::black_box(&mut c);
        })
    });
    2.0 * (n as f64).powi(3) / rate.secs(&times) / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Duration = Duration::from_millis(2);

    #[test]
    fn huge_page_buf_is_zeroed_aligned_and_sized() {
        for len in [0, 1, 1000, (HUGE_PAGE_BYTES / 4) + 3] {
            let mut b = huge_page_vec_f32(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0.0));
            if len * 4 >= HUGE_PAGE_BYTES {
                assert_eq!(b.as_ptr() as usize % HUGE_PAGE_BYTES, 0);
            } else if len > 0 {
                assert_eq!(b.as_ptr() as usize % SMALL_ALIGN, 0);
            }
            if len > 0 {
                b[len - 1] = 3.0;
                assert_eq!(b[len - 1], 3.0);
            }
        }
    }

    #[test]
    fn huge_page_buf_fill_clone_and_small_pages() {
        let len = HUGE_PAGE_BYTES / 8 + 5;
        let b = HugePageBuf::<u64>::from_elem_with(len, 7, Pages::Small);
        assert!(b.iter().all(|&x| x == 7));
        assert!(!b.huge_pages());
        let mut c = b.clone();
        assert_eq!(c.pages(), Pages::Small);
        assert_eq!(&c[..], &b[..]);
        c[0] = 1;
        assert_eq!(b[0], 7);
        let d = HugePageBuf::from_slice(&[1.5f64, 2.5]);
        assert_eq!(&d[..], &[1.5, 2.5]);
        let e = HugePageBuf::<i32>::new_default(3);
        assert_eq!(&e[..], &[0, 0, 0]);
        assert!(HugePageBuf::<f32>::default().is_empty());
        // Zero-sized elements allocate nothing.
        assert_eq!(HugePageBuf::from_elem(10, ()).len(), 10);
        fn send_sync<T: Send + Sync>() {}
        send_sync::<HugePageBuf<f32>>();
    }

    #[test]
    fn probes_return_finite_positive_rates() {
        for v in [
            copy_bandwidth(1 << 16, 2, TINY, Rate::Best),
            gather_bandwidth(1 << 16, 64, true, true, 2, TINY),
            gather_bandwidth(1 << 16, 256, false, false, 1, TINY),
            gather_bandwidth(100, 12, false, true, 1, TINY),
            gemm_gflops(32, 2, TINY, Rate::Sustained),
        ] {
            assert!(v.is_finite() && v > 0.0, "{v}");
        }
    }

    #[test]
    fn timed_reps_respects_min_reps_and_median() {
        let t = timed_reps(Duration::ZERO, 4, || {});
        assert_eq!(t.len(), 4);
        let m = median_secs(&[
            Duration::from_secs(3),
            Duration::from_secs(1),
            Duration::from_secs(2),
        ]);
        assert_eq!(m, 2.0);
        let reps = [1, 4, 1].map(Duration::from_secs);
        assert_eq!(Rate::Best.secs(&reps), 1.0);
        assert_eq!(Rate::Median.secs(&reps), 1.0);
        assert_eq!(Rate::Sustained.secs(&reps), 2.0);
    }
}
