//! `ctx demo`: the whole flow on the sample catalog, step by step, through the same JSON commands
//! a host's processes call (spec/cli.md §3): ingest the catalog, prepare a query for a sample
//! piece of work, show the plan and why, choose a skill, show the consent challenge, sign a grant
//! with a local device key standing in for the person, resolve it (the skill is installed exactly
//! once), and audit the journal. A second run reuses the data directory and says so.

use std::io::Write;

use ctx_journal::Timestamp;
use ctx_model::{CapabilityKind, Json, UtcMicros};

use crate::commands::{HostCommand, field, run_step, strings};
use crate::data_dir::DataDir;
use crate::error::CliError;
use ctx_service::Layout;

/// The demo's sample work: a session, a workspace and a prompt.
pub const DEMO_SESSION: &str = "ctx-demo-session";
pub const DEMO_WORKSPACE: &str = "/ctx-demo/workspace";
pub const DEMO_PROMPT: &str =
    "write terraform for the new infrastructure and test the webapp end to end";
/// The device key file the demo creates inside the data directory.
pub const DEMO_KEY_FILE: &str = "demo-human.key";

/// What one demo run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSummary {
    /// True when this run found an existing journal in the data directory.
    pub reused: bool,
    pub query_ref: String,
    /// The capability chosen for installation.
    pub capability_id: String,
    /// True when this run installed it; false when an earlier run had.
    pub installed_now: bool,
    /// Records the final audit verified.
    pub audited_records: u64,
}

fn flag(value: &Json, key: &str) -> &'static str {
    match value.get(key) {
        Some(Json::Bool(true)) => "yes",
        _ => "no",
    }
}

/// Runs the demo in `dir` at the trusted time `now`, printing each step to `out`.
pub fn run_demo(
    dir: &DataDir,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<DemoSummary, CliError> {
    let layout = Layout::new(&dir.path);
    let now = UtcMicros(now.0);
    let reused = match ctx_service::journal_source(&layout.journal()) {
        ctx_service::JournalSource::Embedded => layout
            .journal()
            .join(ctx_journal::files::DATABASE_FILE)
            .exists(),
        _ => {
            ctx_service::open_journal(&layout.journal(), &ctx_journal::OpenOptions::new())?
                .head_position()?
                > 0
        }
    };
    writeln!(out, "ctx demo: plan, consent and install, step by step\n")?;
    writeln!(
        out,
        "data directory: {} ({}); {}",
        dir.path.display(),
        dir.source,
        if reused {
            "reused the existing journal: this run repeats the same requests, which the \
             journal answers idempotently"
        } else {
            "a new journal"
        }
    )?;

    writeln!(out, "\n1. ingest the sample catalog")?;
    let catalog = run_step(
        "catalog ingest",
        &layout,
        now,
        HostCommand::CatalogIngest { catalog_dir: None },
        Json::object::<&str>([]),
    )?;
    writeln!(
        out,
        "   {} capabilities in namespace {} ({})",
        catalog.get("capabilities").map_or(0, |c| match c {
            Json::Int(n) => *n,
            _ => 0,
        }),
        field(&catalog, "namespace"),
        if catalog.get("changed") == Some(&Json::Bool(true)) {
            "ingested"
        } else {
            "already ingested, unchanged"
        }
    )?;

    writeln!(
        out,
        "\n2. persist the install policy: ask the person each time"
    )?;
    let policy = run_step(
        "policy show",
        &layout,
        now,
        HostCommand::PolicyShow,
        Json::object::<&str>([]),
    )?;
    run_step(
        "policy set",
        &layout,
        now,
        HostCommand::PolicySet { key: None },
        policy.clone(),
    )?;
    writeln!(
        out,
        "   skills: {}, agents: {}, MCP servers: {}",
        field(&policy, "skill_mode"),
        field(&policy, "agent_mode"),
        field(&policy, "mcp_server_mode")
    )?;

    writeln!(out, "\n3. plan for a piece of work")?;
    writeln!(out, "   prompt: {DEMO_PROMPT:?}")?;
    let query = run_step(
        "query prepare",
        &layout,
        now,
        HostCommand::QueryPrepare,
        Json::object([
            ("label", Json::str("ctx-demo-query")),
            ("prompt", Json::str(DEMO_PROMPT)),
            ("session_id", Json::str(DEMO_SESSION)),
            ("workspace", Json::str(DEMO_WORKSPACE)),
        ]),
    )?;
    let query_ref = field(&query, "query_ref").to_owned();
    writeln!(
        out,
        "   query {query_ref}: {} (journal revision {})",
        field(&query, "status"),
        query.get("journal_revision").map_or(0, |r| match r {
            Json::Int(n) => *n,
            _ => 0,
        })
    )?;
    let selections = match query.get("selections") {
        Some(Json::Arr(items)) => items.clone(),
        _ => Vec::new(),
    };
    writeln!(
        out,
        "   the planned bundle ({} of at most 5):",
        selections.len()
    )?;
    for s in &selections {
        writeln!(
            out,
            "   - {:<28} {:<8} net benefit {:>7} u  why: {} (signals: {})",
            field(s, "capability_id"),
            field(s, "actionability"),
            s.get("marginal_net_benefit_u").map_or(0, |v| match v {
                Json::Int(n) => *n,
                _ => 0,
            }),
            strings(s, "reason_codes").join(", "),
            strings(s, "matching_signals").join(", ")
        )?;
    }
    // The skill store installs skills whose install neither expands permissions nor needs
    // credentials; the demo chooses the first such skill of the plan.
    let chosen = selections.iter().find(|s| {
        field(s, "kind") == CapabilityKind::Skill.as_str()
            && field(s, "actionability") == "install"
            && s.get("install").is_some_and(|i| {
                i.get("permission_expansion") == Some(&Json::Bool(false))
                    && i.get("credential_requirement") == Some(&Json::Bool(false))
            })
    });
    let Some(chosen) = chosen else {
        return Err(CliError::Step {
            step: "query prepare",
            message: "the plan holds no installable skill; the sample catalog has changed".into(),
            exit: crate::error::EXIT_INTERNAL,
        });
    };
    let capability_id = field(chosen, "capability_id").to_owned();

    writeln!(out, "\n4. choose {capability_id} (the desired set)")?;
    let desired = run_step(
        "desired set",
        &layout,
        now,
        HostCommand::DesiredSet,
        Json::object([
            ("capability_ids", Json::Arr(vec![Json::str(&capability_id)])),
            ("choice_label", Json::str("ctx-demo-choice")),
            ("query_ref", Json::str(&query_ref)),
        ]),
    )?;
    writeln!(
        out,
        "   desired set {}: {}",
        field(&desired, "desired_set_ref"),
        field(&desired, "status")
    )?;
    let challenge = desired.get("challenge").filter(|c| **c != Json::Null);
    let Some(challenge) = challenge else {
        writeln!(
            out,
            "   no consent is pending: an earlier run installed {capability_id} (the journal \
             holds its one claim, outcome and settlement); nothing is installed twice"
        )?;
        let audited = audit_step(&layout, out)?;
        return Ok(DemoSummary {
            reused,
            query_ref,
            capability_id,
            installed_now: false,
            audited_records: audited,
        });
    };
    let challenge_digest = field(challenge, "challenge_digest").to_owned();

    writeln!(
        out,
        "\n5. the consent challenge the person is asked to sign"
    )?;
    let record = run_step(
        "consent challenge",
        &layout,
        now,
        HostCommand::ConsentChallenge,
        Json::object([("challenge_digest", Json::str(&challenge_digest))]),
    )?;
    let install = record.get("install").cloned().unwrap_or(Json::Null);
    writeln!(out, "   challenge {challenge_digest}")?;
    writeln!(
        out,
        "   install {} ({}) into the skill store; expands permissions: {}; needs credentials: {}",
        field(&record, "capability_id"),
        field(&install, "result_path"),
        flag(&install, "permission_expansion"),
        flag(&install, "credential_requirement")
    )?;
    writeln!(
        out,
        "   state {}; expires at {}",
        field(&record, "state"),
        field(challenge, "expires_at")
    )?;

    writeln!(out, "\n6. the person's device key")?;
    let key_path = layout.root().join(DEMO_KEY_FILE);
    if key_path.exists() {
        writeln!(out, "   reusing {} from an earlier run", key_path.display())?;
    } else {
        let key = run_step(
            "key generate",
            &layout,
            now,
            HostCommand::KeyGenerate {
                out: key_path.clone(),
            },
            Json::object::<&str>([]),
        )?;
        register_demo_key(&layout, &key_path, now)?;
        writeln!(
            out,
            "   generated a plain Ed25519 file key in {} (mode 0600) and registered it as \
             device {} (file assurance)",
            key_path.display(),
            field(&key, "authenticator_id")
        )?;
    }
    writeln!(
        out,
        "   NOTE: a plain file key stands in for the person, which is enough only for a plain \
         skill asked for through the JSON interface. In real use the person runs `ctx key init` \
         once (a key sealed under their passphrase) and approves in their own terminal; a file \
         key never approves what a host's hook asks for."
    )?;

    writeln!(out, "\n7. sign a grant and resolve the consent")?;
    let signed = run_step(
        "key sign",
        &layout,
        now,
        HostCommand::KeySign {
            key: key_path.clone(),
        },
        Json::object([
            ("challenge_digest", Json::str(&challenge_digest)),
            ("decision", Json::str("granted")),
        ]),
    )?;
    let resolved = run_step(
        "consent resolve",
        &layout,
        now,
        HostCommand::ConsentResolve,
        Json::object([("assertion", Json::str(field(&signed, "assertion")))]),
    )?;
    let outcome = field(&resolved, "outcome").to_owned();
    writeln!(
        out,
        "   {}: {} ({})",
        field(&resolved, "capability_id"),
        outcome,
        field(&resolved, "reason_code")
    )?;
    let installed_now = outcome == "installed-inactive";
    if installed_now {
        writeln!(
            out,
            "   installed exactly once into {} (content-addressed by its SHA-256 {})",
            layout.skills().display(),
            field(&install, "result_sha256")
        )?;
    }
    let audited = audit_step(&layout, out)?;
    Ok(DemoSummary {
        reused,
        query_ref,
        capability_id,
        installed_now,
        audited_records: audited,
    })
}

/// Registers the demo's file key in the verifier registry on the file-key first-use basis.
fn register_demo_key(
    layout: &Layout,
    key: &std::path::Path,
    now: UtcMicros,
) -> Result<(), CliError> {
    let failure = |e: ctx_service::RuntimeError| CliError::Step {
        step: "key register",
        message: e.to_string(),
        exit: crate::error::EXIT_OUTCOME,
    };
    let file = ctx_service::read_device_key(key).map_err(failure)?;
    let signer = file.open(None).map_err(failure)?;
    let journal = ctx_service::open_journal(&layout.journal(), &ctx_journal::OpenOptions::new())?;
    let state = ctx_service::read_trust(&journal).map_err(|e| failure(e.into()))?;
    if state.find(&file.entry().authenticator_id).is_some() {
        return Ok(());
    }
    crate::person::register_file_key(
        &journal,
        &state,
        &signer,
        &file.entry(),
        ctx_journal::Timestamp(now.0),
    )
    .map_err(failure)
}

/// The last step: `ctx audit`, as an operator would run it (every record, redb's integrity check,
/// every engine stream replayed, every projection folded afresh). Every handle of this run is
/// closed by now, which the storage check needs.
fn audit_step(layout: &Layout, out: &mut dyn Write) -> Result<u64, CliError> {
    writeln!(out, "\n8. audit the journal (ctx audit)")?;
    let code = crate::audit::audit(layout, false, out, &mut std::io::sink(), false)?;
    if code != crate::error::EXIT_OK {
        return Err(CliError::Step {
            step: "audit",
            message: "the audit found a failure (see the report above)".into(),
            exit: code,
        });
    }
    let journal = ctx_service::open_journal(&layout.journal(), &ctx_journal::OpenOptions::new())?;
    Ok(journal.head_position()?)
}
