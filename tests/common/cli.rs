//! One run of the `hivekeeper` binary as a command-line client (`status`, `inspect`, ...).

use std::process::{Command, Stdio};

use serde_json::Value;

use super::within;

/// What one run of the `hivekeeper` binary printed.
pub struct CliRun {
    /// Whether it exited 0.
    pub success: bool,
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl CliRun {
    /// The standard output as JSON (for `--json`); fails the test with both streams otherwise.
    pub fn json(&self) -> Value {
        assert!(self.success, "the command failed:\n{}", self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "--json printed something that is not JSON ({e}):\n{}",
                self.stdout
            )
        })
    }
}

/// Runs `hivekeeper ARGS` (an admin subcommand) to completion, at most 30 s.
pub async fn run_cli(args: &[&str]) -> CliRun {
    run_cli_with_env(args, &[]).await
}

/// [`run_cli`] against the node whose MQTT port is `port`, as the `admin` account with the
/// secret in `secret_file` (a node with `--auth`).
pub async fn run_cli_as_admin(port: u16, secret_file: &std::path::Path, args: &[&str]) -> CliRun {
    let broker = format!("127.0.0.1:{port}");
    let secret_file = secret_file.to_str().expect("a UTF-8 temp path");
    let mut all: Vec<&str> = args.to_vec();
    all.extend([
        "--broker",
        &broker,
        "--user",
        "admin",
        "--password-file",
        secret_file,
    ]);
    run_cli(&all).await
}

/// [`run_cli`] with environment variables set (`HIVEKEEPER_TLS_CA=...`).
pub async fn run_cli_with_env(args: &[&str], env: &[(&str, &str)]) -> CliRun {
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    let what = format!("hivekeeper {}", args.join(" "));
    let output = within(
        30,
        &what,
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_hivekeeper"))
                .args(&args)
                .envs(env)
                .stdin(Stdio::null())
                .output()
        }),
    )
    .await
    .expect("the blocking task ran")
    .unwrap_or_else(|e| panic!("{what}: could not run: {e}"));
    CliRun {
        success: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
