//! Asked once (spec/cli.md §6, §7.3; spec/decisions.md §16): a person using ctx through real
//! hook processes over three sessions and two workspaces is asked for each capability once per
//! scope, never for what is installed, granted or denied in scope, and a revocation takes effect
//! at the next hook. Every decision stays a signed journal record that `ctx audit` re-checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ctx_model::UtcMicros;

use super::hook::{Machine, context, hook_env, hook_input, reply, with_prompt};
use super::person::{PASSPHRASE, person_key_init};
use crate::support::{self, CtxRun, Typed, run_ctx, run_ctx_tty};

/// The prompts of the script and the capability each keeps touching.
const TERRAFORM: &str = "write terraform for the new infrastructure";
const REVIEW: &str = "ask the code reviewer to review this pull request for security issues";
const PLAYWRIGHT: &str = "add Playwright e2e tests for the checkout page";
const POSTGRES: &str = "query the postgres database schema";
const KUBERNETES: &str = "write a kubernetes helm chart";
const RUST: &str = "write rust unit tests";

/// `ctx consent approve|deny DIGEST --yes [--scope S]` at the person's terminal.
fn decide(data: &Path, home: &Path, verb: &str, digest: &str, scope: &str) -> CtxRun {
    let run = run_ctx_tty(
        data,
        &["consent", verb, digest, "--yes", "--scope", scope],
        &[Typed {
            expect: "passphrase for",
            typed: PASSPHRASE,
        }],
        &[("HOME", home)],
    );
    assert_eq!(run.code, 0, "{verb} {digest} --scope {scope}: {run:?}");
    run
}

/// One host session of the script: its prompts, what it was asked, what its model was told.
struct Session<'a> {
    data: &'a Path,
    home: &'a Path,
    project: &'a Path,
    id: &'static str,
    /// Every prompt's (capability asked of the person, its challenge digest).
    asked: Vec<(String, String)>,
    /// Every prompt's context, in order.
    told: Vec<String>,
}

impl Session<'_> {
    /// Sends one prompt; returns the challenges it asked the person for: (capability, digest).
    fn prompt(&mut self, text: &str) -> Vec<(String, String)> {
        let input = with_prompt(
            hook_input("claude", "UserPromptSubmit", self.id, self.project),
            text,
        );
        let answer = reply(&hook_env(
            self.data,
            self.home,
            "claude",
            "user-prompt-submit",
            &input,
        ))
        .expect("a reply");
        let told = context(&answer, "UserPromptSubmit");
        self.told.push(told);
        let asked = answer
            .get_str("systemMessage")
            .map(asked_in)
            .unwrap_or_default();
        self.asked.extend(asked.iter().cloned());
        asked
    }

    /// Sends one prompt and returns the challenge it asked for `capability_id`.
    fn asks(&mut self, text: &str, capability_id: &str) -> String {
        let asked = self.prompt(text);
        asked
            .iter()
            .find(|(id, _)| id == capability_id)
            .map(|(_, d)| d.clone())
            .unwrap_or_else(|| panic!("{capability_id} not asked: {asked:?} {}", self.last_told()))
    }

    /// Sends one prompt and checks it asked nothing for `capability_id`.
    fn asks_nothing_for(&mut self, text: &str, capability_id: &str) {
        let asked = self.prompt(text);
        assert!(
            asked.iter().all(|(id, _)| id != capability_id),
            "{capability_id} asked again in {}: {asked:?}",
            self.id
        );
    }

    fn last_told(&self) -> &str {
        self.told.last().map_or("", String::as_str)
    }

    fn end(&self) {
        let input = hook_input("claude", "SessionEnd", self.id, self.project);
        let run = hook_env(self.data, self.home, "claude", "session-end", &input);
        assert_eq!(run.code, 0, "{run:?}");
    }
}

/// The (capability, digest) pairs a hook's message to the person asks for: one ("ctx: ID awaits
/// … `ctx consent approve DIGEST`") or several ("`ctx consent approve DIGEST` (ID)").
fn asked_in(message: &str) -> Vec<(String, String)> {
    let digests: Vec<&str> = message
        .split("ctx consent approve ")
        .skip(1)
        .filter_map(|rest| rest.get(..64))
        .collect();
    if let [digest] = digests.as_slice() {
        let id = message
            .strip_prefix("ctx: ")
            .and_then(|rest| rest.split(' ').next())
            .expect("the capability");
        return vec![(id.to_owned(), (*digest).to_owned())];
    }
    message
        .split("ctx consent approve ")
        .skip(1)
        .filter_map(|rest| {
            let digest = rest.get(..64)?;
            let id = rest.get(64..)?.strip_prefix("` (")?.split(')').next()?;
            Some((id.to_owned(), digest.to_owned()))
        })
        .collect()
}

/// The challenges a person was asked, per (capability, host session), read from the journal:
/// every published challenge minus those ctx resolved for the person from an earlier decision
/// (their evidence names a basis).
fn person_challenges(data: &Path) -> BTreeMap<(String, String), usize> {
    let delegated: BTreeSet<String> = support::exported_payloads(data, "ctx.decision-evidence.v1")
        .iter()
        .filter(|e| e.get_str("basis").is_some())
        .filter_map(|e| e.get_str("challenge_digest").map(str::to_owned))
        .collect();
    let records =
        ctx_service::challenges(&ctx_service::Layout::new(data), UtcMicros(support_now()))
            .expect("the challenges");
    let mut asked: BTreeMap<(String, String), usize> = BTreeMap::new();
    for record in records {
        let challenge = record.challenge();
        if delegated.contains(challenge.challenge_digest()) {
            continue;
        }
        let session = ctx_service::host_session_of(&challenge.scope().session_id).to_owned();
        *asked
            .entry((challenge.capability_id().to_owned(), session))
            .or_default() += 1;
    }
    asked
}

fn support_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    i64::try_from(since.as_micros()).expect("a time in range")
}

fn mcp_config(project: &Path) -> String {
    std::fs::read_to_string(project.join(".mcp.json")).unwrap_or_default()
}

#[test]
fn forty_prompts_over_three_sessions_ask_each_capability_once_per_scope() {
    let machine = Machine::new("infra");
    let (data, home, w1) = machine.paths();
    let w2 = machine.dir.path().join("shop");
    std::fs::create_dir_all(&w2).unwrap();
    let env = [("HOME", home.as_path())];
    assert_eq!(person_key_init(&data, &env).code, 0);
    let skill = |name: &str| home.join(format!(".claude/skills/{name}/SKILL.md"));
    let mut prompts = 0;

    // Session A, workspace 1: each of the four installs is asked once and decided at a scope.
    let mut a = Session {
        data: &data,
        home: &home,
        project: &w1,
        id: "s-a",
        asked: Vec::new(),
        told: Vec::new(),
    };
    let terraform = a.asks(TERRAFORM, "skill:terraform");
    a.prompt(KUBERNETES);
    // A catalog skill is active from the first prompt that plans it.
    assert!(skill("kubernetes").is_file(), "{}", a.last_told());
    a.prompt(RUST);
    assert!(skill("rust-testing").is_file(), "{}", a.last_told());
    decide(&data, &home, "approve", &terraform, "once");
    let reviewer = a.asks(REVIEW, "agent:code-reviewer");
    decide(&data, &home, "deny", &reviewer, "workspace");
    let playwright = a.asks(PLAYWRIGHT, "mcp-server:playwright");
    let approved = decide(&data, &home, "approve", &playwright, "always");
    let standing_playwright = approved
        .stdout
        .split("standing decision ")
        .nth(1)
        .and_then(|rest| rest.get(..19))
        .expect("the standing decision's id")
        .to_owned();
    let reader = a.asks(POSTGRES, "mcp-server:dbhub");
    decide(&data, &home, "deny", &reader, "once");
    for text in [TERRAFORM, REVIEW, PLAYWRIGHT, POSTGRES, KUBERNETES, RUST].repeat(2) {
        a.prompt(text);
    }
    prompts += a.told.len();
    assert!(skill("terraform").is_file());
    assert!(mcp_config(&w1).contains("playwright"), "{:#?}", a.told);
    a.end();

    // Session B, workspace 1: the installed skill and the standing grant ask nothing; the
    // workspace denial offers nothing; the once-denial is asked again and denied always; the
    // standing grant, revoked, is taken away at the next hook and asked for again.
    let mut b = Session {
        data: &data,
        home: &home,
        project: &w1,
        id: "s-b",
        asked: Vec::new(),
        told: Vec::new(),
    };
    b.asks_nothing_for(TERRAFORM, "skill:terraform");
    assert!(skill("terraform").is_file(), "{}", b.last_told());
    b.asks_nothing_for(REVIEW, "agent:code-reviewer");
    assert!(b.last_told().contains("agent:code-reviewer") && b.last_told().contains("declined"));
    b.asks_nothing_for(PLAYWRIGHT, "mcp-server:playwright");
    assert!(mcp_config(&w1).contains("playwright"), "{}", b.last_told());
    // A once-denial was for its challenge: another session asks again.
    let reader_b = b.asks(POSTGRES, "mcp-server:dbhub");
    decide(&data, &home, "deny", &reader_b, "always");
    let revoked = run_ctx_tty(
        &data,
        &["consent", "revoke", &standing_playwright],
        &[Typed {
            expect: "passphrase for",
            typed: PASSPHRASE,
        }],
        &env,
    );
    assert_eq!(revoked.code, 0, "{revoked:?}");
    b.prompt(KUBERNETES);
    assert!(
        !mcp_config(&w1).contains("playwright"),
        "revoked, so taken away at the next hook: {}",
        mcp_config(&w1)
    );
    let playwright_b = b.asks(PLAYWRIGHT, "mcp-server:playwright");
    decide(&data, &home, "approve", &playwright_b, "once");
    for text in [TERRAFORM, REVIEW, PLAYWRIGHT, POSTGRES, RUST, KUBERNETES] {
        b.prompt(text);
    }
    assert!(mcp_config(&w1).contains("playwright"), "{}", b.last_told());
    prompts += b.told.len();
    b.end();

    // Session C, workspace 2: the reviewer is asked here (the denial was for workspace 1) and
    // granted for the session; the reader was denied always; the rest is installed.
    let mut c = Session {
        data: &data,
        home: &home,
        project: &w2,
        id: "s-c",
        asked: Vec::new(),
        told: Vec::new(),
    };
    let reviewer_c = c.asks(REVIEW, "agent:code-reviewer");
    decide(&data, &home, "approve", &reviewer_c, "session");
    c.asks_nothing_for(POSTGRES, "mcp-server:dbhub");
    assert!(c.last_told().contains("mcp-server:dbhub") && c.last_told().contains("declined"));
    for text in [TERRAFORM, PLAYWRIGHT, KUBERNETES, RUST, REVIEW, POSTGRES].repeat(2) {
        c.prompt(text);
    }
    assert!(mcp_config(&w2).contains("playwright"), "{}", c.last_told());
    assert!(home.join(".claude/agents/ctx/code-reviewer.md").is_file());
    prompts += c.told.len();
    assert!(prompts >= 40, "{prompts} prompts");

    // What the person was asked, per capability and session, counted in the journal.
    let asked = person_challenges(&data);
    let sessions = |capability: &str| -> BTreeSet<String> {
        asked
            .iter()
            .filter(|((id, _), _)| id == capability)
            .map(|((_, s), _)| s.clone())
            .collect()
    };
    let set =
        |items: &[&str]| -> BTreeSet<String> { items.iter().map(|s| (*s).to_owned()).collect() };
    assert_eq!(
        sessions("skill:terraform"),
        set(&["claude:s-a"]),
        "{asked:?}"
    );
    assert_eq!(
        sessions("agent:code-reviewer"),
        set(&["claude:s-a", "claude:s-c"]),
        "{asked:?}"
    );
    assert_eq!(
        sessions("mcp-server:playwright"),
        set(&["claude:s-a", "claude:s-b"]),
        "{asked:?}"
    );
    assert_eq!(
        sessions("mcp-server:dbhub"),
        set(&["claude:s-a", "claude:s-b"]),
        "{asked:?}"
    );
    for capability in ["skill:kubernetes", "skill:rust-testing"] {
        assert!(sessions(capability).is_empty(), "{capability}: {asked:?}");
    }
    // Every capability, these six and the others the plans chained to: once per session.
    for ((capability, session), count) in &asked {
        assert_eq!(*count, 1, "{capability} in {session}: {asked:?}");
    }
    // The hooks' own messages agree: no capability was asked twice in a session.
    for session in [&a, &b, &c] {
        let mut seen = BTreeSet::new();
        for (id, _) in &session.asked {
            assert!(
                seen.insert(id.clone()),
                "{id} asked twice in {}",
                session.id
            );
        }
    }

    // The standing decisions, as the person lists them, and the audit of every decision.
    let list = run_ctx(&data, &["consent", "list"], "");
    assert_eq!(list.code, 0, "{list:?}");
    let standing: Vec<&str> = list
        .stdout
        .lines()
        .filter(|l| l.starts_with("sd-"))
        .collect();
    assert_eq!(standing.len(), 4, "{}", list.stdout);
    assert!(
        standing
            .iter()
            .any(|l| l.contains("revoked") && l.contains("grant mcp-server:playwright always")),
        "{}",
        list.stdout
    );
    for expected in [
        "in force  deny agent:code-reviewer for workspace",
        "in force  deny mcp-server:dbhub always",
        "in force  grant agent:code-reviewer for session claude:s-c",
    ] {
        assert!(
            standing.iter().any(|l| l.contains(expected)),
            "{expected}: {}",
            list.stdout
        );
    }
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
    c.end();
}
