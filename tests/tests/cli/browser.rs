//! Passkeys end to end (spec/webauthn.md): `ctx key init --passkey` and `ctx consent approve
//! DIGEST --browser` driven in a headless Chromium whose WebAuthn authenticator is WebDriver's
//! virtual one. Skipped (with a line saying so) where Chromium or chromedriver is missing,
//! unless `CTX_REQUIRE_BROWSER=1`, as in CI.

use std::path::Path;

use ctx_model::Json;

use super::person::{installed, pending_challenge, registry};
use super::webdriver::{Browser, CHROMEDRIVER, CHROMIUM};
use crate::support::{self, CtxRun, CtxTty, run_ctx, run_ctx_env};

/// True when the browser tests can run; false (after saying why) when they are skipped.
fn browser_available() -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).is_file())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CTX_REQUIRE_BROWSER").as_deref() != Ok("1"),
        "CTX_REQUIRE_BROWSER=1 but {} is missing",
        missing.join(" and ")
    );
    println!("skipped: {} is missing", missing.join(" and "));
    false
}

/// Runs `ctx args…`, opens the page whose URL it prints in `browser`, lets `on_page` look at it,
/// clicks its button and waits for ctx to exit.
fn ceremony(
    browser: &Browser,
    data: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    on_page: impl FnOnce(&Browser),
) -> CtxRun {
    let ctx = CtxTty::spawn(data, args, env);
    let url = ctx.wait_for("open http://localhost:");
    let url = format!(
        "http://localhost:{}",
        url.split_whitespace().next().expect("a URL")
    );
    browser.open(&url);
    on_page(browser);
    browser.click("#go");
    ctx.finish(180)
}

fn challenge_state(data: &Path, digest: &str) -> Json {
    let run = run_ctx(
        data,
        &["consent", "challenge"],
        &Json::object([("challenge_digest", Json::str(digest))]).to_string(),
    );
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    Json::parse(run.stdout.trim_end())
        .expect("JSON")
        .get("result")
        .cloned()
        .expect("a result")
}

#[test]
fn a_passkey_registers_approves_in_the_browser_and_installs_once_and_without_uv_is_refused() {
    if !browser_available() {
        return;
    }
    let dir = support::tempdir();
    let browser = Browser::start(&dir.path().join("chromium-profile"));
    let authenticator = browser.add_authenticator(true);

    // Registration: the page creates the credential and signs the registration with it; the
    // first presence verifier is trusted on first use from this terminal.
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    let digest = pending_challenge(&data);
    let registered = ceremony(&browser, &data, &["key", "init", "--passkey"], &env, |_| {});
    assert_eq!(registered.code, 0, "{}", registered.stdout);
    assert!(
        registered.stdout.contains("trusted on first use"),
        "{}",
        registered.stdout
    );
    assert!(
        registered
            .stdout
            .contains("registered passkey ctx-passkey-"),
        "{}",
        registered.stdout
    );
    let trust = registry(&data);
    let active: Vec<_> = trust.active().collect();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].entry.kind, ctx_service::VerifierKind::Passkey);
    assert_eq!(active[0].basis, ctx_service::TrustBasis::FirstUseTerminal);

    // The decision: the page shows what `ctx consent approve` prints, the passkey signs it.
    let mut page_text = String::new();
    let approved = ceremony(
        &browser,
        &data,
        &["consent", "approve", &digest, "--browser"],
        &env,
        |browser| {
            page_text = browser.text("#summary");
            let png = browser.screenshot();
            assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
            let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
            std::fs::create_dir_all(&target).expect("the target directory");
            std::fs::write(target.join("consent-page.png"), png).expect("write the screenshot");
        },
    );
    assert_eq!(approved.code, 0, "{}", approved.stdout);
    for expected in [
        "install:               skill:terraform (skill)",
        "skills/terraform/SKILL.md",
        "expands permissions:   no",
        "state:                 pending",
        "your decision: APPROVE this install (granted)",
    ] {
        assert!(page_text.contains(expected), "{expected}: {page_text}");
    }
    assert!(
        approved
            .stdout
            .contains("installed-inactive (physical-install-applied)"),
        "{}",
        approved.stdout
    );
    assert!(approved.stdout.contains("(passkey)"), "{}", approved.stdout);
    browser.wait_text("#status", "done: installed-inactive", 30);
    assert_eq!(installed(&data), 1);
    assert_eq!(
        challenge_state(&data, &digest).get_str("decision"),
        Some("granted")
    );

    // Settled: a second approval signs nothing and installs nothing twice.
    let again =
        CtxTty::spawn(&data, &["consent", "approve", &digest, "--browser"], &env).finish(60);
    assert_eq!(again.code, 1, "{}", again.stdout);
    assert!(
        again.stdout.contains("nothing was signed"),
        "{}",
        again.stdout
    );
    assert_eq!(installed(&data), 1, "nothing installed twice");

    // Without user verification the same flow is refused and nothing is installed.
    let other = dir.path().join("ctx-2");
    let other_home = dir.path().join("home-2");
    let other_env = [("HOME", other_home.as_path())];
    let other_digest = pending_challenge(&other);
    let registered = ceremony(
        &browser,
        &other,
        &["key", "init", "--passkey"],
        &other_env,
        |_| {},
    );
    assert_eq!(registered.code, 0, "{}", registered.stdout);
    browser.set_user_verified(&authenticator, false);
    let refused = ceremony(
        &browser,
        &other,
        &["consent", "approve", &other_digest, "--browser"],
        &other_env,
        |_| {},
    );
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    // The browser itself refuses a ceremony that requires user verification it cannot get.
    assert!(
        refused
            .stdout
            .contains("the browser reported that the passkey ceremony failed"),
        "{}",
        refused.stdout
    );
    assert!(
        !refused.stdout.contains("installed-inactive"),
        "{}",
        refused.stdout
    );
    assert_eq!(installed(&other), 0);
    assert_eq!(
        challenge_state(&other, &other_digest).get_str("state"),
        Some("pending")
    );

    // Any local process can post to the page: a post with an assertion made without user
    // verification (what a script on the page, or another program, could obtain) is checked
    // and refused by ctx, not trusted (spec/webauthn.md §5.8).
    let ctx = CtxTty::spawn(
        &other,
        &["consent", "approve", &other_digest, "--browser"],
        &other_env,
    );
    let url = ctx.wait_for("open http://localhost:");
    browser.open(&format!(
        "http://localhost:{}",
        url.split_whitespace().next().expect("a URL")
    ));
    let posted = browser.execute_async(FORGED_POST);
    let refused = ctx.finish(60);
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        refused
            .stdout
            .contains("the authenticator did not verify the person"),
        "{}",
        refused.stdout
    );
    assert!(
        posted.as_str().is_some_and(|p| p.contains("UV is off")),
        "{posted}"
    );
    assert_eq!(installed(&other), 0);
    assert_eq!(
        challenge_state(&other, &other_digest).get_str("state"),
        Some("pending")
    );

    // The person runs the command again, verified this time, and denies: the denial is signed
    // and recorded, and nothing is installed.
    browser.set_user_verified(&authenticator, true);
    let mut page_text = String::new();
    let denied = ceremony(
        &browser,
        &other,
        &["consent", "deny", &other_digest, "--browser"],
        &other_env,
        |browser| page_text = browser.text("#summary"),
    );
    assert_eq!(denied.code, 0, "{}", denied.stdout);
    assert!(
        page_text.contains("your decision: DENY this install (denied)"),
        "{page_text}"
    );
    assert!(denied.stdout.contains("(passkey)"), "{}", denied.stdout);
    assert_eq!(
        challenge_state(&other, &other_digest).get_str("decision"),
        Some("denied")
    );
    assert_eq!(installed(&other), 0);
}

/// Runs the page's own `get` with user verification discouraged and posts the result to
/// `/decide`; hands back the server's answer.
const FORGED_POST: &str = r#"
const done = arguments[arguments.length - 1];
(async () => {
  const credential = await navigator.credentials.get({publicKey: {
    challenge: unb64u(OPTIONS.challenge),
    rpId: OPTIONS.rpId,
    allowCredentials: [{type: "public-key", id: unb64u(OPTIONS.credentialId)}],
    userVerification: "discouraged",
  }});
  const r = credential.response;
  const response = await fetch("/decide", {method: "POST", body: JSON.stringify({
    credentialId: b64u(credential.rawId),
    authenticatorData: b64u(r.authenticatorData),
    clientDataJSON: b64u(r.clientDataJSON),
    signature: b64u(r.signature),
  })});
  done(await response.text());
})().catch(e => done("script failed: " + e));
"#;

#[test]
fn a_passkey_registers_only_from_a_terminal_and_browser_needs_a_registered_passkey() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let env = [("HOME", home.as_path())];
    // Without a terminal (a hook, an agent's tool call) no page is served and nothing is
    // registered: a first passkey is trusted only from the person's terminal.
    let headless = run_ctx_env(&data, &["key", "init", "--passkey"], "", &env);
    assert_eq!(headless.code, 1, "{} {}", headless.stdout, headless.stderr);
    assert!(
        headless.stderr.contains("no controlling terminal"),
        "{}",
        headless.stderr
    );
    assert!(
        !headless.stdout.contains("http://localhost:"),
        "{}",
        headless.stdout
    );
    let digest = pending_challenge(&data);
    assert_eq!(registry(&data).revision(), 0);
    let none = run_ctx(&data, &["consent", "approve", &digest, "--browser"], "");
    assert_eq!(none.code, 2, "{} {}", none.stdout, none.stderr);
    assert!(
        none.stderr
            .contains("has no passkey; register one with `ctx key init --passkey`"),
        "{}",
        none.stderr
    );
    assert!(
        !none.stdout.contains("http://localhost:"),
        "{}",
        none.stdout
    );
    assert_eq!(installed(&data), 0);
    let both = run_ctx(
        &data,
        &["consent", "approve", &digest, "--browser", "--yes"],
        "",
    );
    assert_eq!(both.code, 2, "{}", both.stderr);
}
