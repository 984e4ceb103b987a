//! A prompt hook is one unit of work (spec/journal.md §14, spec/service.md §13): a hook that dies
//! after changing the host loses its unsynced records, but never the claim and the ledger intent
//! that came before the change (U2), so the next delivery finds the host change as its own and
//! finishes it instead of meeting a file nobody recorded.

use std::path::Path;

use ctx_hosts::activation::failpoints;
use ctx_hosts::{
    AgentHost, HookContext, HookInput, HostHome, SessionError, read_session, run_hook,
};
use ctx_journal::{Journal, OpenOptions, Timestamp};
use ctx_model::Json;
use ctx_service::Layout;

use crate::support::{self, FailPoints};

const NOW: i64 = 1_800_000_000_000_000;
const PROMPT: &str = "write rust unit tests";

fn hook(
    layout: &Layout,
    home: &Path,
    name: &str,
    input: &str,
) -> Result<Option<Json>, SessionError> {
    let host = AgentHost::Claude;
    let event = host.hook_event_named(name).unwrap();
    let input = HookInput::parse(host, event, input.as_bytes())?;
    let context = HookContext {
        host,
        layout,
        home: Ok(HostHome::new(home)),
        now: Timestamp(NOW),
    };
    Ok(run_hook(&context, event, &input)?.to_json())
}

fn prompt_input(ws: &Path) -> String {
    Json::object(vec![
        ("session_id", Json::str("unit-1")),
        ("cwd", Json::str(ws.to_str().unwrap())),
        ("prompt", Json::str(PROMPT)),
        ("hook_event_name", Json::str("UserPromptSubmit")),
    ])
    .to_cj()
}

/// Ledger records of the host activations (spec/activation.md §4.2): intents and outcomes.
fn ledger_records(layout: &Layout) -> usize {
    let journal = Journal::open(layout.journal(), &OpenOptions::new()).unwrap();
    journal
        .read_all(1, 100_000)
        .unwrap()
        .iter()
        .filter(|r| r.kind == "ctx.host-activation.v1")
        .count()
}

/// The session's records by event: (session starts, prompts).
fn session_records(layout: &Layout) -> (usize, usize) {
    let journal = Journal::open(layout.journal(), &OpenOptions::new()).unwrap();
    let records = read_session(&journal, AgentHost::Claude, "claude:unit-1").unwrap();
    let count = |event: &str| {
        records
            .iter()
            .filter(|r| r.get_str("event") == Some(event))
            .count()
    };
    (count("session-start"), count("prompt"))
}

#[test]
fn a_prompt_that_dies_after_changing_the_host_keeps_its_claim_and_the_next_delivery_finishes_it() {
    let _fp = FailPoints::setup();
    let dir = support::tempdir();
    let (data, home, ws) = (
        dir.path().join("ctx"),
        dir.path().join("home"),
        dir.path().join("ws"),
    );
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    let layout = Layout::new(&data);
    let start = Json::object(vec![
        ("session_id", Json::str("unit-1")),
        ("cwd", Json::str(ws.to_str().unwrap())),
        ("hook_event_name", Json::str("SessionStart")),
        ("source", Json::str("startup")),
    ])
    .to_cj();
    hook(&layout, &home, "session-start", &start).unwrap();

    // The hook dies (a panic unwinds through it, so the journal closes without its final sync,
    // as a killed process would) right after the skill's link was made on the host.
    fail::cfg(failpoints::AFTER_APPLY, "panic").unwrap();
    let died =
        std::panic::catch_unwind(|| hook(&layout, &home, "user-prompt-submit", &prompt_input(&ws)));
    fail::remove(failpoints::AFTER_APPLY);
    assert!(died.is_err(), "the hook died at the fail point");
    let link = home.join(".claude/skills/rust-testing");
    assert!(
        link.symlink_metadata().is_ok(),
        "the host change happened before the hook died"
    );
    assert_eq!(
        session_records(&layout),
        (1, 0),
        "the session start stands; the prompt's record was in the unit that never became durable"
    );
    assert_eq!(
        ledger_records(&layout),
        1,
        "the ledger intent was made durable before the link was made; its outcome was not"
    );

    // The host delivers the same prompt again: it finds the link as the recorded intent's and
    // reports the skill active, with the prompt recorded once.
    let reply = hook(&layout, &home, "user-prompt-submit", &prompt_input(&ws))
        .unwrap()
        .unwrap()
        .to_cj();
    assert!(
        reply.contains("skill:rust-testing") && reply.contains("is active"),
        "{reply}"
    );
    assert!(!reply.contains("not activated"), "{reply}");
    assert!(link.symlink_metadata().is_ok());
    assert_eq!(session_records(&layout), (1, 1));
    assert_eq!(
        ledger_records(&layout),
        2,
        "the next delivery recorded the intent's outcome (recovery), nothing more"
    );
}
