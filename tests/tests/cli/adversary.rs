//! The agent as the adversary of the consent path (spec/decisions.md §12.1): a process of the
//! person's own user, with their environment and every file they can touch, but no controlling
//! terminal. Each test plays one of its attempts against the built binary and checks that it is
//! refused with a typed error, that nothing is installed, and that `ctx audit` stays clean; the
//! person at a real terminal (a pty the test makes) then succeeds where the agent failed.

use std::path::{Path, PathBuf};

use ctx_journal::{ExpectedRevision, NewRecord, StreamAppend, StreamId, Timestamp};
use ctx_model::{Json, UtcMicros};
use ctx_projections::consent_store::{AssertionFields, SignedHumanDecisionAssertion};
use ctx_projections::streams::{DECISION_EVIDENCE_NAMESPACE, TRUST_CHANGE_KIND};
use ctx_service::{Ed25519Signer, VerifierEntry, VerifierKind};

use super::person::{
    installed, pending_challenge, person_decide, person_key_init, registry, result,
    terraform_challenge,
};
use crate::support::{self, CtxRun, run_ctx, run_ctx_env};

/// A data directory whose person has registered a sealed device key at their terminal, with a
/// pending consent for skill:terraform asked through the JSON interface.
struct Scene {
    _dir: tempfile::TempDir,
    data: PathBuf,
    home: PathBuf,
    digest: String,
}

impl Scene {
    fn new() -> Scene {
        let dir = support::tempdir();
        let data = dir.path().join("ctx");
        let home = dir.path().join("home");
        let digest = pending_challenge(&data);
        let init = person_key_init(&data, &[("HOME", home.as_path())]);
        assert_eq!(init.code, 0, "{init:?}");
        Scene {
            _dir: dir,
            data,
            home,
            digest,
        }
    }

    fn env(&self) -> [(&'static str, &Path); 1] {
        [("HOME", self.home.as_path())]
    }

    /// Runs ctx as the agent does: the person's HOME, no terminal.
    fn agent(&self, args: &[&str], stdin: &str) -> CtxRun {
        run_ctx_env(&self.data, args, stdin, &self.env())
    }

    fn device_key(&self) -> PathBuf {
        self.home.join(".config/ctx/device.key")
    }

    /// The person, at their terminal, approves; the install happens once and the audit is clean.
    fn person_approves(&self) {
        let approved = person_decide(&self.data, "approve", &self.digest, &self.env());
        assert_eq!(approved.code, 0, "{approved:?}");
        assert_eq!(installed(&self.data), 1);
        self.assert_audit_clean();
    }

    fn assert_audit_clean(&self) {
        let audit = run_ctx(&self.data, &["audit"], "");
        assert_eq!(audit.code, 0, "{} {}", audit.stdout, audit.stderr);
    }

    fn journal(&self) -> ctx_journal::Journal {
        ctx_service::open_journal(&self.data.join("journal"), &ctx_journal::OpenOptions::new())
            .expect("the journal opens for any process of the user")
    }
}

/// `consent resolve` with `assertion`: must be refused with the JSON error `code`.
fn resolve_refused(scene: &Scene, assertion: &str, code: &str) -> String {
    let request = Json::object([("assertion", Json::str(assertion))]).to_string();
    let run = scene.agent(&["consent", "resolve"], &request);
    assert_ne!(run.code, 0, "{run:?}");
    let value = Json::parse(run.stdout.trim_end()).expect("one JSON line");
    assert_eq!(value.get("ok"), Some(&Json::Bool(false)), "{run:?}");
    let error = value.get("error").expect("an error");
    assert_eq!(error.get_str("code"), Some(code), "{run:?}");
    error.get_str("message").unwrap_or_default().to_owned()
}

/// The wall clock, as the agent's own code would read it.
fn now() -> UtcMicros {
    UtcMicros(
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_micros(),
        )
        .expect("in range"),
    )
}

/// An assertion in the wire form, signed by `signer` under the identity `entry` claims.
fn forged_assertion(
    signer: &Ed25519Signer,
    entry: &VerifierEntry,
    challenge_digest: &str,
) -> String {
    let unsigned = assertion_in_name_of(entry, challenge_digest, b"unsigned".to_vec());
    let signed = signer.sign_assertion(&unsigned).expect("signed");
    String::from_utf8(signed.encode().expect("encoded")).expect("UTF-8")
}

/// A grant of `challenge_digest` in `entry`'s name, valid now, carrying `proof` as it is.
fn assertion_in_name_of(
    entry: &VerifierEntry,
    challenge_digest: &str,
    proof: Vec<u8>,
) -> SignedHumanDecisionAssertion {
    let now = now();
    SignedHumanDecisionAssertion::new(AssertionFields {
        challenge_digest: challenge_digest.to_owned(),
        decision: "granted".to_owned(),
        principal_digest: entry.principal_digest.clone(),
        authenticator_id: entry.authenticator_id.clone(),
        audience: ctx_service::CONSENT_AUDIENCE.to_owned(),
        nonce: "ctx-nonce-00112233445566778899aabbccddeeff".to_owned(),
        issued_at: now.render(),
        expires_at: UtcMicros(now.0 + 300_000_000).render(),
        proof,
    })
    .expect("well-formed fields")
}

#[test]
fn approving_without_a_terminal_is_refused_and_the_person_at_one_succeeds() {
    let scene = Scene::new();
    // The eager agent's first move: approve what it was told needs the person's consent.
    for args in [
        &["consent", "approve", scene.digest.as_str(), "--yes"][..],
        &["consent", "approve", scene.digest.as_str()][..],
        &["consent", "deny", scene.digest.as_str(), "--yes"][..],
    ] {
        let run = scene.agent(args, "y\ncorrect horse battery\n");
        assert_eq!(run.code, 1, "{args:?}: {run:?}");
        assert!(
            run.stderr.contains("no controlling terminal"),
            "{args:?}: {}",
            run.stderr
        );
    }
    // Signing through the host interface asks for the passphrase at the terminal too.
    let key = scene.device_key();
    let request = Json::object([
        ("challenge_digest", Json::str(&scene.digest)),
        ("decision", Json::str("granted")),
    ])
    .to_string();
    let sign = scene.agent(
        &["key", "sign", "--key", key.to_str().expect("UTF-8")],
        &request,
    );
    assert_ne!(sign.code, 0, "{sign:?}");
    assert!(sign.stdout.contains("\"no-terminal\""), "{sign:?}");
    assert_eq!(installed(&scene.data), 0);
    scene.assert_audit_clean();
    scene.person_approves();
}

#[test]
fn the_key_file_read_by_the_agent_signs_nothing_that_verifies() {
    let scene = Scene::new();
    let sealed = std::fs::read(scene.device_key()).expect("the agent can read the key file");
    let person = registry(&scene.data)
        .active()
        .next()
        .expect("the person's verifier")
        .entry
        .clone();
    // Every 32-byte window of the sealed file taken as an Ed25519 seed, signing in the person's
    // name with the agent's own code.
    for start in (0..=sealed.len() - 32).step_by(8) {
        let seed: [u8; 32] = sealed[start..start + 32].try_into().expect("32 bytes");
        let signer = Ed25519Signer::from_seed(&seed);
        let forged = forged_assertion(&signer, &person, &scene.digest);
        resolve_refused(&scene, &forged, "rejected");
    }
    // A key of the agent's own, claiming the person's identity.
    let own = ctx_service::fresh_signer().expect("randomness");
    resolve_refused(
        &scene,
        &forged_assertion(&own, &person, &scene.digest),
        "rejected",
    );
    assert_eq!(installed(&scene.data), 0);
    scene.assert_audit_clean();
    scene.person_approves();
}

#[test]
fn a_key_the_agent_mints_or_plants_is_never_a_verifier() {
    let scene = Scene::new();
    let minted = scene.data.with_extension("agent.key");
    let minted_arg = minted.to_str().expect("UTF-8");
    let generated = result(&scene.agent(&["key", "generate", "--out", minted_arg], ""));
    assert_eq!(generated.get("registered"), Some(&Json::Bool(false)));

    // Registering it: from no terminal, and as a file key once the person has a sealed one.
    let init = scene.agent(&["key", "init", "--key", minted_arg], "");
    assert_eq!(init.code, 1, "{init:?}");
    assert!(init.stderr.contains("no controlling terminal"), "{init:?}");
    let file_key = scene.agent(&["key", "init", "--file-key", "--key", minted_arg], "");
    assert_ne!(file_key.code, 0, "{file_key:?}");

    // Planting it where verifiers used to be files.
    let text = std::fs::read_to_string(&minted).expect("the minted key");
    let public = generated.get_str("public_key").expect("its public key");
    std::fs::create_dir_all(scene.data.join("verifiers")).expect("a verifiers directory");
    std::fs::write(
        scene.data.join("verifiers/agent.json"),
        Json::object([
            (
                "authenticator_id",
                Json::str(generated.get_str("authenticator_id").unwrap_or("")),
            ),
            ("kind", Json::str("sealed-key")),
            ("public_key", Json::str(public)),
        ])
        .to_string(),
    )
    .expect("the agent writes into the data directory");
    assert!(!text.is_empty());

    // Approving with it, plain and non-interactive: refused, the key is nobody.
    let approve = scene.agent(
        &[
            "consent",
            "approve",
            &scene.digest,
            "--key",
            minted_arg,
            "--yes",
        ],
        "",
    );
    assert_ne!(approve.code, 0, "{approve:?}");
    assert!(
        approve
            .stderr
            .contains("no exact human decision verifier is registered"),
        "{approve:?}"
    );
    let trust = registry(&scene.data);
    assert_eq!(
        trust.active().count(),
        1,
        "the registry holds the person's key only"
    );
    assert_eq!(installed(&scene.data), 0);
    scene.assert_audit_clean();
    scene.person_approves();
}

#[test]
fn a_plain_file_key_never_approves_what_a_hook_asked() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let home = dir.path().join("home");
    let project = dir.path().join("infra");
    std::fs::create_dir_all(&project).expect("a project");
    let env = [("HOME", home.as_path())];
    // CI mode: the only verifier is a plain file key, which the agent can read.
    let key = dir.path().join("ci.key");
    let key_arg = key.to_str().expect("UTF-8");
    let init = run_ctx_env(
        &data,
        &["key", "init", "--file-key", "--key", key_arg],
        "",
        &env,
    );
    assert_eq!(init.code, 0, "{init:?}");
    let input = Json::object([
        ("cwd", Json::str(project.display().to_string())),
        ("hook_event_name", Json::str("UserPromptSubmit")),
        ("permission_mode", Json::str("default")),
        (
            "prompt",
            Json::str("write terraform for the new infrastructure"),
        ),
        ("session_id", Json::str("s-9")),
        ("transcript_path", Json::str("/tmp/transcripts/s-9.jsonl")),
    ]);
    let hook = run_ctx_env(
        &data,
        &["hook", "claude", "user-prompt-submit"],
        &input.to_string(),
        &env,
    );
    assert_eq!(hook.code, 0, "{hook:?}");
    let reply = Json::parse(hook.stdout.trim_end()).expect("a hook reply");
    let message = reply
        .get_str("systemMessage")
        .expect("a message to the person");
    let digest = message
        .split("ctx consent approve ")
        .nth(1)
        .and_then(|rest| rest.get(..64))
        .unwrap_or_else(|| panic!("no challenge in {message:?}"));
    let approve = run_ctx_env(
        &data,
        &["consent", "approve", digest, "--key", key_arg, "--yes"],
        "",
        &env,
    );
    assert_ne!(approve.code, 0, "{approve:?}");
    let said = format!("{}{}", approve.stdout, approve.stderr);
    assert!(said.contains("file assurance"), "{said}");
    assert!(said.contains("at least presence assurance"), "{said}");
    assert_eq!(installed(&data), 0);
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
}

#[test]
fn a_replayed_assertion_is_refused_for_its_own_challenge_and_for_another() {
    let scene = Scene::new();
    // A second challenge for the same install in another session: a signature over the first
    // must not cover it.
    let other = terraform_challenge(&scene.data, "s-2");
    assert_ne!(other, scene.digest);
    scene.person_approves();
    // The agent reads the person's signed assertion back out of the journal.
    let journal = scene.journal();
    let evidence = journal
        .read_stream(
            &StreamId::derive(DECISION_EVIDENCE_NAMESPACE, scene.digest.as_bytes())
                .expect("a stream id"),
            1,
            8,
        )
        .expect("the evidence stream");
    let value = Json::parse(std::str::from_utf8(&evidence[0].payload).expect("UTF-8"))
        .expect("JSON evidence");
    let assertion = value
        .get_str("assertion")
        .expect("the assertion")
        .to_owned();
    drop(journal);
    resolve_refused(&scene, &assertion, "refused");

    let retargeted = assertion.replace(&scene.digest, &other);
    assert_ne!(retargeted, assertion);
    // Refused for its spent nonce, and with a fresh nonce for the signature that covers neither.
    resolve_refused(&scene, &retargeted, "conflict");
    let at = retargeted.find("ctx-nonce-").expect("a nonce") + "ctx-nonce-".len();
    let mut fresh = retargeted.clone();
    let flipped = if &fresh[at..=at] == "0" { "1" } else { "0" };
    fresh.replace_range(at..=at, flipped);
    resolve_refused(&scene, &fresh, "rejected");
    assert_eq!(
        installed(&scene.data),
        1,
        "only the person's approval installed"
    );
    scene.assert_audit_clean();
}

#[test]
fn a_forged_registry_record_is_refused_and_reported() {
    let scene = Scene::new();
    // The agent holds the installation key (same user), so it can append a correctly
    // authenticated record: a copy of the person's registration with its own public key.
    let journal = scene.journal();
    let stream = ctx_service::trust_stream();
    let first = journal.read_stream(&stream, 1, 1).expect("the registry")[0].clone();
    let person = registry(&scene.data)
        .active()
        .next()
        .expect("a verifier")
        .entry
        .clone();
    let own = ctx_service::fresh_signer().expect("randomness");
    let own_entry = VerifierEntry::ed25519(VerifierKind::SealedKey, own.verifying_key_bytes());
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let forged = String::from_utf8(first.payload.clone())
        .expect("UTF-8")
        .replace(&hex(&person.public_key), &hex(&own_entry.public_key))
        .replace(&person.authenticator_id, &own_entry.authenticator_id)
        .replace(&person.principal_digest, &own_entry.principal_digest);
    append_forged_trust(
        journal,
        1,
        "trust-forged",
        Timestamp(first.occurred_at.0 + 1),
        forged.into_bytes(),
    );

    let request = Json::object([(
        "assertion",
        Json::str(forged_assertion(&own, &own_entry, &scene.digest)),
    )])
    .to_string();
    let run = scene.agent(&["consent", "resolve"], &request);
    assert_ne!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("verifier registry"), "{run:?}");
    assert_eq!(installed(&scene.data), 0);
    assert_audit_reports_forgery(&scene);
}

#[test]
fn racing_approvals_install_exactly_once() {
    let scene = Scene::new();
    let env = scene.env();
    let outcomes: Vec<CtxRun> = std::thread::scope(|s| {
        let people: Vec<_> = (0..2)
            .map(|_| s.spawn(|| person_decide(&scene.data, "approve", &scene.digest, &env)))
            .collect();
        let agent = s.spawn(|| scene.agent(&["consent", "approve", &scene.digest, "--yes"], ""));
        let mut runs: Vec<CtxRun> = people
            .into_iter()
            .map(|h| h.join().expect("a person"))
            .collect();
        let agent = agent.join().expect("the agent");
        assert_eq!(agent.code, 1, "{agent:?}");
        runs.push(agent);
        runs
    });
    let succeeded = outcomes[..2].iter().filter(|r| r.code == 0).count();
    assert!(succeeded >= 1, "{outcomes:?}");
    assert_eq!(
        installed(&scene.data),
        1,
        "exactly one install: {outcomes:?}"
    );
    scene.assert_audit_clean();
}

#[test]
fn a_webauthn_assertion_from_an_unregistered_credential_is_refused() {
    let scene = Scene::new();
    // The agent makes up a credential and a well-formed passkey proof for it (its own "security
    // key"), and also presents that proof under the person's identity.
    let proof = ctx_service::WebAuthnProof {
        credential_id: vec![7; 16],
        authenticator_data: [vec![0; 32], vec![0x05], vec![0, 0, 0, 9]].concat(),
        client_data_json:
            br#"{"type":"webauthn.get","challenge":"","origin":"http://localhost:1"}"#.to_vec(),
        signature: vec![0x30; 70],
    }
    .encode()
    .expect("an encodable proof");
    let made_up = VerifierEntry {
        kind: VerifierKind::Passkey,
        authenticator_id: "ctx-passkey-0707070707070707".to_owned(),
        principal_digest: "7".repeat(64),
        public_key: Vec::new(),
    };
    let person = registry(&scene.data)
        .active()
        .next()
        .expect("the person's verifier")
        .entry
        .clone();
    for claimed in [&made_up, &person] {
        let unsigned = assertion_in_name_of(claimed, &scene.digest, proof.clone());
        let wire = String::from_utf8(unsigned.encode().expect("encoded")).expect("UTF-8");
        let code = if claimed.kind == VerifierKind::Passkey {
            "unverifiable"
        } else {
            "rejected"
        };
        let message = resolve_refused(&scene, &wire, code);
        assert!(
            message.contains("verifier is registered") || message.contains("signature"),
            "refused for who signed, not for when: {message}"
        );
    }
    assert_eq!(installed(&scene.data), 0);
    scene.assert_audit_clean();
}

/// `ctx consent approve|deny DIGEST --yes --scope SCOPE` by the person at their terminal.
fn person_decides_at_scope(scene: &Scene, verb: &str, digest: &str, scope: &str) -> CtxRun {
    support::run_ctx_tty(
        &scene.data,
        &["consent", verb, digest, "--yes", "--scope", scope],
        &[support::Typed {
            expect: "passphrase for",
            typed: super::person::PASSPHRASE,
        }],
        &scene.env(),
    )
}

#[test]
fn a_delegated_proof_passes_for_no_signature_outside_the_hook_that_checked_it() {
    let scene = Scene::new();
    // The person grants terraform's exact install always; a later session asks again through
    // the JSON interface (only the hooks resolve for the person).
    let granted = person_decides_at_scope(&scene, "approve", &scene.digest, "always");
    assert_eq!(granted.code, 0, "{granted:?}");
    let standing = registry(&scene.data).standing()[0].id.clone();
    let later = terraform_challenge(&scene.data, "s-2");
    let person = registry(&scene.data)
        .active()
        .next()
        .expect("a verifier")
        .entry
        .clone();
    // The agent presents the person's standing decision and their earlier grant as proofs.
    for proof in [
        format!("ctx-standing:{standing}"),
        format!("ctx-installed:{}", scene.digest),
    ] {
        let assertion = assertion_in_name_of(&person, &later, proof.into_bytes());
        let wire = String::from_utf8(assertion.encode().expect("encoded")).expect("UTF-8");
        let message = resolve_refused(&scene, &wire, "rejected");
        assert!(message.contains("not verified"), "{message}");
    }
    // Nor can it revoke, or remember a decision, without the person's terminal.
    let revoke = scene.agent(&["consent", "revoke", &standing], "");
    assert_ne!(revoke.code, 0, "{revoke:?}");
    let remember = scene.agent(
        &["consent", "deny", &later, "--yes", "--scope", "always"],
        "",
    );
    assert_ne!(remember.code, 0, "{remember:?}");
    let state = registry(&scene.data);
    assert_eq!(state.standing().len(), 1);
    assert!(state.standing()[0].revoked_position.is_none());
    assert_eq!(
        installed(&scene.data),
        1,
        "only the person's own approval installed"
    );
    scene.assert_audit_clean();
}

#[test]
fn a_standing_grant_the_agent_appends_refuses_the_registry_and_is_reported() {
    let scene = Scene::new();
    let journal = scene.journal();
    let stream = ctx_service::trust_stream();
    let head = journal
        .read_stream(&stream, 1, 64)
        .expect("the registry")
        .len() as u64;
    // The agent's own key signs a standing grant "always" of terraform's install, written
    // as a well-formed, authenticated journal record.
    let own = ctx_service::fresh_signer().expect("randomness");
    let own_entry = VerifierEntry::ed25519(VerifierKind::SealedKey, own.verifying_key_bytes());
    let record =
        ctx_service::challenge_record(&ctx_service::Layout::new(&scene.data), &scene.digest, now())
            .expect("the challenge");
    let challenge = record.challenge();
    let change = ctx_service::TrustChange::Standing(ctx_service::StandingDecision {
        granted: true,
        capability_id: challenge.capability_id().to_owned(),
        descriptor_digest: challenge.descriptor_digest().to_owned(),
        material_identity_digest: challenge.material_identity_digest().to_owned(),
        scope: ctx_service::StandingScope::Always,
        challenge_digest: scene.digest.clone(),
    });
    let digest = ctx_service::change_digest(&change, head);
    let unsigned =
        ctx_service::unsigned_trust_assertion(&own_entry, &digest, now()).expect("an assertion");
    let approval = ctx_service::sign_trust_assertion(&own, &unsigned).expect("signed");
    let wire = String::from_utf8(approval.encode().expect("encoded")).expect("UTF-8");
    let payload = Json::object([
        ("approval", Json::str(wire)),
        ("basis", Json::str("approved")),
        ("change", change.to_json()),
        ("possession", Json::Null),
        ("previous_revision", Json::from(head)),
        ("schema", Json::str(TRUST_CHANGE_KIND)),
    ])
    .to_cja();
    append_forged_trust(
        journal,
        head,
        "trust-standing-forged",
        Timestamp(now().0),
        payload.into_bytes(),
    );
    let list = scene.agent(&["consent", "list"], "");
    assert_ne!(list.code, 0, "{list:?}");
    assert!(list.stderr.contains("verifier registry"), "{list:?}");
    assert_eq!(installed(&scene.data), 0);
    assert_audit_reports_forgery(&scene);
}

/// Appends `payload` to the verifier registry after `revision` as the agent can: a
/// well-formed record the installation key authenticates (the agent runs as the person's user).
fn append_forged_trust(
    journal: ctx_journal::Journal,
    revision: u64,
    event_id: &str,
    at: Timestamp,
    payload: Vec<u8>,
) {
    journal
        .append(StreamAppend::new(
            ctx_service::trust_stream(),
            ExpectedRevision::Exact(revision),
            vec![NewRecord::new(event_id, TRUST_CHANGE_KIND, at, payload)],
        ))
        .expect("the journal takes an authenticated record");
}

/// `ctx audit` fails and names the refused registry record.
fn assert_audit_reports_forgery(scene: &Scene) {
    let audit = run_ctx(&scene.data, &["audit"], "");
    assert_ne!(
        audit.code, 0,
        "the audit reports the forged record: {audit:?}"
    );
    assert!(audit.stdout.contains("trust/registry-refused"), "{audit:?}");
}
