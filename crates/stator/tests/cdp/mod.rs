//! A small client of the Chrome DevTools Protocol, enough for a test to drive Debian's
//! headless `chromium` inside a network namespace: start it, open a page, evaluate
//! expressions in it, size the viewport, take screenshots, close it.
//!
//! Chromium listens for DevTools on an ephemeral port of the namespace's loopback
//! (`--remote-debugging-port=0`) and writes the port and the browser's WebSocket path to
//! `DevToolsActivePort` in its profile directory; the test connects from a thread inside the
//! namespace ([`Netns::run_in`]) and then uses the socket from anywhere. Messages are JSON
//! over one WebSocket (tungstenite); commands for the page carry the session id of a flat
//! `Target.attachToTarget`. Events are read and ignored.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use stator_lab::netns::{ChildGuard, Netns};
use tungstenite::{Message, WebSocket};

/// A headless Chromium in a namespace, killed (with its profile removed) when dropped.
pub struct Browser {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    child: ChildGuard,
    profile: PathBuf,
}

/// A tab, attached with a flat session.
pub struct Tab {
    session: String,
}

impl Browser {
    /// Starts `chromium` in `ns` with a fresh profile under `dir`, logging to `dir/chromium.log`,
    /// and connects to its DevTools endpoint.
    pub fn start(ns: &Netns, dir: &Path) -> Browser {
        let profile = dir.join("chromium-profile");
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let user_data = format!("--user-data-dir={}", profile.display());
        let child = ns
            .spawn_logged(
                "chromium",
                &[
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--hide-scrollbars",
                    "--remote-debugging-port=0",
                    &user_data,
                    "about:blank",
                ],
                &dir.join("chromium.log"),
            )
            .expect("chromium starts (make test-deps installs it)");
        let port_file = profile.join("DevToolsActivePort");
        let started = Instant::now();
        let text = loop {
            if let Ok(t) = std::fs::read_to_string(&port_file)
                && t.lines().count() >= 2
            {
                break t;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "chromium wrote no DevToolsActivePort within 60 s; see {}",
                dir.join("chromium.log").display()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut lines = text.lines();
        let port: u16 = lines.next().unwrap().trim().parse().unwrap();
        let path = lines.next().unwrap().trim().to_owned();
        let stream = ns
            .run_in(move || TcpStream::connect(("127.0.0.1", port)))
            .unwrap()
            .expect("connecting to chromium's DevTools port");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let (ws, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), stream)
            .expect("DevTools WebSocket handshake");
        println!(
            "chromium DevTools on port {port}, ready after {:?}",
            started.elapsed()
        );
        Browser {
            ws,
            next_id: 0,
            child,
            profile,
        }
    }

    /// Sends a command (to the browser, or to a tab's session) and waits for its result.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            let m = self.ws.read().expect("reading from DevTools");
            let Message::Text(text) = m else { continue };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
        }
    }

    /// Opens a tab on `url`.
    pub fn open(&mut self, url: &str) -> Tab {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let id = target["targetId"].as_str().unwrap().to_owned();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": id, "flatten": true }),
        );
        let tab = Tab {
            session: attached["sessionId"].as_str().unwrap().to_owned(),
        };
        self.call(Some(&tab.session), "Page.enable", json!({}));
        self.call(Some(&tab.session), "Runtime.enable", json!({}));
        self.call(Some(&tab.session), "Page.navigate", json!({ "url": url }));
        tab
    }

    /// Evaluates `expression` in the tab; returns its value (JSON-serializable results).
    pub fn eval(&mut self, tab: &Tab, expression: &str) -> Value {
        let r = self.call(
            Some(&tab.session),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Polls `expression` every 100 ms until it is `true`; returns the time it took.
    pub fn wait_for(
        &mut self,
        tab: &Tab,
        what: &str,
        expression: &str,
        timeout: Duration,
    ) -> Duration {
        let start = Instant::now();
        while self.eval(tab, expression) != json!(true) {
            assert!(
                start.elapsed() < timeout,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        start.elapsed()
    }

    /// Sets the viewport (CSS pixels) and whether it is a phone's.
    pub fn viewport(&mut self, tab: &Tab, width: u32, height: u32, mobile: bool) {
        self.call(
            Some(&tab.session),
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile }),
        );
    }

    /// Saves a PNG of the whole page (beyond the viewport) to `path`.
    pub fn screenshot(&mut self, tab: &Tab, path: &Path) {
        let shot = self.call(
            Some(&tab.session),
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ask politely (the browser takes its renderers with it), then make sure.
        self.next_id += 1;
        let close = json!({ "id": self.next_id, "method": "Browser.close" });
        let _ = self.ws.send(Message::text(close.to_string()));
        if self.child.wait_timeout(Duration::from_secs(5)).is_none() {
            self.child.signal(libc::SIGKILL);
            let _ = self.child.wait_timeout(Duration::from_secs(5));
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
