//! The process's own figures for `/metrics`: which build runs (`hivekeeper_build_info`), and,
//! read from `/proc/self` at each scrape, resident memory, open and allowed file descriptors
//! and CPU time, in the names every Prometheus client library uses (`process_*`), so the
//! usual dashboards and alerts work unchanged.
//!
//! ```text
//!  GET /metrics ─▶ render(): /proc/self/status (VmRSS), /proc/self/fd (entries),
//!                           /proc/self/limits (Max open files), /proc/self/stat (utime+stime)
//!               ─▶ Prometheus text, after the recorder's
//! ```
//!
//! Read by hand rather than with a crate (`metrics-process` pulls in `procfs` and its
//! dependencies for four numbers). Linux only: elsewhere the files do not exist and the
//! metrics are left out. CPU time is in clock ticks of `USER_HZ`, which the kernel fixes at
//! 100 a second for every user-space interface (it is not the kernel's `HZ`).

use std::fmt::Write;

use metrics::{describe_gauge, gauge};

/// 1, labelled with the build: `version` (the package's), and `git` (the commit) when the
/// build set `HIVEKEEPER_GIT_COMMIT` (gauge).
pub const BUILD_INFO: &str = "hivekeeper_build_info";

/// Resident memory, bytes (gauge).
const RESIDENT_MEMORY_BYTES: &str = "process_resident_memory_bytes";
/// Open file descriptors (gauge).
const OPEN_FDS: &str = "process_open_fds";
/// The soft limit on open file descriptors (gauge).
const MAX_FDS: &str = "process_max_fds";
/// User plus system CPU time, seconds (counter).
const CPU_SECONDS_TOTAL: &str = "process_cpu_seconds_total";

/// Clock ticks a second in `/proc/self/stat` (`USER_HZ`).
const USER_HZ: f64 = 100.0;

/// Exports [`BUILD_INFO`] (once, at start, after the recorder is installed).
pub fn export_build_info() {
    describe_gauge!(
        BUILD_INFO,
        "Always 1; the labels say which build runs: version, and git (the commit) when known."
    );
    let version = env!("CARGO_PKG_VERSION");
    match option_env!("HIVEKEEPER_GIT_COMMIT") {
        Some(commit) => gauge!(BUILD_INFO, "version" => version, "git" => commit).set(1.0),
        None => gauge!(BUILD_INFO, "version" => version).set(1.0),
    }
}

/// The process metrics as Prometheus text (each with its `# HELP` and `# TYPE`), those the
/// system has; empty off Linux.
pub fn render() -> String {
    let read = |path| std::fs::read_to_string(path).ok();
    // The directory's own handle is one of the entries while it is read.
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count().saturating_sub(1) as f64);
    let figures = [
        (
            RESIDENT_MEMORY_BYTES,
            "gauge",
            "Resident memory size in bytes.",
            read("/proc/self/status")
                .as_deref()
                .and_then(resident_bytes)
                .map(|b| b as f64),
        ),
        (
            OPEN_FDS,
            "gauge",
            "Number of open file descriptors.",
            open_fds,
        ),
        (
            MAX_FDS,
            "gauge",
            "Maximum number of open file descriptors (the soft limit).",
            read("/proc/self/limits")
                .as_deref()
                .and_then(max_open_files)
                .map(|m| m as f64),
        ),
        (
            CPU_SECONDS_TOTAL,
            "counter",
            "Total user and system CPU time spent in seconds.",
            read("/proc/self/stat").as_deref().and_then(cpu_seconds),
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, value) in figures {
        if let Some(value) = value {
            metric(&mut out, name, kind, help, value);
        }
    }
    out
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
    );
}

/// `VmRSS` of `/proc/self/status`, in bytes (the file says kB, meaning KiB).
fn resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The soft limit of `Max open files` in `/proc/self/limits`; `None` when unlimited.
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// User plus system CPU time of `/proc/self/stat`, in seconds. The command name (field 2) is
/// in parentheses and may hold spaces and parentheses itself, so fields are counted after the
/// last `)`: state is the first there, `utime` the 12th and `stime` the 13th (fields 14 and
/// 15 of proc(5)).
fn cpu_seconds(stat: &str) -> Option<f64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read_as_proc5_describes_them() {
        let status = "Name:\thivekeeper\nVmPeak:\t  300000 kB\nVmRSS:\t  147456 kB\nThreads:\t9\n";
        assert_eq!(resident_bytes(status), Some(147_456 * 1024));
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        // A command name with a space and a parenthesis in it.
        let stat = "4242 (hive keeper)) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 9 0 \
                    123 456 789";
        assert_eq!(cpu_seconds(stat), Some(3.25));
        assert_eq!(cpu_seconds("4242 (x) S 1"), None);
    }

    /// On Linux (where the tests run) every figure is there, in Prometheus text.
    #[test]
    fn this_process_has_every_figure() {
        let text = render();
        for name in [RESIDENT_MEMORY_BYTES, OPEN_FDS, MAX_FDS, CPU_SECONDS_TOTAL] {
            assert!(
                text.contains(&format!("\n{name} ")),
                "{name} missing:\n{text}"
            );
        }
    }
}
