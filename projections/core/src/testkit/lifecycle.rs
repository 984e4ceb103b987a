//! A whole managed session driven through a real [`Engine`]: plan, desired set, consent, an
//! install claimed / observed / settled, activations claimed / observed / settled, exposure,
//! evidence, session end and deactivation. Used by benchmarks and end-to-end tests.

use std::collections::BTreeSet;

use ctx_model::testkit::{RowKind, Session, decision, digest, row};
use ctx_model::{
    ActionKind, EngineEvent, EventKind, HostAction, INSTALLER_DIGEST, INSTALLER_ID,
    InstallExecutionBinding, Json, OPAQUE_REF_SCHEMA, ObservationRef, Surrogate, UtcMicros,
};

use crate::engine::{Engine, InstallOutcome, ManualClock, ObservationNormalizer, SeamError};

/// Resolves any observation reference into the approved opaque-reference surrogate.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpaqueNormalizer;

impl ObservationNormalizer for OpaqueNormalizer {
    fn normalize(&self, reference: &ObservationRef) -> Result<Surrogate, SeamError> {
        Ok(Surrogate::new(
            OPAQUE_REF_SCHEMA,
            1,
            Json::object([
                ("content_digest", Json::str(&reference.content_digest)),
                ("provider_id", Json::str(&reference.provider_id)),
            ]),
        ))
    }
}

/// A planning event carrying an observation reference, as a host sends it.
pub fn observed_intent(s: &mut Session) -> EngineEvent {
    let mut intent = s.intent();
    intent.payload = Json::object([(
        "observation_ref",
        Json::object([
            ("content_digest", Json::str(digest("observation"))),
            ("opaque_id", Json::str("work-1")),
            ("provider_id", Json::str("host-1")),
        ]),
    )]);
    intent
}

/// The execution binding of the fixture installer and target.
pub fn binding() -> InstallExecutionBinding {
    InstallExecutionBinding::new(
        INSTALLER_ID,
        INSTALLER_DIGEST,
        &digest("host-identity"),
        &digest("target-identity"),
    )
    .expect("the fixture binding is valid")
}

/// The rows of the lifecycle's plan: three loadable skills and one install.
pub fn lifecycle_rows(tag: &str) -> Vec<Json> {
    vec![
        row(RowKind::Load, "skill", &format!("{tag}-a")),
        row(RowKind::Load, "skill", &format!("{tag}-b")),
        row(RowKind::Load, "agent", &format!("{tag}-c")),
        row(RowKind::Install, "skill", &format!("{tag}-d")),
    ]
}

struct Driver<'a> {
    engine: &'a Engine,
    clock: &'a ManualClock,
    s: &'a mut Session,
    records: u64,
}

impl Driver<'_> {
    fn commit(&mut self, event: &EngineEvent, decision: Option<Surrogate>) -> Vec<HostAction> {
        let t = self
            .engine
            .process(event, decision)
            .expect("the lifecycle event commits");
        self.s.revision = t.to_revision;
        self.records += 1;
        t.actions
    }

    fn receipt(&mut self, action: &HostAction) -> Vec<HostAction> {
        let e = self.s.applied(action);
        self.commit(&e, None)
    }

    fn activate(&mut self, action: &HostAction) -> Vec<HostAction> {
        let b = binding();
        let host = self.s.host_descriptor.clone();
        self.engine
            .authorize_activation(action, &b, &host)
            .expect("the activation claim succeeds");
        let observed = action
            .payload
            .get("material_identity")
            .and_then(|m| m.get_str("identity_digest"))
            .unwrap_or_default()
            .to_owned();
        let guard = self
            .engine
            .record_activation_outcome(action, &b, &observed, &digest("activation-seen"))
            .expect("the activation outcome records");
        let status = self
            .engine
            .activation_execution_status(action)
            .expect("the activation status reads");
        let observed_at = status.observed_at.as_deref().unwrap_or_default();
        // The activation receipt must carry the observation time of its outcome.
        self.s.now = UtcMicros::parse(observed_at).expect("a canonical observation time");
        let e = self.s.applied(action);
        let t = self
            .engine
            .process_activation_receipt(&e, &guard)
            .expect("the activation receipt settles");
        self.s.revision = t.to_revision;
        self.records += 3;
        t.actions
    }
}

/// Runs one full session through `engine`; returns the number of journal records it appended
/// (engine records, claims and outcomes).
pub fn run_lifecycle(engine: &Engine, clock: &ManualClock, s: &mut Session) -> u64 {
    clock.set(s.now);
    let mut d = Driver {
        engine,
        clock,
        s,
        records: 0,
    };
    let rows = lifecycle_rows(&d.s.scope.session_id.clone());
    let e = d.s.started("managing");
    d.commit(&e, None);
    let e = observed_intent(d.s);
    d.commit(&e, Some(decision(rows.clone())));
    let ids: Vec<String> = rows
        .iter()
        .filter_map(|r| r.get_str("capability_id").map(str::to_owned))
        .collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let e = d.s.desired("owner-1", &rows, &id_refs);
    let request = d.commit(&e, None);
    assert_eq!(
        request[0].kind,
        ActionKind::RequestConsent,
        "consent comes first"
    );
    let state = d
        .engine
        .snapshot(&d.s.scope)
        .expect("the snapshot reads")
        .into_state()
        .expect("the session exists");
    let install = state.pending_consents[0].install_action.clone();
    let e = d.s.decide(&install, true, "interactive");
    d.commit(&e, None);

    let install_row = rows
        .iter()
        .find(|r| r.get_str("actionability") == Some("install"))
        .cloned()
        .unwrap_or(Json::Null);
    let descriptor = install_row
        .get("authority")
        .and_then(|a| a.get("descriptor"))
        .cloned()
        .unwrap_or(Json::Null);
    let material = install_row
        .get("authority")
        .and_then(|a| a.get("result_material"))
        .and_then(|m| m.get_str("identity_digest"))
        .unwrap_or_default()
        .to_owned();
    let (catalog, policy) = (d.s.catalog.clone(), d.s.policy.clone());
    d.engine
        .authorize_install(
            &install,
            &install_row,
            &descriptor,
            &catalog,
            &policy,
            &binding(),
        )
        .expect("the install claim succeeds");
    let guard = d
        .engine
        .record_install_outcome(
            &install,
            &binding(),
            InstallOutcome::Applied,
            Some(&material),
            &digest("install-seen"),
        )
        .expect("the install outcome records");
    let e = d.s.applied(&install);
    let t = d
        .engine
        .process_install_receipt(&e, &guard)
        .expect("the install receipt settles");
    d.s.revision = t.to_revision;
    d.records += 3;

    for activation in t.actions {
        d.activate(&activation);
    }
    let e = d.s.empty(EventKind::TurnStarting);
    let prepares = d.commit(&e, None);
    for p in &prepares {
        d.receipt(p);
    }
    let submission = Json::object([(
        "capabilities",
        Json::Arr(
            rows.iter()
                .map(|r| {
                    Json::object([
                        (
                            "capability_id",
                            r.get("capability_id").cloned().unwrap_or(Json::Null),
                        ),
                        (
                            "source_digest",
                            r.get("catalog_entry_digest").cloned().unwrap_or(Json::Null),
                        ),
                    ])
                })
                .collect(),
        ),
    )]);
    let e = d.s.event(EventKind::ProviderSubmissionObserved, submission);
    d.commit(&e, None);
    let e = d.s.empty(EventKind::TurnEnded);
    d.commit(&e, None);
    let e = d.s.empty(EventKind::SessionEnded);
    let mut next = d.commit(&e, None);
    let mut seen = BTreeSet::new();
    while let Some(deactivate) = next.first().cloned() {
        assert!(
            seen.insert(deactivate.action_id.clone()),
            "each deactivation once"
        );
        next = d.receipt(&deactivate);
    }
    let _ = d.clock;
    d.records
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ctx_journal::{Journal, OpenOptions};

    use super::*;
    use crate::engine::EngineOptions;

    #[test]
    fn a_full_lifecycle_commits_settles_and_rebuilds_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(Journal::open(dir.path(), &OpenOptions::new()).unwrap());
        let mut s = Session::new("life");
        let clock = Arc::new(ManualClock::new(s.now));
        let options = EngineOptions::new(clock.clone())
            .normalizer(Arc::new(OpaqueNormalizer), "ctx-normalizer-structured-v1");
        let engine = Engine::open(journal.clone(), options).unwrap();
        let records = run_lifecycle(&engine, &clock, &mut s);
        assert_eq!(journal.head_position().unwrap(), records);
        let state = engine.snapshot(&s.scope).unwrap().into_state().unwrap();
        assert!(state.active_capability_ids().is_empty());
        assert!(state.pending_effects.is_empty());
        assert!(engine.replay_audit(&s.scope).unwrap().is_clean());
        for (name, _) in engine.projections().attached() {
            let report = engine.projections().check(name).unwrap();
            assert!(report.is_equal(), "{name} rebuilds to the same bytes");
        }
    }
}
