//! Offline checkers for histories recorded against Hivekeeper's keys.
//!
//! Pure functions over recorded data: no clock but the timestamps in the history, no I/O.
pub mod linearizability;
pub mod watch;
