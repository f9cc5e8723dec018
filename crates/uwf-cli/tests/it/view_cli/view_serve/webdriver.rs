//! A small W3C WebDriver client (https://www.w3.org/TR/webdriver2/) for
//! the browser tests of `uwf serve`: JSON over HTTP to Debian's
//! `chromedriver`, which drives headless `chromium`.
//!
//! Written over `ureq`, which the tests already use for the API, rather
//! than with fantoccini or thirtyfour: those bring tokio and an async
//! HTTP stack into a workspace that has no async runtime, for the dozen
//! commands these tests send.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// How long a condition is waited for before the test fails.
pub const WAIT: Duration = Duration::from_secs(60);

/// The key WebDriver names an element by in its answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `$CHROMEDRIVER`, else `chromedriver` on the PATH.
pub fn find() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("CHROMEDRIVER") {
        return Some(b.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("chromedriver"))
        .find(|p| p.is_file())
}

/// A running `chromedriver` on a free loopback port; killed when dropped.
pub struct Driver {
    child: Child,
    base: String,
}

impl Driver {
    /// Starts `bin --port=0` and reads the port it chose from its first
    /// lines ("… started successfully on port N.").
    pub fn start(bin: &Path) -> Driver {
        let mut child = Command::new(bin)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = Vec::new();
        let port = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("{} stopped before it listened: {seen:?}", bin.display());
            };
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest.trim_end_matches('.').trim().to_string();
            }
            seen.push(line);
        };
        // The rest of its output is not read: drain it so it never blocks.
        std::thread::spawn(move || for _ in lines {});
        Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A new headless Chromium session (`$CHROMIUM_BIN` when set), its
    /// profile under `dir`.
    pub fn session(&self, dir: &Path) -> Session {
        let mut options = json!({
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1000,760",
                format!("--user-data-dir={}", dir.join("chromium-profile").display()),
            ]
        });
        if let Some(bin) = std::env::var_os("CHROMIUM_BIN") {
            options["binary"] = json!(PathBuf::from(bin));
        }
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": options,
        }}});
        let v = request(&format!("{}/session", self.base), "POST", Some(&caps))
            .unwrap_or_else(|e| panic!("chromedriver made no session: {e}"));
        Session {
            base: format!("{}/session/{}", self.base, v["sessionId"].as_str().unwrap()),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A WebDriver error: its `error` code and message.
#[derive(Debug)]
pub struct WdError(pub String);

impl std::fmt::Display for WdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One command: its `value`, or the error WebDriver answered.
fn request(url: &str, method: &str, body: Option<&Value>) -> Result<Value, WdError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let response = match method {
        "GET" => agent.get(url).call(),
        "DELETE" => agent.delete(url).call(),
        _ => agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body.unwrap_or(&json!({})).to_string()),
    };
    let mut r = response.map_err(|e| WdError(format!("{method} {url}: {e}")))?;
    let ok = r.status().is_success();
    let text = r
        .body_mut()
        .read_to_string()
        .map_err(|e| WdError(e.to_string()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| WdError(format!("{e}: {text}")))?;
    if ok {
        Ok(v["value"].clone())
    } else {
        Err(WdError(format!(
            "{}: {}",
            v["value"]["error"].as_str().unwrap_or("error"),
            v["value"]["message"].as_str().unwrap_or(&text)
        )))
    }
}

/// An element of the page, as WebDriver names it.
#[derive(Clone, Debug)]
pub struct Element(String);

/// A browser session; deleted (the browser closed) when dropped.
pub struct Session {
    base: String,
}

impl Session {
    fn try_call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, WdError> {
        request(&format!("{}{path}", self.base), method, body.as_ref())
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    /// Opens `url` (returns once the page loaded).
    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// The first element `css` selects, if any now.
    pub fn find(&self, css: &str) -> Option<Element> {
        let v = self
            .try_call(
                "POST",
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .ok()?;
        v[ELEMENT].as_str().map(|id| Element(id.to_string()))
    }

    /// Waits for an element `css` selects.
    pub fn wait_for(&self, css: &str) -> Element {
        self.until(&format!("an element {css:?}"), || self.find(css))
    }

    /// Waits until `check` gives something, looking again every 50 ms;
    /// fails the test after [`WAIT`], saying what it waited for.
    pub fn until<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(t) = check() {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "waited {WAIT:?} for {what}; the page says:\n{}",
                self.script("return document.body ? document.body.innerText : ''", &[])
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn click(&self, e: &Element) {
        self.call("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// Clicks the element `css` selects, waiting for it; found again when
    /// the page replaced it between finding and clicking (the list page
    /// renders its rows anew every two seconds).
    pub fn click_css(&self, css: &str) {
        self.until(&format!("a click on {css:?}"), || {
            let e = self.find(css)?;
            match self.try_call("POST", &format!("/element/{}/click", e.0), Some(json!({}))) {
                Ok(_) => Some(()),
                Err(WdError(m)) if m.contains("stale element") => None,
                Err(e) => panic!("WebDriver click on {css:?}: {e}"),
            }
        });
    }

    /// Types `text` into `e`.
    pub fn type_into(&self, e: &Element, text: &str) {
        self.call(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        );
    }

    pub fn clear(&self, e: &Element) {
        self.call("POST", &format!("/element/{}/clear", e.0), Some(json!({})));
    }

    /// The rendered text of the first element `css` selects now; `None`
    /// when there is none (or it was replaced while being read).
    pub fn text_of(&self, css: &str) -> Option<String> {
        let e = self.find(css)?;
        self.try_call("GET", &format!("/element/{}/text", e.0), None)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
    }

    /// Runs `body` (a function body: `return …`) in the page.
    pub fn script(&self, body: &str, args: &[Value]) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": body, "args": args })),
        )
    }

    /// Accepts the `confirm()` the page shows, once it shows one.
    pub fn accept_dialog(&self) {
        self.until("a dialog", || {
            self.try_call("POST", "/alert/accept", Some(json!({}))).ok()
        });
    }

    /// A PNG of what the window shows, or of one element of it.
    pub fn screenshot(&self, of: Option<&Element>) -> Vec<u8> {
        let path = match of {
            Some(e) => format!("/element/{}/screenshot", e.0),
            None => "/screenshot".to_string(),
        };
        let v = self.call("GET", &path, None);
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = request(&self.base, "DELETE", None);
    }
}
