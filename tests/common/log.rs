//! A child process's output, kept in memory line by line: what a test asserts on ("hivekeeper
//! ready", an error line) and what a failing test prints.

use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex, PoisonError};

/// A child process's output, collected by a reader thread.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn lines(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a line holds `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.count(needle) > 0
    }

    /// How many lines hold `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.lines()
            .iter()
            .filter(|line| line.contains(needle))
            .count()
    }

    /// The first line holding `needle`.
    pub fn find(&self, needle: &str) -> Option<String> {
        self.lines()
            .iter()
            .find(|line| line.contains(needle))
            .cloned()
    }

    /// The last `n` lines.
    pub fn tail(&self, n: usize) -> String {
        let lines = self.lines();
        let start = lines.len().saturating_sub(n);
        lines[start..].join("\n")
    }

    /// Reads `stream` line by line into the log until it closes.
    pub fn collect(&self, stream: impl std::io::Read + Send + 'static) {
        let log = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                log.lines().push(line);
            }
        });
    }
}
