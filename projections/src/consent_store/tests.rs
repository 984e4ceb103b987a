#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ctx_journal::OpenOptions;

use super::*;
use crate::testkit::{self, RowKind, Session};

const AUDIENCE: &str = "ctx-broker-test";

fn d(label: &str) -> String {
    testkit::digest(&format!("consent-store-test:{label}"))
}

fn t(text: &str) -> UtcMicros {
    UtcMicros::parse(text).unwrap()
}

fn open_journal(dir: &Path, key: u8) -> Arc<Journal> {
    Arc::new(Journal::open(dir, &OpenOptions::new().key_source(move || Ok([key; 32]))).unwrap())
}

/// A store whose identity is recorded (opening alone writes nothing).
fn open(dir: &Path) -> ConsentStore {
    let store = ConsentStore::open(open_journal(dir, 1), AUDIENCE).unwrap();
    assert_eq!(store.journal().head_position().unwrap(), 0);
    store.record_identity().unwrap();
    store
}

/// Valid fields of a challenge `id` expiring at 11:00.
fn fields(id: &str) -> ChallengeFields {
    ChallengeFields {
        challenge_id: id.to_owned(),
        audience: AUDIENCE.to_owned(),
        workspace_identity_digest: d("workspace"),
        scope: testkit::scope("s1"),
        capability_id: "skill:demo".into(),
        kind: "skill".into(),
        source_digest: d("source"),
        catalog_snapshot_digest: d("catalog"),
        install_plan_digest: d("plan"),
        descriptor_digest: d("descriptor"),
        execution_binding_digest: d("binding"),
        selection_digest: d("selection"),
        material_identity_digest: d("material"),
        requested_action_content_digest: d("action"),
        policy_snapshot_digest: d("policy"),
        release_root_digest: d("release"),
        plan_id: "plan-1".into(),
        requested_action_id: format!("action-{id}"),
        requested_action_kind: "InstallCapability".into(),
        requested_action_precondition_revision: 3,
        permission_expansion: true,
        credential_requirement: false,
        expires_at: "2026-12-01T11:00:00Z".into(),
    }
}

fn challenge(id: &str) -> InstallConsentChallenge {
    InstallConsentChallenge::new(fields(id)).unwrap()
}

fn with_field(c: &InstallConsentChallenge, key: &str, value: Json) -> Json {
    let mut m = c.to_json().as_obj().unwrap().clone();
    m.insert(key.into(), value);
    Json::Obj(m)
}

fn decode_msg(value: &Json) -> String {
    InstallConsentChallenge::from_json(value)
        .unwrap_err()
        .to_string()
}

const NOW: &str = "2026-12-01T10:00:00Z";

#[test]
fn create_then_pending_then_identical_create_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert_eq!(store.audience(), AUDIENCE);
    // The identity is recorded (by the helper here; by the first challenge otherwise).
    assert_eq!(store.journal().head_position().unwrap(), 1);
    let c = challenge("consent-1");
    let first = store.create_challenge(&c, t(NOW)).unwrap();
    assert_eq!(first.state(), ChallengeState::Pending);
    assert_eq!(first.state().to_string(), "pending");
    assert_eq!(first.challenge(), &c);
    assert_eq!(first.created_at(), NOW);
    assert_eq!(first.expired_at(), None);
    assert_eq!(store.challenge_count().unwrap(), 1);
    let head = store.journal().head_position().unwrap();
    assert_eq!(head, 2);

    // An identical create, later but still live: the stored record, nothing appended.
    let again = store
        .create_challenge(&c, t("2026-12-01T10:30:00Z"))
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(store.journal().head_position().unwrap(), head);
    assert_eq!(store.challenge_count().unwrap(), 1);
    assert_eq!(store.get("consent-1", t(NOW)).unwrap(), first);

    // The stored payload is the challenge's canonical JSON, byte for byte.
    let stream = challenge_stream("consent-1").unwrap();
    let records = store.journal().read_stream(&stream, 1, 10).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].payload, c.to_json_text().into_bytes());
    assert_eq!(records[0].kind, CHALLENGE_KIND);
    assert_eq!(
        records[0].event_id,
        format!("ctx-consent-challenge:{}", c.challenge_digest())
    );
}

#[test]
fn a_different_challenge_under_the_same_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_challenge(&challenge("consent-1"), t(NOW))
        .unwrap();
    let head = store.journal().head_position().unwrap();
    let mut other = fields("consent-1");
    other.expires_at = "2026-12-01T11:00:01Z".into();
    let other = InstallConsentChallenge::new(other).unwrap();
    let e = store.create_challenge(&other, t(NOW)).unwrap_err();
    assert_eq!(e, CONFLICT_ID);
    assert_eq!(
        e.to_string(),
        "public challenge ID is already bound to a different challenge"
    );
    assert_eq!(store.journal().head_position().unwrap(), head);
    // Another id is free.
    store
        .create_challenge(&challenge("consent-2"), t(NOW))
        .unwrap();
    assert_eq!(store.challenge_count().unwrap(), 2);
}

#[test]
fn get_unknown_or_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let e = store.get("consent-9", t(NOW)).unwrap_err();
    assert_eq!(e, NOT_FOUND_ID);
    for bad in ["", "-x", "../x", &"a".repeat(129)] {
        assert_eq!(
            store.get(bad, t(NOW)).unwrap_err().to_string(),
            "challenge_id must be a bounded canonical token"
        );
    }
}

#[test]
fn lookup_by_digest_is_bound_to_workspace_and_release_root() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let c = challenge("consent-1");
    let created = store.create_challenge(&c, t(NOW)).unwrap();
    let (ws, rr) = (d("workspace"), d("release"));
    let found = store
        .get_by_challenge_digest(c.challenge_digest(), &ws, &rr, t(NOW))
        .unwrap();
    assert_eq!(found, created);
    for (w, r) in [(d("other"), rr.clone()), (ws.clone(), d("other"))] {
        let e = store
            .get_by_challenge_digest(c.challenge_digest(), &w, &r, t(NOW))
            .unwrap_err();
        assert_eq!(e, NOT_FOUND_DIGEST);
        assert_eq!(
            e.to_string(),
            "install consent challenge digest was not found"
        );
    }
    // An unknown digest reads the same.
    assert_eq!(
        store
            .get_by_challenge_digest(&d("unknown"), &ws, &rr, t(NOW))
            .unwrap_err(),
        NOT_FOUND_DIGEST
    );
    assert_eq!(
        store
            .get_by_challenge_digest("ABC", &ws, &rr, t(NOW))
            .unwrap_err()
            .to_string(),
        "challenge_digest must be a lowercase SHA-256 digest"
    );
    assert_eq!(
        store
            .get_by_challenge_digest(c.challenge_digest(), "x", &rr, t(NOW))
            .unwrap_err()
            .to_string(),
        "expected_workspace_identity_digest must be a lowercase SHA-256 digest"
    );
}

#[test]
fn expiry_is_a_view_of_the_effective_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let c = challenge("consent-1");
    store.create_challenge(&c, t(NOW)).unwrap();
    let head = store.journal().head_position().unwrap();
    let (ws, rr) = (d("workspace"), d("release"));

    let just_before = t("2026-12-01T10:59:59.999999Z");
    assert_eq!(
        store.get("consent-1", just_before).unwrap().state(),
        ChallengeState::Pending
    );
    for at in ["2026-12-01T11:00:00Z", "2027-01-01T00:00:00Z"] {
        let r = store.get("consent-1", t(at)).unwrap();
        assert_eq!(r.state(), ChallengeState::Expired);
        assert_eq!(r.expired_at(), Some("2026-12-01T11:00:00Z"));
        assert_eq!(r.created_at(), NOW);
        let by_digest = store
            .get_by_challenge_digest(c.challenge_digest(), &ws, &rr, t(at))
            .unwrap();
        assert_eq!(by_digest, r);
    }
    // An identical create of an expired challenge is refused ("assert live").
    let e = store
        .create_challenge(&c, t("2026-12-01T11:00:00Z"))
        .unwrap_err();
    assert_eq!(e, EXPIRED);
    assert_eq!(
        e.to_string(),
        "install consent challenge or decision has expired"
    );
    // Reading wrote nothing: the view is derived, and an earlier clock still sees it pending.
    assert_eq!(store.journal().head_position().unwrap(), head);
    assert_eq!(
        store.get("consent-1", just_before).unwrap().state(),
        ChallengeState::Pending
    );
    // A new challenge already expired at the effective time is refused before any write.
    let e = store
        .create_challenge(&challenge("consent-2"), t("2026-12-01T11:00:00Z"))
        .unwrap_err();
    assert_eq!(e, EXPIRED_AT_CREATION);
    assert_eq!(
        e.to_string(),
        "install consent challenge is already expired"
    );
    assert_eq!(store.journal().head_position().unwrap(), head);
}

#[test]
fn the_audience_is_bound_durably() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open_journal(dir.path(), 1);
    let store = ConsentStore::open(Arc::clone(&journal), AUDIENCE).unwrap();
    store.record_identity().unwrap();
    let mut other = fields("consent-1");
    other.audience = "another-broker".into();
    let e = store
        .create_challenge(&InstallConsentChallenge::new(other).unwrap(), t(NOW))
        .unwrap_err();
    assert_eq!(e, AUDIENCE_MISMATCH);
    assert_eq!(
        e.to_string(),
        "install consent challenge audience does not match this broker"
    );
    // Opening again with the same audience writes nothing; another audience is refused.
    let head = journal.head_position().unwrap();
    ConsentStore::open(Arc::clone(&journal), AUDIENCE).unwrap();
    assert_eq!(journal.head_position().unwrap(), head);
    let e = ConsentStore::open(Arc::clone(&journal), "another-broker").unwrap_err();
    assert_eq!(e, IDENTITY_AUDIENCE_MISMATCH);
    assert_eq!(
        e.to_string(),
        "consent broker audience does not match its durable identity"
    );
    assert_eq!(
        ConsentStore::open(journal, "not a token")
            .unwrap_err()
            .to_string(),
        "audience must be a bounded canonical token"
    );
}

#[test]
fn rebuild_gives_the_same_digest() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for i in 0..5 {
        store
            .create_challenge(&challenge(&format!("consent-{i}")), t(NOW))
            .unwrap();
    }
    let projections = store.projections();
    let report = projections.check(CONSENT_STORE_PROJECTION).unwrap();
    assert!(report.is_equal(), "{report:?}");
    let before = projections.digest(CONSENT_STORE_PROJECTION).unwrap();
    projections.rebuild(CONSENT_STORE_PROJECTION).unwrap();
    assert_eq!(
        projections.digest(CONSENT_STORE_PROJECTION).unwrap(),
        before
    );
    assert_eq!(store.challenge_count().unwrap(), 5);
    let record = store.get("consent-3", t(NOW)).unwrap();
    // A reopen (the journal is closed in between) finds the same tables and records.
    drop(store);
    let store = ConsentStore::open(open_journal(dir.path(), 1), AUDIENCE).unwrap();
    assert_eq!(
        store
            .projections()
            .digest(CONSENT_STORE_PROJECTION)
            .unwrap(),
        before
    );
    assert_eq!(store.get("consent-3", t(NOW)).unwrap(), record);
}

#[test]
fn strict_decoding_of_the_challenge_json() {
    let c = challenge("consent-1");
    assert_eq!(InstallConsentChallenge::from_json(&c.to_json()).unwrap(), c);
    assert_eq!(
        InstallConsentChallenge::from_json_text(&c.to_json_text()).unwrap(),
        c
    );
    assert_eq!(c.to_json().as_obj().unwrap().len(), 25);

    assert_eq!(
        decode_msg(&with_field(&c, "extra", Json::Null)),
        "install consent challenge fields are not exact"
    );
    let mut missing = c.to_json().as_obj().unwrap().clone();
    missing.remove("plan_id");
    assert_eq!(
        decode_msg(&Json::Obj(missing)),
        "install consent challenge fields are not exact"
    );
    assert_eq!(
        decode_msg(&with_field(&c, "challenge_digest", Json::str(d("x")))),
        "install consent challenge digest does not match its fields"
    );
    // A field changed under the old digest.
    assert_eq!(
        decode_msg(&with_field(&c, "plan_id", Json::str("plan-2"))),
        "install consent challenge digest does not match its fields"
    );
    assert_eq!(
        decode_msg(&with_field(
            &c,
            "schema",
            Json::str("ctx.install-consent-challenge-v1")
        )),
        "install consent challenge schema is unsupported"
    );
    assert_eq!(
        decode_msg(&with_field(&c, "scope", Json::str("scope"))),
        "install consent challenge scope is invalid"
    );
    let mut scope = c.scope().to_json().as_obj().unwrap().clone();
    scope.remove("parent_exposure_id");
    assert_eq!(
        decode_msg(&with_field(&c, "scope", Json::Obj(scope))),
        "install consent challenge scope is invalid"
    );
    assert_eq!(
        decode_msg(&with_field(&c, "permission_expansion", Json::Int(1))),
        "permission_expansion must be a boolean"
    );
    assert_eq!(
        decode_msg(&with_field(
            &c,
            "requested_action_precondition_revision",
            Json::Bool(true)
        )),
        "requested_action_precondition_revision must be positive"
    );
    assert_eq!(
        decode_msg(&with_field(&c, "challenge_id", Json::Int(7))),
        "challenge_id must be a bounded canonical token"
    );
    // Text: canonical bytes only, no duplicate keys.
    let spaced = c.to_json_text().replacen(':', ": ", 1);
    assert_eq!(
        InstallConsentChallenge::from_json_text(&spaced)
            .unwrap_err()
            .to_string(),
        "install consent challenge JSON is not canonical"
    );
    let text = c.to_json_text();
    let duplicated = format!("{{\"audience\":\"x\",{}", &text[1..]);
    assert_eq!(
        InstallConsentChallenge::from_json_text(&duplicated)
            .unwrap_err()
            .to_string(),
        "install consent challenge JSON contains duplicate fields"
    );
    assert_eq!(
        InstallConsentChallenge::from_json_text("[1]")
            .unwrap_err()
            .to_string(),
        "install consent challenge fields are not exact"
    );
}

#[test]
fn construction_follows_the_reference_order() {
    let msg = |f: ChallengeFields| InstallConsentChallenge::new(f).unwrap_err().to_string();
    let mut f = fields("consent-1");
    f.challenge_id = "-bad".into();
    f.audience = "-bad".into();
    assert_eq!(msg(f), "challenge_id must be a bounded canonical token");
    let mut f = fields("consent-1");
    f.scope.session_id = "has space".into();
    assert_eq!(msg(f), "scope.session_id must be a bounded canonical token");
    let mut f = fields("consent-1");
    f.capability_id = "harness:demo".into();
    f.kind = "harness".into();
    assert_eq!(msg(f), "kind is not an installable capability kind");
    let mut f = fields("consent-1");
    f.kind = "agent".into();
    assert_eq!(
        msg(f),
        "kind and capability_id must form one canonical identity"
    );
    let mut f = fields("consent-1");
    f.release_root_digest = "0".repeat(63);
    f.plan_id = "-".into();
    assert_eq!(
        msg(f),
        "release_root_digest must be a lowercase SHA-256 digest"
    );
    let mut f = fields("consent-1");
    f.requested_action_kind = "ActivateCapability".into();
    assert_eq!(msg(f), "requested_action_kind must be InstallCapability");
    let mut f = fields("consent-1");
    f.requested_action_precondition_revision = 0;
    assert_eq!(
        msg(f),
        "requested_action_precondition_revision must be positive"
    );
    for bad in [
        "2026-12-01T11:00:00.000Z",
        "2026-12-01T11:00:00+00:00",
        "soon",
    ] {
        let mut f = fields("consent-1");
        f.expires_at = bad.into();
        assert_eq!(msg(f), "expires_at must be a canonical UTC timestamp");
    }
}

#[test]
fn the_size_bound_is_enforced_on_input_storage_and_append() {
    let c = challenge("consent-1");
    let text = c.to_json_text();
    assert!(text.len() <= CHALLENGE_JSON_MAX_BYTES);
    // Valid fields cannot reach 16 KiB (tokens are bounded), so the bound is met by bytes.
    let oversized = format!(
        "{text}{}",
        " ".repeat(CHALLENGE_JSON_MAX_BYTES + 1 - text.len())
    );
    assert_eq!(oversized.len(), CHALLENGE_JSON_MAX_BYTES + 1);
    assert_eq!(
        InstallConsentChallenge::from_json_text(&oversized)
            .unwrap_err()
            .to_string(),
        "install consent challenge exceeds its bounded size"
    );
    assert_eq!(
        decode_stored(oversized.as_bytes()).unwrap_err(),
        "persisted challenge byte length is invalid"
    );
    assert_eq!(
        decode_stored(b"").unwrap_err(),
        "persisted challenge byte length is invalid"
    );
    // The projection refuses such a payload inside the append.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let err = store
        .journal()
        .append(StreamAppend::new(
            challenge_stream("consent-1").unwrap(),
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                challenge_event_id(c.challenge_digest()),
                CHALLENGE_KIND,
                Timestamp(t(NOW).0),
                oversized.into_bytes(),
            )],
        ))
        .unwrap_err();
    assert!(
        matches!(&err, AppendError::Hook { code: Some(code), message, .. }
            if *code == codes::CONSENT_RECORD_INVALID
                && message.contains("persisted challenge byte length is invalid")),
        "{err:?}"
    );
    assert_eq!(store.challenge_count().unwrap(), 0);
}

/// Appends a challenge record directly, bypassing the store's early checks.
fn append_raw(
    store: &ConsentStore,
    c: &InstallConsentChallenge,
    created_at: &str,
    event_id: Option<&str>,
) -> Result<(), AppendError> {
    store
        .journal()
        .append(StreamAppend::new(
            challenge_stream(c.challenge_id()).unwrap(),
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                event_id.map_or_else(|| challenge_event_id(c.challenge_digest()), str::to_owned),
                CHALLENGE_KIND,
                Timestamp(t(created_at).0),
                c.to_json_text().into_bytes(),
            )],
        ))
        .map(drop)
}

#[test]
fn the_projection_enforces_its_rules_inside_the_append() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let c = challenge("consent-1");
    // Created at or after its expiry.
    let e = append_raw(&store, &c, "2026-12-01T11:00:00Z", None).unwrap_err();
    assert_eq!(append_error(e), EXPIRED_AT_CREATION);
    // Another event id than the digest's.
    let e = append_raw(&store, &c, NOW, Some("consent-1")).unwrap_err();
    assert!(
        matches!(&e, AppendError::Hook { code: Some(code), .. } if *code == codes::CONSENT_RECORD_INVALID),
        "{e:?}"
    );
    // Another audience than the identity's.
    let mut f = fields("consent-2");
    f.audience = "another-broker".into();
    let e = append_raw(&store, &InstallConsentChallenge::new(f).unwrap(), NOW, None).unwrap_err();
    assert_eq!(append_error(e), AUDIENCE_MISMATCH);
    // On the stream of another id.
    let e = store
        .journal()
        .append(StreamAppend::new(
            challenge_stream("consent-3").unwrap(),
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                challenge_event_id(c.challenge_digest()),
                CHALLENGE_KIND,
                Timestamp(t(NOW).0),
                c.to_json_text().into_bytes(),
            )],
        ))
        .unwrap_err();
    assert!(matches!(e, AppendError::Hook { .. }), "{e:?}");
    assert_eq!(store.challenge_count().unwrap(), 0);
    // A well-formed direct append is indexed like a created one.
    append_raw(&store, &c, NOW, None).unwrap();
    assert_eq!(
        store.get("consent-1", t(NOW)).unwrap().state(),
        ChallengeState::Pending
    );
}

#[test]
fn capacity_is_enforced_with_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // Pretend the store is full: the counter is what both the early check and the hook read.
    store
        .journal()
        .maintain(|tx| {
            tx.insert(
                CONSENT_COUNTS_TABLE,
                COUNT_CHALLENGES_KEY,
                &CONSENT_CHALLENGES_MAX.to_le_bytes(),
            )
            .map(|()| ((), true))
            .map_err(HookError::from)
        })
        .unwrap();
    let c = challenge("consent-1");
    let e = store.create_challenge(&c, t(NOW)).unwrap_err();
    assert_eq!(e, CAPACITY);
    assert_eq!(
        e.to_string(),
        "install consent broker reached its bounded capacity"
    );
    // The hook refuses too when the early check is bypassed.
    assert_eq!(
        append_error(append_raw(&store, &c, NOW, None).unwrap_err()),
        CAPACITY
    );
}

#[test]
fn an_altered_index_entry_is_refused_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let c = challenge("consent-1");
    store.create_challenge(&c, t(NOW)).unwrap();
    let mut entry = store.entry("consent-1").unwrap().unwrap();
    entry.expires_at += 3_600_000_000;
    let bytes = archive::to_bytes(&entry).unwrap();
    store
        .journal()
        .maintain(|tx| {
            tx.insert(CONSENT_CHALLENGES_TABLE, b"consent-1", &bytes)
                .map(|()| ((), true))
                .map_err(HookError::from)
        })
        .unwrap();
    let e = store.get("consent-1", t(NOW)).unwrap_err();
    assert_eq!(e.to_string(), "consent broker index authentication failed");
    assert!(matches!(e, ConsentStoreError::Corruption { .. }));
    let report = store.projections().check(CONSENT_STORE_PROJECTION).unwrap();
    assert!(!report.is_equal());
    store
        .projections()
        .rebuild(CONSENT_STORE_PROJECTION)
        .unwrap();
    assert_eq!(store.get("consent-1", t(NOW)).unwrap().challenge(), &c);
}

#[test]
fn a_record_this_version_does_not_fold_is_refused_on_read() {
    // A later record on the challenge stream (a decision, say) read by this version: its state
    // would be unknown, so the challenge is not reported at all.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_challenge(&challenge("consent-1"), t(NOW))
        .unwrap();
    store
        .journal()
        .append(StreamAppend::new(
            challenge_stream("consent-1").unwrap(),
            ExpectedRevision::Exact(1),
            vec![NewRecord::new(
                "ctx-consent-future:1",
                "ctx.consent-decision.v1",
                Timestamp(t(NOW).0),
                b"{}".to_vec(),
            )],
        ))
        .unwrap();
    let e = store.get("consent-1", t(NOW)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "persisted consent lifecycle fields are invalid"
    );
}

/// Replaces every copy of `needle` in the closed journal's redb file: a raw edit of the stored
/// record, as an attacker with file access would make.
fn tamper_file(dir: &Path, needle: &[u8], replacement: &[u8]) -> usize {
    let path = dir.join(ctx_journal::files::DATABASE_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let mut hits = 0;
    let mut i = 0;
    while i + needle.len() <= bytes.len() {
        if &bytes[i..i + needle.len()] == needle {
            bytes[i..i + needle.len()].copy_from_slice(replacement);
            hits += 1;
            i += needle.len();
        } else {
            i += 1;
        }
    }
    std::fs::write(&path, bytes).unwrap();
    hits
}

#[test]
fn a_record_altered_on_disk_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store
            .create_challenge(&challenge("consent-1"), t(NOW))
            .unwrap();
    }
    // Move the stored expiry by an hour (same length): the journal's MAC no longer matches.
    let hits = tamper_file(
        dir.path(),
        b"\"expires_at\":\"2026-12-01T11:00:00Z\"",
        b"\"expires_at\":\"2026-12-01T12:00:00Z\"",
    );
    assert!(hits >= 1);
    let journal = open_journal(dir.path(), 1);
    let e = ConsentStore::open(Arc::clone(&journal), AUDIENCE).unwrap_err();
    assert!(matches!(e, ConsentStoreError::Corruption { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "consent broker journal authentication failed"
    );
    let stream = challenge_stream("consent-1").unwrap();
    let e = read_error(journal.read_stream(&stream, 1, 1).unwrap_err());
    assert_eq!(e.to_string(), "consent broker record authentication failed");
}

// ------------------------------------------------------------------------------------------------
// Derivation from a real pending install (reference §3.2)
// ------------------------------------------------------------------------------------------------

mod derivation {
    use super::*;
    use crate::engine::{Engine, EngineOptions, ManualClock};
    use crate::identity::InstallExecutionBinding;
    use crate::model::HostAction;
    use crate::testkit::lifecycle::{OpaqueNormalizer, binding, observed_intent};

    /// A session whose desired install is pending consent: the engine, the session, the plan row
    /// and the pending install action.
    struct Pending {
        journal: Arc<Journal>,
        s: Session,
        row: Json,
        action: HostAction,
    }

    fn pending(dir: &Path) -> Pending {
        let journal = open_journal(dir, 1);
        let mut s = Session::new("consent");
        let clock = Arc::new(ManualClock::new(s.now));
        let options = EngineOptions::new(clock)
            .normalizer(Arc::new(OpaqueNormalizer), "ctx-normalizer-structured-v1");
        let engine = Engine::open(Arc::clone(&journal), options).unwrap();
        let row = testkit::row(RowKind::Install, "skill", "consent-d");
        let commit = |s: &mut Session, e: &crate::model::EngineEvent, dec| {
            let t = engine.process(e, dec).unwrap();
            s.revision = t.to_revision;
            t.actions
        };
        let e = s.started("managing");
        commit(&mut s, &e, None);
        let e = observed_intent(&mut s);
        commit(&mut s, &e, Some(testkit::decision(vec![row.clone()])));
        let e = s.desired("owner-1", std::slice::from_ref(&row), &["skill:consent-d"]);
        let actions = commit(&mut s, &e, None);
        assert_eq!(actions[0].kind, crate::model::ActionKind::RequestConsent);
        let state = engine.snapshot(&s.scope).unwrap().into_state().unwrap();
        let action = state.pending_consents[0].install_action.clone();
        Pending {
            journal,
            s,
            row,
            action,
        }
    }

    fn inputs<'a>(
        p: &'a Pending,
        action: &'a HostAction,
        row: &'a Json,
        binding: &'a InstallExecutionBinding,
    ) -> ChallengeInputs<'a> {
        ChallengeInputs {
            consent_id: p.action.consent_id.as_deref().unwrap_or_default(),
            plan_id: &p.s.plan_id,
            catalog_snapshot_digest: &p.s.catalog,
            policy_snapshot_digest: &p.s.policy,
            selection_row: row,
            install_action: action,
            execution_binding: binding,
            workspace_identity_digest: WORKSPACE,
            release_root_digest: RELEASE,
            audience: AUDIENCE,
        }
    }

    const WORKSPACE: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const RELEASE: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn a_pending_install_derives_its_challenge_and_publishes_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = pending(dir.path());
        let b = binding();
        let c = derive_install_consent_challenge(&inputs(&p, &p.action, &p.row, &b)).unwrap();
        let a = &p.action;
        assert_eq!(Some(c.challenge_id()), a.consent_id.as_deref());
        assert_eq!(Some(c.expires_at()), a.expires_at.as_deref());
        assert_eq!(c.scope(), &a.scope);
        assert_eq!(c.capability_id(), "skill:consent-d");
        assert_eq!(c.kind(), "skill");
        assert_eq!(
            Some(c.source_digest()),
            p.row.get_str("catalog_entry_digest")
        );
        assert_eq!(c.execution_binding_digest(), b.binding_digest());
        assert_eq!(
            c.selection_digest(),
            install_consent_selection_digest(&p.row)
        );
        assert_eq!(c.requested_action_id(), a.action_id);
        assert_eq!(c.requested_action_content_digest(), a.content_digest());
        assert_eq!(
            c.requested_action_precondition_revision(),
            a.precondition_revision
        );
        assert_eq!(c.requested_action_kind(), "InstallCapability");
        assert_eq!(c.policy_snapshot_digest(), p.s.policy);
        assert_eq!(c.catalog_snapshot_digest(), p.s.catalog);
        assert_eq!(c.plan_id(), p.s.plan_id);
        let descriptor = p.row.get("authority").unwrap().get("descriptor").unwrap();
        assert_eq!(
            Some(c.install_plan_digest()),
            descriptor.get_str("plan_digest")
        );
        assert_eq!(
            Some(c.descriptor_digest()),
            descriptor.get_str("descriptor_digest")
        );
        assert!(!c.permission_expansion() && !c.credential_requirement());
        // The selection digest binds the whole row under its schema.
        assert_eq!(
            c.selection_digest(),
            crate::check::cja_digest(&Json::object([
                (
                    "schema",
                    Json::str("ctx.install-consent-selection-binding-v1")
                ),
                ("selection", p.row.clone()),
            ]))
        );
        // The challenge digest is H(CJA(the 24-key mapping)).
        let mut mapping = c.to_json().as_obj().unwrap().clone();
        mapping.remove("challenge_digest");
        assert_eq!(mapping.len(), 24);
        assert_eq!(
            c.challenge_digest(),
            crate::check::cja_digest(&Json::Obj(mapping))
        );

        // Prepare (§3.3): derive, then create; the status is pending, the same by digest.
        let store = ConsentStore::open(Arc::clone(&p.journal), AUDIENCE).unwrap();
        let created = store.create_challenge(&c, p.s.now).unwrap();
        assert_eq!(created.state(), ChallengeState::Pending);
        assert_eq!(store.get(c.challenge_id(), p.s.now).unwrap(), created);
        assert_eq!(
            store
                .get_by_challenge_digest(c.challenge_digest(), WORKSPACE, RELEASE, p.s.now)
                .unwrap(),
            created
        );
        // The engine's projections and the consent projection share the journal, each
        // reproducible on its own.
        let report = store.projections().check(CONSENT_STORE_PROJECTION).unwrap();
        assert!(report.is_equal());
    }

    #[test]
    fn derivation_refuses_inputs_that_do_not_bind_one_install() {
        let dir = tempfile::tempdir().unwrap();
        let p = pending(dir.path());
        let b = binding();
        let derive = |action: &HostAction, row: &Json, b: &InstallExecutionBinding| {
            derive_install_consent_challenge(&inputs(&p, action, row, b))
                .unwrap_err()
                .to_string()
        };
        let load_row = testkit::row(RowKind::Load, "skill", "consent-d");
        assert_eq!(
            derive(&p.action, &load_row, &b),
            "interactive install consent requires exact install planning authority"
        );
        let mut broken = p.row.as_obj().unwrap().clone();
        broken.insert("extra".into(), Json::Null);
        assert_eq!(
            derive(&p.action, &Json::Obj(broken), &b),
            "selection must be a CapabilityPlanSelectionV3"
        );
        let mut no_expiry = p.action.clone();
        no_expiry.expires_at = None;
        assert_eq!(
            derive(&no_expiry, &p.row, &b),
            "directive does not match the exact pending install action"
        );
        let mut other_consent = p.action.clone();
        other_consent.consent_id = Some("consent-other".into());
        assert_eq!(
            derive(&other_consent, &p.row, &b),
            "directive does not match the exact pending install action"
        );
        let other_row = testkit::row(RowKind::Install, "skill", "consent-e");
        assert_eq!(
            derive(&p.action, &other_row, &b),
            "directive does not match the exact pending install action"
        );
        let mut no_feature = p.action.clone();
        no_feature.required_host_feature = Some("activation".into());
        assert_eq!(
            derive(&no_feature, &p.row, &b),
            "pending action is not an exact installation host effect"
        );
        let other_driver = InstallExecutionBinding::new(
            &b.driver_id,
            &d("another-driver"),
            &b.host_identity_digest,
            &b.target_identity_digest,
        )
        .unwrap();
        assert_eq!(
            derive(&p.action, &p.row, &other_driver),
            "execution driver does not match the exact install descriptor and action"
        );
        let mut other_payload = p.action.clone();
        if let Json::Obj(m) = &mut other_payload.payload {
            m.insert(
                "policy_snapshot_digest".into(),
                Json::str(d("other-policy")),
            );
        }
        assert_eq!(
            derive(&other_payload, &p.row, &b),
            "pending action payload does not match the exact install authority"
        );
        let e = derive_install_consent_challenge(&ChallengeInputs {
            workspace_identity_digest: "nope",
            ..inputs(&p, &p.action, &p.row, &b)
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "workspace_identity_digest must be a lowercase SHA-256 digest"
        );
        assert!(matches!(e, ConsentStoreError::Invalid { .. }));
        // A binding mismatch is typed apart from malformed input.
        assert!(matches!(
            derive_install_consent_challenge(&inputs(&p, &no_feature, &p.row, &b)),
            Err(ConsentStoreError::Binding { .. })
        ));
    }
}
