//! towerrec-fuzz: what the parsers' fuzz tests share (each crate's `tests/fuzz.rs`, a
//! dev-dependency only). Fuzzing is proptest on stable Rust, so it runs in CI at the
//! default case count and for as long as one likes with `PROPTEST_CASES`:
//!
//! ```text
//! PROPTEST_CASES=1000000 cargo test --release --workspace --test fuzz
//! ```
//!
//! - [`config`]: the proptest configuration: the case count from the environment, and
//!   a per-case time limit that turns a hang into a failing case.
//! - [`mutated`] and [`arbitrary`]: inputs: valid files with bytes flipped, inserted,
//!   deleted, duplicated, truncated or replaced by tokens a parser cares about; and
//!   bytes drawn from a parser's alphabet.
//! - [`AllocGuard`]: a global allocator for the test binary that refuses any one
//!   allocation over [`MAX_ALLOCATION`] or a live total over [`MAX_LIVE`], so that a
//!   parser trusting a size it read aborts the case instead of passing on a big machine.

mod alloc;
mod mutate;

pub use alloc::{AllocGuard, MAX_ALLOCATION, MAX_LIVE};
pub use mutate::{apply, arbitrary, mutated, Edit, Pos};

use proptest::test_runner::{Config, FileFailurePersistence};

/// Milliseconds one case may take before it counts as a hang: thousands of times what
/// any case here needs, so that a loaded machine does not fail it.
pub const HANG_MS: u32 = 10_000;

/// The fuzz tests' proptest configuration: the default case count (256, or
/// `PROPTEST_CASES`) and a [`HANG_MS`] time limit per case. The limit makes proptest
/// run the cases in a child process, which also turns a crash (an allocation refused
/// by [`AllocGuard`], a stack overflow) into a failing case it reports and shrinks.
/// proptest lets its environment variables override this, so `PROPTEST_TIMEOUT=0`
/// would turn both off: a crash then ends the whole test binary.
/// Failures are kept beside each test file (`tests/fuzz.proptest-regressions`) and
/// replayed first on every run; check them in.
pub fn config() -> Config {
    Config {
        timeout: HANG_MS,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}
