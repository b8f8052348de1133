//! A headless Chromium driven over WebDriver: Debian's `chromium` and `chromium-driver`, the
//! driver on a free port, closed with its guard.
//!
//! Why fantoccini: it is a WebDriver client that is async on tokio (the runtime every test here
//! already runs), small, and speaks the W3C protocol that chromedriver serves, so the tests need
//! no second runtime, no Node.js and no browser build of its own. A CDP crate (chromiumoxide,
//! headless_chrome) would tie the tests to Chromium's internal protocol and, for some, download
//! a browser; WebDriver keeps them on the standard interface that Debian's driver package ships.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::common::{eventually, free_port};

/// Where Debian installs the driver (`chromium-driver`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether the page's live stream is open and has delivered.
pub const LIVE: &str = "return document.getElementById('live').classList.contains('on');";

/// A chromedriver process and a browser session on it.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session of `width`×`height`.
    pub async fn start(width: u32, height: u32) -> Browser {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            // Its own process group, the browser's too: a test that panics kills them all.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("{CHROMEDRIVER}: {error} (apt-get install chromium chromium-driver)")
            });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--ignore-certificate-errors",
                            format!("--window-size={width},{height}")]}),
        );
        let url = format!("http://127.0.0.1:{port}");
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = eventually(30, "chromedriver answers", || {
            let builder = ClientBuilder::new(connector.clone())
                .capabilities(capabilities.clone())
                .clone();
            let url = url.clone();
            async move { builder.connect(&url).await.ok() }
        })
        .await;
        Browser { client, driver }
    }

    /// Loads the console of the node whose HTTP port is `port`.
    pub async fn load(&self, port: u16) {
        self.load_url(&format!("http://127.0.0.1:{port}/ui")).await;
    }

    /// Loads `url`.
    pub async fn load_url(&self, url: &str) {
        self.client.goto(url).await.expect("the page loads");
    }

    /// Loads the console of `port` and switches it to `view` (see [`Browser::show`]).
    pub async fn open(&self, port: u16, view: &str) {
        self.load(port).await;
        self.show(view).await;
    }

    /// Switches the page to `view` and waits until its stream delivered.
    pub async fn show(&self, view: &str) {
        let secs = Duration::from_secs(10);
        self.until(
            "return document.getElementById('main').hidden === false;",
            &json!(true),
            secs,
        )
        .await;
        self.eval(&format!(
            "document.getElementById('live').classList.remove('on');
             document.querySelector('#tabs button[data-view={view}]').click(); return true;"
        ))
        .await;
        self.until(LIVE, &json!(true), secs).await;
    }

    /// Runs `script` (a function body: `return ...`) in the page.
    pub async fn eval(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|error| panic!("{script}: {error}"))
    }

    /// The errors the page collected (`window.__consoleErrors`): it must have none.
    pub async fn assert_no_errors(&self) {
        let errors = self
            .eval("return window.__consoleErrors || ['the console script did not run'];")
            .await;
        assert_eq!(errors, json!([]), "JavaScript errors in the page");
    }

    /// Polls `script` every 25 ms until it returns `want`, for at most `limit`; returns how
    /// long that took, or panics with the last value.
    pub async fn until(&self, script: &str, want: &Value, limit: Duration) -> Duration {
        let started = std::time::Instant::now();
        loop {
            let got = self.eval(script).await;
            if &got == want {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < limit,
                "{script} was {got}, not {want}, after {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Ends the session, then the driver and the browser (dropping does the latter).
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    /// Kills the driver's process group: the driver and the browser it started.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.wait();
    }
}
