#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ctx_journal::OpenOptions;
use ctx_model::testkit::{self, RowKind, Session};

use crate::streams::*;

use super::*;

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
    assert!(
        e.to_string()
            .starts_with("install consent broker reached its bounded capacity: "),
        "{e}"
    );
    // The sentence names the bound it enforces, and the nonce sentence its own.
    assert!(
        e.to_string()
            .contains(&format!(" {CONSENT_CHALLENGES_MAX} open "))
    );
    assert!(
        NONCE_CAPACITY
            .to_string()
            .contains(&format!(" {CONSENT_NONCES_MAX} "))
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
    // Payloads stored as is, so the edit below finds its text (spec/journal.md §4, R7).
    let _as_is = ctx_journal::StorePayloadsAsIs::new();
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
// Derivation from a real pending install (spec/projections.md §8.3)
// ------------------------------------------------------------------------------------------------

mod derivation {
    use super::*;
    use crate::engine::{Engine, EngineOptions, ManualClock};
    use crate::testkit::lifecycle::{OpaqueNormalizer, binding, observed_intent};
    use ctx_model::HostAction;
    use ctx_model::InstallExecutionBinding;

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
        let commit = |s: &mut Session, e: &ctx_model::EngineEvent, dec| {
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
        assert_eq!(actions[0].kind, ctx_model::ActionKind::RequestConsent);
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
            ctx_model::cja_digest(&Json::object([
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
            ctx_model::cja_digest(&Json::Obj(mapping))
        );

        // Prepare (spec/projections.md §8.3): derive, then create; the status is pending, the same
        // by digest.
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
            "selection must be a CapabilityPlanSelection"
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

// ------------------------------------------------------------------------------------------------
// The decision lifecycle (spec/projections.md §8.8, §8.5)
// ------------------------------------------------------------------------------------------------

mod lifecycle {
    use std::cell::Cell;

    use super::*;

    fn accept(_: &SignedHumanDecisionAssertion, _: &[u8]) -> bool {
        true
    }

    fn refuse_all(_: &SignedHumanDecisionAssertion, _: &[u8]) -> bool {
        false
    }

    /// An assertion for `c` (granted by the test principal) with `nonce`, issued and expiring at
    /// the given times; the proof is a placeholder (the test verifiers do not check it).
    fn signed(
        c: &InstallConsentChallenge,
        nonce: &str,
        issued_at: &str,
        expires_at: &str,
    ) -> SignedHumanDecisionAssertion {
        SignedHumanDecisionAssertion::new(AssertionFields {
            challenge_digest: c.challenge_digest().to_owned(),
            decision: "granted".into(),
            principal_digest: d("principal"),
            authenticator_id: "authn-1".into(),
            audience: AUDIENCE.into(),
            nonce: nonce.into(),
            issued_at: issued_at.into(),
            expires_at: expires_at.into(),
            proof: b"proof".to_vec(),
        })
        .unwrap()
    }

    fn with(
        a: &SignedHumanDecisionAssertion,
        edit: impl FnOnce(&mut AssertionFields),
    ) -> SignedHumanDecisionAssertion {
        let mut f = a.fields().clone();
        edit(&mut f);
        SignedHumanDecisionAssertion::new(f).unwrap()
    }

    fn reservation(c: &InstallConsentChallenge, event: &str) -> Reservation {
        Reservation {
            scope: c.scope().clone(),
            event_id: event.into(),
            event_content_digest: d(event),
            consent_id: c.challenge_id().into(),
            decision: HumanDecision::Granted,
            policy_snapshot_digest: c.policy_snapshot_digest().into(),
            requested_action_id: c.requested_action_id().into(),
            requested_action_kind: c.requested_action_kind().into(),
            requested_action_content_digest: c.requested_action_content_digest().into(),
            requested_action_precondition_revision: c.requested_action_precondition_revision(),
            install_expires_at: c.expires_at().into(),
        }
    }

    fn kinds(store: &ConsentStore, id: &str) -> Vec<String> {
        let stream = challenge_stream(id).unwrap();
        let records = store.journal().read_stream(&stream, 1, 100).unwrap();
        records.into_iter().map(|r| r.kind).collect()
    }

    fn head(store: &ConsentStore) -> u64 {
        store.journal().head_position().unwrap()
    }

    fn assert_rebuild_equal(store: &ConsentStore) {
        let report = store.projections().check(CONSENT_STORE_PROJECTION).unwrap();
        assert!(report.is_equal(), "{report:?}");
    }

    /// A store with challenge `id` created at 10:00 (expiring 11:00), decision-ready from an
    /// assertion with `nonce` issued 10:01, expiring 10:30, verified and marked at 10:02.
    fn ready(
        store: &ConsentStore,
        id: &str,
        nonce: &str,
    ) -> (InstallConsentChallenge, VerifiedHumanDecision) {
        let c = challenge(id);
        store.create_challenge(&c, t(NOW)).unwrap();
        let a = signed(&c, nonce, "2026-12-01T10:01:00Z", "2026-12-01T10:30:00Z");
        let at = t("2026-12-01T10:02:00Z");
        let decision = store.verify_human_decision(id, &a, &accept, at).unwrap();
        store.mark_decision_ready(&decision, at).unwrap();
        (c, decision)
    }

    #[test]
    fn pending_to_decision_ready_to_reserved_to_settled() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let c = challenge("consent-1");
        store.create_challenge(&c, t(NOW)).unwrap();
        let a = signed(
            &c,
            "nonce-1",
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:30:00Z",
        );
        let calls = Cell::new(0);
        let verify = |a: &SignedHumanDecisionAssertion, bytes: &[u8]| {
            calls.set(calls.get() + 1);
            bytes == a.signing_bytes().as_slice()
        };
        let before = head(&store);
        let decision = store
            .verify_human_decision("consent-1", &a, &verify, t("2026-12-01T10:02:00Z"))
            .unwrap();
        assert_eq!(calls.get(), 1);
        // Verifying a pending challenge writes nothing: the nonce and the floor go with the mark.
        assert_eq!(head(&store), before);
        assert_eq!(decision.challenge_id(), "consent-1");
        assert_eq!(decision.challenge_digest(), c.challenge_digest());
        assert_eq!(decision.decision(), HumanDecision::Granted);
        assert_eq!(decision.assertion_nonce_digest(), a.nonce_digest());
        assert_eq!(decision.expires_at(), "2026-12-01T10:30:00Z");

        let ready = store
            .mark_decision_ready(&decision, t("2026-12-01T10:02:00Z"))
            .unwrap();
        assert_eq!(ready.state(), ChallengeState::DecisionReady);
        assert_eq!(ready.decision(), Some("granted"));
        assert_eq!(ready.principal_digest(), Some(d("principal").as_str()));
        assert_eq!(ready.authenticator_id(), Some("authn-1"));
        assert_eq!(ready.audience(), Some(AUDIENCE));
        assert_eq!(
            ready.assertion_nonce_digest(),
            Some(a.nonce_digest().as_str())
        );
        assert_eq!(
            ready.decision_issued_at().as_deref(),
            Some("2026-12-01T10:01:00Z")
        );
        assert_eq!(
            ready.decision_expires_at().as_deref(),
            Some("2026-12-01T10:30:00Z")
        );
        assert_eq!(
            ready.decision_recorded_at().as_deref(),
            Some("2026-12-01T10:02:00Z")
        );
        assert_eq!(ready.reservation_event_id(), None);
        assert_eq!(ready.revision(), 2);
        assert_eq!(
            kinds(&store, "consent-1"),
            [CHALLENGE_KIND, DECISION_READY_KIND]
        );
        // One append: the decision and the floor raise on the identity stream.
        assert_eq!(head(&store), before + 2);
        let identity = store.identity_entry().unwrap().unwrap();
        assert_eq!(
            identity.trusted_time_high_water,
            Some(t("2026-12-01T10:02:00Z").0)
        );
        assert_eq!(identity.revision, 2);
        let ids = store
            .journal()
            .read_stream(&identity_stream().unwrap(), 2, 1)
            .unwrap();
        assert_eq!(ids[0].kind, TRUSTED_TIME_KIND);
        assert_eq!(
            ids[0].payload,
            b"{\"schema\":\"ctx.install-consent-broker-trusted-time-v1\",\"trusted_time_high_water\":\"2026-12-01T10:02:00Z\"}"
        );
        // The payload is canonical ASCII JSON bound to the challenge digest.
        let records = store
            .journal()
            .read_stream(&challenge_stream("consent-1").unwrap(), 2, 1)
            .unwrap();
        assert_eq!(
            records[0].event_id,
            format!("ctx-consent-r2:{}", c.challenge_digest())
        );
        assert_eq!(
            String::from_utf8(records[0].payload.clone()).unwrap(),
            format!(
                "{{\"assertion_nonce_digest\":\"{}\",\"audience\":\"{AUDIENCE}\",\"authenticator_id\":\"authn-1\",\"challenge_digest\":\"{}\",\"decision\":\"granted\",\"decision_expires_at\":\"2026-12-01T10:30:00Z\",\"decision_issued_at\":\"2026-12-01T10:01:00Z\",\"principal_digest\":\"{}\",\"schema\":\"ctx.install-consent-decision-ready-v1\"}}",
                a.nonce_digest(),
                c.challenge_digest(),
                d("principal")
            )
        );
        let entry = store.entry("consent-1").unwrap().unwrap();
        assert_eq!(entry.lifecycle.nonce_history_count, 1);
        assert_eq!(
            entry.lifecycle.nonce_history_digest,
            nonce_record_digest(
                "consent-1",
                &a.nonce_digest(),
                &nonce_history_genesis("consent-1"),
                t("2026-12-01T10:02:00Z"),
                1
            )
        );
        // The floor holds for a slower clock: the effective time is 10:02.
        let slow = store.get("consent-1", t("2026-12-01T09:00:00Z")).unwrap();
        assert_eq!(slow, ready);

        let token = store
            .reserve(
                &decision,
                &reservation(&c, "event-1"),
                t("2026-12-01T10:03:00Z"),
            )
            .unwrap();
        assert_eq!(token.event_id(), "event-1");
        let reserved = store.get("consent-1", t("2026-12-01T10:03:00Z")).unwrap();
        assert_eq!(reserved.state(), ChallengeState::Reserved);
        assert_eq!(reserved.reservation_event_id(), Some("event-1"));
        assert_eq!(
            reserved.reservation_event_content_digest(),
            Some(d("event-1").as_str())
        );
        assert_eq!(
            reserved.reserved_at().as_deref(),
            Some("2026-12-01T10:03:00Z")
        );
        assert!(
            store
                .entry("consent-1")
                .unwrap()
                .unwrap()
                .lifecycle
                .reservation
                .unwrap()
                .token_digest
                .is_some()
        );
        // A second reservation of the same decision is a replay.
        assert_eq!(
            store
                .reserve(
                    &decision,
                    &reservation(&c, "event-2"),
                    t("2026-12-01T10:03:00Z")
                )
                .unwrap_err()
                .to_string(),
            "install consent decision is already reserved"
        );

        let settled = store.settle(token, t("2026-12-01T10:04:00Z")).unwrap();
        assert_eq!(settled.state(), ChallengeState::Settled);
        assert_eq!(settled.settled_at(), Some("2026-12-01T10:04:00Z"));
        assert_eq!(settled.reservation_event_id(), Some("event-1"));
        assert_eq!(
            settled.reserved_at().as_deref(),
            Some("2026-12-01T10:03:00Z")
        );
        assert_eq!(
            kinds(&store, "consent-1"),
            [
                CHALLENGE_KIND,
                DECISION_READY_KIND,
                RESERVED_KIND,
                SETTLED_KIND
            ]
        );
        let entry = store.entry("consent-1").unwrap().unwrap();
        assert_eq!(entry.lifecycle.reservation.unwrap().token_digest, None);
        // Settled is terminal and untouched by time.
        let late = store.get("consent-1", t("2027-01-01T00:00:00Z")).unwrap();
        assert_eq!(late.state(), ChallengeState::Settled);
        assert_eq!(store.inspect_record("consent-1").unwrap(), settled);
        // Settled can no longer change: the challenge is retired (spec/projections.md §8.9, R2),
        // and a rebuild reproduces that.
        assert_eq!(store.challenge_count().unwrap(), 1);
        assert_eq!(store.live_challenge_count().unwrap(), 0);
        let projections = store.projections();
        let before = projections.digest(CONSENT_STORE_PROJECTION).unwrap();
        projections.rebuild(CONSENT_STORE_PROJECTION).unwrap();
        assert_eq!(
            projections.digest(CONSENT_STORE_PROJECTION).unwrap(),
            before
        );
        assert_eq!(
            store
                .verify_human_decision("consent-1", &a, &accept, t("2026-12-01T10:05:00Z"))
                .unwrap_err()
                .to_string(),
            "install consent decision is already settled"
        );
        assert_rebuild_equal(&store);
    }

    #[test]
    fn a_replayed_nonce_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (_, _) = ready(&store, "consent-1", "nonce-1");
        let c2 = challenge("consent-2");
        store.create_challenge(&c2, t(NOW)).unwrap();
        let before = head(&store);
        let a = signed(
            &c2,
            "nonce-1",
            "2026-12-01T10:03:00Z",
            "2026-12-01T10:30:00Z",
        );
        let calls = Cell::new(0);
        let counting = |_: &SignedHumanDecisionAssertion, _: &[u8]| {
            calls.set(calls.get() + 1);
            true
        };
        let e = store
            .verify_human_decision("consent-2", &a, &counting, t("2026-12-01T10:04:00Z"))
            .unwrap_err();
        assert_eq!(e, NONCE_REPLAY);
        assert_eq!(
            e.to_string(),
            "verified human decision nonce was already recorded"
        );
        assert!(matches!(e, ConsentStoreError::Conflict { .. }));
        assert_eq!(calls.get(), 0);
        assert_eq!(head(&store), before);
        // Two decisions verified with one nonce for two challenges: the first mark wins, the
        // projection refuses the second inside its append.
        let c3 = challenge("consent-3");
        store.create_challenge(&c3, t(NOW)).unwrap();
        let a2 = signed(
            &c2,
            "nonce-2",
            "2026-12-01T10:03:00Z",
            "2026-12-01T10:30:00Z",
        );
        let a3 = signed(
            &c3,
            "nonce-2",
            "2026-12-01T10:03:00Z",
            "2026-12-01T10:30:00Z",
        );
        let at = t("2026-12-01T10:04:00Z");
        let d2 = store
            .verify_human_decision("consent-2", &a2, &accept, at)
            .unwrap();
        let d3 = store
            .verify_human_decision("consent-3", &a3, &accept, at)
            .unwrap();
        store.mark_decision_ready(&d2, at).unwrap();
        let before = head(&store);
        assert_eq!(
            store.mark_decision_ready(&d3, at).unwrap_err(),
            NONCE_REPLAY
        );
        assert_eq!(head(&store), before);
        let raw = ConsentStore::lifecycle_append(
            &store.stored("consent-3").unwrap().unwrap(),
            &[super::super::lifecycle::Lifecycle::DecisionReady {
                decision: "granted".into(),
                principal_digest: d("principal"),
                authenticator_id: "authn-1".into(),
                audience: AUDIENCE.into(),
                assertion_nonce_digest: a3.nonce_digest(),
                issued_at: t("2026-12-01T10:03:00Z"),
                expires_at: t("2026-12-01T10:30:00Z"),
            }],
            at,
        )
        .unwrap();
        let e = store.journal().append(raw).unwrap_err();
        assert!(
            matches!(&e, AppendError::Hook { code: Some(code), .. } if *code == codes::CONSENT_NONCE_REPLAY),
            "{e:?}"
        );
        assert_eq!(append_error(e), NONCE_REPLAY);
        assert_rebuild_equal(&store);
    }

    #[test]
    fn verification_refusals_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let c = challenge("consent-1");
        store.create_challenge(&c, t(NOW)).unwrap();
        let a = signed(
            &c,
            "nonce-1",
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:30:00Z",
        );
        let at = t("2026-12-01T10:02:00Z");
        let before = head(&store);
        let msg = |id: &str,
                   a: &SignedHumanDecisionAssertion,
                   v: &dyn Fn(&SignedHumanDecisionAssertion, &[u8]) -> bool| {
            store.verify_human_decision(id, a, v, at).unwrap_err()
        };
        assert_eq!(msg("consent-9", &a, &accept), NOT_FOUND_ID);
        assert_eq!(
            msg("-bad", &a, &accept).to_string(),
            "challenge_id must be a bounded canonical token"
        );
        let cases: [(SignedHumanDecisionAssertion, &str); 4] = [
            (
                with(&a, |f| f.audience = "another-broker".into()),
                "signed assertion audience does not match this broker",
            ),
            (
                with(&a, |f| f.challenge_digest = d("other")),
                "signed assertion does not bind the exact challenge digest",
            ),
            (
                with(&a, |f| f.issued_at = "2026-12-01T10:03:00.000001Z".into()),
                "signed assertion is dated in the future: issued at 2026-12-01T10:03:00.000001Z, \
                 more than 60 seconds after this process's clock 2026-12-01T10:02:00Z",
            ),
            (
                with(&a, |f| f.expires_at = "2026-12-01T11:00:00.000001Z".into()),
                "signed assertion outlives the exact install challenge",
            ),
        ];
        for (bad, sentence) in cases {
            let e = msg("consent-1", &bad, &accept);
            assert_eq!(e.to_string(), sentence);
            assert!(matches!(e, ConsentStoreError::Rejected { .. }), "{e:?}");
        }
        let e = msg("consent-1", &a, &refuse_all);
        assert_eq!(
            e.to_string(),
            "signed human decision signature was not verified"
        );
        assert!(matches!(e, ConsentStoreError::Rejected { .. }));
        let panicking =
            |_: &SignedHumanDecisionAssertion, _: &[u8]| -> bool { panic!("verifier failed") };
        assert_eq!(
            msg("consent-1", &a, &panicking).to_string(),
            "signed human decision verifier rejected the assertion"
        );
        assert_eq!(head(&store), before);
        assert_eq!(
            store.get("consent-1", at).unwrap().state(),
            ChallengeState::Pending
        );
        // An assertion that expired by the time it is verified: Expired after the floor is
        // written (the reference commits the high-water before raising). The floor rises to the
        // signed issue time plus the skew (10:01 + 60 s), not to the verifying clock (C-12).
        let late = t("2026-12-01T10:30:00Z");
        let e = store
            .verify_human_decision("consent-1", &a, &accept, late)
            .unwrap_err();
        assert_eq!(e.to_string(), "signed assertion has expired");
        assert!(matches!(e, ConsentStoreError::Expired { .. }));
        assert_eq!(
            store
                .identity_entry()
                .unwrap()
                .unwrap()
                .trusted_time_high_water,
            Some(t("2026-12-01T10:02:00Z").0)
        );
        assert_eq!(kinds(&store, "consent-1"), [CHALLENGE_KIND]);
        assert_rebuild_equal(&store);
    }

    #[test]
    fn a_decision_is_bound_to_the_store_instance() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let c = challenge("consent-1");
        store.create_challenge(&c, t(NOW)).unwrap();
        let a = signed(
            &c,
            "nonce-1",
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:30:00Z",
        );
        let at = t("2026-12-01T10:02:00Z");
        let decision = store
            .verify_human_decision("consent-1", &a, &accept, at)
            .unwrap();
        let other = ConsentStore::open(Arc::clone(store.journal()), AUDIENCE).unwrap();
        let e = other.mark_decision_ready(&decision, at).unwrap_err();
        assert_eq!(e, NOT_PROCESS_BOUND);
        assert_eq!(
            e.to_string(),
            "VerifiedHumanDecision is not process-bound to this broker instance"
        );
        // The issuing instance records it; the other instance cannot reserve with it either.
        store.mark_decision_ready(&decision, at).unwrap();
        assert_eq!(
            other
                .reserve(&decision, &reservation(&c, "event-1"), at)
                .unwrap_err(),
            NOT_PROCESS_BOUND
        );
        // A second mark of the same decision is a replay.
        assert_eq!(
            store
                .mark_decision_ready(&decision, at)
                .unwrap_err()
                .to_string(),
            "install consent record is already decision-ready"
        );
    }

    #[test]
    fn expiry_of_a_decision_ready_challenge_is_sticky_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (c, decision) = ready(&store, "consent-1", "nonce-1");
        let before = head(&store);
        // A reader with a fast clock sees the view; nothing is written.
        let view = store.get("consent-1", t("2026-12-01T11:00:00Z")).unwrap();
        assert_eq!(view.state(), ChallengeState::Expired);
        assert_eq!(view.expired_at(), Some("2026-12-01T11:00:00Z"));
        assert_eq!(view.decision(), Some("granted"));
        assert_eq!(head(&store), before);
        // The decision's own TTL (10:30) passed first: re-authentication, as a view.
        assert_eq!(
            store
                .get("consent-1", t("2026-12-01T10:45:00Z"))
                .unwrap()
                .state(),
            ChallengeState::ReauthenticationRequired
        );
        assert_eq!(
            store
                .get("consent-1", t("2026-12-01T10:10:00Z"))
                .unwrap()
                .state(),
            ChallengeState::DecisionReady
        );
        // An operation that writes observes the expiry: it is written, then Expired is raised.
        let e = store
            .reserve(
                &decision,
                &reservation(&c, "event-1"),
                t("2026-12-01T11:00:00Z"),
            )
            .unwrap_err();
        assert_eq!(e, EXPIRED);
        assert_eq!(
            kinds(&store, "consent-1"),
            [CHALLENGE_KIND, DECISION_READY_KIND, EXPIRED_KIND]
        );
        // Sticky: an earlier clock no longer sees it decision-ready.
        let record = store.get("consent-1", t("2026-12-01T10:10:00Z")).unwrap();
        assert_eq!(record.state(), ChallengeState::Expired);
        // The tombstone reads as the view did (only the folded revision moved).
        assert_eq!(record.expired_at(), view.expired_at());
        assert_eq!(record.decision(), view.decision());
        assert_eq!((view.revision(), record.revision()), (2, 3));
        assert_eq!(
            store.inspect_record("consent-1").unwrap().state(),
            ChallengeState::Expired
        );
        assert_eq!(
            store
                .reserve(
                    &decision,
                    &reservation(&c, "event-1"),
                    t("2026-12-01T10:10:00Z")
                )
                .unwrap_err()
                .to_string(),
            "install consent decision is already expired"
        );
        assert_eq!(
            store
                .entry("consent-1")
                .unwrap()
                .unwrap()
                .lifecycle
                .expired_at,
            Some(t("2026-12-01T11:00:00Z").0)
        );
        assert_rebuild_equal(&store);
    }

    #[test]
    fn a_lapsed_decision_is_not_reserved() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (c, decision) = ready(&store, "consent-1", "nonce-1");
        let e = store
            .reserve(
                &decision,
                &reservation(&c, "event-1"),
                t("2026-12-01T10:30:00Z"),
            )
            .unwrap_err();
        assert_eq!(e, EXPIRED);
        assert_eq!(
            kinds(&store, "consent-1"),
            [
                CHALLENGE_KIND,
                DECISION_READY_KIND,
                REAUTHENTICATION_REQUIRED_KIND
            ]
        );
        // Re-authentication needs a fresh nonce and the same decision identity.
        let same = signed(
            &c,
            "nonce-1",
            "2026-12-01T10:31:00Z",
            "2026-12-01T10:50:00Z",
        );
        let at = t("2026-12-01T10:32:00Z");
        assert_eq!(
            store
                .verify_human_decision("consent-1", &same, &accept, at)
                .unwrap_err()
                .to_string(),
            "reconciliation requires a fresh nonce in the signed assertion"
        );
        let other = with(&same, |f| {
            f.nonce = "nonce-2".into();
            f.principal_digest = d("someone-else");
        });
        assert_eq!(
            store
                .verify_human_decision("consent-1", &other, &accept, at)
                .unwrap_err()
                .to_string(),
            "reverified assertion does not match the decision-ready record"
        );
        let fresh = with(&same, |f| f.nonce = "nonce-2".into());
        let again = store
            .verify_human_decision("consent-1", &fresh, &accept, at)
            .unwrap();
        let record = store.mark_decision_ready(&again, at).unwrap();
        assert_eq!(record.state(), ChallengeState::DecisionReady);
        assert_eq!(
            record.assertion_nonce_digest(),
            Some(fresh.nonce_digest().as_str())
        );
        assert_eq!(
            store
                .entry("consent-1")
                .unwrap()
                .unwrap()
                .lifecycle
                .nonce_history_count,
            2
        );
        assert_rebuild_equal(&store);
    }

    fn floor(store: &ConsentStore) -> Option<i64> {
        store
            .identity_entry()
            .unwrap()
            .unwrap()
            .trusted_time_high_water
    }

    /// The testers' scenario (spec/projections.md §8.7, C-12): a verification by a process whose
    /// clock runs 400 s ahead raises the floor only to the signed issue time plus the skew, so the
    /// person's next correctly dated assertion is accepted, and an assertion dated 200 s ahead of
    /// a correct clock is refused as dated in the future.
    #[test]
    fn a_clock_running_ahead_does_not_move_trusted_time_past_the_signed_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (c1, c2, c3) = (
            challenge("consent-1"),
            challenge("consent-2"),
            challenge("consent-3"),
        );
        for c in [&c1, &c2, &c3] {
            store.create_challenge(c, t(NOW)).unwrap();
        }
        // Signed at the real time 10:01 for 300 s (as `key sign` does), resolved by a process
        // whose clock reads 10:01 + 400 s: expired by that clock, and the floor written before
        // the refusal holds the signed time plus the skew, not the clock.
        let first = signed(
            &c1,
            "nonce-1",
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:06:00Z",
        );
        let e = store
            .verify_human_decision("consent-1", &first, &accept, t("2026-12-01T10:07:40Z"))
            .unwrap_err();
        assert_eq!(e.to_string(), "signed assertion has expired");
        assert_eq!(floor(&store), Some(t("2026-12-01T10:02:00Z").0));

        // A grant accepted by a process 400 s ahead: the floor again stops at issued + 60 s.
        let ahead = t("2026-12-01T10:08:20Z");
        let grant = signed(
            &c2,
            "nonce-2",
            "2026-12-01T10:01:40Z",
            "2026-12-01T10:30:00Z",
        );
        let decision = store
            .verify_human_decision("consent-2", &grant, &accept, ahead)
            .unwrap();
        let ready = store.mark_decision_ready(&decision, ahead).unwrap();
        assert_eq!(ready.state(), ChallengeState::DecisionReady);
        assert_eq!(floor(&store), Some(t("2026-12-01T10:02:40Z").0));

        // Back at the real time (10:01:50): an assertion dated 200 s ahead is refused, whatever
        // the floor, and nothing is written.
        let real = t("2026-12-01T10:01:50Z");
        let before = head(&store);
        let early = signed(
            &c3,
            "nonce-3",
            "2026-12-01T10:05:10Z",
            "2026-12-01T10:30:00Z",
        );
        let e = store
            .verify_human_decision("consent-3", &early, &accept, real)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "signed assertion is dated in the future: issued at 2026-12-01T10:05:10Z, more than 60 \
             seconds after this process's clock 2026-12-01T10:01:50Z"
        );
        assert!(matches!(e, ConsentStoreError::Rejected { .. }), "{e:?}");
        assert_eq!(head(&store), before);

        // A correctly dated assertion (signed 10:01:45 for 300 s) is accepted: before C-12 the
        // floor stood at 10:08:20, past its expiry. The floor does not move back either: the
        // decision is recorded at the effective time, the floor 10:02:40.
        let fresh = signed(
            &c3,
            "nonce-4",
            "2026-12-01T10:01:45Z",
            "2026-12-01T10:06:45Z",
        );
        let decision = store
            .verify_human_decision("consent-3", &fresh, &accept, real)
            .unwrap();
        let ready = store.mark_decision_ready(&decision, real).unwrap();
        assert_eq!(ready.state(), ChallengeState::DecisionReady);
        assert_eq!(
            ready.decision_recorded_at().as_deref(),
            Some("2026-12-01T10:02:40Z")
        );
        assert_eq!(floor(&store), Some(t("2026-12-01T10:02:40Z").0));
        assert_rebuild_equal(&store);
    }

    /// An assertion dated within the skew ahead of this process's clock is accepted; its signed
    /// time lifts the floor and the decision's effective time (the fold needs issued ≤ N).
    #[test]
    fn an_assertion_within_the_skew_lifts_the_floor_to_its_signed_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let c = challenge("consent-1");
        store.create_challenge(&c, t(NOW)).unwrap();
        let at = t("2026-12-01T10:02:00Z");
        let a = signed(
            &c,
            "nonce-1",
            "2026-12-01T10:03:00Z",
            "2026-12-01T10:30:00Z",
        );
        let decision = store
            .verify_human_decision("consent-1", &a, &accept, at)
            .unwrap();
        let ready = store.mark_decision_ready(&decision, at).unwrap();
        assert_eq!(
            ready.decision_recorded_at().as_deref(),
            Some("2026-12-01T10:03:00Z")
        );
        assert_eq!(floor(&store), Some(t("2026-12-01T10:03:00Z").0));
        assert_rebuild_equal(&store);
    }

    /// A refusal the floor causes, not this process's clock, names the floor (spec/projections.md
    /// §8.7); the floor stays monotonic: a slow clock neither lowers it nor revives what it
    /// expired.
    #[test]
    fn an_expiry_caused_by_the_floor_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (c1, c2) = (challenge("consent-1"), challenge("consent-2"));
        let c3 = InstallConsentChallenge::new(ChallengeFields {
            expires_at: "2026-12-01T10:35:00Z".into(),
            ..fields("consent-3")
        })
        .unwrap();
        for c in [&c1, &c2, &c3] {
            store.create_challenge(c, t(NOW)).unwrap();
        }
        // The person's decision signed and resolved at 10:40 raises the floor to 10:40.
        let at = t("2026-12-01T10:40:00Z");
        let a = signed(
            &c1,
            "nonce-1",
            "2026-12-01T10:40:00Z",
            "2026-12-01T10:50:00Z",
        );
        let decision = store
            .verify_human_decision("consent-1", &a, &accept, at)
            .unwrap();
        store.mark_decision_ready(&decision, at).unwrap();
        assert_eq!(floor(&store), Some(at.0));

        // A process whose clock reads 10:20 verifies an assertion that expired at 10:30.
        let slow = t("2026-12-01T10:20:00Z");
        let old = signed(
            &c2,
            "nonce-2",
            "2026-12-01T10:10:00Z",
            "2026-12-01T10:30:00Z",
        );
        let e = store
            .verify_human_decision("consent-2", &old, &accept, slow)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "signed assertion expired at 2026-12-01T10:30:00Z by ctx's trusted time floor \
             2026-12-01T10:40:00Z (the latest time the journal has seen), not by this process's \
             clock 2026-12-01T10:20:00Z"
        );
        assert!(matches!(e, ConsentStoreError::Expired { .. }), "{e:?}");
        assert_eq!(floor(&store), Some(at.0));
        assert_eq!(kinds(&store, "consent-2"), [CHALLENGE_KIND]);

        // The challenge expiry the floor makes due is written and named the same way.
        let late = signed(
            &c3,
            "nonce-3",
            "2026-12-01T10:10:00Z",
            "2026-12-01T10:30:00Z",
        );
        let e = store
            .verify_human_decision("consent-3", &late, &accept, slow)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "install consent challenge expired at 2026-12-01T10:35:00Z by ctx's trusted time \
             floor 2026-12-01T10:40:00Z (the latest time the journal has seen), not by this \
             process's clock 2026-12-01T10:20:00Z"
        );
        assert_eq!(kinds(&store, "consent-3"), [CHALLENGE_KIND, EXPIRED_KIND]);
        // A clock at the deadline is the process's own refusal: the reference's sentence.
        assert_eq!(
            store
                .verify_human_decision("consent-3", &late, &accept, t("2026-12-01T10:35:00Z"))
                .unwrap_err(),
            EXPIRED
        );
        assert_rebuild_equal(&store);
    }

    #[test]
    fn reverification_of_a_ready_decision_records_its_nonce() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (c, first) = ready(&store, "consent-1", "nonce-1");
        let a = signed(
            &c,
            "nonce-2",
            "2026-12-01T10:05:00Z",
            "2026-12-01T10:40:00Z",
        );
        let decision = store
            .verify_human_decision("consent-1", &a, &accept, t("2026-12-01T10:06:00Z"))
            .unwrap();
        // The decision carries the record's nonce and times, not the new assertion's.
        assert_eq!(decision, first);
        assert_eq!(
            kinds(&store, "consent-1"),
            [CHALLENGE_KIND, DECISION_READY_KIND, NONCE_RECORDED_KIND]
        );
        let entry = store.entry("consent-1").unwrap().unwrap();
        assert_eq!(entry.lifecycle.nonce_history_count, 2);
        assert_eq!(
            store
                .identity_entry()
                .unwrap()
                .unwrap()
                .trusted_time_high_water,
            Some(t("2026-12-01T10:06:00Z").0)
        );
        // Its nonce is consumed.
        assert_eq!(
            store
                .verify_human_decision("consent-1", &a, &accept, t("2026-12-01T10:07:00Z"))
                .unwrap_err(),
            NONCE_REPLAY
        );
        // The re-verified decision reserves like the first.
        store
            .reserve(
                &decision,
                &reservation(&c, "event-1"),
                t("2026-12-01T10:07:00Z"),
            )
            .unwrap();
        assert_rebuild_equal(&store);
    }

    #[test]
    fn reserve_then_release_returns_to_decision_ready() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (c, decision) = ready(&store, "consent-1", "nonce-1");
        let at = t("2026-12-01T10:03:00Z");
        let mut wrong = reservation(&c, "event-1");
        wrong.requested_action_precondition_revision += 1;
        let before = head(&store);
        assert_eq!(
            store
                .reserve(&decision, &wrong, at)
                .unwrap_err()
                .to_string(),
            "interactive reservation does not match the exact install challenge"
        );
        let mut denied = reservation(&c, "event-1");
        denied.decision = HumanDecision::Denied;
        assert!(matches!(
            store.reserve(&decision, &denied, at).unwrap_err(),
            ConsentStoreError::Rejected { .. }
        ));
        assert_eq!(head(&store), before);
        let token = store
            .reserve(&decision, &reservation(&c, "event-1"), at)
            .unwrap();
        let released = store.release(token, t("2026-12-01T10:04:00Z")).unwrap();
        assert_eq!(released.state(), ChallengeState::DecisionReady);
        assert_eq!(released.reservation_event_id(), None);
        assert_eq!(released.reserved_at(), None);
        assert_eq!(
            kinds(&store, "consent-1"),
            [
                CHALLENGE_KIND,
                DECISION_READY_KIND,
                RESERVED_KIND,
                RELEASED_KIND
            ]
        );
        // Reserved again, then settled in the same atomic append as another stream's record
        // (the engine's decision event, in the service).
        let token = store
            .reserve(
                &decision,
                &reservation(&c, "event-2"),
                t("2026-12-01T10:05:00Z"),
            )
            .unwrap();
        let settle = store
            .settle_append(&token, t("2026-12-01T10:06:00Z"))
            .unwrap();
        let engine = StreamAppend::new(
            StreamId::derive("test.engine", b"scope").unwrap(),
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                "event-2",
                "test.decision",
                Timestamp(0),
                b"{}".to_vec(),
            )],
        );
        let result = store
            .journal()
            .append_batch(vec![engine, settle.clone()])
            .map(drop);
        let settled = store.settle_outcome(&token, &settle, result).unwrap();
        assert_eq!(settled.state(), ChallengeState::Settled);
        assert_eq!(settled.reservation_event_id(), Some("event-2"));
        // A retry of the same settlement is decided against the stored one.
        let stale = Err(AppendError::WrongRevision {
            stream: settle.stream,
            expected: settle.expected,
            current: 6,
        });
        assert_eq!(
            store.settle_outcome(&token, &settle, stale).unwrap(),
            settled
        );
        assert_eq!(
            store
                .release(token, t("2026-12-01T10:07:00Z"))
                .unwrap_err()
                .to_string(),
            "interactive decision is no longer reserved"
        );
        assert_rebuild_equal(&store);
    }

    #[test]
    fn reconcile_settles_on_committed_evidence_and_reopens_on_absence() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        // consent-1: reserved, then the settle never happened ("guard settlement failed").
        let (c1, d1) = ready(&store, "consent-1", "nonce-1");
        let r1 = reservation(&c1, "event-1");
        let token = store.reserve(&d1, &r1, t("2026-12-01T10:03:00Z")).unwrap();
        drop(token);
        let at = t("2026-12-01T10:05:00Z");
        assert_eq!(store.recover(at).unwrap().retained_reserved, 1);
        let committed = DecisionEvidence::Committed {
            event_id: "event-1".into(),
            event_content_digest: d("event-1"),
            head_revision: 7,
            head_record_digest: d("head"),
        };
        let mut other = r1.clone();
        other.event_id = "event-9".into();
        other.event_content_digest = d("event-9");
        assert_eq!(
            store
                .reconcile_install_decision(&other, &DecisionEvidence::AbsentAtExpectedHead, at)
                .unwrap_err()
                .to_string(),
            "journal evidence does not match the persisted broker reservation"
        );
        let report = store
            .reconcile_install_decision(&r1, &committed, at)
            .unwrap();
        assert_eq!(report.outcome, ReconciliationOutcome::Settled);
        assert_eq!(report.journal_status, JournalStatus::Committed);
        assert_eq!(report.record.state(), ChallengeState::Settled);
        assert_eq!(report.record.settled_at(), Some("2026-12-01T10:05:00Z"));
        assert_eq!(
            report.record.reserved_at().as_deref(),
            Some("2026-12-01T10:03:00Z")
        );
        // Idempotent; absence cannot reopen it.
        let before = head(&store);
        assert_eq!(
            store
                .reconcile_install_decision(&r1, &committed, at)
                .unwrap()
                .record,
            report.record
        );
        assert_eq!(head(&store), before);
        assert_eq!(
            store
                .reconcile_install_decision(&r1, &DecisionEvidence::AbsentAtExpectedHead, at)
                .unwrap_err()
                .to_string(),
            "absence cannot reopen a settled install decision"
        );

        // consent-2: reserved, the event absent at the expected head → re-authentication.
        let (c2, d2) = ready(&store, "consent-2", "nonce-2");
        let r2 = reservation(&c2, "event-2");
        drop(store.reserve(&d2, &r2, at).unwrap());
        let quarantined = store
            .reconcile_install_decision(&r2, &DecisionEvidence::HeadAdvanced, at)
            .unwrap();
        assert_eq!(quarantined.outcome, ReconciliationOutcome::Quarantined);
        assert_eq!(quarantined.journal_status, JournalStatus::HeadAdvanced);
        assert_eq!(quarantined.record.state(), ChallengeState::Reserved);
        let report = store
            .reconcile_install_decision(&r2, &DecisionEvidence::AbsentAtExpectedHead, at)
            .unwrap();
        assert_eq!(
            report.outcome,
            ReconciliationOutcome::ReauthenticationRequired
        );
        assert_eq!(report.journal_status, JournalStatus::AbsentAtExpectedHead);
        assert_eq!(
            report.record.state(),
            ChallengeState::ReauthenticationRequired
        );
        assert_eq!(report.record.reservation_event_id(), None);
        assert_eq!(report.record.decision(), Some("granted"));

        // consent-3: decision-ready, absent after the challenge expired → expired.
        let (c3, _) = ready(&store, "consent-3", "nonce-3");
        let r3 = reservation(&c3, "event-3");
        let report = store
            .reconcile_install_decision(
                &r3,
                &DecisionEvidence::AbsentAtExpectedHead,
                t("2026-12-01T11:00:00Z"),
            )
            .unwrap();
        assert_eq!(report.outcome, ReconciliationOutcome::Expired);
        assert_eq!(report.record.state(), ChallengeState::Expired);
        assert_eq!(*kinds(&store, "consent-3").last().unwrap(), EXPIRED_KIND);

        // A pending challenge has no decision: the exact check refuses it.
        let c4 = challenge("consent-4");
        store.create_challenge(&c4, t(NOW)).unwrap();
        assert_eq!(
            store
                .reconcile_install_decision(&reservation(&c4, "event-4"), &committed, at)
                .unwrap_err()
                .to_string(),
            "journal evidence does not match the exact broker decision and reservation"
        );
        assert_rebuild_equal(&store);
    }

    #[test]
    fn recover_writes_due_transitions_and_retains_reservations() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (c1, d1) = ready(&store, "consent-1", "nonce-1");
        drop(
            store
                .reserve(&d1, &reservation(&c1, "event-1"), t("2026-12-01T10:03:00Z"))
                .unwrap(),
        );
        ready(&store, "consent-2", "nonce-2");
        let mut late = fields("consent-3");
        late.expires_at = "2026-12-01T10:20:00Z".into();
        store
            .create_challenge(&InstallConsentChallenge::new(late).unwrap(), t(NOW))
            .unwrap();
        store
            .create_challenge(&challenge("consent-4"), t(NOW))
            .unwrap();
        let report = store.recover(t("2026-12-01T10:40:00Z")).unwrap();
        assert_eq!(
            report,
            RecoveryReport {
                expired: 1,
                reauthentication_required: 1,
                retained_reserved: 1,
            }
        );
        let state = |id: &str| store.inspect_record(id).unwrap().state();
        assert_eq!(state("consent-1"), ChallengeState::Reserved);
        assert_eq!(state("consent-2"), ChallengeState::ReauthenticationRequired);
        assert_eq!(state("consent-3"), ChallengeState::Expired);
        assert_eq!(state("consent-4"), ChallengeState::Pending);
        // Nothing is due any more at that time.
        assert_eq!(
            store.recover(t("2026-12-01T10:40:00Z")).unwrap(),
            RecoveryReport {
                retained_reserved: 1,
                ..RecoveryReport::default()
            }
        );
        assert_rebuild_equal(&store);
        // A reopen re-validates the identity with its floor and every record.
        drop(store);
        let store = ConsentStore::open(open_journal(dir.path(), 1), AUDIENCE).unwrap();
        assert_eq!(
            store.inspect_record("consent-2").unwrap().state(),
            ChallengeState::ReauthenticationRequired
        );
        assert_rebuild_equal(&store);
    }

    #[test]
    fn the_projection_refuses_illegal_transitions() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let c = challenge("consent-1");
        store.create_challenge(&c, t(NOW)).unwrap();
        let stored = store.stored("consent-1").unwrap().unwrap();
        use super::super::lifecycle::{ExpiryCause, Lifecycle, SettleBasis};
        let forged = [
            Lifecycle::Settled {
                event_id: "event-1".into(),
                event_content_digest: d("event-1"),
                basis: SettleBasis::CommittedEvidence {
                    head_revision: 1,
                    head_record_digest: d("head"),
                },
            },
            Lifecycle::Reserved {
                event_id: "event-1".into(),
                event_content_digest: d("event-1"),
                token_digest: d("token"),
            },
            // An expiry before the challenge expired.
            Lifecycle::Expired {
                cause: ExpiryCause::ChallengeExpired,
            },
        ];
        for record in forged {
            let append =
                ConsentStore::lifecycle_append(&stored, &[record], t("2026-12-01T10:05:00Z"))
                    .unwrap();
            let e = store.journal().append(append).unwrap_err();
            assert!(
                matches!(&e, AppendError::Hook { code: Some(code), .. } if *code == codes::CONSENT_TRANSITION),
                "{e:?}"
            );
        }
        // A lifecycle record at the wrong revision (event id of revision 3 at revision 2).
        let mut append = ConsentStore::lifecycle_append(
            &stored,
            &[Lifecycle::Expired {
                cause: ExpiryCause::ChallengeExpired,
            }],
            t("2026-12-01T11:00:00Z"),
        )
        .unwrap();
        append.records[0].event_id = format!("ctx-consent-r3:{}", c.challenge_digest());
        let e = store.journal().append(append).unwrap_err();
        assert!(
            matches!(&e, AppendError::Hook { code: Some(code), .. } if *code == codes::CONSENT_RECORD_INVALID),
            "{e:?}"
        );
        // A non-canonical payload.
        let mut append = ConsentStore::lifecycle_append(
            &stored,
            &[Lifecycle::Expired {
                cause: ExpiryCause::ChallengeExpired,
            }],
            t("2026-12-01T11:00:00Z"),
        )
        .unwrap();
        append.records[0].payload = String::from_utf8(append.records[0].payload.clone())
            .unwrap()
            .replacen(':', ": ", 1)
            .into_bytes();
        assert!(store.journal().append(append).is_err());
        // A foreign record on the identity stream.
        let e = store
            .journal()
            .append(StreamAppend::new(
                identity_stream().unwrap(),
                ExpectedRevision::Exact(1),
                vec![NewRecord::new(
                    "x-1",
                    "test.other",
                    Timestamp(0),
                    b"{}".to_vec(),
                )],
            ))
            .unwrap_err();
        assert!(matches!(e, AppendError::Hook { .. }), "{e:?}");
        assert_eq!(kinds(&store, "consent-1"), [CHALLENGE_KIND]);
        assert_rebuild_equal(&store);
    }

    #[test]
    fn a_tampered_lifecycle_record_or_entry_is_refused() {
        // Payloads stored as is, so the edit below finds its text (spec/journal.md §4, R7).
        let _as_is = ctx_journal::StorePayloadsAsIs::new();
        let dir = tempfile::tempdir().unwrap();
        {
            let store = open(dir.path());
            let (c, decision) = ready(&store, "consent-1", "nonce-1");
            drop(
                store
                    .reserve(
                        &decision,
                        &reservation(&c, "event-1"),
                        t("2026-12-01T10:03:00Z"),
                    )
                    .unwrap(),
            );
            // An index entry edited to claim `settled`: the re-fold disagrees.
            let mut entry = store.entry("consent-1").unwrap().unwrap();
            entry.lifecycle.state = ChallengeState::Settled.code();
            let bytes = archive::to_bytes(&entry).unwrap();
            store
                .journal()
                .maintain(|tx| {
                    tx.insert(CONSENT_CHALLENGES_TABLE, b"consent-1", &bytes)
                        .map(|()| ((), true))
                        .map_err(HookError::from)
                })
                .unwrap();
            let e = store
                .get("consent-1", t("2026-12-01T10:04:00Z"))
                .unwrap_err();
            assert_eq!(e.to_string(), "consent broker index authentication failed");
            store
                .projections()
                .rebuild(CONSENT_STORE_PROJECTION)
                .unwrap();
            assert_eq!(
                store
                    .get("consent-1", t("2026-12-01T10:04:00Z"))
                    .unwrap()
                    .state(),
                ChallengeState::Reserved
            );
        }
        // The reserved record's event id edited on disk (same length): the MAC fails.
        let hits = tamper_file(
            dir.path(),
            b"\"reservation_event_id\":\"event-1\"",
            b"\"reservation_event_id\":\"event-7\"",
        );
        assert!(hits >= 1);
        let journal = open_journal(dir.path(), 1);
        let e = ConsentStore::open(Arc::clone(&journal), AUDIENCE).unwrap_err();
        assert_eq!(
            e.to_string(),
            "consent broker journal authentication failed"
        );
    }
}

/// A challenge `id` expiring at `expires_at`.
fn challenge_until(id: &str, expires_at: &str) -> InstallConsentChallenge {
    let mut f = fields(id);
    f.expires_at = expires_at.into();
    InstallConsentChallenge::new(f).unwrap()
}

#[test]
fn challenges_expired_before_a_new_one_leave_the_capacity_count() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // Two days of prompts, three challenges an hour, each open for an hour: many more than the
    // ones alive at once. Every creation retires those that expired before it (R3).
    let mut created = 0u64;
    for hour in 0..48i64 {
        for k in 0..3i64 {
            let at = t(NOW)
                .checked_add((hour * 60 + k * 20) * 60_000_000)
                .unwrap();
            let until = at.checked_add(3_600_000_000).unwrap();
            let c = challenge_until(&format!("consent-{hour}-{k}"), &until.render());
            store.create_challenge(&c, at).unwrap();
            created += 1;
            // Alive: this one and those created in the hour before it (expiry strictly after).
            assert!(store.live_challenge_count().unwrap() <= 4, "hour {hour}");
        }
    }
    assert_eq!(store.challenge_count().unwrap(), created);
    assert_eq!(store.live_challenge_count().unwrap(), 3);
    // A retired challenge is still there: read back, and an identical create is the stored one.
    let old = challenge_until("consent-0-0", "2026-12-01T11:00:00Z");
    let late = t("2026-12-04T00:00:00Z");
    assert_eq!(store.get("consent-0-0", late).unwrap().challenge(), &old);
    assert_eq!(
        store.create_challenge(&old, late).unwrap_err().to_string(),
        EXPIRED.to_string()
    );
    assert_eq!(store.challenge_count().unwrap(), created);
    // The live table and counters are part of the fold.
    let projections = store.projections();
    let report = projections.check(CONSENT_STORE_PROJECTION).unwrap();
    assert!(report.is_equal(), "{report:?}");
    let before = projections.digest(CONSENT_STORE_PROJECTION).unwrap();
    projections.rebuild(CONSENT_STORE_PROJECTION).unwrap();
    assert_eq!(
        projections.digest(CONSENT_STORE_PROJECTION).unwrap(),
        before
    );
    assert_eq!(store.live_challenge_count().unwrap(), 3);
}

#[test]
fn at_capacity_only_expiry_or_settlement_makes_room() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_challenge(&challenge("consent-1"), t(NOW))
        .unwrap();
    // Pretend the other live slots are taken: consent-1 (expiring at 11:00) is the last one.
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
    let next = challenge_until("consent-2", "2026-12-01T13:00:00Z");
    // Before consent-1 expires: refused early and inside the append.
    let before = t("2026-12-01T10:59:59Z");
    assert_eq!(store.create_challenge(&next, before).unwrap_err(), CAPACITY);
    assert_eq!(
        append_error(append_raw(&store, &next, "2026-12-01T10:59:59Z", None).unwrap_err()),
        CAPACITY
    );
    // At its expiry it retires, and the new challenge takes its slot.
    let at = t("2026-12-01T11:00:00Z");
    let created = store.create_challenge(&next, at).unwrap();
    assert_eq!(created.state(), ChallengeState::Pending);
    assert_eq!(
        store.live_challenge_count().unwrap(),
        CONSENT_CHALLENGES_MAX
    );
    let third = challenge_until("consent-3", "2026-12-01T13:00:00Z");
    assert_eq!(store.create_challenge(&third, at).unwrap_err(), CAPACITY);
}
