//! The workspace's `hivekeeper` binary, for tests outside the root package (which cannot name
//! it with `env!("CARGO_BIN_EXE_hivekeeper")`), and the system programs tests run (Debian's
//! `mosquitto`, `prometheus`).

use std::path::{Path, PathBuf};

/// `target/<profile>/hivekeeper`, beside the running test (which runs from
/// `target/<profile>/deps/`). Panics, saying how to build it, when it is missing: `cargo test
/// --workspace` builds every binary first, a test run alone may not.
pub fn hivekeeper_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let profile_dir = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps");
    let binary = profile_dir.join(format!("hivekeeper{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} is missing: build it first (cargo build --bin hivekeeper)",
        binary.display()
    );
    binary
}

/// A system program: where Debian and Ubuntu install it, or on `PATH`. Fails the test when it is
/// missing, with `needed_for` (who needs it and how to install it).
pub fn installed(name: &str, needed_for: &str) -> PathBuf {
    let candidates =
        ["/usr/sbin", "/usr/bin", "/usr/local/sbin"].map(|dir| Path::new(dir).join(name));
    if let Some(found) = candidates.iter().find(|path| path.exists()) {
        return found.clone();
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|path| path.exists())
        .unwrap_or_else(|| {
            panic!("{name} not found (looked in {candidates:?} and PATH): {needed_for}")
        })
}
