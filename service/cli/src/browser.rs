//! The one-shot page of a passkey ceremony (spec/webauthn.md §4): a listener on 127.0.0.1 at a
//! port the operating system picks serves one page, which runs `navigator.credentials.create` or
//! `.get` and posts the result back as JSON. Any local process can connect, so nothing posted is
//! trusted: each post goes to a handler that verifies it (spec/webauthn.md §5, §7). Requests are
//! bounded in size and time, and the whole ceremony has a deadline.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ctx_model::Json;

/// Longest request head (request line and headers), in bytes.
pub const PAGE_REQUEST_HEAD_MAX_BYTES: usize = 8 * 1024;
/// Longest request body, in bytes: a WebAuthn response is a few kilobytes.
pub const PAGE_REQUEST_BODY_MAX_BYTES: usize = 64 * 1024;
/// How long the person has to finish the ceremony.
pub const PAGE_CEREMONY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one connection may take to send its request.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an idle listener looks for a connection.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Why a ceremony did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrowserError {
    #[error("the passkey page could not listen on 127.0.0.1: {0}")]
    Listen(std::io::Error),
    #[error("nobody finished the passkey page {url} within {seconds} s; nothing was signed")]
    TimedOut { url: String, seconds: u64 },
    #[error("the browser reported that the passkey ceremony failed: {0}")]
    BrowserFailed(String),
    #[error("the passkey page posted a response that is refused: {0}")]
    Refused(String),
}

/// Why a handler refused a post: a sentence for the page and for [`BrowserError::Refused`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal(pub(crate) String);

impl<E: std::fmt::Display> From<E> for Refusal {
    fn from(error: E) -> Refusal {
        Refusal(error.to_string())
    }
}

/// What a handler decided about one post: answer the page and go on waiting, or finish.
pub(crate) enum Step<T> {
    /// Answer with this JSON and wait for the next post (the next half of a ceremony).
    Continue(Json),
    /// Answer with this JSON and end the ceremony with the value.
    Done(Json, T),
}

/// The one-shot page server.
pub(crate) struct PageServer {
    listener: TcpListener,
    port: u16,
    page: String,
}

impl std::fmt::Debug for PageServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageServer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl PageServer {
    /// Listens on 127.0.0.1 at a fresh port for `page` (HTML).
    pub(crate) fn bind(page: String) -> Result<PageServer, BrowserError> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .map_err(BrowserError::Listen)?;
        let port = listener.local_addr().map_err(BrowserError::Listen)?.port();
        listener
            .set_nonblocking(true)
            .map_err(BrowserError::Listen)?;
        Ok(PageServer {
            listener,
            port,
            page,
        })
    }

    /// The origin the page is served at. It is named `localhost`, the relying party id of every
    /// ctx credential (spec/webauthn.md §4).
    pub(crate) fn origin(&self) -> String {
        format!("http://localhost:{}", self.port)
    }

    /// The URL the person opens.
    pub(crate) fn url(&self) -> String {
        format!("{}/", self.origin())
    }

    /// Serves the page and hands every JSON post to `handle` until it finishes the ceremony or
    /// the deadline passes. A post `{"error": …}` is the browser reporting a failed ceremony and
    /// ends it; a post the handler refuses ends it too (spec/webauthn.md §4: fail closed).
    pub(crate) fn serve<T>(
        &self,
        timeout: Duration,
        mut handle: impl FnMut(&str, &Json) -> Result<Step<T>, Refusal>,
    ) -> Result<T, BrowserError> {
        let deadline = Instant::now() + timeout;
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(BrowserError::TimedOut {
                            url: self.url(),
                            seconds: timeout.as_secs(),
                        });
                    }
                    std::thread::sleep(POLL_INTERVAL);
                    continue;
                }
                Err(e) => return Err(BrowserError::Listen(e)),
            };
            // One bad connection (a slow or malformed client) is dropped, not the ceremony.
            let Ok(mut connection) = Connection::open(stream) else {
                continue;
            };
            let Ok(request) = connection.read_request() else {
                let _ = connection.respond(400, "text/plain", b"bad request");
                continue;
            };
            match (request.method.as_str(), request.path.as_str()) {
                ("GET", "/") => {
                    let _ =
                        connection.respond(200, "text/html; charset=utf-8", self.page.as_bytes());
                }
                ("POST", path) => {
                    let body = std::str::from_utf8(&request.body)
                        .ok()
                        .and_then(|text| Json::parse(text).ok())
                        .filter(|value| value.as_obj().is_some());
                    let Some(body) = body else {
                        let _ = connection.respond_json(400, &error_json("not a JSON object"));
                        continue;
                    };
                    if let Some(reported) = body.get_str("error") {
                        let _ = connection.respond_json(200, &error_json("ceremony ended"));
                        return Err(BrowserError::BrowserFailed(reported.to_owned()));
                    }
                    match handle(path, &body) {
                        Ok(Step::Continue(answer)) => {
                            let _ = connection.respond_json(200, &answer);
                        }
                        Ok(Step::Done(answer, value)) => {
                            let _ = connection.respond_json(200, &answer);
                            return Ok(value);
                        }
                        Err(Refusal(reason)) => {
                            let _ = connection.respond_json(400, &error_json(&reason));
                            return Err(BrowserError::Refused(reason));
                        }
                    }
                }
                _ => {
                    let _ = connection.respond(404, "text/plain", b"not found");
                }
            }
        }
    }
}

fn error_json(message: &str) -> Json {
    Json::object([("error", Json::str(message))])
}

/// The bytes of a base64url field of a posted response.
pub(crate) fn b64_field(body: &Json, key: &str) -> Result<Vec<u8>, Refusal> {
    let text = body
        .get_str(key)
        .ok_or_else(|| Refusal(format!("the response has no {key}")))?;
    URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|_| Refusal(format!("its {key} is not base64url")))
}

/// base64url without padding, as WebAuthn writes challenges.
pub(crate) fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Text for an HTML page, with the five special characters escaped.
pub(crate) fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

struct Connection {
    stream: TcpStream,
}

#[derive(Debug)]
struct BadRequest;

impl Connection {
    fn open(stream: TcpStream) -> Result<Connection, std::io::Error> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(CONNECTION_TIMEOUT))?;
        stream.set_write_timeout(Some(CONNECTION_TIMEOUT))?;
        Ok(Connection { stream })
    }

    /// One HTTP/1.1 request, bounded: the head to [`PAGE_REQUEST_HEAD_MAX_BYTES`], the body to
    /// [`PAGE_REQUEST_BODY_MAX_BYTES`] (by Content-Length; no chunked bodies).
    fn read_request(&mut self) -> Result<Request, BadRequest> {
        let mut head = Vec::new();
        let mut buffer = [0u8; 4096];
        let end = loop {
            if let Some(at) = find(&head, b"\r\n\r\n") {
                break at;
            }
            if head.len() > PAGE_REQUEST_HEAD_MAX_BYTES {
                return Err(BadRequest);
            }
            let n = self.stream.read(&mut buffer).map_err(|_| BadRequest)?;
            if n == 0 {
                return Err(BadRequest);
            }
            head.extend_from_slice(&buffer[..n]);
        };
        if end > PAGE_REQUEST_HEAD_MAX_BYTES {
            return Err(BadRequest);
        }
        let mut body = head.split_off(end + 4);
        let text = std::str::from_utf8(&head[..end]).map_err(|_| BadRequest)?;
        let mut lines = text.split("\r\n");
        let mut request_line = lines.next().ok_or(BadRequest)?.split(' ');
        let method = request_line.next().ok_or(BadRequest)?.to_owned();
        let path = request_line.next().ok_or(BadRequest)?.to_owned();
        let mut length = 0usize;
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                return Err(BadRequest);
            };
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().map_err(|_| BadRequest)?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(BadRequest);
            }
        }
        if length > PAGE_REQUEST_BODY_MAX_BYTES || body.len() > length {
            return Err(BadRequest);
        }
        while body.len() < length {
            let n = self.stream.read(&mut buffer).map_err(|_| BadRequest)?;
            if n == 0 || body.len() + n > length {
                return Err(BadRequest);
            }
            body.extend_from_slice(&buffer[..n]);
        }
        Ok(Request { method, path, body })
    }

    fn respond(&mut self, status: u16, content_type: &str, body: &[u8]) -> std::io::Result<()> {
        let reason = match status {
            200 => "OK",
            400 => "Bad Request",
            _ => "Not Found",
        };
        // no-store: the page holds a one-time challenge; no-referrer and a strict CSP keep it
        // from loading or leaking anything elsewhere.
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\nReferrer-Policy: no-referrer\r\nContent-Security-Policy: \
             default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'\r\nConnection: close\r\n\r\n",
            body.len()
        );
        self.stream.write_all(head.as_bytes())?;
        self.stream.write_all(body)?;
        self.stream.flush()
    }

    fn respond_json(&mut self, status: u16, value: &Json) -> std::io::Result<()> {
        self.respond(status, "application/json", value.to_string().as_bytes())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The page: `summary` lines shown as they are, then one button that runs `script` (which
/// receives the options in `options` as a JSON object named `OPTIONS`).
pub(crate) fn page(
    title: &str,
    summary: &[String],
    button: &str,
    options: &Json,
    script: &str,
) -> String {
    let lines: String = summary
        .iter()
        .map(|line| format!("{}\n", html_escape(line)))
        .collect();
    // The options are JSON; `<` is escaped so no value can close the script element.
    let options = options.to_string().replace('<', "\\u003c");
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n\
         <style>body{{font-family:sans-serif;margin:2em;max-width:60em}}pre{{background:#f4f4f4;\
         padding:1em;font-size:15px}}button{{font-size:18px;padding:.5em 1.5em}}\
         #status{{margin-top:1em;font-weight:bold}}</style></head><body>\n\
         <h1>{title}</h1>\n<pre id=\"summary\">{lines}</pre>\n\
         <button id=\"go\" type=\"button\">{button}</button>\n<div id=\"status\"></div>\n\
         <script>\nconst OPTIONS = {options};\n{COMMON_SCRIPT}\n{script}\n</script>\n</body></html>\n",
        title = html_escape(title),
        button = html_escape(button),
    )
}

/// Helpers every page's script uses: base64url both ways and a JSON post.
const COMMON_SCRIPT: &str = r#"
function b64u(buffer) {
  const bytes = new Uint8Array(buffer);
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
function unb64u(text) {
  const plain = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(plain, c => c.charCodeAt(0));
}
function show(text) { document.getElementById("status").textContent = text; }
async function post(path, body) {
  const response = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || ("HTTP " + response.status));
  return answer;
}
async function fail(error) {
  show("refused: " + error);
  try { await post("/error", {error: String(error)}); } catch (_) {}
}
async function signAndPost(challenge, credentialId, path) {
  const credential = await navigator.credentials.get({publicKey: {
    challenge: unb64u(challenge),
    rpId: OPTIONS.rpId,
    allowCredentials: [{type: "public-key", id: unb64u(credentialId)}],
    userVerification: "required",
    timeout: 120000,
  }});
  const r = credential.response;
  return await post(path, {
    credentialId: b64u(credential.rawId),
    authenticatorData: b64u(r.authenticatorData),
    clientDataJSON: b64u(r.clientDataJSON),
    signature: b64u(r.signature),
  });
}
"#;

/// The script of a decision page: one `get` over the decision's challenge.
pub(crate) const DECIDE_SCRIPT: &str = r#"
document.getElementById("go").addEventListener("click", async () => {
  document.getElementById("go").disabled = true;
  show("waiting for your passkey…");
  try {
    const answer = await signAndPost(OPTIONS.challenge, OPTIONS.credentialId, "/decide");
    show(answer.message);
  } catch (e) { await fail(e); }
});
"#;

/// The script of a registration page: `create`, then a `get` over the registration's digest
/// that proves possession of the new credential.
pub(crate) const REGISTER_SCRIPT: &str = r#"
document.getElementById("go").addEventListener("click", async () => {
  document.getElementById("go").disabled = true;
  show("waiting for your passkey…");
  try {
    const created = await navigator.credentials.create({publicKey: {
      challenge: unb64u(OPTIONS.challenge),
      rp: {id: OPTIONS.rpId, name: "ctx"},
      user: {id: unb64u(OPTIONS.userId), name: OPTIONS.userName, displayName: OPTIONS.userName},
      pubKeyCredParams: [{type: "public-key", alg: -7}],
      authenticatorSelection: {residentKey: "preferred", userVerification: "required"},
      attestation: "none",
      timeout: 120000,
    }});
    const step = await post("/register", {
      attestationObject: b64u(created.response.attestationObject),
      clientDataJSON: b64u(created.response.clientDataJSON),
    });
    show("registered; now sign the registration with it…");
    const answer = await signAndPost(step.challenge, step.credentialId, "/possess");
    show(answer.message);
  } catch (e) { await fail(e); }
});
"#;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.
    use super::*;

    fn send(port: u16, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(request).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }

    #[test]
    fn serves_the_page_refuses_junk_and_hands_json_posts_to_the_handler() {
        let server = PageServer::bind("<p>the page</p>".to_owned()).unwrap();
        let port = server.port;
        let client = std::thread::spawn(move || {
            let page = send(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            let missing = send(port, b"GET /other HTTP/1.1\r\n\r\n");
            let junk = send(port, b"\x00\x01garbage\r\n\r\n");
            let huge = send(
                port,
                format!(
                    "POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
                    PAGE_REQUEST_BODY_MAX_BYTES + 1
                )
                .as_bytes(),
            );
            let not_json = send(port, b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
            let body = b"{\"n\":1}";
            let next = send(
                port,
                format!(
                    "POST /next HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}",
                    body.len(),
                    std::str::from_utf8(body).unwrap()
                )
                .as_bytes(),
            );
            let done = send(
                port,
                b"POST /done HTTP/1.1\r\nContent-Length: 7\r\n\r\n{\"n\":2}",
            );
            (page, missing, junk, huge, not_json, next, done)
        });
        let mut seen = Vec::new();
        let value = server
            .serve(Duration::from_secs(30), |path, body| {
                seen.push(path.to_owned());
                if path == "/done" {
                    Ok(Step::Done(
                        Json::object([("ok", Json::Bool(true))]),
                        body.clone(),
                    ))
                } else {
                    Ok(Step::Continue(Json::object([("next", Json::Bool(true))])))
                }
            })
            .unwrap();
        let (page, missing, junk, huge, not_json, next, done) = client.join().unwrap();
        assert!(
            page.starts_with("HTTP/1.1 200") && page.ends_with("<p>the page</p>"),
            "{page}"
        );
        assert!(page.contains("Cache-Control: no-store"), "{page}");
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        assert!(junk.starts_with("HTTP/1.1 400"), "{junk}");
        assert!(huge.starts_with("HTTP/1.1 400"), "{huge}");
        assert!(not_json.starts_with("HTTP/1.1 400"), "{not_json}");
        assert!(next.contains("{\"next\":true}"), "{next}");
        assert!(done.contains("{\"ok\":true}"), "{done}");
        assert_eq!(seen, ["/next", "/done"]);
        assert_eq!(value.get("n").and_then(Json::as_i64), Some(2));
    }

    #[test]
    fn a_refused_post_or_a_browser_error_ends_the_ceremony_and_a_deadline_holds() {
        let server = PageServer::bind(String::new()).unwrap();
        let port = server.port;
        let client = std::thread::spawn(move || {
            send(
                port,
                b"POST /decide HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
            )
        });
        let refused = server.serve::<()>(Duration::from_secs(30), |_, _| {
            Err(Refusal("forged".to_owned()))
        });
        assert!(matches!(refused, Err(BrowserError::Refused(ref r)) if r == "forged"));
        assert!(client.join().unwrap().starts_with("HTTP/1.1 400"));

        let client = std::thread::spawn(move || {
            let body = "{\"error\":\"NotAllowedErr\"}";
            send(
                port,
                format!(
                    "POST /error HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
        });
        let failed = server.serve::<()>(Duration::from_secs(30), |_, _| {
            Err(Refusal("unused".to_owned()))
        });
        assert!(
            matches!(failed, Err(BrowserError::BrowserFailed(ref r)) if r == "NotAllowedErr"),
            "{failed:?}"
        );
        let _ = client.join();

        let late = server.serve::<()>(Duration::from_millis(100), |_, _| {
            Err(Refusal(String::new()))
        });
        assert!(matches!(late, Err(BrowserError::TimedOut { .. })));
    }

    #[test]
    fn the_page_escapes_the_summary_and_the_options() {
        let html = page(
            "t",
            &["<script>alert(1)</script> & more".to_owned()],
            "go",
            &Json::object([("x", Json::str("</script>"))]),
            "",
        );
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; more"));
        assert!(!html.contains("\"</script>\""));
    }
}
