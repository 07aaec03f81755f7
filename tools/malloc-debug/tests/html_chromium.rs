//! The HTML report of a real dump (leaky.c) opened in headless Chromium and driven through the
//! Chrome DevTools protocol (a websocket client, tungstenite): the top allocation site is shown,
//! its callers are hidden, and a real mouse click (Input.dispatchMouseEvent, so the browser's own
//! hit testing and click dispatch run) on the site expands it and shows the callers; the page
//! loads nothing but itself; the standalone flamegraph SVG parses as XML.
//!
//! Needs Debian's `chromium` package (or `$CHROMIUM` naming a Chromium/Chrome binary); without
//! one the test prints a warning and passes without checking anything.

#[path = "../../../tests/common/skip_log.rs"]
mod skip_log;
use skip_log::note_skip;

mod common;
use common::*;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// How long to wait for Chromium before calling it hung (a guard, not a measurement).
const PATIENCE: Duration = Duration::from_secs(60);

fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
    .find(|p| p.is_file())
}

/// The browser process; killed (it was started here) and reaped when the test ends.
struct Browser {
    child: Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn launch(chromium: &Path, profile: &Path) -> (Browser, String) {
    let child = Command::new(chromium)
        .args([
            "--headless",
            // Root in a container: Chromium refuses to start sandboxed.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            "--window-size=1280,1024",
            "about:blank",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
    let browser = Browser { child };
    // With port 0 Chromium picks a port and writes "PORT\n/devtools/browser/ID" here.
    let port_file = profile.join("DevToolsActivePort");
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&port_file)
            && let Some((port, path)) = text.trim().split_once('\n')
        {
            return (browser, format!("ws://127.0.0.1:{port}{path}"));
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{} did not write {}",
            chromium.display(),
            port_file.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A minimal CDP client over the browser endpoint, with one flattened page session.
struct Cdp {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    session: Option<String>,
    events: Vec<Value>,
}

impl Cdp {
    fn connect(url: &str) -> Cdp {
        let addr = url
            .strip_prefix("ws://")
            .and_then(|u| u.split('/').next())
            .unwrap();
        let stream = TcpStream::connect(addr).expect("connect to DevTools");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let (ws, _) = tungstenite::client(url, stream).expect("DevTools websocket handshake");
        Cdp {
            ws,
            next_id: 0,
            session: None,
            events: Vec::new(),
        }
    }

    /// Sends a command (to the page session once attached) and returns its `result`; the events
    /// that arrive in between are kept in `events`.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .expect("send to DevTools");
        loop {
            let reply = self.ws.read().expect("read from DevTools");
            let Ok(text) = reply.to_text() else { continue };
            let v: Value = serde_json::from_str(text).expect("DevTools sends JSON");
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method} failed: {v}");
                return v["result"].clone();
            }
            if v.get("method").is_some() {
                self.events.push(v);
            }
        }
    }

    /// Evaluates a JavaScript expression in the page and returns its value.
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// A left click at page coordinates, as a user's: press and release through the input
    /// pipeline, so hit testing, the click event and <summary>'s default action all happen.
    fn click(&mut self, x: f64, y: f64) {
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "buttons": 1, "clickCount": 1 }),
            );
        }
    }
}

/// JavaScript: is the first element matching `selector` rendered? (Chromium keeps a closed
/// <details>' content laid out but `content-visibility: hidden`; checkVisibility sees that.)
fn visible(selector: &str) -> String {
    format!(
        "(() => {{ const e = document.querySelector({selector:?}); \
         return !!e && e.checkVisibility() && e.getClientRects().length > 0; }})()"
    )
}

#[test]
fn top_site_is_shown_and_a_click_expands_it() {
    let Some(chromium) = find_chromium() else {
        // CI installs Chromium (.ci/run): there a missing browser is a failure, not a skip.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but no chromium found (install Debian's `chromium` package or set CHROMIUM)"
        );
        note_skip(
            "tools/malloc-debug/tests/html_chromium.rs: no chromium (Debian's `chromium` package, \
             or set CHROMIUM): the HTML report was not checked in a browser",
        );
        eprintln!(
            "WARNING: html_chromium: no chromium found (install Debian's `chromium` package or \
             set CHROMIUM): the HTML report was NOT checked in a browser; skipping"
        );
        return;
    };
    let dir = tmp_dir("chromium");
    let html = dir.join("report.html");
    ok(cli()
        .arg("report")
        .arg(dump10())
        .arg("--html")
        .arg(&html)
        .arg("--flamegraph")
        .arg(dir.join("flame.svg"))
        .output()
        .unwrap());

    let (_browser, url) = launch(&chromium, &dir.join("profile"));
    let mut cdp = Cdp::connect(&url);
    let target = cdp.call("Target.createTarget", json!({ "url": "about:blank" }));
    let attached = cdp.call(
        "Target.attachToTarget",
        json!({ "targetId": target["targetId"], "flatten": true }),
    );
    cdp.session = Some(attached["sessionId"].as_str().unwrap().to_string());
    // Every request the page makes is seen from here on.
    cdp.call("Network.enable", json!({}));
    let page_url = format!("file://{}", html.display());
    cdp.call("Page.navigate", json!({ "url": page_url }));

    let start = Instant::now();
    while cdp.eval("document.readyState") != json!("complete")
        || cdp.eval("document.getElementById('tree') !== null") != json!(true)
    {
        assert!(
            start.elapsed() < PATIENCE,
            "the report never finished loading"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Self-contained: the page itself is the only thing loaded.
    let requests: Vec<String> = cdp
        .events
        .iter()
        .filter(|e| e["method"] == json!("Network.requestWillBeSent"))
        .map(|e| {
            e["params"]["request"]["url"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        })
        .collect();
    assert_eq!(requests, std::slice::from_ref(&page_url));

    // The top site is first in the summary table and in the tree, and it is on screen.
    assert_eq!(
        cdp.eval("document.querySelector('table.top tr:nth-child(2) td:last-child').textContent"),
        json!("big_buffers (leaky.c:14)")
    );
    let first = "#tree > details:first-of-type";
    assert_eq!(
        cdp.eval(&format!(
            "document.querySelector('{first} > summary .label').textContent"
        )),
        json!("big_buffers (leaky.c:14)")
    );
    assert_eq!(
        cdp.eval(&visible(&format!("{first} > summary"))),
        json!(true)
    );
    // Collapsed: its callers are not rendered.
    let caller = format!("{first} > details > summary .label");
    assert_eq!(
        cdp.eval(&format!("document.querySelector('{caller}').textContent")),
        json!("load_assets (leaky.c:24)")
    );
    assert_eq!(
        cdp.eval(&format!("document.querySelector('{first}').open")),
        json!(false)
    );
    assert_eq!(cdp.eval(&visible(&caller)), json!(false));

    // Click the middle of the site's label.
    let rect = cdp.eval(&format!(
        "(() => {{ const e = document.querySelector('{first} > summary .label'); \
         e.scrollIntoView(); const r = e.getBoundingClientRect(); \
         return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
    ));
    let (x, y) = (rect[0].as_f64().unwrap(), rect[1].as_f64().unwrap());
    cdp.click(x, y);

    let start = Instant::now();
    while cdp.eval(&visible(&caller)) != json!(true) {
        assert!(
            start.elapsed() < PATIENCE,
            "clicking the top site at ({x}, {y}) did not show its callers"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        cdp.eval(&format!("document.querySelector('{first}').open")),
        json!(true)
    );
    // Only that node opened.
    assert_eq!(
        cdp.eval("document.querySelectorAll('#tree details[open]').length"),
        json!(1)
    );

    // "Expand all" then "Collapse all", clicked like the site.
    let total = cdp.eval("document.querySelectorAll('#tree details').length");
    assert!(total.as_u64().unwrap() > 3, "{total}");
    for (button, open) in [("Expand all", total.clone()), ("Collapse all", json!(0))] {
        let at = cdp.eval(&format!(
            "(() => {{ const b = [...document.querySelectorAll('button')].find(b => b.textContent == {button:?}); \
             b.scrollIntoView(); const r = b.getBoundingClientRect(); \
             return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
        ));
        cdp.click(at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
        let start = Instant::now();
        while cdp.eval("document.querySelectorAll('#tree details[open]').length") != open {
            assert!(
                start.elapsed() < PATIENCE,
                "clicking {button} did not give {open} open nodes"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Reopen the top site for the screenshot.
    let at = cdp.eval(&format!(
        "(() => {{ const e = document.querySelector('{first} > summary .label'); \
         e.scrollIntoView(); const r = e.getBoundingClientRect(); \
         return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
    ));
    cdp.click(at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
    let start = Instant::now();
    while cdp.eval(&format!("document.querySelector('{first}').open")) != json!(true) {
        assert!(start.elapsed() < PATIENCE, "the top site did not reopen");
        std::thread::sleep(Duration::from_millis(50));
    }

    // MALLOC_DEBUG_SCREENSHOT=FILE.png: the whole page in this state (how docs/report.png is made).
    if let Some(path) = std::env::var_os("MALLOC_DEBUG_SCREENSHOT") {
        cdp.eval("window.scrollTo(0, 0)");
        let width = cdp.call("Page.getLayoutMetrics", json!({}))["cssContentSize"]["width"].clone();
        let height = cdp.eval("Math.ceil(document.body.getBoundingClientRect().bottom) + 24");
        let shot = cdp.call(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true,
                    "clip": { "x": 0, "y": 0, "width": width, "height": height, "scale": 1 } }),
        );
        std::fs::write(&path, base64(shot["data"].as_str().unwrap())).unwrap();
        eprintln!("screenshot written to {}", Path::new(&path).display());
    }

    // The standalone flamegraph is well-formed SVG: the browser's XML parser takes it whole.
    cdp.call(
        "Page.navigate",
        json!({ "url": format!("file://{}", dir.join("flame.svg").display()) }),
    );
    let start = Instant::now();
    while cdp.eval("document.readyState") != json!("complete")
        || cdp.eval("document.documentElement.localName") != json!("svg")
    {
        assert!(
            start.elapsed() < PATIENCE,
            "the flamegraph never loaded as SVG"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        cdp.eval("document.getElementsByTagName('parsererror').length"),
        json!(0)
    );
    assert_eq!(
        cdp.eval("[...document.querySelectorAll('g > title')].some(t => t.textContent.startsWith('big_buffers (leaky.c:14): 8192 bytes'))"),
        json!(true)
    );
}

/// Center of the first element matching `selector`, scrolled into view.
fn center(cdp: &mut Cdp, selector: &str) -> (f64, f64) {
    let at = cdp.eval(&format!(
        "(() => {{ const e = document.querySelector({selector:?}); e.scrollIntoView(); \
         const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
    ));
    (at[0].as_f64().unwrap(), at[1].as_f64().unwrap())
}

/// Polls `expression` until it gives `want`.
fn wait_for(cdp: &mut Cdp, expression: &str, want: Value) {
    let start = Instant::now();
    loop {
        let got = cdp.eval(expression);
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{expression}: {got} instead of {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The page's interactive parts, driven by real clicks and typing: the sites table sorts by
/// count and by bytes, a click on a flamegraph frame zooms to it, Reset zoom undoes it, the
/// search highlights the matching frames and sums their bytes; and nothing logs an error.
#[test]
fn sites_sort_and_the_flamegraph_zooms_and_searches() {
    let Some(chromium) = find_chromium() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but no chromium found (install Debian's `chromium` package or set CHROMIUM)"
        );
        note_skip(
            "tools/malloc-debug/tests/html_chromium.rs: no chromium: the interactive report was \
             not checked in a browser",
        );
        return;
    };
    let dir = tmp_dir("chromium-interactive");
    let html = dir.join("report.html");
    ok(cli()
        .arg("report")
        .arg(dump10())
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap());
    let (_browser, url) = launch(&chromium, &dir.join("profile"));
    let mut cdp = Cdp::connect(&url);
    let target = cdp.call("Target.createTarget", json!({ "url": "about:blank" }));
    let attached = cdp.call(
        "Target.attachToTarget",
        json!({ "targetId": target["targetId"], "flatten": true }),
    );
    cdp.session = Some(attached["sessionId"].as_str().unwrap().to_string());
    cdp.call("Runtime.enable", json!({}));
    cdp.call("Log.enable", json!({}));
    cdp.call(
        "Page.navigate",
        json!({ "url": format!("file://{}", html.display()) }),
    );
    wait_for(
        &mut cdp,
        "document.readyState === 'complete' && typeof fg === 'object' && fg !== null",
        json!(true),
    );

    // The sites table: by bytes first; a click on "allocations" sorts by count, on "bytes" back.
    let first_site = "document.querySelector('#sites tr.site td:nth-child(3)').textContent";
    assert_eq!(cdp.eval(first_site), json!("big_buffers (leaky.c:14)"));
    let (x, y) = center(&mut cdp, "#sites th:nth-child(2)");
    cdp.click(x, y);
    wait_for(&mut cdp, first_site, json!("small_nodes (leaky.c:21)"));
    let (x, y) = center(&mut cdp, "#sites th:nth-child(1)");
    cdp.click(x, y);
    wait_for(&mut cdp, first_site, json!("big_buffers (leaky.c:14)"));

    // Zoom: load_config's frame (a third of the picture) fills the width; load_assets, beside
    // it, is hidden; Reset zoom brings the picture back.
    let frame = |label: &str| format!("document.querySelector('g.f[data-l^=\"{label}\"]')");
    let width = |label: &str| {
        format!(
            "+{}.querySelector('rect').getAttribute('width')",
            frame(label)
        )
    };
    let shown = |label: &str| format!("{}.style.display !== 'none'", frame(label));
    let before = cdp.eval(&width("load_config")).as_f64().unwrap();
    assert!(before > 300.0 && before < 500.0, "{before}");
    let (x, y) = center(&mut cdp, "g.f[data-l^='load_config'] rect");
    cdp.click(x, y);
    wait_for(
        &mut cdp,
        &format!("{} === 1180", width("load_config")),
        json!(true),
    );
    assert_eq!(cdp.eval(&shown("load_assets")), json!(false));
    // Its callers stay, stretched; the other calls from main go.
    assert_eq!(cdp.eval(&shown("main (leaky.c:30)")), json!(true));
    assert_eq!(cdp.eval(&shown("_start")), json!(true));
    assert_eq!(cdp.eval(&shown("main (leaky.c:29)")), json!(false));
    let (x, y) = center(&mut cdp, "#fg-reset");
    cdp.click(x, y);
    wait_for(&mut cdp, &shown("load_assets"), json!(true));
    assert_eq!(cdp.eval(&width("load_config")).as_f64(), Some(before));

    // Search, typed: both big_buffers frames are highlighted, their bytes summed.
    let (x, y) = center(&mut cdp, "#fg-search");
    cdp.click(x, y);
    cdp.call("Input.insertText", json!({ "text": "big_buffers" }));
    wait_for(
        &mut cdp,
        "document.getElementById('fg-status').textContent",
        json!("2 frames match: 12288 bytes (96.69%)"),
    );
    assert_eq!(
        cdp.eval("[...document.querySelectorAll('g.f.match')].map(g => g.dataset.l)"),
        json!(["big_buffers (leaky.c:14)", "big_buffers (leaky.c:14)"])
    );

    // No exception, no console error, no error log entry.
    let errors: Vec<&Value> = cdp
        .events
        .iter()
        .filter(|e| {
            e["method"] == json!("Runtime.exceptionThrown")
                || (e["method"] == json!("Runtime.consoleAPICalled")
                    && e["params"]["type"] == json!("error"))
                || (e["method"] == json!("Log.entryAdded")
                    && e["params"]["entry"]["level"] == json!("error"))
        })
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

/// Standard base64 (CDP's encoding of binary data) to bytes.
fn base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).expect("base64 digit") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
