//! Tests of the policy value, its store (in private temporary directories) and consent routing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use std::fmt::Display;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ctx_model::testkit::{RowKind, digest, row, scope};
use ctx_model::{
    ActionKind, HostAction, INSTALLER_ID, InstallDescriptorInput, Json, PrivacyLabel,
    USER_DECISION_KEYS, action_id, consent_id, consent_request_payload, install_payload,
    install_plan_descriptor, install_rollback, install_verification,
};

use super::*;

const SAFE_DEFAULT_DIGEST: &str =
    "e2ad57139141aea54f58c5f24b1bee718305a21b85355c9ab273679002cf6ff1";
const SKILL_AUTO_DIGEST: &str = "b03a11bc77f94719ed5c2f3e7795f8b9be170c5f7173995e2d52d60b61618eba";

fn skill_auto() -> InstallConsentPolicy {
    InstallConsentPolicy {
        skill_mode: InstallConsentMode::PreapprovedAuto,
        ..InstallConsentPolicy::safe_default()
    }
}

fn all_auto() -> InstallConsentPolicy {
    InstallConsentPolicy {
        skill_mode: InstallConsentMode::PreapprovedAuto,
        agent_mode: InstallConsentMode::PreapprovedAuto,
        mcp_server_mode: InstallConsentMode::PreapprovedAuto,
    }
}

fn err_text<T: std::fmt::Debug, E: Display>(result: Result<T, E>) -> String {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// The policy value

#[test]
fn reference_digest_vectors() {
    assert_eq!(
        InstallConsentPolicy::safe_default().policy_digest(),
        SAFE_DEFAULT_DIGEST
    );
    assert_eq!(skill_auto().policy_digest(), SKILL_AUTO_DIGEST);
}

#[test]
fn canonical_text_is_sorted_compact_ascii_with_one_newline() {
    let text = InstallConsentPolicy::safe_default().canonical_text();
    assert_eq!(
        text,
        format!(
            "{{\"agent_mode\":\"ask-each-time\",\"mcp_server_mode\":\"ask-each-time\",\
             \"policy_digest\":\"{SAFE_DEFAULT_DIGEST}\",\
             \"schema\":\"ctx.install-consent-policy-v1\",\"skill_mode\":\"ask-each-time\"}}\n"
        )
    );
}

#[test]
fn json_roundtrip_and_mode_for() {
    for policy in [
        InstallConsentPolicy::safe_default(),
        skill_auto(),
        all_auto(),
    ] {
        assert_eq!(
            InstallConsentPolicy::from_json(&policy.to_json()).unwrap(),
            policy
        );
    }
    let p = skill_auto();
    assert_eq!(
        p.mode_for("skill").unwrap(),
        InstallConsentMode::PreapprovedAuto
    );
    assert_eq!(
        p.mode_for("agent").unwrap(),
        InstallConsentMode::AskEachTime
    );
    assert_eq!(
        p.mode_for("mcp-server").unwrap(),
        InstallConsentMode::AskEachTime
    );
    assert_eq!(
        err_text(p.mode_for("harness")),
        "kind is not an installable capability kind"
    );
    assert_eq!(
        InstallConsentMode::parse("preapproved-auto"),
        Some(InstallConsentMode::PreapprovedAuto)
    );
    assert_eq!(InstallConsentMode::parse("Preapproved-auto"), None);
}

#[test]
fn from_json_refusals_use_the_reference_sentences() {
    let good = skill_auto().to_json();
    let with = |key: &str, value: Json| {
        let mut m = good.as_obj().unwrap().clone();
        m.insert(key.into(), value);
        Json::Obj(m)
    };
    let without = |key: &str| {
        let mut m = good.as_obj().unwrap().clone();
        m.remove(key);
        Json::Obj(m)
    };
    let cases = [
        (
            Json::Arr(vec![]),
            "install consent policy must be an object",
        ),
        (
            with("zeta", Json::Null),
            "install consent policy has unknown fields: zeta",
        ),
        (
            without("agent_mode"),
            "install consent policy is missing fields: agent_mode",
        ),
        (
            with("schema", Json::str("ctx.install-consent-policy-v2")),
            "install consent policy schema is unsupported",
        ),
        (
            with("agent_mode", Json::str("always")),
            "agent_mode is not a declared install consent mode",
        ),
        (
            with("mcp_server_mode", Json::Int(1)),
            "mcp_server_mode is not a declared install consent mode",
        ),
        (
            with("policy_digest", Json::str("ABC")),
            "policy_digest must be a lowercase SHA-256 digest",
        ),
        (
            with("policy_digest", Json::str(SAFE_DEFAULT_DIGEST)),
            "policy_digest does not match policy fields",
        ),
    ];
    for (value, sentence) in cases {
        assert_eq!(err_text(InstallConsentPolicy::from_json(&value)), sentence);
    }
    let mut m = good.as_obj().unwrap().clone();
    m.insert("b".into(), Json::Null);
    m.insert("a".into(), Json::Null);
    assert_eq!(
        err_text(InstallConsentPolicy::from_json(&Json::Obj(m))),
        "install consent policy has unknown fields: a, b"
    );
}

// ---------------------------------------------------------------------------------------------
// The store

struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    store: InstallPolicyStore,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().to_path_buf();
    fs::set_permissions(&base, fs::Permissions::from_mode(0o700)).unwrap();
    let root = base.join("install-policy");
    let store = InstallPolicyStore::new(&root).unwrap();
    Fixture {
        _tmp: tmp,
        base,
        root,
        store,
    }
}

impl Fixture {
    fn current(&self) -> PathBuf {
        self.root.join(CURRENT_FILE)
    }

    fn snapshot(&self, digest: &str) -> PathBuf {
        self.root.join(SNAPSHOTS_DIR).join(format!("{digest}.json"))
    }

    fn handle(&self) -> InstallPolicyStore {
        InstallPolicyStore::new(&self.root).unwrap()
    }
}

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Replaces `path` with `bytes` as a private 0600 file (what a careless editor would leave).
fn write_private(path: &Path, bytes: &[u8]) {
    let _ = fs::remove_file(path);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn new_refuses_relative_parent_and_filesystem_roots() {
    assert_eq!(
        err_text(InstallPolicyStore::new(Path::new("relative/policy"))),
        "install policy root must be an absolute normalized path"
    );
    assert_eq!(
        err_text(InstallPolicyStore::new(Path::new("/tmp/../policy"))),
        "install policy root must be an absolute normalized path"
    );
    assert_eq!(
        err_text(InstallPolicyStore::new(Path::new("/"))),
        "install policy root cannot be a filesystem root"
    );
    let store = InstallPolicyStore::new(Path::new("/home/u/.ctx/install-policy/")).unwrap();
    assert_eq!(store.root(), Path::new("/home/u/.ctx/install-policy"));
    assert_eq!(
        store.lock_path(),
        Path::new("/home/u/.ctx/.install-policy.policy-current")
    );
}

#[test]
fn absent_store_reads_as_the_safe_default_and_is_not_created() {
    let f = fixture();
    assert_eq!(
        f.store.load_current().unwrap(),
        InstallConsentPolicy::safe_default()
    );
    assert!(!f.store.has_persisted().unwrap());
    assert_eq!(
        err_text(f.store.hold(SAFE_DEFAULT_DIGEST)),
        "no persisted install policy is available"
    );
    assert_eq!(
        err_text(f.store.hold("not-a-digest")),
        "expected policy digest must be lowercase SHA-256"
    );
    assert!(!f.root.exists());
    // An empty root is the default too.
    fs::create_dir(&f.root).unwrap();
    fs::set_permissions(&f.root, fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        f.store.load_current().unwrap(),
        InstallConsentPolicy::safe_default()
    );
    assert!(!f.store.has_persisted().unwrap());
}

#[test]
fn persist_then_load_roundtrips_with_private_canonical_files() {
    let f = fixture();
    let digest = f.store.persist(&skill_auto()).unwrap();
    assert_eq!(digest, SKILL_AUTO_DIGEST);
    assert_eq!(f.store.load_current().unwrap(), skill_auto());
    assert!(f.store.has_persisted().unwrap());
    // A second handle sees the same.
    assert_eq!(f.handle().load_current().unwrap(), skill_auto());

    let text = skill_auto().canonical_text();
    assert_eq!(fs::read_to_string(f.current()).unwrap(), text);
    assert_eq!(fs::read_to_string(f.snapshot(&digest)).unwrap(), text);
    assert_eq!(mode_of(&f.current()), 0o600);
    assert_eq!(mode_of(&f.snapshot(&digest)), 0o600);
    assert_eq!(mode_of(&f.root), 0o700);
    assert_eq!(mode_of(&f.root.join(SNAPSHOTS_DIR)), 0o700);
    let lock = f.base.join(".install-policy.policy-current");
    assert_eq!(f.store.lock_path(), lock);
    assert_eq!(mode_of(&lock), 0o600);
    // No temporary or probe is left behind.
    let mut names: Vec<String> = fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["current.json", "snapshots"]);
    let mut base_names: Vec<String> = fs::read_dir(&f.base)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    base_names.sort();
    assert_eq!(
        base_names,
        [".install-policy.policy-current", "install-policy"]
    );

    // Selecting another policy keeps the first snapshot; re-selecting is idempotent.
    let d2 = f
        .store
        .persist(&InstallConsentPolicy::safe_default())
        .unwrap();
    assert_eq!(d2, SAFE_DEFAULT_DIGEST);
    assert!(f.snapshot(SKILL_AUTO_DIGEST).exists());
    assert_eq!(
        f.store.load_current().unwrap(),
        InstallConsentPolicy::safe_default()
    );
    assert_eq!(f.store.persist(&skill_auto()).unwrap(), SKILL_AUTO_DIGEST);
    assert_eq!(f.store.load_current().unwrap(), skill_auto());
}

#[test]
fn persist_creates_a_missing_parent_privately() {
    let f = fixture();
    let root = f.base.join("a").join("b").join("install-policy");
    let store = InstallPolicyStore::new(&root).unwrap();
    store.persist(&all_auto()).unwrap();
    assert_eq!(mode_of(&f.base.join("a").join("b")), 0o700);
    assert_eq!(store.load_current().unwrap(), all_auto());
}

#[test]
fn tampered_current_is_refused() {
    let f = fixture();
    f.store
        .persist(&InstallConsentPolicy::safe_default())
        .unwrap();
    // Same digest, different mode: the digest no longer matches.
    let forged = InstallConsentPolicy::safe_default()
        .canonical_text()
        .replace(
            "\"skill_mode\":\"ask-each-time\"",
            "\"skill_mode\":\"preapproved-auto\"",
        );
    write_private(&f.current(), forged.as_bytes());
    assert_eq!(
        err_text(f.store.load_current()),
        "policy_digest does not match policy fields"
    );
    assert_eq!(
        err_text(f.store.has_persisted()),
        "policy_digest does not match policy fields"
    );
    // Valid policy, non-canonical bytes.
    let spaced = skill_auto().to_json().to_cja().replace(',', ", ") + "\n";
    write_private(&f.current(), spaced.as_bytes());
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must use exact canonical JSON"
    );
    // No trailing newline.
    write_private(&f.current(), skill_auto().to_json().to_cja().as_bytes());
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must use exact canonical JSON"
    );
    // A valid canonical policy that was never persisted has no snapshot.
    write_private(&f.current(), skill_auto().canonical_text().as_bytes());
    assert_eq!(
        err_text(f.store.load_current()),
        "current policy has no matching immutable snapshot"
    );
    for (bytes, sentence) in [
        (
            &b"\xff\xfe{}"[..],
            "policy file must be strict UTF-8: current.json",
        ),
        (b"{", "policy file is invalid JSON: current.json"),
        (b"{\"a\":1,\"a\":2}", "duplicate JSON key: a"),
        (b"[1]", "policy JSON must be an object"),
        (
            b"{\"extra\":1}",
            "install consent policy has unknown fields: extra",
        ),
    ] {
        write_private(&f.current(), bytes);
        assert_eq!(err_text(f.store.load_current()), sentence);
    }
}

#[test]
fn loose_modes_links_and_oversize_files_are_refused() {
    let f = fixture();
    f.store.persist(&skill_auto()).unwrap();
    let current = f.current();

    fs::set_permissions(&current, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must use mode 0600: current.json"
    );
    fs::set_permissions(&current, fs::Permissions::from_mode(0o620)).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must not be group or world writable: current.json"
    );
    fs::set_permissions(&current, fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must use mode 0600: current.json"
    );
    fs::set_permissions(&current, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(f.store.load_current().unwrap(), skill_auto());

    let snapshot = f.snapshot(SKILL_AUTO_DIGEST);
    fs::set_permissions(&snapshot, fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        format!("policy file must use mode 0600: {SKILL_AUTO_DIGEST}.json")
    );
    // persist validates the existing snapshot the same way.
    assert_eq!(
        err_text(f.store.persist(&skill_auto())),
        format!("policy file must use mode 0600: {SKILL_AUTO_DIGEST}.json")
    );
    fs::set_permissions(&snapshot, fs::Permissions::from_mode(0o600)).unwrap();

    fs::set_permissions(&f.root, fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "install policy root must use mode 0700"
    );
    fs::set_permissions(&f.root, fs::Permissions::from_mode(0o770)).unwrap();
    assert_eq!(
        err_text(f.store.persist(&skill_auto())),
        "install policy root must not be group or world writable"
    );
    fs::set_permissions(&f.root, fs::Permissions::from_mode(0o700)).unwrap();
    let snapshots = f.root.join(SNAPSHOTS_DIR);
    fs::set_permissions(&snapshots, fs::Permissions::from_mode(0o711)).unwrap();
    assert_eq!(
        err_text(f.store.has_persisted()),
        "install policy snapshots directory must use mode 0700"
    );
    fs::set_permissions(&snapshots, fs::Permissions::from_mode(0o700)).unwrap();

    // A second name for current.json.
    let extra = f.root.join("extra-link");
    fs::hard_link(&current, &extra).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must not be hard linked: current.json"
    );
    fs::remove_file(&extra).unwrap();

    // A symbolic link in place of current.json.
    fs::remove_file(&current).unwrap();
    std::os::unix::fs::symlink(&snapshot, &current).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must not be a symlink: current.json"
    );
    fs::remove_file(&current).unwrap();

    // Oversize.
    write_private(&current, &vec![b' '; 5_000]);
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file exceeds the size limit"
    );
    // Exactly at the limit is read (and then refused as JSON that is not canonical).
    let mut padded = skill_auto().canonical_text().into_bytes();
    padded.resize(4_096, b' ');
    write_private(&current, &padded);
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must use exact canonical JSON"
    );

    // A directory in place of current.json.
    fs::remove_file(&current).unwrap();
    fs::create_dir(&current).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "policy file must be a regular file: current.json"
    );
}

#[test]
fn symlinked_root_and_directories_are_refused() {
    let f = fixture();
    f.store.persist(&skill_auto()).unwrap();
    let link = f.base.join("linked-policy");
    std::os::unix::fs::symlink(&f.root, &link).unwrap();
    let linked = InstallPolicyStore::new(&link).unwrap();
    let text = err_text(linked.load_current());
    assert!(
        text.starts_with("refusing to use symlinked path: ") && text.ends_with("linked-policy"),
        "{text}"
    );
    assert!(err_text(linked.persist(&skill_auto())).starts_with("refusing to use symlinked path"));

    // snapshots/ replaced by a link to a private directory.
    let elsewhere = f.base.join("elsewhere");
    fs::rename(f.root.join(SNAPSHOTS_DIR), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, f.root.join(SNAPSHOTS_DIR)).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "install policy snapshots directory must be a real directory"
    );
}

#[test]
fn snapshot_mismatches_are_refused() {
    let f = fixture();
    f.store.persist(&skill_auto()).unwrap();
    let snapshot = f.snapshot(SKILL_AUTO_DIGEST);
    // The snapshot named for skill_auto holds another (valid, canonical) policy.
    write_private(
        &snapshot,
        InstallConsentPolicy::safe_default()
            .canonical_text()
            .as_bytes(),
    );
    assert_eq!(
        err_text(f.store.load_current()),
        "policy snapshot digest does not match its filename"
    );
    // persist verifies an existing snapshot before selecting it.
    assert_eq!(
        err_text(f.store.persist(&skill_auto())),
        "policy snapshot digest does not match its filename"
    );
    // The snapshot is gone.
    fs::remove_file(&snapshot).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "current policy has no matching immutable snapshot"
    );
    // The whole snapshots directory is gone.
    fs::remove_dir(f.root.join(SNAPSHOTS_DIR)).unwrap();
    assert_eq!(
        err_text(f.store.load_current()),
        "current policy exists without a snapshots directory"
    );
    assert_eq!(
        err_text(f.store.has_persisted()),
        "current policy exists without a snapshots directory"
    );
    // persist repairs the store: it recreates snapshots/ and the snapshot.
    f.store.persist(&skill_auto()).unwrap();
    assert_eq!(f.store.load_current().unwrap(), skill_auto());
}

#[test]
fn hold_pins_the_policy_and_excludes_other_handles() {
    let f = fixture();
    f.store.persist(&skill_auto()).unwrap();
    assert_eq!(
        err_text(f.store.hold(SAFE_DEFAULT_DIGEST)),
        "current install policy snapshot changed"
    );
    let other = f.handle();
    let impatient = f.handle().with_lock_wait(Duration::from_millis(50));
    std::thread::scope(|s| {
        let held = f.store.hold(SKILL_AUTO_DIGEST).unwrap();
        assert_eq!(held.policy(), &skill_auto());
        held.assert_current().unwrap();
        // A second handle in this process cannot read while the policy is held.
        assert_eq!(
            err_text(impatient.load_current()),
            "install policy lock was not acquired within 50 ms"
        );
        // A writer through another handle waits for the hold to end.
        let writer = s.spawn(|| other.persist(&InstallConsentPolicy::safe_default()));
        std::thread::sleep(Duration::from_millis(200));
        assert!(!writer.is_finished());
        held.assert_current().unwrap();
        drop(held);
        assert_eq!(writer.join().unwrap().unwrap(), SAFE_DEFAULT_DIGEST);
    });
    // The old digest is no longer current.
    assert_eq!(
        err_text(f.store.hold(SKILL_AUTO_DIGEST)),
        "current install policy snapshot changed"
    );
    let held = f.store.hold(SAFE_DEFAULT_DIGEST).unwrap();
    held.assert_current().unwrap();
}

#[test]
fn assert_current_detects_a_change_behind_the_lock() {
    let f = fixture();
    f.store.persist(&skill_auto()).unwrap();
    let held = f.store.hold(SKILL_AUTO_DIGEST).unwrap();
    // A writer that ignores the lock selects another (well-formed) policy.
    let next = all_auto();
    write_private(
        &f.snapshot(&next.policy_digest()),
        next.canonical_text().as_bytes(),
    );
    write_private(&f.current(), next.canonical_text().as_bytes());
    assert_eq!(
        err_text(held.assert_current()),
        "current install policy snapshot changed"
    );
    // Damage is reported as such.
    fs::set_permissions(f.current(), fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        err_text(held.assert_current()),
        "policy file must use mode 0600: current.json"
    );
}

#[test]
fn assert_current_detects_a_swapped_store_written_by_another_handle() {
    let f = fixture();
    f.store.persist(&skill_auto()).unwrap();
    let held = f.store.hold(SKILL_AUTO_DIGEST).unwrap();
    // Another handle (on a sibling root, so another lock) writes the very same policy; the
    // sibling is then renamed into place.
    let sibling = f.base.join("sibling-policy");
    let other = InstallPolicyStore::new(&sibling).unwrap();
    assert_eq!(other.persist(&skill_auto()).unwrap(), SKILL_AUTO_DIGEST);
    fs::rename(&f.root, f.base.join("retired-policy")).unwrap();
    fs::rename(&sibling, &f.root).unwrap();
    assert_eq!(
        err_text(held.assert_current()),
        "install policy store identity changed"
    );
    // The root vanishing entirely is the same fault.
    fs::rename(&f.root, f.base.join("gone-policy")).unwrap();
    assert_eq!(
        err_text(held.assert_current()),
        "install policy store identity changed"
    );
}

#[test]
fn a_foreign_lock_file_is_refused() {
    let f = fixture();
    let lock = f.store.lock_path().to_path_buf();
    std::os::unix::fs::symlink(f.base.join("target"), &lock).unwrap();
    assert_eq!(
        err_text(f.store.persist(&skill_auto())),
        "install policy lock file violates its integrity contract"
    );
    fs::remove_file(&lock).unwrap();
    write_private(&lock, b"");
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        err_text(f.store.persist(&skill_auto())),
        "install policy lock file violates its integrity contract"
    );
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o600)).unwrap();
    f.store.persist(&skill_auto()).unwrap();
}

#[test]
fn store_handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<InstallPolicyStore>();
    assert_send_sync::<HeldInstallPolicy>();
}

// ---------------------------------------------------------------------------------------------
// Routing

fn descriptor(kind: &str, permission_expansion: bool, credential_requirement: bool) -> Json {
    let id = format!("{kind}:demo");
    install_plan_descriptor(&InstallDescriptorInput {
        capability_id: &id,
        kind,
        installer_id: INSTALLER_ID,
        plan_digest: &digest("plan"),
        provenance_digest: &digest("provenance"),
        permission_expansion,
        credential_requirement,
        result_material_identity_digest: Some(&digest("material")),
    })
    .unwrap()
}

#[test]
fn routing_table_rows_one_to_four() {
    let route = |policy: &InstallConsentPolicy, d: &Json| {
        let decision = route_install_authorization(policy, d).unwrap();
        assert_eq!(decision.policy_snapshot_digest, policy.policy_digest());
        assert!(decision.authorization_eligible());
        (decision.decision_basis, decision.reason_code)
    };
    for kind in ["skill", "agent", "mcp-server"] {
        // Row 1: permission expansion is interactive even when everything is preapproved, and
        // wins over a credential requirement.
        for d in [descriptor(kind, true, false), descriptor(kind, true, true)] {
            assert_eq!(
                route(&all_auto(), &d),
                (
                    DecisionBasis::Interactive,
                    "permission-expansion-requires-consent"
                )
            );
        }
        // Row 2: credentials are interactive even when everything is preapproved.
        assert_eq!(
            route(&all_auto(), &descriptor(kind, false, true)),
            (DecisionBasis::Interactive, "credentials-require-consent")
        );
        // Row 3: the kind's mode is preapproved-auto.
        let decision =
            route_install_authorization(&all_auto(), &descriptor(kind, false, false)).unwrap();
        assert_eq!(
            (decision.decision_basis, decision.reason_code),
            (
                DecisionBasis::PreapprovedPolicy,
                "matching-preapproved-policy"
            )
        );
        assert!(decision.is_preapproved());
        // Row 4: ask each time.
        assert_eq!(
            route(
                &InstallConsentPolicy::safe_default(),
                &descriptor(kind, false, false)
            ),
            (DecisionBasis::Interactive, "per-install-consent-required")
        );
    }
    // The mode is per kind: skill preapproved does not cover agents.
    assert_eq!(
        route(&skill_auto(), &descriptor("agent", false, false)),
        (DecisionBasis::Interactive, "per-install-consent-required")
    );
    let decision =
        route_install_authorization(&skill_auto(), &descriptor("skill", false, false)).unwrap();
    assert_eq!(
        decision.to_json().to_cja(),
        format!(
            "{{\"authorization_eligible\":true,\"decision_basis\":\"preapproved-policy\",\
             \"policy_snapshot_digest\":\"{SKILL_AUTO_DIGEST}\",\
             \"reason_code\":\"matching-preapproved-policy\"}}"
        )
    );
    // A forged descriptor is refused with its own sentence.
    let mut forged = descriptor("skill", false, false).as_obj().unwrap().clone();
    forged.insert("permission_expansion".into(), Json::Bool(true));
    assert_eq!(
        err_text(route_install_authorization(&all_auto(), &Json::Obj(forged))),
        "descriptor_digest does not match descriptor fields"
    );
    assert_eq!(
        DecisionBasis::parse("preapproved-policy").unwrap(),
        DecisionBasis::PreapprovedPolicy
    );
    assert_eq!(
        err_text(DecisionBasis::parse("automatic")),
        "decision_basis is not a declared installation decision basis"
    );
}

/// The `RequestConsent` the reducer issues for `row` under `policy_digest` (mirrors
/// `projections/src/reducer/actions.rs::request_consent`).
fn consent_request(row: &Json, policy_digest: &str) -> HostAction {
    let id = row.get_str("capability_id").unwrap();
    let kind = row.get_str("kind").unwrap();
    let authority = row.get("authority").unwrap();
    let descriptor = authority.get("descriptor").unwrap();
    let payload = install_payload(
        kind,
        row.get("catalog_identity").unwrap(),
        authority.get("result_material").unwrap(),
        descriptor,
        policy_digest,
    );
    let event = digest("event");
    let revision = 7;
    let install = HostAction {
        action_id: action_id(&event, ActionKind::InstallCapability, Some(id), 0),
        kind: ActionKind::InstallCapability,
        scope: scope("s1"),
        precondition_revision: revision + 1,
        payload: payload.clone(),
        privacy: PrivacyLabel::default(),
        entity_id: Some(id.to_owned()),
        source_digest: Some(row.get_str("catalog_entry_digest").unwrap().to_owned()),
        plan_id: Some("ctx-query-host-1-s1-1".to_owned()),
        catalog_snapshot_id: Some(digest("planning-environment")),
        consent_id: Some(consent_id(&event, id)),
        lease_id: None,
        required_host_feature: Some("installation".to_owned()),
        expires_at: Some("2026-12-01T11:00:00.000000Z".to_owned()),
        verification: install_verification(),
        rollback: install_rollback(descriptor.get_str("installer_id").unwrap()),
    };
    HostAction {
        action_id: action_id(&event, ActionKind::RequestConsent, Some(id), 0),
        kind: ActionKind::RequestConsent,
        precondition_revision: revision,
        payload: consent_request_payload(
            &payload,
            &install.action_id,
            &install.content_digest(),
            revision + 1,
        ),
        expires_at: None,
        required_host_feature: Some("installation-consent".to_owned()),
        verification: Json::Obj(Default::default()),
        rollback: Json::Obj(Default::default()),
        ..install
    }
}

fn row_descriptor(row: &Json) -> Json {
    row.get("authority")
        .and_then(|a| a.get("descriptor"))
        .cloned()
        .unwrap()
}

#[test]
fn consent_request_routes_to_a_prompt_under_ask_each_time() {
    let row = row(RowKind::Install, "skill", "demo");
    let descriptor = row_descriptor(&row);
    let policy = InstallConsentPolicy::safe_default();
    let request = consent_request(&row, &policy.policy_digest());
    ctx_model::validate_action(&request).unwrap();
    let d = route_install_consent_request(&request, &row, &descriptor, &policy).unwrap();
    assert!(d.requires_prompt());
    assert_eq!(d.decision_basis(), DecisionBasis::Interactive);
    assert_eq!(d.reason_code(), "per-install-consent-required");
    assert!(d.automatic_grant_payload().is_none());
    assert_eq!(d.consent_id(), request.consent_id.as_deref().unwrap());
    assert_eq!(d.capability_id(), "skill:demo");
    assert_eq!(d.kind(), "skill");
    assert_eq!(
        d.source_digest(),
        row.get_str("catalog_entry_digest").unwrap()
    );
    assert_eq!(
        d.catalog_snapshot_digest(),
        request.catalog_snapshot_id.as_deref().unwrap()
    );
    assert_eq!(d.plan_id(), "ctx-query-host-1-s1-1");
    assert_eq!(
        d.install_plan_digest(),
        descriptor.get_str("plan_digest").unwrap()
    );
    assert_eq!(
        d.descriptor_digest(),
        descriptor.get_str("descriptor_digest").unwrap()
    );
    assert_eq!(d.installer_id(), INSTALLER_ID);
    assert_eq!(
        d.provenance_digest(),
        descriptor.get_str("provenance_digest").unwrap()
    );
    assert!(!d.permission_expansion());
    assert!(!d.credential_requirement());
    assert_eq!(d.policy_snapshot_digest(), SAFE_DEFAULT_DIGEST);
    assert_eq!(d.requested_action_kind(), ActionKind::InstallCapability);
    assert_eq!(
        Some(d.requested_action_id()),
        request.payload.get_str("requested_action_id")
    );
    assert_eq!(
        Some(d.requested_action_content_digest()),
        request.payload.get_str("requested_action_content_digest")
    );
    assert_eq!(d.requested_action_precondition_revision(), 8);
    assert_eq!(
        d.result_material_identity_digest(),
        descriptor.get_str("result_material_identity_digest")
    );

    // The decision payload has exactly the eight UserDecision keys.
    let payload = d.decision_payload("denied").unwrap();
    let keys: Vec<&str> = payload
        .as_obj()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = USER_DECISION_KEYS.to_vec();
    expected.sort_unstable();
    assert_eq!(keys, expected);
    assert_eq!(payload.get_str("decision"), Some("denied"));
    assert_eq!(payload.get_str("decision_basis"), Some("interactive"));
    assert_eq!(
        payload.get_str("policy_snapshot_digest"),
        Some(SAFE_DEFAULT_DIGEST)
    );
    assert_eq!(
        payload.get_str("requested_action_kind"),
        Some("InstallCapability")
    );
    assert_eq!(
        payload.get("requested_action_precondition_revision"),
        Some(&Json::Int(8))
    );
    assert_eq!(
        err_text(d.decision_payload("maybe")),
        "decision must be granted or denied"
    );
}

#[test]
fn consent_request_is_granted_automatically_under_a_matching_preapproval() {
    let row = row(RowKind::Install, "skill", "demo");
    let descriptor = row_descriptor(&row);
    let policy = skill_auto();
    let request = consent_request(&row, &policy.policy_digest());
    let d = route_install_consent_request(&request, &row, &descriptor, &policy).unwrap();
    assert!(!d.requires_prompt());
    assert_eq!(d.decision_basis(), DecisionBasis::PreapprovedPolicy);
    assert_eq!(d.reason_code(), "matching-preapproved-policy");
    let grant = d.automatic_grant_payload().unwrap();
    assert_eq!(grant, d.decision_payload("granted").unwrap());
    assert_eq!(grant.get_str("decision_basis"), Some("preapproved-policy"));
    assert_eq!(
        grant.get_str("policy_snapshot_digest"),
        Some(SKILL_AUTO_DIGEST)
    );
}

#[test]
fn permission_expansion_prompts_even_when_preapproved() {
    let row = row(RowKind::InstallSensitive, "skill", "demo");
    let descriptor = row_descriptor(&row);
    let policy = all_auto();
    let request = consent_request(&row, &policy.policy_digest());
    let d = route_install_consent_request(&request, &row, &descriptor, &policy).unwrap();
    assert!(d.requires_prompt());
    assert!(d.permission_expansion());
    assert_eq!(d.reason_code(), "permission-expansion-requires-consent");
    assert!(d.automatic_grant_payload().is_none());
}

#[test]
fn consent_requests_that_do_not_bind_are_refused() {
    const MISMATCH: &str = "consent request does not match current policy and install identity";
    const UNTYPED: &str = "consent routing requires typed request, selection, plan, and policy";
    let row = row(RowKind::Install, "skill", "demo");
    let descriptor = row_descriptor(&row);
    let policy = InstallConsentPolicy::safe_default();
    let request = consent_request(&row, &policy.policy_digest());
    let route =
        |request: &HostAction, row: &Json, descriptor: &Json, policy: &InstallConsentPolicy| {
            err_text(route_install_consent_request(
                request, row, descriptor, policy,
            ))
        };

    // The policy changed since the request was issued.
    assert_eq!(route(&request, &row, &descriptor, &skill_auto()), MISMATCH);
    // Another capability's request.
    let mut r = request.clone();
    r.entity_id = Some("skill:other".into());
    assert_eq!(route(&r, &row, &descriptor, &policy), MISMATCH);
    // Another source digest.
    let mut r = request.clone();
    r.source_digest = Some(digest("other-entry"));
    assert_eq!(route(&r, &row, &descriptor, &policy), MISMATCH);
    // Not a consent request.
    let mut r = request.clone();
    r.kind = ActionKind::InstallCapability;
    assert_eq!(route(&r, &row, &descriptor, &policy), MISMATCH);
    // No consent id / plan id.
    let mut r = request.clone();
    r.consent_id = None;
    assert_eq!(route(&r, &row, &descriptor, &policy), MISMATCH);
    let mut r = request.clone();
    r.plan_id = None;
    assert_eq!(route(&r, &row, &descriptor, &policy), MISMATCH);
    // A payload with another schema or requested kind.
    for (key, value) in [
        ("schema", Json::str("ctx.install-consent-request-v2")),
        ("requested_action_kind", Json::str("UninstallCapability")),
        ("capability_kind", Json::str("agent")),
    ] {
        let mut r = request.clone();
        let mut m = r.payload.as_obj().unwrap().clone();
        m.insert(key.into(), value);
        r.payload = Json::Obj(m);
        assert_eq!(route(&r, &row, &descriptor, &policy), MISMATCH, "{key}");
    }
    // A valid descriptor of another plan than the row's authority.
    let other = descriptor_for_row_kind("skill");
    assert_eq!(route(&request, &row, &other, &policy), MISMATCH);
    // A row of another capability.
    let other_row = ctx_model::testkit::row(RowKind::Install, "skill", "other");
    assert_eq!(route(&request, &other_row, &descriptor, &policy), MISMATCH);
    // A load row cannot carry an install consent.
    let load_row = ctx_model::testkit::row(RowKind::Load, "skill", "demo");
    assert_eq!(route(&request, &load_row, &descriptor, &policy), MISMATCH);

    // Malformed inputs are untyped.
    let mut broken_row = row.as_obj().unwrap().clone();
    broken_row.remove("benefit");
    assert_eq!(
        route(&request, &Json::Obj(broken_row), &descriptor, &policy),
        UNTYPED
    );
    assert_eq!(
        route(&request, &row, &Json::Obj(Default::default()), &policy),
        UNTYPED
    );
    // A bound request that breaks the action contract.
    let mut r = request.clone();
    r.precondition_revision = 3;
    assert_eq!(route(&r, &row, &descriptor, &policy), UNTYPED);
}

fn descriptor_for_row_kind(kind: &str) -> Json {
    install_plan_descriptor(&InstallDescriptorInput {
        capability_id: &format!("{kind}:demo"),
        kind,
        installer_id: INSTALLER_ID,
        plan_digest: &digest("another-plan"),
        provenance_digest: &digest("installation-snapshot"),
        permission_expansion: false,
        credential_requirement: false,
        result_material_identity_digest: Some(&digest("another-material")),
    })
    .unwrap()
}
