//! Every journal stream namespace and record kind ctx writes, in one table (spec/projections.md
//! "Streams and record kinds"). A namespace names a family of streams and a record kind names
//! the format of one record on them; both are on-disk formats, so a value never changes, and a
//! new stream or kind is added here first. Modules that read or write a stream import its names
//! from here; the host streams are declared here for the service's host adapters too.

/// The namespace of one family of streams, the record kinds written on it, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSpec {
    pub namespace: &'static str,
    pub kinds: &'static [&'static str],
    pub what: &'static str,
}

// Engine (spec/engine-store.md).

/// Stream namespace of engine sessions; the key is the session's scope.
pub const ENGINE_STREAM_NAMESPACE: &str = "ctx.engine";
/// Kind of an engine record: one reduced event with its replay input and transition.
pub const ENGINE_RECORD_KIND: &str = "ctx.engine.v1";
/// Stream namespace of install effects; the key is the effect key.
pub const INSTALL_EFFECT_NAMESPACE: &str = "ctx.install-effect";
/// Kind of an install claim.
pub const INSTALL_CLAIM_KIND: &str = "ctx.install-claim.v1";
/// Kind of an install outcome.
pub const INSTALL_OUTCOME_KIND: &str = "ctx.install-outcome.v1";
/// Stream namespace of activation effects; the key is the effect key.
pub const ACTIVATION_EFFECT_NAMESPACE: &str = "ctx.activation-effect";
/// Kind of an activation claim.
pub const ACTIVATION_CLAIM_KIND: &str = "ctx.activation-claim.v1";
/// Kind of an activation outcome.
pub const ACTIVATION_OUTCOME_KIND: &str = "ctx.activation-outcome.v1";
/// Stream namespace of benefit selection results; the key is the result digest.
pub const BENEFIT_AUDIT_NAMESPACE: &str = "ctx.benefit-audit";
/// Kind of a benefit selection result.
pub const BENEFIT_RESULT_KIND: &str = "ctx.benefit-result.v1";

// Query store (spec/projections.md "query.store").

/// Stream namespace of managed queries; the key is the logical query id (64 hex characters).
pub const QUERY_STREAM_NAMESPACE: &str = "ctx.query";
/// Kind of a registration (revision 1 of a query stream).
pub const QUERY_REGISTRATION_KIND: &str = "ctx.query-registration.v1";
/// Kind of a planned mark (revision 2 of a query stream).
pub const QUERY_PLANNED_KIND: &str = "ctx.query-planned.v1";
/// Kind of a desired-set reservation (a query stream's revision 3, 5, 7, …).
pub const DESIRED_RESERVATION_KIND: &str = "ctx.desired-reservation.v1";
/// Kind of a desired-set commit (right after its reservation).
pub const DESIRED_COMMITTED_KIND: &str = "ctx.desired-committed.v1";

// Consent store (spec/projections.md "consent.store").

/// Stream namespace of the broker identity (one stream, key `identity`).
pub const IDENTITY_STREAM_NAMESPACE: &str = "ctx.consent-broker";
/// Kind of the broker identity (revision 1 of the identity stream).
pub const IDENTITY_KIND: &str = "ctx.consent-broker-identity.v1";
/// Kind of a raised trusted-time floor (identity stream, revision ≥ 2).
pub const TRUSTED_TIME_KIND: &str = "ctx.consent-broker-trusted-time.v1";
/// Stream namespace of challenges; the key is the challenge id (UTF-8).
pub const CHALLENGE_STREAM_NAMESPACE: &str = "ctx.consent";
/// Kind of a challenge (revision 1 of a challenge stream).
pub const CHALLENGE_KIND: &str = "ctx.consent-challenge.v1";
/// Kind of a recorded decision (`pending` / `reauthentication-required` → `decision-ready`).
pub const DECISION_READY_KIND: &str = "ctx.consent-decision-ready.v1";
/// Kind of a re-verification's nonce (`decision-ready` → `decision-ready`, +1 nonce).
pub const NONCE_RECORDED_KIND: &str = "ctx.consent-nonce-recorded.v1";
/// Kind of a reservation (`decision-ready` → `reserved`).
pub const RESERVED_KIND: &str = "ctx.consent-reserved.v1";
/// Kind of a released reservation (`reserved` → `decision-ready`).
pub const RELEASED_KIND: &str = "ctx.consent-released.v1";
/// Kind of a settlement (guard or committed journal evidence → `settled`).
pub const SETTLED_KIND: &str = "ctx.consent-settled.v1";
/// Kind of a forced re-authentication (decision expired, or the decision event is absent).
pub const REAUTHENTICATION_REQUIRED_KIND: &str = "ctx.consent-reauthentication-required.v1";
/// Kind of the sticky expiry tombstone.
pub const EXPIRED_KIND: &str = "ctx.consent-expired.v1";

// Host adapters (spec/activation.md, spec/cli.md), written by the service.

/// Stream namespace of host sessions: the key is `host ‖ "\n" ‖ session id`.
pub const HOST_SESSION_NAMESPACE: &str = "ctx.host-session";
/// Kind of a hook call on a host session's stream.
pub const HOST_SESSION_KIND: &str = "ctx.host-session.v1";
/// Stream namespace of the per-target activation ledgers.
pub const HOST_ACTIVATION_NAMESPACE: &str = "ctx.host-activation";
/// Kind of an activation intent or outcome record.
pub const HOST_ACTIVATION_RECORD_KIND: &str = "ctx.host-activation.v1";
/// Stream namespace of the activation target index (one stream, key `targets`).
pub const HOST_ACTIVATION_INDEX_NAMESPACE: &str = "ctx.host-activation-index";
/// Kind of a target index record.
pub const HOST_ACTIVATION_TARGET_KIND: &str = "ctx.host-activation-target.v1";
/// Stream namespace of the engine sessions holding a host entry: key = host ‖ kind ‖ name ‖
/// project.
pub const HOST_ACTIVATION_HOLDERS_NAMESPACE: &str = "ctx.host-activation-holders";
/// Kind of a holder record.
pub const HOST_ACTIVATION_HOLDER_KIND: &str = "ctx.host-activation-holder.v1";

// Who may decide (spec/decisions.md §12–§15), written by the service.

/// The verifier registry and the person-approved policies of a data directory (spec/decisions.md
/// §14): one stream, every change signed.
pub const TRUST_STREAM_NAMESPACE: &str = "ctx.trust";
/// Kind of a registry change: a registration, a removal or a policy approval.
pub const TRUST_CHANGE_KIND: &str = "ctx.trust-change.v1";
/// Stream namespace of decision evidence; the key is the challenge digest (spec/decisions.md
/// §12.5).
pub const DECISION_EVIDENCE_NAMESPACE: &str = "ctx.decision-evidence";
/// Kind of one verified decision's signed assertion, verifier kind and assurance.
pub const DECISION_EVIDENCE_KIND: &str = "ctx.decision-evidence.v1";

/// Stream namespace of the index of grants a person signed for one exact install; the key is the
/// capability id and the install descriptor digest (spec/decisions.md §16.3).
pub const INSTALL_GRANTS_NAMESPACE: &str = "ctx.install-grants";
/// Kind of one indexed grant: the challenge where the person signed it.
pub const INSTALL_GRANT_KIND: &str = "ctx.install-grant.v1";

/// Stream namespace of a stored work observation; the key is its work reference (spec/cli.md
/// §4, "Work observations").
pub const WORK_STREAM_NAMESPACE: &str = "ctx.work";
/// Kind of a work observation: what a host observed, as the query's input authority reads it.
pub const WORK_OBSERVATION_KIND: &str = "ctx.work-observation.v1";

/// Every stream namespace ctx writes, with its record kinds.
pub const STREAMS: &[StreamSpec] = &[
    StreamSpec {
        namespace: ENGINE_STREAM_NAMESPACE,
        kinds: &[ENGINE_RECORD_KIND],
        what: "an engine session: reduced events with replay inputs and transitions",
    },
    StreamSpec {
        namespace: INSTALL_EFFECT_NAMESPACE,
        kinds: &[INSTALL_CLAIM_KIND, INSTALL_OUTCOME_KIND],
        what: "one install effect: its claim and observed outcome",
    },
    StreamSpec {
        namespace: ACTIVATION_EFFECT_NAMESPACE,
        kinds: &[ACTIVATION_CLAIM_KIND, ACTIVATION_OUTCOME_KIND],
        what: "one activation effect: its claim and observed outcome",
    },
    StreamSpec {
        namespace: BENEFIT_AUDIT_NAMESPACE,
        kinds: &[BENEFIT_RESULT_KIND],
        what: "one benefit selection result a plan's audit binds",
    },
    StreamSpec {
        namespace: QUERY_STREAM_NAMESPACE,
        kinds: &[
            QUERY_REGISTRATION_KIND,
            QUERY_PLANNED_KIND,
            DESIRED_RESERVATION_KIND,
            DESIRED_COMMITTED_KIND,
        ],
        what: "one managed query: registration, planned mark, desired-set reservations and commits",
    },
    StreamSpec {
        namespace: IDENTITY_STREAM_NAMESPACE,
        kinds: &[IDENTITY_KIND, TRUSTED_TIME_KIND],
        what: "the consent broker identity and its trusted-time floor",
    },
    StreamSpec {
        namespace: CHALLENGE_STREAM_NAMESPACE,
        kinds: &[
            CHALLENGE_KIND,
            DECISION_READY_KIND,
            NONCE_RECORDED_KIND,
            RESERVED_KIND,
            RELEASED_KIND,
            SETTLED_KIND,
            REAUTHENTICATION_REQUIRED_KIND,
            EXPIRED_KIND,
        ],
        what: "one install consent challenge and its lifecycle",
    },
    StreamSpec {
        namespace: HOST_SESSION_NAMESPACE,
        kinds: &[HOST_SESSION_KIND],
        what: "one agent-host session: the hook calls ctx answered",
    },
    StreamSpec {
        namespace: HOST_ACTIVATION_NAMESPACE,
        kinds: &[HOST_ACTIVATION_RECORD_KIND],
        what: "one host activation target: alternating intent and outcome records",
    },
    StreamSpec {
        namespace: HOST_ACTIVATION_INDEX_NAMESPACE,
        kinds: &[HOST_ACTIVATION_TARGET_KIND],
        what: "the index of every host activation target",
    },
    StreamSpec {
        namespace: HOST_ACTIVATION_HOLDERS_NAMESPACE,
        kinds: &[HOST_ACTIVATION_HOLDER_KIND],
        what: "the engine sessions holding one host entry",
    },
    StreamSpec {
        namespace: TRUST_STREAM_NAMESPACE,
        kinds: &[TRUST_CHANGE_KIND],
        what: "the verifier registry and approved policies: signed registrations, removals, approvals",
    },
    StreamSpec {
        namespace: DECISION_EVIDENCE_NAMESPACE,
        kinds: &[DECISION_EVIDENCE_KIND],
        what: "one challenge's decision evidence: each verified signed assertion and its assurance",
    },
    StreamSpec {
        namespace: WORK_STREAM_NAMESPACE,
        kinds: &[WORK_OBSERVATION_KIND],
        what: "one work observation a current-work reference resolves to",
    },
    StreamSpec {
        namespace: INSTALL_GRANTS_NAMESPACE,
        kinds: &[INSTALL_GRANT_KIND],
        what: "the challenges where the person signed a grant of one exact install",
    },
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn namespaces_are_distinct_and_kinds_are_distinct_within_a_namespace() {
        let mut namespaces = BTreeSet::new();
        for stream in STREAMS {
            assert!(namespaces.insert(stream.namespace), "{}", stream.namespace);
            assert!(!stream.kinds.is_empty(), "{}", stream.namespace);
            let mut kinds = BTreeSet::new();
            for kind in stream.kinds {
                assert!(kinds.insert(*kind), "{} {kind}", stream.namespace);
            }
        }
    }

    #[test]
    fn every_name_follows_the_ctx_prefix() {
        for stream in STREAMS {
            assert!(stream.namespace.starts_with("ctx."), "{}", stream.namespace);
            for kind in stream.kinds {
                assert!(kind.starts_with("ctx.") && kind.ends_with(".v1"), "{kind}");
            }
        }
    }
}
