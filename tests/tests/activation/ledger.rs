//! The activation ledger on the journal: its record layout, its survival across reopening, and
//! its coexistence with the engine's records (audit, projection checks and rebuilds).

use std::fs;
use std::sync::Arc;

use ctx_hosts::AgentHost;
use ctx_hosts::activation::{ACTIVATION_INDEX_KEY, ActivationOutcome, LedgerRecord, TargetStatus};
use ctx_journal::StreamId;
use ctx_model::testkit::Session;
use ctx_model::{CapabilityKind, Json};
use ctx_projections::engine::{Engine, EngineOptions, ManualClock};
// The ledger names its streams with ctx_projections::streams (one table); the tests keep
// their short names.
use ctx_projections::streams::{
    HOST_ACTIVATION_INDEX_NAMESPACE as ACTIVATION_INDEX_NAMESPACE,
    HOST_ACTIVATION_NAMESPACE as ACTIVATION_NAMESPACE,
    HOST_ACTIVATION_RECORD_KIND as ACTIVATION_RECORD_KIND,
    HOST_ACTIVATION_TARGET_KIND as ACTIVATION_TARGET_KIND,
};
use ctx_projections::testkit::lifecycle::{OpaqueNormalizer, run_lifecycle};
use ctx_projections::{Projections, domain_projections};

use super::fixture::{Fixture, catalog};
use crate::support::{self, run_ctx};

#[test]
fn the_ledger_survives_reopening_the_journal() {
    let _shared = support::shared();
    let f = Fixture::new();
    let skill = catalog("skills/rust/SKILL.md");
    let sentry = catalog("mcp-servers/sentry.json");
    f.activate(AgentHost::Claude, CapabilityKind::Skill, "rust", &skill)
        .unwrap();
    f.activate(
        AgentHost::Codex,
        CapabilityKind::McpServer,
        "sentry",
        &sentry,
    )
    .unwrap();
    let head = f.head();

    let f = f.reopen();
    assert_eq!(f.head(), head);
    let inspected = f.actuator.inspect().unwrap();
    assert_eq!(inspected.len(), 2);
    assert!(inspected.iter().all(|t| t.status == TargetStatus::Active));
    assert_eq!(
        f.activate(AgentHost::Claude, CapabilityKind::Skill, "rust", &skill)
            .unwrap()
            .outcome,
        ActivationOutcome::AlreadyActive
    );
    f.deactivate(AgentHost::Codex, CapabilityKind::McpServer, "sentry")
        .unwrap();
    f.deactivate(AgentHost::Claude, CapabilityKind::Skill, "rust")
        .unwrap();
    assert!(f.actuator.inspect().unwrap().is_empty());
}

#[test]
fn ledger_records_are_canonical_json_in_one_stream_per_target() {
    let _shared = support::shared();
    let f = Fixture::new();
    let body = catalog("agents/debugger.md");
    let report = f
        .activate(AgentHost::Claude, CapabilityKind::Agent, "debugger", &body)
        .unwrap();
    f.deactivate(AgentHost::Claude, CapabilityKind::Agent, "debugger")
        .unwrap();

    let path = fs::canonicalize(f.home().join(".claude/agents"))
        .unwrap()
        .join("ctx/debugger.md");
    let path = path.to_str().unwrap();
    assert_eq!(report.target.path, path);
    let key = [b"claude".as_slice(), b"\0agent\0", path.as_bytes()].concat();
    let stream = StreamId::derive(ACTIVATION_NAMESPACE, &key).unwrap();
    let records = f.journal.read_stream(&stream, 1, 100).unwrap();
    assert_eq!(records.len(), 4, "intent, outcome, intent, outcome");
    let state = ctx_model::sha256_hex_bytes(&body);
    let digest = format!("\"{state}\"");
    let null = "null".to_owned();
    let expected = [
        ("intent", "activate", null.clone(), digest.clone(), None),
        ("outcome", "activate", null.clone(), digest.clone(), Some(1)),
        ("intent", "deactivate", digest.clone(), null.clone(), None),
        (
            "outcome",
            "deactivate",
            digest.clone(),
            null.clone(),
            Some(3),
        ),
    ];
    for (record, (phase, operation, prior, new, intent_revision)) in records.iter().zip(expected) {
        assert_eq!(record.kind, ACTIVATION_RECORD_KIND);
        assert_eq!(
            record.event_id,
            format!("ctx-activation:{}:{}", stream.to_hex(), record.revision)
        );
        let text = std::str::from_utf8(&record.payload).unwrap();
        let mut want = format!(
            "{{\"capability_id\":\"agent:debugger\",\"entry\":null,\"host\":\"claude\",{}\"kind\":\
             \"agent\",\"name\":\"debugger\",\"new_state\":{new},{}\"operation\":\"{operation}\",\
             \"path\":{},\"phase\":\"{phase}\",\"prior_state\":{prior}",
            intent_revision.map_or(String::new(), |r| format!("\"intent_revision\":{r},")),
            intent_revision.map_or(String::new(), |_| format!("\"observed_state\":{new},")),
            Json::str(path).to_cj(),
        );
        if intent_revision.is_some() {
            want.push_str(",\"resolved_by\":\"apply\",\"result\":\"applied\"");
        }
        want.push('}');
        assert_eq!(text, want);
        let decoded = LedgerRecord::decode(&record.payload).unwrap();
        assert_eq!(decoded.encode(), record.payload);
    }
    // The index lists the target once.
    let index = StreamId::derive(ACTIVATION_INDEX_NAMESPACE, ACTIVATION_INDEX_KEY).unwrap();
    let listed = f.journal.read_stream(&index, 1, 100).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].kind, ACTIVATION_TARGET_KIND);
    assert_eq!(
        std::str::from_utf8(&listed[0].payload).unwrap(),
        format!(
            "{{\"entry\":null,\"host\":\"claude\",\"kind\":\"agent\",\"path\":{}}}",
            Json::str(path).to_cj()
        )
    );
}

#[test]
fn ledger_records_do_not_disturb_audit_or_projection_rebuilds() {
    let _shared = support::shared();
    let f = Fixture::new();
    let journal = Arc::new(f.journal.clone());
    let mut first = Session::new("activation-audit-a");
    let clock = Arc::new(ManualClock::new(first.now));
    let options = EngineOptions::new(clock.clone())
        .normalizer(Arc::new(OpaqueNormalizer), "ctx-normalizer-structured-v1");
    let engine = Engine::open(journal.clone(), options).unwrap();
    let projections = Projections::attach(&journal, domain_projections()).unwrap();
    run_lifecycle(&engine, &clock, &mut first);

    // Activation records between engine records: every live projection hook sees them.
    f.activate(
        AgentHost::Claude,
        CapabilityKind::Skill,
        "rust",
        &catalog("skills/rust/SKILL.md"),
    )
    .unwrap();
    f.activate(
        AgentHost::Codex,
        CapabilityKind::McpServer,
        "sentry",
        &catalog("mcp-servers/sentry.json"),
    )
    .unwrap();
    f.deactivate(AgentHost::Claude, CapabilityKind::Skill, "rust")
        .unwrap();
    let mut second = Session::new("activation-audit-b");
    run_lifecycle(&engine, &clock, &mut second);

    for (name, _) in projections.attached() {
        let check = projections.check(name).unwrap();
        assert!(check.is_equal(), "{name}: {check:?}");
        projections.rebuild(name).unwrap();
        assert!(
            projections.check(name).unwrap().is_equal(),
            "{name} after rebuild"
        );
    }
    drop(projections);
    drop(engine);
    drop(journal);
    let data = f.data();
    let Fixture {
        dir,
        journal,
        actuator,
    } = f;
    drop(actuator);
    drop(journal);

    let run = run_ctx(&data, &["audit", "--json"], "");
    assert_eq!(run.code, 0, "{run:?}");
    let report = Json::parse(run.stdout.trim_end()).unwrap();
    assert_eq!(report.get("ok"), Some(&Json::Bool(true)), "{}", run.stdout);
    assert_eq!(report.get("engine_streams"), Some(&Json::Int(2)));
    drop(dir);
}
