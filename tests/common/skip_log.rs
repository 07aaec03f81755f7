//! The one record of a skipped check, shared by the test crates that can skip (included with
//! `#[path]`, so that each includes only this and not the rest of common/).

/// scripts/test lists every skipped check at its end: each skip is one line appended to
/// $MALLOC_DEBUG_SKIP_LOG (one write, O_APPEND: test processes run in parallel).
pub fn note_skip(what: &str) {
    use std::io::Write;
    if let Some(log) = std::env::var_os("MALLOC_DEBUG_SKIP_LOG").filter(|v| !v.is_empty())
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
    {
        let _ = f.write_all(format!("{what}\n").as_bytes());
    }
}
