//! The list of every domain projection (spec/projections.md, "Domain projections", "query.store",
//! "consent.store"), for offline tools that read or check them without opening the engine or the
//! stores: `ctx audit` and `ctx inspect`.

use std::sync::Arc;

use crate::consent_store::ConsentStoreProjection;
use crate::engine::engine_projections;
use crate::framework::Projection;
use crate::query_store::QueryStoreProjection;

/// Every domain projection, in a fixed order: `engine.state`, `engine.effects`,
/// `engine.benefit_audit`, `query.store`, `consent.store`. The list validates as one attach list
/// (distinct names and tables).
pub fn domain_projections() -> Vec<Arc<dyn Projection>> {
    let mut list = engine_projections();
    list.push(Arc::new(QueryStoreProjection));
    list.push(Arc::new(ConsentStoreProjection));
    list
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use ctx_journal::{Journal, OpenOptions};

    use super::*;
    use crate::consent_store::CONSENT_STORE_PROJECTION;
    use crate::engine::{
        AuditComponent, ENGINE_BENEFIT_AUDIT_PROJECTION, ENGINE_EFFECTS_PROJECTION,
        ENGINE_STATE_PROJECTION, Engine, EngineOptions, ManualClock, engine_stream,
        replay_audit_stream,
    };
    use crate::framework::{DetachedStatus, Projections};
    use crate::query_store::QUERY_STORE_PROJECTION;
    use crate::streams::ENGINE_RECORD_KIND;
    use crate::testkit::lifecycle::{OpaqueNormalizer, run_lifecycle};
    use ctx_model::testkit::Session;

    #[test]
    fn every_domain_projection_is_listed_once_and_checks_equal_after_a_lifecycle() {
        let names: Vec<&str> = domain_projections().iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            [
                ENGINE_STATE_PROJECTION,
                ENGINE_EFFECTS_PROJECTION,
                ENGINE_BENEFIT_AUDIT_PROJECTION,
                QUERY_STORE_PROJECTION,
                CONSENT_STORE_PROJECTION
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(Journal::open(dir.path(), &OpenOptions::new()).unwrap());
        let mut s = Session::new("domain");
        let clock = Arc::new(ManualClock::new(s.now));
        let options = EngineOptions::new(clock.clone())
            .normalizer(Arc::new(OpaqueNormalizer), "ctx-normalizer-structured-v1");
        let engine = Engine::open(journal.clone(), options).unwrap();
        let records = run_lifecycle(&engine, &clock, &mut s);
        let mut last = 0;
        let checks =
            Projections::check_detached(&journal, &domain_projections(), &mut |p, _| last = p)
                .unwrap();
        assert_eq!(last, records);
        for c in &checks {
            assert_eq!(c.status(), DetachedStatus::Equal, "{c:?}");
        }
        // The engine's projections are attached and folded every record; the stores never were.
        assert_eq!((checks[0].upto, checks[0].records), (records, records));
        assert_eq!((checks[3].meta.clone(), checks[3].upto), (None, 0));
        let summaries = Projections::inspect_detached(&journal, &domain_projections()).unwrap();
        for (summary, check) in summaries.iter().zip(&checks) {
            assert_eq!(summary.digest, check.stored, "{}", summary.name);
        }
        assert!(summaries[0].tables.iter().all(|(_, n)| *n > 0));
        // The stream-id form of the replay audit: clean on the engine stream, a binding
        // divergence at revision 1 on a stream that holds other records.
        let stream = engine_stream(&s.scope).unwrap();
        let report = replay_audit_stream(&journal, &stream).unwrap();
        assert!(report.is_clean());
        assert_eq!(report.revisions_checked(), s.revision);
        let mut other = None;
        journal
            .visit_streams(|info| {
                if info.first_kind.as_deref() != Some(ENGINE_RECORD_KIND) {
                    other = Some(info.stream);
                }
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        let report = replay_audit_stream(&journal, &other.unwrap()).unwrap();
        let divergence = report.divergence().unwrap();
        assert_eq!(
            (divergence.revision, divergence.component),
            (1, AuditComponent::RecordBinding)
        );
    }
}
