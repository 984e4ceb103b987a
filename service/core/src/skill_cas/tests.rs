#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ctx_model::testkit::{digest, scope};
use ctx_model::{
    ActionKind, HostAction, INSTALLER_DIGEST, INSTALLER_ID, InstallDescriptorInput,
    InstallExecutionBinding, Json, PrivacyLabel, action_id, build_material_identity,
    catalog_capability_identity, cj_digest, install_payload, install_plan_descriptor,
    sha256_hex_bytes,
};

use super::*;

/// A skill body with a non-ASCII character, so byte and character counts differ.
const BODY: &str = "# Demo skill\n\nUse the demo skill \u{2014} carefully.\n";

#[derive(Debug)]
struct CountingSource {
    text: String,
    calls: AtomicUsize,
}

impl CountingSource {
    fn new(text: &str) -> Arc<CountingSource> {
        Arc::new(CountingSource {
            text: text.to_owned(),
            calls: AtomicUsize::new(0),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl SkillBodySource for CountingSource {
    fn load(&self, _action: &HostAction, _material: &Json) -> Result<String, BodySourceError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(self.text.clone())
    }
}

#[derive(Debug)]
struct FailingSource;

impl SkillBodySource for FailingSource {
    fn load(&self, _action: &HostAction, _material: &Json) -> Result<String, BodySourceError> {
        Err(BodySourceError::new("no such body"))
    }
}

fn private_dir(path: &Path) {
    fs::create_dir(path).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o700)).unwrap();
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .unwrap();
    file.write_all(bytes).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn material_for(capability_id: &str, kind: &str, body: &str) -> Json {
    build_material_identity(
        capability_id,
        kind,
        &sha256_hex_bytes(body.as_bytes()),
        i64::try_from(body.len()).unwrap(),
    )
}

struct Authority {
    kind: &'static str,
    permission_expansion: bool,
    credential_requirement: bool,
}

const SKILL: Authority = Authority {
    kind: "skill",
    permission_expansion: false,
    credential_requirement: false,
};

fn descriptor_for(material: &Json, authority: &Authority) -> Json {
    install_plan_descriptor(&InstallDescriptorInput {
        capability_id: material.get_str("capability_id").unwrap(),
        kind: authority.kind,
        installer_id: INSTALLER_ID,
        plan_digest: &digest("plan"),
        provenance_digest: &digest("provenance"),
        permission_expansion: authority.permission_expansion,
        credential_requirement: authority.credential_requirement,
        result_material_identity_digest: material.get_str("identity_digest"),
    })
    .unwrap()
}

fn action_for(material: &Json, descriptor: &Json, kind: &str) -> HostAction {
    let capability_id = material.get_str("capability_id").unwrap();
    let catalog = catalog_capability_identity(capability_id, kind, &digest("namespace")).unwrap();
    HostAction {
        action_id: action_id(
            &digest("event"),
            ActionKind::InstallCapability,
            Some(capability_id),
            0,
        ),
        kind: ActionKind::InstallCapability,
        scope: scope("session-1"),
        precondition_revision: 7,
        payload: install_payload(kind, &catalog, material, descriptor, &digest("policy")),
        privacy: PrivacyLabel::default(),
        entity_id: Some(capability_id.to_owned()),
        source_digest: Some(digest("source")),
        plan_id: Some("plan-1".to_owned()),
        catalog_snapshot_id: Some("catalog-1".to_owned()),
        consent_id: Some("consent-1".to_owned()),
        lease_id: None,
        required_host_feature: Some("installation".to_owned()),
        expires_at: Some("2030-01-01T00:00:00Z".to_owned()),
        verification: Json::object([("expected_state", Json::str("installed"))]),
        rollback: Json::object([("strategy", Json::str("atomic-restore"))]),
    }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    source: Arc<CountingSource>,
    config: SkillCasRuntimeConfig,
    material: Json,
    descriptor: Json,
    action: HostAction,
}

impl Fixture {
    /// A private root and a configuration whose body source returns `served`; the authority
    /// installs `BODY`.
    fn serving(served: &str) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("skills");
        private_dir(&root);
        let source = CountingSource::new(served);
        let config = SkillCasRuntimeConfig::new(
            &root,
            source.clone(),
            INSTALLER_ID,
            &digest("host-identity"),
        )
        .unwrap();
        let material = material_for("skill:demo", "skill", BODY);
        let descriptor = descriptor_for(&material, &SKILL);
        let action = action_for(&material, &descriptor, "skill");
        Fixture {
            _tmp: tmp,
            root,
            source,
            config,
            material,
            descriptor,
            action,
        }
    }

    fn new() -> Fixture {
        Fixture::serving(BODY)
    }

    fn binding(&self) -> InstallExecutionBinding {
        self.config.binding(INSTALLER_DIGEST).unwrap()
    }

    fn driver(&self) -> SkillCasDriver {
        self.config
            .connect(&self.action, &self.descriptor, &self.binding())
            .unwrap()
    }

    fn sha(&self) -> String {
        sha256_hex_bytes(BODY.as_bytes())
    }

    fn final_path(&self) -> PathBuf {
        self.root.join(self.sha())
    }

    fn stage_path(&self, label: &str) -> PathBuf {
        self.root.join(format!(
            ".ctx-skill-{}-{}.pending",
            self.sha(),
            digest(label)
        ))
    }

    /// Every name in the root except the content lock file.
    fn names(&self) -> Vec<String> {
        let lock = format!("{}.lock", self.sha());
        let mut names: Vec<String> = fs::read_dir(&self.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| *n != lock)
            .collect();
        names.sort();
        names
    }

    fn identity_digest(&self) -> &str {
        self.material.get_str("identity_digest").unwrap()
    }
}

fn source_message(e: &SkillCasError) -> String {
    e.source().map(|s| s.to_string()).unwrap_or_default()
}

#[test]
fn fresh_apply_publishes_the_exact_file() {
    let fx = Fixture::new();
    let mut driver = fx.driver();
    driver.apply_once().unwrap();
    assert_eq!(fx.source.calls(), 1);
    assert_eq!(fs::read(fx.final_path()).unwrap(), BODY.as_bytes());
    let meta = fs::symlink_metadata(fx.final_path()).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(meta.nlink(), 1);
    assert_eq!(fx.names(), vec![fx.sha()], "no stage is left behind");
    let lock = fs::symlink_metadata(fx.root.join(format!("{}.lock", fx.sha()))).unwrap();
    assert!(lock.file_type().is_file());

    let observation = driver.reconcile();
    assert_eq!(observation.state, ObservationState::InstalledExact);
    assert_eq!(
        observation.observed_material_identity_digest.as_deref(),
        Some(fx.identity_digest())
    );
    assert_eq!(
        observation.verification_digest,
        observation_verification_digest(
            &fx.binding().binding_digest(),
            fx.identity_digest(),
            ObservationState::InstalledExact
        )
    );
    observation.validate().unwrap();
    assert!(!driver.apply_failed());
}

#[test]
fn observation_digest_is_the_ascii_canonical_digest_of_its_fields() {
    let expected = sha256_hex_bytes(
        format!(
            "{{\"binding_digest\":\"{}\",\"material_identity_digest\":\"{}\",\
             \"schema\":\"ctx.skill-cas-observation-v1\",\"state\":\"absent\"}}",
            digest("b"),
            digest("m")
        )
        .as_bytes(),
    );
    assert_eq!(
        observation_verification_digest(&digest("b"), &digest("m"), ObservationState::Absent),
        expected
    );
}

#[test]
fn second_apply_on_an_exact_file_writes_nothing_and_loads_nothing() {
    let fx = Fixture::new();
    fx.driver().apply_once().unwrap();
    assert_eq!(fx.source.calls(), 1);
    let before = fs::symlink_metadata(fx.final_path()).unwrap();

    let mut again = fx.driver();
    again.apply_once().unwrap();
    assert_eq!(fx.source.calls(), 1, "the body source is not called again");
    let after = fs::symlink_metadata(fx.final_path()).unwrap();
    assert_eq!(
        (
            before.ino(),
            before.mtime_nsec(),
            before.ctime_nsec(),
            before.nlink()
        ),
        (
            after.ino(),
            after.mtime_nsec(),
            after.ctime_nsec(),
            after.nlink()
        )
    );
    assert_eq!(fx.names(), vec![fx.sha()]);
    assert_eq!(again.reconcile().state, ObservationState::InstalledExact);
}

#[test]
fn a_body_that_does_not_match_the_material_is_refused() {
    let fx = Fixture::serving("# Another skill\n");
    let mut driver = fx.driver();
    let err = driver.apply_once().unwrap_err();
    // The reference rewraps errors raised inside the pinned directory scope.
    assert_eq!(err.to_string(), "skill store directory operation failed");
    assert!(matches!(err, SkillCasError::FilesystemError { .. }));
    assert_eq!(
        source_message(&err),
        "skill body does not match authenticated material"
    );
    assert!(driver.apply_failed());
    assert_eq!(fx.names(), Vec::<String>::new(), "nothing was staged");

    let observation = driver.reconcile();
    assert_eq!(observation.state, ObservationState::Indeterminate);
    assert_eq!(observation.observed_material_identity_digest, None);
    observation.validate().unwrap();

    let fresh = fx.driver().reconcile();
    assert_eq!(fresh.state, ObservationState::Absent);
    assert_eq!(
        fresh.verification_digest,
        observation_verification_digest(
            &fx.binding().binding_digest(),
            fx.identity_digest(),
            ObservationState::Absent
        )
    );
}

#[test]
fn empty_and_nul_bodies_are_refused() {
    for served in ["", "a\0b"] {
        let fx = Fixture::serving(served);
        let err = fx.driver().apply_once().unwrap_err();
        assert_eq!(
            source_message(&err),
            "skill body must be non-empty NUL-free UTF-8 text"
        );
        assert_eq!(fx.names(), Vec::<String>::new());
    }
}

#[test]
fn a_body_source_failure_fails_the_apply() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("skills");
    private_dir(&root);
    let config =
        SkillCasRuntimeConfig::new(&root, Arc::new(FailingSource), INSTALLER_ID, &digest("h"))
            .unwrap();
    let material = material_for("skill:demo", "skill", BODY);
    let descriptor = descriptor_for(&material, &SKILL);
    let action = action_for(&material, &descriptor, "skill");
    let binding = config.binding(INSTALLER_DIGEST).unwrap();
    let mut driver = config.connect(&action, &descriptor, &binding).unwrap();
    let err = driver.apply_once().unwrap_err();
    assert_eq!(err.to_string(), "skill store directory operation failed");
    assert_eq!(
        source_message(&err),
        "skill body source could not load the material"
    );
    assert_eq!(driver.reconcile().state, ObservationState::Indeterminate);
}

#[test]
fn reconcile_publishes_a_leftover_exact_stage() {
    let fx = Fixture::new();
    // A crash after staging, before linking.
    write_file(&fx.stage_path("crashed-action"), BODY.as_bytes(), 0o600);
    let observation = fx.driver().reconcile();
    assert_eq!(observation.state, ObservationState::InstalledExact);
    assert_eq!(fs::read(fx.final_path()).unwrap(), BODY.as_bytes());
    assert_eq!(fs::symlink_metadata(fx.final_path()).unwrap().nlink(), 1);
    assert_eq!(fx.names(), vec![fx.sha()]);
    assert_eq!(fx.source.calls(), 0);
}

#[test]
fn apply_publishes_a_leftover_exact_stage_without_loading_the_body() {
    let fx = Fixture::new();
    write_file(&fx.stage_path("crashed-action"), BODY.as_bytes(), 0o600);
    fx.driver().apply_once().unwrap();
    assert_eq!(fx.source.calls(), 0);
    assert_eq!(fx.names(), vec![fx.sha()]);
}

#[test]
fn the_smallest_of_several_exact_stages_is_published_and_the_rest_removed() {
    let fx = Fixture::new();
    let (a, b) = (fx.stage_path("first"), fx.stage_path("second"));
    write_file(&a, BODY.as_bytes(), 0o600);
    write_file(&b, BODY.as_bytes(), 0o600);
    let smallest = if a < b { &a } else { &b };
    let ino = fs::symlink_metadata(smallest).unwrap().ino();
    assert_eq!(
        fx.driver().reconcile().state,
        ObservationState::InstalledExact
    );
    assert_eq!(fs::symlink_metadata(fx.final_path()).unwrap().ino(), ino);
    assert_eq!(fx.names(), vec![fx.sha()]);
}

#[test]
fn a_final_file_with_a_stage_alias_is_repaired() {
    let fx = Fixture::new();
    // A crash after linking, before unlinking the stage.
    write_file(&fx.final_path(), BODY.as_bytes(), 0o600);
    fs::hard_link(fx.final_path(), fx.stage_path("crashed-action")).unwrap();
    assert_eq!(fs::symlink_metadata(fx.final_path()).unwrap().nlink(), 2);
    assert_eq!(
        fx.driver().reconcile().state,
        ObservationState::InstalledExact
    );
    assert_eq!(fs::symlink_metadata(fx.final_path()).unwrap().nlink(), 1);
    assert_eq!(fx.names(), vec![fx.sha()]);
}

#[test]
fn a_final_file_with_an_unknown_hard_link_is_a_conflict() {
    let fx = Fixture::new();
    write_file(&fx.final_path(), BODY.as_bytes(), 0o600);
    fs::hard_link(fx.final_path(), fx.root.join("elsewhere")).unwrap();
    let mut driver = fx.driver();
    assert_eq!(driver.reconcile().state, ObservationState::Conflict);
    let err = driver.apply_once().unwrap_err();
    assert_eq!(
        source_message(&err),
        "skill CAS address is not safely writable"
    );
    assert_eq!(fs::symlink_metadata(fx.final_path()).unwrap().nlink(), 2);
}

#[test]
fn a_stage_with_wrong_content_but_safe_metadata_is_removed() {
    let fx = Fixture::new();
    write_file(&fx.stage_path("torn"), b"# Demo sk", 0o600);
    assert_eq!(fx.driver().reconcile().state, ObservationState::Absent);
    assert_eq!(fx.names(), Vec::<String>::new());

    // And beside an exact final file.
    write_file(&fx.final_path(), BODY.as_bytes(), 0o600);
    write_file(&fx.stage_path("torn"), b"garbage", 0o600);
    assert_eq!(
        fx.driver().reconcile().state,
        ObservationState::InstalledExact
    );
    assert_eq!(fx.names(), vec![fx.sha()]);
}

#[test]
fn an_unsafe_stage_makes_the_address_a_conflict_that_is_never_written_over() {
    let fx = Fixture::new();
    let stage = fx.stage_path("foreign");
    write_file(&stage, BODY.as_bytes(), 0o644);
    let mut driver = fx.driver();
    let err = driver.apply_once().unwrap_err();
    assert_eq!(err.to_string(), "skill store directory operation failed");
    assert_eq!(
        source_message(&err),
        "skill CAS address is not safely writable"
    );
    assert_eq!(fx.source.calls(), 0, "the body is never loaded");
    assert!(!fx.final_path().exists());
    let meta = fs::symlink_metadata(&stage).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o644);
    assert_eq!(fs::read(&stage).unwrap(), BODY.as_bytes());
    assert_eq!(driver.reconcile().state, ObservationState::Indeterminate);
    assert_eq!(fx.driver().reconcile().state, ObservationState::Conflict);
    assert!(stage.exists());
}

#[test]
fn a_symlinked_final_name_is_a_conflict() {
    let fx = Fixture::new();
    let outside = fx._tmp.path().join("outside");
    write_file(&outside, BODY.as_bytes(), 0o600);
    std::os::unix::fs::symlink(&outside, fx.final_path()).unwrap();
    assert_eq!(fx.driver().reconcile().state, ObservationState::Conflict);
    assert!(fx.driver().apply_once().is_err());
    assert!(
        fs::symlink_metadata(fx.final_path())
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn more_stages_than_the_limit_is_a_conflict() {
    let fx = Fixture::new();
    for i in 0..=STAGE_LIMIT {
        write_file(&fx.stage_path(&format!("s{i}")), b"x", 0o600);
    }
    assert_eq!(fx.driver().reconcile().state, ObservationState::Conflict);
    assert_eq!(fx.names().len(), STAGE_LIMIT + 1, "nothing was removed");
}

#[test]
fn a_root_that_is_not_owner_private_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("skills");
    fs::create_dir(&root).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let err =
        SkillCasRuntimeConfig::new(&root, CountingSource::new(BODY), INSTALLER_ID, &digest("h"))
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "skill CAS root is unavailable or unsupported"
    );
    assert_eq!(
        source_message(&err),
        "skill store root must be owner-private"
    );
    let err = skill_cas_target_identity_digest(&root).unwrap_err();
    assert_eq!(
        err.to_string(),
        "skill CAS root is unavailable or unsupported"
    );

    let missing = tmp.path().join("missing");
    assert!(skill_cas_target_identity_digest(&missing).is_err());
}

#[test]
fn a_replaced_root_is_refused() {
    let fx = Fixture::new();
    let mut driver = fx.driver();
    fs::rename(&fx.root, fx._tmp.path().join("moved")).unwrap();
    private_dir(&fx.root);
    let err = fx.config.binding(INSTALLER_DIGEST).unwrap_err();
    assert_eq!(
        err.to_string(),
        "skill CAS root changed after runtime configuration"
    );
    let err = driver.apply_once().unwrap_err();
    assert!(matches!(err, SkillCasError::FilesystemConflict { .. }));
    assert_eq!(err.to_string(), "skill store target identity changed");
    assert_eq!(fx.source.calls(), 0);
    assert_eq!(fx.driver_result_message(), NOT_ELIGIBLE);
    assert_eq!(fx.names(), Vec::<String>::new());
}

impl Fixture {
    fn driver_result_message(&self) -> String {
        let binding = InstallExecutionBinding::new(
            INSTALLER_ID,
            INSTALLER_DIGEST,
            &digest("host-identity"),
            self.config.target_identity_digest(),
        )
        .unwrap();
        self.config
            .connect(&self.action, &self.descriptor, &binding)
            .unwrap_err()
            .to_string()
    }
}

#[test]
fn the_target_identity_digest_is_the_utf8_canonical_digest_of_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("skills-\u{e9}t\u{e9}");
    private_dir(&root);
    let canonical = fs::canonicalize(&root).unwrap();
    let meta = fs::metadata(&canonical).unwrap();
    let expected = cj_digest(&Json::object([
        ("canonical_root", Json::str(canonical.to_str().unwrap())),
        ("device", Json::Int(i64::try_from(meta.dev()).unwrap())),
        ("inode", Json::Int(i64::try_from(meta.ino()).unwrap())),
        ("schema", Json::str("ctx.skill-cas-target-v2")),
    ]));
    // Raw UTF-8, not \u escapes.
    let text = format!(
        "{{\"canonical_root\":\"{}\",\"device\":{},\"inode\":{},\"schema\":\"ctx.skill-cas-target-v2\"}}",
        canonical.to_str().unwrap(),
        meta.dev(),
        meta.ino()
    );
    assert_eq!(expected, sha256_hex_bytes(text.as_bytes()));
    assert_eq!(skill_cas_target_identity_digest(&root).unwrap(), expected);
    let config =
        SkillCasRuntimeConfig::new(&root, CountingSource::new(BODY), INSTALLER_ID, &digest("h"))
            .unwrap();
    assert_eq!(config.target_identity_digest(), expected);
    assert_eq!(config.root(), canonical);
    let binding = config.binding(INSTALLER_DIGEST).unwrap();
    assert_eq!(binding.target_identity_digest, expected);
    assert_eq!(binding.driver_id, INSTALLER_ID);
    assert_eq!(binding.host_identity_digest, digest("h"));
    let shown = format!("{config:?}");
    assert!(!shown.contains("skills-"), "Debug shows no path: {shown}");
}

#[test]
fn configuration_scalars_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("skills");
    private_dir(&root);
    let source = CountingSource::new(BODY);
    let err = SkillCasRuntimeConfig::new(&root, source.clone(), " x", &digest("h")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "installer_id must be non-empty trimmed text"
    );
    let err = SkillCasRuntimeConfig::new(&root, source.clone(), "x", "ABC").unwrap_err();
    assert_eq!(
        err.to_string(),
        "host_identity_digest must be a lowercase SHA-256 digest"
    );
    let config = SkillCasRuntimeConfig::new(&root, source, "x", &digest("h")).unwrap();
    let err = config.binding("nope").unwrap_err();
    assert_eq!(
        err.to_string(),
        "driver_digest must be a lowercase SHA-256 digest"
    );
}

#[test]
fn the_eligibility_gate_refuses_other_authority() {
    let fx = Fixture::new();
    let binding = fx.binding();
    let refuse = |action: &HostAction, descriptor: &Json, binding: &InstallExecutionBinding| {
        fx.config
            .connect(action, descriptor, binding)
            .unwrap_err()
            .to_string()
    };

    // Kind is not skill.
    let agent = material_for("agent:demo", "agent", BODY);
    let agent_descriptor = descriptor_for(
        &agent,
        &Authority {
            kind: "agent",
            ..SKILL
        },
    );
    let agent_action = action_for(&agent, &agent_descriptor, "agent");
    assert_eq!(
        refuse(&agent_action, &agent_descriptor, &binding),
        NOT_ELIGIBLE
    );

    // Permission expansion, credential requirement.
    for authority in [
        Authority {
            permission_expansion: true,
            ..SKILL
        },
        Authority {
            credential_requirement: true,
            ..SKILL
        },
    ] {
        let descriptor = descriptor_for(&fx.material, &authority);
        let action = action_for(&fx.material, &descriptor, "skill");
        assert_eq!(refuse(&action, &descriptor, &binding), NOT_ELIGIBLE);
    }

    // A binding naming another target.
    let other_target = InstallExecutionBinding::new(
        INSTALLER_ID,
        INSTALLER_DIGEST,
        &digest("host-identity"),
        &digest("another-target"),
    )
    .unwrap();
    assert_eq!(
        refuse(&fx.action, &fx.descriptor, &other_target),
        NOT_ELIGIBLE
    );

    // The payload's capability kind is not skill.
    let mut wrong_kind = fx.action.clone();
    if let Json::Obj(m) = &mut wrong_kind.payload {
        m.insert("capability_kind".into(), Json::str("agent"));
    }
    assert_eq!(refuse(&wrong_kind, &fx.descriptor, &binding), NOT_ELIGIBLE);

    // A descriptor naming other material.
    let other = material_for("skill:demo", "skill", "# Other body\n");
    let other_descriptor = descriptor_for(&other, &SKILL);
    let mixed = action_for(&fx.material, &other_descriptor, "skill");
    assert_eq!(
        refuse(&mixed, &other_descriptor, &binding),
        "skill CAS material does not match the install descriptor"
    );

    // Result material missing or tampered.
    let mut no_material = fx.action.clone();
    if let Json::Obj(m) = &mut no_material.payload {
        m.insert("result_material".into(), Json::Null);
    }
    assert_eq!(
        refuse(&no_material, &fx.descriptor, &binding),
        "install action has no typed result material"
    );
    let mut tampered = fx.action.clone();
    if let Json::Obj(m) = &mut tampered.payload {
        let mut material = fx.material.clone();
        if let Json::Obj(mm) = &mut material {
            mm.insert("content_bytes".into(), Json::Int(1));
        }
        m.insert("result_material".into(), material);
    }
    assert_eq!(
        refuse(&tampered, &fx.descriptor, &binding),
        "install result material is invalid"
    );
    assert_eq!(fx.names(), Vec::<String>::new());
}

#[test]
fn observations_are_validated() {
    let d = digest("v");
    assert!(InstallDriverObservation::new(ObservationState::Absent, &d, None).is_ok());
    assert_eq!(
        InstallDriverObservation::new(ObservationState::InstalledExact, &d, None)
            .unwrap_err()
            .to_string(),
        "installed-exact observation requires a material identity"
    );
    assert_eq!(
        InstallDriverObservation::new(ObservationState::Conflict, &d, Some(&d))
            .unwrap_err()
            .to_string(),
        "non-installed observations cannot authorize material"
    );
    assert_eq!(
        InstallDriverObservation::new(ObservationState::Absent, "x", None)
            .unwrap_err()
            .to_string(),
        "verification_digest must be a lowercase SHA-256 digest"
    );
    for state in ObservationState::ALL {
        assert_eq!(ObservationState::parse(state.as_str()).unwrap(), state);
    }
    assert_eq!(
        ObservationState::parse("installed")
            .unwrap_err()
            .to_string(),
        "unsupported install observation state"
    );
}

#[test]
fn ancestors_must_not_permit_unsafe_renames() {
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    let root = shared.join("skills");
    private_dir(&root);
    let configure =
        || SkillCasRuntimeConfig::new(&root, CountingSource::new(BODY), INSTALLER_ID, &digest("h"));
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
    let err = configure().unwrap_err();
    assert_eq!(
        source_message(&err),
        "skill store ancestor permits unsafe rename"
    );
    // World-writable but sticky, and the protected child is ours: accepted.
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    configure().unwrap();
}

#[test]
fn a_root_configured_through_a_symlink_is_pinned_by_its_canonical_path() {
    let fx = Fixture::new();
    let link = fx._tmp.path().join("link");
    std::os::unix::fs::symlink(&fx.root, &link).unwrap();
    let config =
        SkillCasRuntimeConfig::new(&link, CountingSource::new(BODY), INSTALLER_ID, &digest("h"))
            .unwrap();
    assert_eq!(config.root(), fs::canonicalize(&fx.root).unwrap());
    assert_eq!(
        config.target_identity_digest(),
        fx.config.target_identity_digest()
    );
}

#[test]
fn reconcile_waits_for_the_content_lock() {
    let fx = Fixture::new();
    fx.driver().apply_once().unwrap();
    let lock = fs::File::open(fx.root.join(format!("{}.lock", fx.sha()))).unwrap();
    lock.lock().unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(lock);
    });
    let started = std::time::Instant::now();
    assert_eq!(
        fx.driver().reconcile().state,
        ObservationState::InstalledExact
    );
    assert!(started.elapsed() >= std::time::Duration::from_millis(90));
    release.join().unwrap();
}

#[test]
fn an_unsafe_lock_file_is_a_conflict() {
    let fx = Fixture::new();
    let outside = fx._tmp.path().join("outside.lock");
    write_file(&outside, b"", 0o600);
    std::os::unix::fs::symlink(&outside, fx.root.join(format!("{}.lock", fx.sha()))).unwrap();
    let mut driver = fx.driver();
    let err = driver.apply_once().unwrap_err();
    assert!(matches!(err, SkillCasError::FilesystemConflict { .. }));
    assert_eq!(err.to_string(), "skill store content lock is unsafe");
    assert_eq!(fx.source.calls(), 0);
    assert_eq!(fx.driver().reconcile().state, ObservationState::Conflict);
    assert_eq!(fs::read(&outside).unwrap(), b"");
}

#[test]
fn configurations_and_drivers_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<SkillCasRuntimeConfig>();
    send_sync::<SkillCasDriver>();
    send_sync::<SkillCasError>();
}

#[test]
fn a_named_target_is_what_bindings_name_and_the_root_is_still_pinned() {
    let fx = Fixture::new();
    let captured = fx.config.target_identity_digest().to_owned();
    let named = digest("data-directory-store");
    let config = SkillCasRuntimeConfig::new(
        &fx.root,
        fx.source.clone(),
        INSTALLER_ID,
        &digest("host-identity"),
    )
    .unwrap()
    .with_target_identity(&named)
    .unwrap();
    assert_eq!(config.target_identity_digest(), named);
    let binding = config.binding(INSTALLER_DIGEST).unwrap();
    assert_eq!(binding.target_identity_digest, named);
    assert_ne!(binding.target_identity_digest, captured);
    // A binding that names the captured root is not this store's.
    assert_eq!(
        config
            .connect(&fx.action, &fx.descriptor, &fx.binding())
            .unwrap_err()
            .to_string(),
        NOT_ELIGIBLE
    );
    config
        .connect(&fx.action, &fx.descriptor, &binding)
        .unwrap()
        .apply_once()
        .unwrap();
    assert_eq!(fs::read(fx.final_path()).unwrap(), BODY.as_bytes());
    // The root is still re-captured: a replaced one is refused whatever the name.
    fs::rename(&fx.root, fx._tmp.path().join("moved")).unwrap();
    private_dir(&fx.root);
    assert_eq!(
        config.binding(INSTALLER_DIGEST).unwrap_err().to_string(),
        "skill CAS root changed after runtime configuration"
    );
    let err = SkillCasRuntimeConfig::new(
        &fx.root,
        fx.source.clone(),
        INSTALLER_ID,
        &digest("host-identity"),
    )
    .unwrap()
    .with_target_identity("NOT-A-DIGEST")
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "target_identity_digest must be a lowercase SHA-256 digest"
    );
}
