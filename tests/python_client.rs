//! The Python agent client (`clients/python`, package `hivekeeper`) against real
//! `hivekeeper serve` processes: this test installs the package and pytest into a venv under
//! `target/tmp/` and runs the client's pytest suite (`clients/python/tests`) with this build's
//! binary, so `cargo test --workspace` covers the Python client too.
//!
//! It needs a `python3` (3.9 or newer) with the `venv` module and ensurepip (Debian:
//! `apt-get install python3-venv`), and PyPI for paho-mqtt and pytest on the first run.
//! `HIVEKEEPER_PYTHON=/path/to/python3` picks the interpreter. Without one it FAILS, saying
//! what to install: a skipped suite would look like a passing one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test, handed to the suite's fixtures.
const BIN: &str = env!("CARGO_BIN_EXE_hivekeeper");
/// The workspace root (the root package's manifest dir).
const WORKSPACE: &str = env!("CARGO_MANIFEST_DIR");
/// Cargo's scratch dir for integration tests (`target/tmp`): the venv lives here, reused.
const SCRATCH: &str = env!("CARGO_TARGET_TMPDIR");
/// The suite takes about 20 s on an idle machine; this bounds a hang, not the work.
const SUITE_S_MAX: u64 = 900;
/// A `pip install` may download from PyPI on the first run.
const INSTALL_S_MAX: u64 = 600;
/// Python code that exits 0 on Python 3.9 or newer, 3 on an older one.
const AT_LEAST_3_9: &str = "import sys; sys.exit(0 if sys.version_info >= (3, 9) else 3)";

#[test]
fn python_client_suite_passes_against_real_nodes() {
    let python = python_with_venv();
    let venv = Path::new(SCRATCH).join("python-client-venv");
    let venv_python = venv.join("bin").join("python");
    // A venv left by an interpreter that is gone (or another version) is made anew.
    let usable = Command::new(&venv_python)
        .args(["-c", AT_LEAST_3_9])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success());
    if !usable {
        let _ = std::fs::remove_dir_all(&venv);
        let created = run(
            Command::new(&python).arg("-m").arg("venv").arg(&venv),
            INSTALL_S_MAX,
        );
        if !created.status.success() {
            let _ = std::fs::remove_dir_all(&venv);
            panic!(
                "{} -m venv {} failed (Debian: apt-get install python3-venv):\n{}",
                python.display(),
                venv.display(),
                output_text(&created)
            );
        }
    }
    let client = Path::new(WORKSPACE).join("clients").join("python");
    // The runtime dependency and pytest (a no-op once satisfied), then this checkout's
    // client, reinstalled every run so the suite tests the source as it is now.
    let pip = |args: &[&str]| {
        let output = run(
            Command::new(&venv_python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--quiet",
                ])
                .args(args),
            INSTALL_S_MAX,
        );
        assert!(
            output.status.success(),
            "pip install {args:?} failed:\n{}",
            output_text(&output)
        );
    };
    pip(&["paho-mqtt>=2,<3", "pytest>=7"]);
    // setuptools builds in the source tree and copies into `build/` without removing what the
    // source no longer has: a module deleted since the last run would be installed again.
    let _ = std::fs::remove_dir_all(client.join("build"));
    let client_arg = client.to_str().expect("the workspace path is UTF-8");
    pip(&["--no-deps", "--force-reinstall", client_arg]);
    let suite = run(
        Command::new(&venv_python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
            .current_dir(&client)
            .env("HIVEKEEPER_BIN", BIN)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        SUITE_S_MAX,
    );
    let text = output_text(&suite);
    assert!(
        suite.status.success(),
        "the Python client's pytest suite failed:\n{text}"
    );
    // The summary line ("N passed in ...s"), for `cargo test -- --nocapture`.
    println!("{}", text.lines().last().unwrap_or_default());
    assert!(
        text.contains(" passed"),
        "pytest ran no test (a skip is not a pass):\n{text}"
    );
}

/// The first of `$HIVEKEEPER_PYTHON`, `python3`, `/usr/bin/python3` that is Python 3.9 or
/// newer with `venv` and `ensurepip`; the test fails saying what to install otherwise.
fn python_with_venv() -> PathBuf {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(explicit) = std::env::var_os("HIVEKEEPER_PYTHON") {
        candidates.push(explicit.into());
    }
    candidates.push("python3".into());
    candidates.push("/usr/bin/python3".into());
    let probe = format!("import venv, ensurepip; {AT_LEAST_3_9}");
    let mut tried = Vec::new();
    for candidate in candidates {
        let outcome = Command::new(&candidate)
            .args(["-c", &probe])
            .stdin(Stdio::null())
            .output();
        match outcome {
            Ok(output) if output.status.success() => return candidate,
            Ok(output) => tried.push(format!(
                "{}: {}",
                candidate.display(),
                if output.status.code() == Some(3) {
                    "older than 3.9".to_string()
                } else {
                    String::from_utf8_lossy(&output.stderr).trim().to_string()
                }
            )),
            Err(error) => tried.push(format!("{}: {error}", candidate.display())),
        }
    }
    panic!(
        "the Python client's tests need python3 (3.9 or newer) with the venv module and pip \
         (Debian: apt-get install python3 python3-venv; or set HIVEKEEPER_PYTHON). Tried:\n  {}",
        tried.join("\n  ")
    );
}

/// Runs `command` to completion with its output captured, killing it after `limit_s`.
fn run(command: &mut Command, limit_s: u64) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
    // Drain both pipes on their own threads: a full pipe would stall the child.
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let deadline = Instant::now() + Duration::from_secs(limit_s);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {limit_s} s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let join = |handle: Option<std::thread::JoinHandle<Vec<u8>>>| {
        handle
            .map(|h| h.join().expect("the pipe reader does not panic"))
            .unwrap_or_default()
    };
    Output {
        status,
        stdout: join(stdout),
        stderr: join(stderr),
    }
}

fn drain(mut pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

fn output_text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
