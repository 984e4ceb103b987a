//! The engine's activations carried out through a host's actuator, and crashes between their
//! steps: after the engine's claim, after the actuator's intent, after the host files changed,
//! and after the engine's outcome. Every crash is followed by a later call that must finish the
//! activation exactly once, with the host entry as the catalog has it.

use std::path::Path;

use ctx_hosts::HostActivationDriver;
use ctx_hosts::activation::{
    ActivationLedger as _, JournalLedger, Operation, OutcomeResult, failpoints as actuator,
};
use ctx_hosts::{AgentHost, HostHome};
use ctx_journal::{Journal, OpenOptions, Timestamp};
use ctx_model::UtcMicros;
use ctx_service::{
    ActivationReport, DesiredSetRequest, InstallConsentPolicy, Layout, QueryRequest, Runtime,
    ServiceError, WorkRequest, activation_failpoints as service, logical_id,
};

use crate::support::{self, FailPoints, run_ctx};

const NOW: i64 = 1_800_000_000_000_000;

/// A data directory with the sample catalog and a committed choice of the catalog-loaded skills
/// `go` and `go-testing`; returns the runtime and the query ref.
fn chosen(data: &Path) -> (Runtime, String) {
    let ingest = run_ctx(data, &["catalog", "ingest"], "");
    assert_eq!(ingest.code, 0, "{ingest:?}");
    let layout = Layout::new(data);
    let runtime = Runtime::open(&layout, UtcMicros(NOW)).unwrap();
    runtime
        .policy_store()
        .persist(&InstallConsentPolicy::safe_default())
        .unwrap();
    let work = WorkRequest {
        session_id: "claude:s-1".into(),
        workspace: "/work/p".into(),
        prompt: "write go tests".into(),
        signals: vec![],
        languages: vec![],
        requested_limit: 5,
    };
    let work_ref = runtime.observe_work(&work).unwrap();
    let query = QueryRequest::new(&logical_id("query", &work_ref), &work_ref).unwrap();
    let prepared = runtime.service().prepare(&query).unwrap();
    let request = DesiredSetRequest::new(
        prepared.query_ref(),
        &logical_id("choice", "c"),
        &["skill:go", "skill:go-testing"],
        None,
    )
    .unwrap();
    runtime.service().set_desired(&request).unwrap();
    (runtime, prepared.query_ref().to_owned())
}

fn driver<'a>(runtime: &'a Runtime, data: &Path, home: &Path) -> HostActivationDriver<'a> {
    let layout = Layout::new(data);
    let journal = Journal::open(layout.journal(), &OpenOptions::new()).unwrap();
    HostActivationDriver::new(
        AgentHost::Claude,
        HostHome::new(home),
        Some(Path::new("/work/p")),
        &layout.activation_store(),
        journal,
        runtime.catalog(),
        &runtime.catalog_dir(),
        Timestamp(NOW),
    )
}

/// Both skills are links into the store, holding the catalog's bytes.
fn assert_active(home: &Path) {
    for name in ["go", "go-testing"] {
        let link = home.join(".claude/skills").join(name);
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{}",
            link.display()
        );
        assert_eq!(
            std::fs::read(link.join("SKILL.md")).unwrap(),
            support::catalog_skill(name)
        );
    }
}

fn activated(report: &ActivationReport) -> Vec<String> {
    let mut ids = report.activated.clone();
    ids.sort();
    ids
}

#[test]
fn a_crash_at_every_step_of_an_activation_finishes_exactly_once_later() {
    let _fp = FailPoints::setup();
    // (fail point, whether the failing call reports an error rather than an unsettled action)
    let points = [
        (service::AFTER_CLAIM, true),
        (actuator::AFTER_INTENT, false),
        (actuator::AFTER_APPLY, false),
        (service::AFTER_OUTCOME, true),
    ];
    for (point, errs) in points {
        let dir = support::tempdir();
        let data = dir.path().join("ctx");
        let home = dir.path().join("home");
        let (runtime, query_ref) = chosen(&data);
        let d = driver(&runtime, &data, &home);
        fail::cfg(point, "return").unwrap();
        let crashed = runtime.service().advance_activations(&query_ref, &d);
        fail::remove(point);
        match crashed {
            Err(ServiceError::FailPoint { name, .. }) => {
                assert!(errs, "{point}: an error");
                assert_eq!(name, point);
            }
            Ok(report) => {
                assert!(!errs, "{point}: {report:?}");
                assert!(report.activated.is_empty(), "{point}: {report:?}");
                assert_eq!(report.indeterminate.len(), 2, "{point}: {report:?}");
            }
            Err(e) => panic!("{point}: {e}"),
        }
        // The process ends; a later one (here: a fresh runtime and driver) finishes the job.
        drop(d);
        drop(runtime);
        let runtime = Runtime::open(&Layout::new(&data), UtcMicros(NOW + 1_000_000)).unwrap();
        let d = driver(&runtime, &data, &home);
        let report = runtime
            .service()
            .advance_activations(&query_ref, &d)
            .unwrap();
        // A failing call that stopped with an error left its first action claimed (and, after
        // the outcome, observed); an unsettled one left both claimed. Both finish now.
        assert_eq!(
            activated(&report),
            ["skill:go", "skill:go-testing"],
            "{point}: {report:?}"
        );
        assert_active(&home);
        // Settled: nothing is left to do, and the actuator's ledger agrees with the host.
        let again = runtime
            .service()
            .advance_activations(&query_ref, &d)
            .unwrap();
        assert!(
            again.activated.is_empty() && again.indeterminate.is_empty(),
            "{again:?}"
        );
        let inspected = d.actuator().inspect().unwrap();
        assert_eq!(inspected.len(), 2, "{point}: {inspected:?}");
        assert!(
            inspected
                .iter()
                .all(|i| i.status == ctx_hosts::activation::TargetStatus::Active),
            "{point}: {inspected:?}"
        );
        // Exactly one applied activation per target: the host files changed once.
        let ledger = JournalLedger::new(
            Journal::open(Layout::new(&data).journal(), &OpenOptions::new()).unwrap(),
        );
        for i in &inspected {
            let applied = ledger
                .read(&i.target)
                .unwrap()
                .iter()
                .filter(|r| {
                    r.operation == Operation::Activate
                        && r.outcome
                            .as_ref()
                            .is_some_and(|o| o.result == OutcomeResult::Applied)
                })
                .count();
            assert_eq!(applied, 1, "{point}: {}", i.name);
        }
        drop(ledger);
        drop(d);
        drop(runtime);
        let audit = run_ctx(&data, &["audit"], "");
        assert_eq!(audit.code, 0, "{point}: {audit:?}");
    }
}
