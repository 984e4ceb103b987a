//! A small W3C WebDriver client for the browser tests: HTTP/1.1 over a std `TcpStream` to a
//! chromedriver this test starts, JSON through `ctx_model::Json`. Only the commands the tests
//! use: a session, navigation, finding and clicking an element, its text, a screenshot and the
//! WebAuthn virtual authenticator extension.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ctx_model::Json;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C key of an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A running chromedriver with one headless Chromium session; both end when dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = request(
            self.port,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// One WebDriver call: the method, path and JSON body; the answer's `value`.
fn request(port: u16, method: &str, path: &str, body: Option<&Json>) -> Result<Json, String> {
    let body = body.map(Json::to_string).unwrap_or_default();
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| e.to_string())?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .map_err(|e| format!("write: {e}"))?;
    // chromedriver keeps the connection open after its answer: read the head, then exactly
    // Content-Length bytes.
    let mut raw = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut buffer).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!(
                "{method} {path}: the connection closed before an answer"
            ));
        }
        raw.extend_from_slice(&buffer[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        })
        .ok_or_else(|| format!("{method} {path}: no Content-Length in {head:?}"))?;
    let mut body = raw[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buffer).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buffer[..n]);
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    let status = head.split(' ').nth(1).unwrap_or("?");
    let value = Json::parse(&body).map_err(|e| format!("{method} {path}: {e}: {body}"))?;
    let value = value.get("value").cloned().unwrap_or(Json::Null);
    if status != "200" {
        return Err(format!("{method} {path}: HTTP {status}: {value}"));
    }
    Ok(value)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile in `profile`.
    pub fn start(profile: &Path) -> Browser {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while request(port, "GET", "/status", None)
            .ok()
            .and_then(|v| v.get("ready").and_then(Json::as_bool))
            != Some(true)
        {
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        let args: Vec<Json> = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1100,800",
        ]
        .iter()
        .map(|a| Json::str(*a))
        .chain([Json::str(format!("--user-data-dir={}", profile.display()))])
        .collect();
        let capabilities = Json::object([(
            "capabilities",
            Json::object([(
                "alwaysMatch",
                Json::object([
                    ("browserName", Json::str("chrome")),
                    ("webauthn:virtualAuthenticators", Json::Bool(true)),
                    (
                        "goog:chromeOptions",
                        Json::object([("binary", Json::str(CHROMIUM)), ("args", Json::Arr(args))]),
                    ),
                ]),
            )]),
        )]);
        let session =
            request(port, "POST", "/session", Some(&capabilities)).expect("a browser session");
        browser.session = session
            .get_str("sessionId")
            .expect("a session id")
            .to_owned();
        browser
    }

    fn call(&self, method: &str, path: &str, body: Option<&Json>) -> Result<Json, String> {
        request(
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
    }

    /// Adds a CTAP2 platform (internal) virtual authenticator with resident keys and user
    /// verification; returns its id.
    pub fn add_authenticator(&self, user_verified: bool) -> String {
        let options = Json::object([
            ("protocol", Json::str("ctap2")),
            ("transport", Json::str("internal")),
            ("hasResidentKey", Json::Bool(true)),
            ("hasUserVerification", Json::Bool(true)),
            ("isUserConsenting", Json::Bool(true)),
            ("isUserVerified", Json::Bool(user_verified)),
        ]);
        let id = self
            .call("POST", "/webauthn/authenticator", Some(&options))
            .expect("a virtual authenticator");
        id.as_str().expect("an authenticator id").to_owned()
    }

    /// Whether the authenticator's user verification succeeds from now on.
    pub fn set_user_verified(&self, authenticator: &str, verified: bool) {
        self.call(
            "POST",
            &format!("/webauthn/authenticator/{authenticator}/uv"),
            Some(&Json::object([("isUserVerified", Json::Bool(verified))])),
        )
        .expect("set user verification");
    }

    pub fn open(&self, url: &str) {
        self.call(
            "POST",
            "/url",
            Some(&Json::object([("url", Json::str(url))])),
        )
        .expect("navigate");
    }

    fn element(&self, css: &str) -> String {
        let found = self
            .call(
                "POST",
                "/element",
                Some(&Json::object([
                    ("using", Json::str("css selector")),
                    ("value", Json::str(css)),
                ])),
            )
            .expect("the element");
        match found.get_str(ELEMENT_KEY) {
            Some(reference) => reference.to_owned(),
            None => panic!("{css}: no element reference in {found}"),
        }
    }

    pub fn click(&self, css: &str) {
        let element = self.element(css);
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(&Json::object::<&str>([])),
        )
        .expect("click");
    }

    pub fn text(&self, css: &str) -> String {
        let element = self.element(css);
        self.call("GET", &format!("/element/{element}/text"), None)
            .expect("the element's text")
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits up to `seconds` for the text of `css` to contain `expect`; returns the text.
    pub fn wait_text(&self, css: &str, expect: &str, seconds: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let text = self.text(css);
            if text.contains(expect) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{css} never showed {expect:?}; it shows {text:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `script` in the page as an asynchronous script (its last argument is the callback)
    /// and returns what it passed to the callback.
    pub fn execute_async(&self, script: &str) -> Json {
        self.call(
            "POST",
            "/execute/async",
            Some(&Json::object([
                ("script", Json::str(script)),
                ("args", Json::Arr(Vec::new())),
            ])),
        )
        .expect("the script's result")
    }

    /// A PNG screenshot of the page.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let text = self.call("GET", "/screenshot", None).expect("a screenshot");
        base64::engine::general_purpose::STANDARD
            .decode(text.as_str().expect("base64 text"))
            .expect("a base64 PNG")
    }
}
