//! leak_track: at exit, one report per live allocation (spec §3.5).

use crate::failure;
use crate::fmt::Bytes;
use crate::log::log_error;
use crate::platform;
use crate::snapshot::Snapshot;
use crate::state::State;

pub fn report(state: &State) {
    let Some(snapshot) = Snapshot::take() else {
        return;
    };
    let records = snapshot.records();
    let total = records.len();
    // One symbolization session for the whole report: each distinct pc is resolved once.
    let _symbols = crate::backtrace::SymbolSession::begin();
    for (i, r) in records.iter().enumerate() {
        log_error!(
            "+++ {} leaked block of size {} at 0x{:x} (leak {} of {})",
            Bytes(platform::progname()),
            r.size,
            r.pointer,
            i + 1,
            total
        );
        if r.has_backtrace() {
            log_error!("Backtrace at time of allocation:");
            failure::log_interned_backtrace(state, r.backtrace_id);
        }
    }
}
