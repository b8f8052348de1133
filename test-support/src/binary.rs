//! The workspace's `hivekeeper` binary, for tests outside the root package (which cannot name
//! it with `env!("CARGO_BIN_EXE_hivekeeper")`).

use std::path::PathBuf;

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
