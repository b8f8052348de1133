//! A process's memory, read from /proc/<pid>/status: the nodes' and the bench's own.

use std::path::Path;

/// A `kB` field of a /proc status file (`VmRSS`, `VmHWM`), in MB (10^6 bytes).
pub fn status_mb(path: &Path, field: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text
        .lines()
        .find(|line| line.starts_with(&format!("{field}:")))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0 / 1e6)
}

/// The resident memory of process `pid` now, MB.
pub fn rss_mb(pid: u32) -> Option<f64> {
    status_mb(Path::new(&format!("/proc/{pid}/status")), "VmRSS")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_reads_its_own_resident_memory() {
        let mb = rss_mb(std::process::id()).expect("this process's VmRSS");
        assert!(mb > 0.0, "{mb}");
        assert_eq!(
            status_mb(Path::new("/proc/self/status"), "NoSuchField"),
            None
        );
    }
}
