//! The shell examples of README.md and docs/*.md run as written.
//!
//! **The convention.** Every fenced block whose language is `sh`, `bash`, `shell` or `console`
//! is one of:
//!
//! - ` ```sh runnable `: run by this test against a fresh `hivekeeper serve` that the test
//!   starts on the documented defaults (agent endpoint 127.0.0.1:1883, /metrics
//!   127.0.0.1:9464) with an empty data dir, as after the README's quick start;
//! - ` ```sh runnable standalone `: run by this test with no node of the test's: the block
//!   needs none (`certs dev`), or starts the servers it needs itself (the cluster snippet, the
//!   security setup);
//! - anything else, and then the block says why it is not run, in a line of its own:
//!   `# not run by the doc test: REASON` (placeholders, real hostnames, root, a benchmark that
//!   runs for minutes, a server in the foreground).
//!
//! GitHub renders ` ```sh runnable ` as `sh` (only the info string's first word names the
//! language). A shell block with neither a marker nor a reason fails
//! [`every_shell_block_is_runnable_or_says_why_not`], so a new example cannot be left out
//! silently.
//!
//! **How a block runs.** Each block on its own: `bash -Eeuo pipefail` on the block's text in
//! an empty temporary directory, the freshly built `hivekeeper` first on `PATH`, no
//! `HIVEKEEPER_*` variable of the caller's environment, stdin closed, at most
//! [`BLOCK_TIMEOUT`]. The block is the leader of its own process group, and the whole group is
//! killed when it ends, so servers it left in the background (`hivekeeper serve ... &`) never
//! outlive it. A block fails on any command that fails (the first one ends it), on the
//! timeout, and when it prints a refused request's answer (`"ok":false`: `mosquitto_rr` exits
//! 0 whatever the service answered); the failure names the file and line of the block and of
//! the command, with the block's output and the `*.log` files it wrote. Every block sees a
//! fresh node, so no block depends on another's leases or holds.
//!
//! The ports are the documented defaults, not free ones: a block must run as a reader would
//! type it. If something else listens on 127.0.0.1:1883 or 127.0.0.1:9464 (a `hivekeeper serve`
//! or a mosquitto of your own), the test fails saying so. The examples use `mosquitto_rr`
//! (Debian's mosquitto-clients, which `.ci/run` installs).

mod common;

use std::fmt::Write as _;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Node, eventually};
use tokio::time::Instant;

/// The agent endpoint's default address (`serve --mqtt-listen`).
const MQTT_PORT: u16 = 1883;

/// The default /metrics port (`serve --metrics-listen`).
const METRICS_PORT: u16 = 9464;

/// The longest a block may run: a cluster of three debug-built members starts in about 1.5 s
/// on a busy 2-core machine; this leaves room to spare, and ends a block that waits for a
/// server that never came up (its log is in the report).
const BLOCK_TIMEOUT: Duration = Duration::from_secs(60);

/// The line a block that is not run gives its reason with.
const NOT_RUN: &str = "# not run by the doc test:";

/// What a refused request's answer holds: a runnable block prints none (a refusal shown on
/// purpose belongs in a block that is not run).
const REFUSAL: &str = r#""ok":false"#;

/// Languages of the blocks this test looks at.
const SHELL_LANGUAGES: [&str; 4] = ["sh", "bash", "shell", "console"];

/// How the test runs a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Against a fresh node of the test's.
    WithNode,
    /// The block starts its own servers.
    Standalone,
}

/// One fenced code block of a Markdown file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    /// The file, relative to the repository root.
    file: String,
    /// The 1-based line of the opening fence.
    fence_line: usize,
    /// The info string's words (` ```sh runnable ` gives `["sh", "runnable"]`).
    info: Vec<String>,
    /// The block's lines, the fence's indentation removed.
    lines: Vec<String>,
}

impl Block {
    /// Whether the block is shell.
    fn is_shell(&self) -> bool {
        self.info
            .first()
            .is_some_and(|language| SHELL_LANGUAGES.contains(&language.as_str()))
    }

    /// How the test runs the block: `None` when it is not marked runnable.
    fn mode(&self) -> Result<Option<Mode>, String> {
        match self
            .info
            .iter()
            .skip(1)
            .map(String::as_str)
            .collect::<Vec<_>>()[..]
        {
            [] => Ok(None),
            ["runnable"] => Ok(Some(Mode::WithNode)),
            ["runnable", "standalone"] => Ok(Some(Mode::Standalone)),
            _ => Err(format!(
                "{}: the info string `{}` is none of `{lang}`, `{lang} runnable`, \
                 `{lang} runnable standalone`",
                self.location(),
                self.info.join(" "),
                lang = self.info[0],
            )),
        }
    }

    /// Whether the block says why it is not run.
    fn says_why_not_run(&self) -> bool {
        self.lines.iter().any(|line| {
            line.trim_start()
                .strip_prefix(NOT_RUN)
                .is_some_and(|reason| !reason.trim().is_empty())
        })
    }

    /// `FILE:LINE` of the opening fence.
    fn location(&self) -> String {
        format!("{}:{}", self.file, self.fence_line)
    }
}

/// The fenced code blocks of `text` (the Markdown file `file`), backtick or tilde fences,
/// indented ones (in a list) included.
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    // The open block and its fence (indentation, fence characters).
    let mut open: Option<(Block, usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let fence_len = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .count();
        let fence = &trimmed[..fence_len];
        // A backtick fence's info string has no backtick (CommonMark): "```` ```sh ````" at
        // the start of a line is inline code, not a fence.
        let is_fence = fence_len >= 3
            && fence.chars().all(|c| c == fence.as_bytes()[0] as char)
            && !(fence.starts_with('`') && trimmed[fence_len..].contains('`'));
        match open.take() {
            None if is_fence => {
                let block = Block {
                    file: file.to_string(),
                    fence_line: index + 1,
                    info: trimmed[fence_len..]
                        .split_whitespace()
                        .map(str::to_string)
                        .collect(),
                    lines: Vec::new(),
                };
                open = Some((block, indent, fence.to_string()));
            }
            None => {}
            Some((block, _, open_fence))
                if is_fence
                    && fence.starts_with(open_fence.as_str())
                    && trimmed[fence_len..].trim().is_empty() =>
            {
                found.push(block);
            }
            Some((mut block, block_indent, open_fence)) => {
                // Strip the fence's indentation, as much of it as the line has.
                let strip = indent.min(block_indent);
                block.lines.push(line[strip..].to_string());
                open = Some((block, block_indent, open_fence));
            }
        }
    }
    if let Some((block, _, _)) = open {
        // An unclosed fence runs to the end of the file (CommonMark).
        found.push(block);
    }
    found
}

/// The repository root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and docs/*.md, in a fixed order, with their text.
fn documents() -> Vec<(String, String)> {
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("read docs/")
        .map(|entry| entry.expect("a docs/ entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(root().join(&file))
                .unwrap_or_else(|error| panic!("read {file}: {error}"));
            (file, text)
        })
        .collect()
}

/// Every shell block of README.md and docs/*.md.
fn shell_blocks() -> Vec<Block> {
    documents()
        .iter()
        .flat_map(|(file, text)| blocks(file, text))
        .filter(Block::is_shell)
        .collect()
}

#[test]
fn the_parser_finds_fences_markers_and_reasons() {
    let text = "intro\n\
                ```sh runnable\n\
                hivekeeper status\n\
                ```\n\
                - a list item:\n\
                \x20 ```bash\n\
                \x20 # not run by the doc test: needs root\n\
                \x20 sudo true\n\
                \x20 ```\n\
                ````text\n\
                ```sh\n\
                ````\n\
                ```` ```sh ```` is inline code\n\
                ```sh runnable standalone\n\
                hivekeeper serve &\n";
    let found = blocks("X.md", text);
    let summary: Vec<_> = found
        .iter()
        .map(|block| {
            (
                block.fence_line,
                block.info.join(" "),
                block.lines.clone(),
                block.is_shell(),
                block.mode(),
                block.says_why_not_run(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                2,
                "sh runnable".to_string(),
                vec!["hivekeeper status".to_string()],
                true,
                Ok(Some(Mode::WithNode)),
                false,
            ),
            (
                6,
                "bash".to_string(),
                vec![
                    "# not run by the doc test: needs root".to_string(),
                    "sudo true".to_string(),
                ],
                true,
                Ok(None),
                true,
            ),
            (
                10,
                "text".to_string(),
                vec!["```sh".to_string()],
                false,
                Ok(None),
                false,
            ),
            (
                14,
                "sh runnable standalone".to_string(),
                vec!["hivekeeper serve &".to_string()],
                true,
                Ok(Some(Mode::Standalone)),
                false,
            ),
        ]
    );
    let typo = blocks("X.md", "```sh runable\ntrue\n```\n");
    assert_eq!(
        typo[0].mode(),
        Err(
            "X.md:1: the info string `sh runable` is none of `sh`, `sh runnable`, \
             `sh runnable standalone`"
                .to_string()
        )
    );
}

#[test]
fn every_shell_block_is_runnable_or_says_why_not() {
    let mut problems = Vec::new();
    for block in shell_blocks() {
        match block.mode() {
            Err(problem) => problems.push(problem),
            Ok(Some(_)) => {}
            Ok(None) if block.says_why_not_run() => {}
            Ok(None) => problems.push(format!(
                "{}: a shell block neither marked `{} runnable` nor saying why not \
                 (`{NOT_RUN} REASON`)",
                block.location(),
                block.info[0]
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "shell blocks in the docs that are not run and do not say why \
         (see tests/docs_runnable.rs for the convention):\n{}",
        problems.join("\n")
    );
}

/// The programs the examples call besides `hivekeeper` and a shell's own, and the package
/// that has each (Debian's, as `.ci/run` installs them).
const TOOLS: [(&str, &str); 2] = [
    ("mosquitto_rr", "mosquitto-clients"),
    ("/usr/sbin/mosquitto", "mosquitto"),
];

/// Fails the test, naming the package, when a block calls a program that is not installed: a
/// clear message once rather than "command not found" in every block that calls it.
fn assert_tools_installed(blocks: &[Block]) {
    for (tool, package) in TOOLS {
        let called = blocks
            .iter()
            .any(|block| block.lines.iter().any(|line| line.contains(tool)));
        let found = Command::new(tool)
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        assert!(
            !called || found,
            "the doc examples call {tool}, which is not installed here: install {package} \
             (`apt-get install {package}`, as .ci/run does)"
        );
    }
}

/// Fails the test, naming the port, unless both default ports are free.
fn assert_default_ports_free(before: &str) {
    for port in [MQTT_PORT, METRICS_PORT] {
        if let Err(error) = TcpListener::bind(("127.0.0.1", port)) {
            panic!(
                "the doc examples use the documented default ports, and 127.0.0.1:{port} is \
                 taken ({error}) {before}: stop what listens there (a `hivekeeper serve`, a \
                 mosquitto) and run this test again"
            );
        }
    }
}

/// Whether both default ports can be bound.
fn default_ports_free() -> bool {
    [MQTT_PORT, METRICS_PORT]
        .iter()
        .all(|&port| TcpListener::bind(("127.0.0.1", port)).is_ok())
}

/// The block's script: an ERR trap that names the doc line of the failing command, then the
/// block's lines (script line `n + 1` is the block's line `n`).
fn script(block: &Block) -> String {
    let mut script = format!(
        "trap 'echo \"docs_runnable: exit status $? at {}:$((LINENO + {}))\" >&2' ERR\n",
        block.file,
        block.fence_line - 1
    );
    for line in &block.lines {
        script.push_str(line);
        script.push('\n');
    }
    script
}

/// Runs one block in a fresh temporary directory: `Err` with what went wrong and the output.
async fn run(block: &Block) -> Result<(), String> {
    let scratch = tempfile::tempdir().expect("a temp dir");
    let work = scratch.path().join("work");
    std::fs::create_dir(&work).expect("the block's working directory");
    let script_path = scratch.path().join("block.sh");
    std::fs::write(&script_path, script(block)).expect("write the block's script");
    let output_path = scratch.path().join("output");
    let output = std::fs::File::create(&output_path).expect("the block's output file");

    let node = match block.mode() {
        Ok(Some(Mode::WithNode)) => {
            let data = scratch.path().join("node-data");
            Some(Node::start_on(&data, MQTT_PORT, METRICS_PORT).await)
        }
        _ => None,
    };

    let binary = PathBuf::from(env!("CARGO_BIN_EXE_hivekeeper"));
    let bin_dir = binary.parent().expect("the binary's directory");
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("a PATH");
    let mut command = Command::new("bash");
    command
        .args(["-Eeuo", "pipefail"])
        .arg(&script_path)
        .current_dir(&work)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("clone the output file"))
        .stderr(output)
        .process_group(0);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HIVEKEEPER_") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|error| panic!("run bash: {error}"));
    let group = child.id();

    let deadline = Instant::now() + BLOCK_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the block") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The block's background jobs (servers it started) end with it.
    kill_group(group);
    let _ = child.wait();
    drop(node);

    let printed = std::fs::read_to_string(&output_path).unwrap_or_default();
    let verdict = match status {
        // `mosquitto_rr` exits 0 whatever the answer: a refusal shows only in what it printed.
        Some(status) if status.success() && printed.contains(REFUSAL) => {
            format!("printed a refusal (`{REFUSAL}`)")
        }
        Some(status) if status.success() => return Ok(()),
        Some(status) => format!("failed ({status})"),
        None => format!("did not end within {} s", BLOCK_TIMEOUT.as_secs()),
    };
    let mut report = format!(
        "{} (a `{}` block) {verdict}; its output:\n{}",
        block.location(),
        block.info.join(" "),
        tail(&printed, 80)
    );
    // Servers a block started write their logs to files (`2> data-n1.log`): why one did not
    // start is there.
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&work)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .collect()
        })
        .unwrap_or_default();
    logs.retain(|path| path.extension().is_some_and(|extension| extension == "log"));
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let name = log.file_name().unwrap_or_default().to_string_lossy();
        let _ = write!(report, "  {name}, which it wrote:\n{}", tail(&text, 20));
    }
    Err(report)
}

/// SIGKILL to every process of the group `group` (kill(1): the workspace forbids `unsafe`). A
/// group with no process left is fine.
fn kill_group(group: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    if lines.len() > n {
        let _ = writeln!(out, "[... {} lines before]", lines.len() - n);
    }
    for line in &lines[lines.len().saturating_sub(n)..] {
        let _ = writeln!(out, "    {line}");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runnable_blocks_run() {
    let runnable: Vec<Block> = shell_blocks()
        .into_iter()
        .filter(|block| matches!(block.mode(), Ok(Some(_))))
        .collect();
    assert!(
        !runnable.is_empty(),
        "no block of README.md or docs/*.md is marked runnable"
    );
    assert_tools_installed(&runnable);
    let mut failures = Vec::new();
    for block in &runnable {
        assert_default_ports_free(&format!("before {} ran", block.location()));
        let started = Instant::now();
        let outcome = run(block).await;
        eprintln!(
            "{} ({}): {} in {:.1} s",
            block.location(),
            block.info.join(" "),
            if outcome.is_ok() { "ran" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if let Err(failure) = outcome {
            failures.push(failure);
        }
        // The node and the block's servers were killed: their ports come free at once, but
        // wait for it rather than fail the next block on a race.
        eventually(10, "the default ports free again", async || {
            default_ports_free()
        })
        .await;
    }
    assert!(
        failures.is_empty(),
        "{} of {} runnable doc blocks failed:\n\n{}",
        failures.len(),
        runnable.len(),
        failures.join("\n")
    );
}
