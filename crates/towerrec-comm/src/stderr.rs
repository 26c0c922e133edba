//! Error lines that stay whole when several processes share one terminal.

/// Writes `line` and a newline to stderr in one `write`: the launcher gathers every
/// rank's stderr, and a line written piece by piece (as `eprintln!` does) can come out
/// interleaved with another rank's.
pub fn print_line(line: &str) {
    use std::io::Write;
    // Best effort: nothing is left to report a failed write of an error to.
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("{line}\n").as_bytes());
}
