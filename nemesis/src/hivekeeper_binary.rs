//! Which `hivekeeper` binary the members run: `--hivekeeper PATH` when given; else the one
//! beside this binary, since `cargo build` puts both into one target directory and `cargo
//! install` both into one bin directory (and `sudo` resets PATH, but not where this binary
//! is); else the first `hivekeeper` on PATH.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The binary's file name.
const NAME: &str = "hivekeeper";

/// The `hivekeeper` binary to run: `flag` if given (it must be a file), else beside this
/// binary, else on PATH; an error says where it looked and how to get one.
pub fn find(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = flag {
        anyhow::ensure!(
            path.is_file(),
            "--hivekeeper {}: no such file",
            path.display()
        );
        return Ok(path.to_path_buf());
    }
    let own = std::env::current_exe().context("finding this binary's own path")?;
    let beside = own.parent().map(|dir| dir.join(NAME));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = std::env::split_paths(&path).map(|dir| dir.join(NAME));
    first_file(beside.into_iter().chain(on_path)).with_context(|| {
        format!(
            "no {NAME} binary beside {} or on PATH: build it (cargo build --bin hivekeeper), \
             install it (cargo install --path .) or give --hivekeeper PATH",
            own.display()
        )
    })
}

/// The first of `candidates` that is a file.
fn first_file(candidates: impl IntoIterator<Item = PathBuf>) -> Option<PathBuf> {
    candidates.into_iter().find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_flag_path_is_refused_by_name() {
        let error = find(Some(Path::new("/nonexistent/hivekeeper"))).expect_err("missing");
        assert_eq!(
            error.to_string(),
            "--hivekeeper /nonexistent/hivekeeper: no such file"
        );
    }

    #[test]
    fn the_first_candidate_that_is_a_file_wins() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let missing = dir.path().join("a").join(NAME);
        let present = dir.path().join(NAME);
        std::fs::write(&present, "").expect("writing the stand-in");
        assert_eq!(
            first_file([missing.clone(), present.clone()]),
            Some(present)
        );
        assert_eq!(first_file([missing]), None);
        // A directory of that name is no binary.
        assert_eq!(first_file([dir.path().to_path_buf()]), None);
    }
}
