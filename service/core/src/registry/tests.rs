//! Tests of the artifact registry over the shipped sample catalog, in private temporary roots.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use ctx_model::{CURRENT_WORK_SCHEMA, Json, ObservationRef, Surrogate, sha256_hex};
use ctx_projections::engine::ObservationNormalizer as _;

use super::*;
use crate::catalog::{LoadedCatalog, load_catalog_dir, sample_catalog_dir};

fn digest(label: &str) -> String {
    sha256_hex(label)
}

/// A current-work surrogate over `signals`, sorted as the engine requires.
fn surrogate(signals: &[&str]) -> Surrogate {
    let mut signals = signals.to_vec();
    signals.sort_unstable();
    Surrogate::new(
        CURRENT_WORK_SCHEMA,
        1,
        Json::object([
            ("active_capability_ids", Json::Arr(vec![])),
            ("baseline_capability_ids", Json::Arr(vec![])),
            ("languages", Json::Arr(vec![Json::str("python")])),
            ("rejected_capability_ids", Json::Arr(vec![])),
            ("requested_limit", Json::Int(5)),
            (
                "signals",
                Json::Arr(signals.iter().map(|s| Json::str(*s)).collect()),
            ),
        ]),
    )
}

fn sample() -> LoadedCatalog {
    load_catalog_dir(&sample_catalog_dir()).unwrap()
}

fn inputs(loaded: &LoadedCatalog) -> IngestInputs {
    let catalog = loaded.catalog();
    IngestInputs {
        planning_environment_digest: digest("environment"),
        catalog_namespace_digest: catalog.namespace_digest().to_owned(),
        catalog_retrieval_digest: catalog.retrieval_snapshot_digest().to_owned(),
        benefit_facts_snapshot_digest: digest("facts"),
        benefit_policy_snapshot_digest: digest("policy"),
        material_snapshot_digest: catalog.material_snapshot_digest().to_owned(),
        installation_snapshot_digest: catalog.installation_snapshot_digest().to_owned(),
        observation_surrogate: surrogate(&["pytest", "lint"]),
        planning_schema_version: "ctx-managed-service-planner-v3".to_owned(),
    }
}

/// A private temporary directory and the registry root inside it.
fn root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let root = dir.path().join("registry");
    (dir, root)
}

fn ingest_sample(registry: &ArtifactRegistry) -> ArtifactHandle {
    let loaded = sample();
    registry.ingest(&loaded, inputs(&loaded)).unwrap()
}

/// Makes a published file writable, replaces its content and makes it read-only again, as an
/// attacker with the owner's rights could.
fn tamper(path: &Path, content: &[u8]) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(path, content).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o400)).unwrap();
}

fn some_body_path(handle: &ArtifactHandle) -> String {
    handle
        .catalog()
        .entries()
        .iter()
        .flat_map(|e| e.bodies().map(|(_, b)| b.path.clone()))
        .next()
        .unwrap()
}

#[test]
fn ingest_binds_every_digest_and_the_observation_reference() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let loaded = sample();
    let handle = registry.ingest(&loaded, inputs(&loaded)).unwrap();
    let catalog = loaded.catalog();
    assert_eq!(handle.graph_artifact_digest(), catalog.content_digest());
    assert_eq!(handle.planning_environment_digest(), digest("environment"));
    assert_eq!(
        handle.catalog_namespace_digest(),
        catalog.namespace_digest()
    );
    assert_eq!(
        handle.catalog_retrieval_digest(),
        catalog.retrieval_snapshot_digest()
    );
    assert_eq!(handle.benefit_facts_snapshot_digest(), digest("facts"));
    assert_eq!(handle.benefit_policy_snapshot_digest(), digest("policy"));
    assert_eq!(
        handle.material_snapshot_digest(),
        catalog.material_snapshot_digest()
    );
    assert_eq!(
        handle.installation_snapshot_digest(),
        catalog.installation_snapshot_digest()
    );
    assert_eq!(
        handle.planning_schema_version(),
        "ctx-managed-service-planner-v3"
    );
    let surrogate = surrogate(&["pytest", "lint"]);
    assert_eq!(handle.observation_surrogate(), &surrogate);
    assert_eq!(
        handle.observation_surrogate_digest(),
        surrogate.value_digest
    );
    assert_eq!(
        handle.observation_reference(),
        &ObservationRef {
            provider_id: "ctx-managed-artifact-observation-v1".to_owned(),
            opaque_id: format!("manifest-{}", handle.manifest_digest()),
            content_digest: surrogate.value_digest.clone(),
        }
    );
    // The manifest digest is the SHA-256 of the stored manifest bytes.
    let manifest_path = root
        .join(MANIFESTS_DIR)
        .join(format!("{}.json", handle.manifest_digest()));
    let bytes = fs::read(&manifest_path).unwrap();
    assert_eq!(
        ctx_model::sha256_hex_bytes(&bytes),
        handle.manifest_digest()
    );
    assert!(bytes.len() <= MANIFEST_MAX_BYTES);
    assert_eq!(handle.catalog(), loaded.catalog());
    registry.verify_handle(&handle).unwrap();
}

#[test]
fn reopen_in_a_second_registry_instance_issues_an_equal_handle() {
    let (_dir, root) = root();
    let first = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&first);
    drop(first);
    let second = ArtifactRegistry::open(&root).unwrap();
    let reopened = second
        .reopen(
            handle.manifest_digest(),
            handle.planning_environment_digest(),
        )
        .unwrap();
    assert_eq!(reopened.manifest_digest(), handle.manifest_digest());
    assert_eq!(
        reopened.graph_artifact_digest(),
        handle.graph_artifact_digest()
    );
    assert_eq!(
        reopened.observation_reference(),
        handle.observation_reference()
    );
    assert_eq!(
        reopened.observation_surrogate(),
        handle.observation_surrogate()
    );
    second.verify_handle(&reopened).unwrap();
}

#[test]
fn a_handle_is_honoured_only_by_the_registry_instance_that_issued_it() {
    let (_dir, root) = root();
    let a = ArtifactRegistry::open(&root).unwrap();
    let b = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&a);
    a.verify_handle(&handle).unwrap();
    let err = b.verify_handle(&handle).unwrap_err();
    assert!(matches!(err, RegistryError::ForeignHandle));
    assert_eq!(
        err.to_string(),
        "managed query artifact was not issued by this service registry"
    );
    // Reopening through B issues B's own handle, which A refuses in turn.
    let reopened = b
        .reopen(
            handle.manifest_digest(),
            handle.planning_environment_digest(),
        )
        .unwrap();
    b.verify_handle(&reopened).unwrap();
    assert!(matches!(
        a.verify_handle(&reopened),
        Err(RegistryError::ForeignHandle)
    ));
}

#[test]
fn a_handle_is_refused_outside_its_issuing_process() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let mut handle = ingest_sample(&registry);
    let normalizer = {
        handle.issuing_pid = handle.issuing_pid.wrapping_add(1);
        handle.observation_normalizer()
    };
    let err = registry.verify_handle(&handle).unwrap_err();
    assert!(matches!(err, RegistryError::HandleOutsideProcess { .. }));
    assert_eq!(
        err.to_string(),
        "managed artifact handle is unavailable outside its issuing process"
    );
    let seam = normalizer
        .normalize(handle.observation_reference())
        .unwrap_err();
    assert_eq!(
        seam.0,
        "managed artifact handle is unavailable outside its issuing process"
    );
}

#[test]
fn identical_reingest_is_idempotent_across_instances() {
    let (_dir, root) = root();
    let a = ArtifactRegistry::open(&root).unwrap();
    let first = ingest_sample(&a);
    let again = ingest_sample(&a);
    let b = ArtifactRegistry::open(&root).unwrap();
    let third = ingest_sample(&b);
    for h in [&again, &third] {
        assert_eq!(h.manifest_digest(), first.manifest_digest());
        assert_eq!(h.graph_artifact_digest(), first.graph_artifact_digest());
    }
    assert_eq!(fs::read_dir(root.join(MANIFESTS_DIR)).unwrap().count(), 1);
    assert_eq!(fs::read_dir(root.join(ARTIFACTS_DIR)).unwrap().count(), 1);
}

#[test]
fn a_different_surrogate_gets_a_new_manifest_over_the_same_artifact() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let loaded = sample();
    let first = registry.ingest(&loaded, inputs(&loaded)).unwrap();
    let mut other = inputs(&loaded);
    other.observation_surrogate = surrogate(&["docker"]);
    let second = registry.ingest(&loaded, other).unwrap();
    assert_ne!(first.manifest_digest(), second.manifest_digest());
    assert_eq!(
        first.graph_artifact_digest(),
        second.graph_artifact_digest()
    );
    assert_eq!(fs::read_dir(root.join(MANIFESTS_DIR)).unwrap().count(), 2);
}

#[test]
fn different_content_under_an_existing_manifest_address_is_refused() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&registry);
    let path = root
        .join(MANIFESTS_DIR)
        .join(format!("{}.json", handle.manifest_digest()));
    tamper(&path, b"{}");
    let loaded = sample();
    let err = registry.ingest(&loaded, inputs(&loaded)).unwrap_err();
    assert!(
        matches!(&err, RegistryError::Occupied { path: p } if *p == path),
        "{err}"
    );
}

#[test]
fn a_modified_body_is_named_by_the_full_verification_and_never_read_by_a_reopen() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&registry);
    let body = some_body_path(&handle);
    let artifact = root
        .join(ARTIFACTS_DIR)
        .join(handle.graph_artifact_digest());
    let path = artifact.join(&body);
    let mut content = fs::read(&path).unwrap();
    content[0] ^= 1;
    tamper(&path, &content);
    // A prompt's reopen reads the projection, not the bodies (spec/registry.md §4): bodies are
    // verified at publication and again by whatever installs one.
    let reopened = registry
        .reopen(
            handle.manifest_digest(),
            handle.planning_environment_digest(),
        )
        .unwrap();
    assert_eq!(reopened.catalog(), handle.catalog());
    // The full verification names the body.
    let err = registry
        .verify_artifact_files(handle.graph_artifact_digest())
        .unwrap_err();
    assert!(matches!(err, RegistryError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains(&body), "{err}");
}

/// A registry with the sample catalog published: the temporary directory that holds it, its
/// root, the registry, the handle, its manifest and environment digests and its projection.
fn published_sample() -> (
    tempfile::TempDir,
    PathBuf,
    ArtifactRegistry,
    ArtifactHandle,
    String,
    String,
    PathBuf,
) {
    let (dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&registry);
    let (md, env) = (
        handle.manifest_digest().to_owned(),
        handle.planning_environment_digest().to_owned(),
    );
    let projection = root
        .join(ARTIFACTS_DIR)
        .join(handle.graph_artifact_digest())
        .join(crate::catalog::PROJECTION_FILE_NAME);
    (dir, root, registry, handle, md, env, projection)
}

#[test]
fn a_tampered_projection_is_refused_by_a_reopen() {
    let (_dir, _, registry, _, md, env, projection) = published_sample();
    let original = fs::read(&projection).unwrap();
    // One flipped byte of the chunk the open reads (the section table and the facts) fails that
    // chunk's BLAKE3 digest (spec/catalog.md §8.3).
    let chunks = u32::from_le_bytes(original[24..28].try_into().unwrap()) as usize;
    let mut flipped = original.clone();
    flipped[64 + 32 * chunks + 3] ^= 1;
    tamper(&projection, &flipped);
    match registry.reopen(&md, &env) {
        Err(RegistryError::Corrupt { path, .. }) => assert_eq!(path, projection),
        other => panic!("expected a corrupt projection, got {other:?}"),
    }
    // A writable projection is refused too.
    tamper(&projection, &original);
    fs::set_permissions(&projection, fs::Permissions::from_mode(0o644)).unwrap();
    assert!(registry.reopen(&md, &env).is_err());
    fs::set_permissions(&projection, fs::Permissions::from_mode(0o400)).unwrap();
    registry.reopen(&md, &env).unwrap();
}

#[test]
fn a_projection_of_another_format_version_is_rewritten_once_after_a_full_verification() {
    let (_dir, root, registry, handle, md, env, projection) = published_sample();
    let current = fs::read(&projection).unwrap();
    // What an earlier build wrote: the same magic, another format version.
    let mut older = current.clone();
    older[8..12].copy_from_slice(&1u32.to_le_bytes());
    tamper(&projection, &older);
    let reopened = registry.reopen(&md, &env).unwrap();
    assert_eq!(
        reopened.graph_artifact_digest(),
        handle.graph_artifact_digest()
    );
    assert_eq!(
        fs::read(&projection).unwrap(),
        current,
        "rewritten in this build's format"
    );
    let mode = fs::metadata(&projection).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o400);
    // No stage is left beside the artifacts, and the artifact verifies whole.
    let names: Vec<String> = fs::read_dir(root.join(ARTIFACTS_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    registry
        .verify_artifact_files(handle.graph_artifact_digest())
        .unwrap();
    // A body changed under the old projection is found by that full verification.
    tamper(&projection, &older);
    let relative = some_body_path(&handle);
    let body = root
        .join(ARTIFACTS_DIR)
        .join(handle.graph_artifact_digest())
        .join(&relative);
    let mut text = fs::read(&body).unwrap();
    text.extend_from_slice(b"\nchanged\n");
    tamper(&body, &text);
    match registry.reopen(&md, &env) {
        Err(e @ RegistryError::Corrupt { .. }) => {
            assert!(e.to_string().contains(&relative), "{e}");
        }
        other => panic!("expected the changed body to be named, got {other:?}"),
    }
}

#[test]
fn tampered_catalog_manifest_modes_and_extra_files_are_detected() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&registry);
    let (md, env) = (
        handle.manifest_digest().to_owned(),
        handle.planning_environment_digest().to_owned(),
    );
    let artifact = root
        .join(ARTIFACTS_DIR)
        .join(handle.graph_artifact_digest());
    let manifest = root.join(MANIFESTS_DIR).join(format!("{md}.json"));
    let corrupt_at = |expected: &Path| match registry.reopen(&md, &env) {
        Err(RegistryError::Corrupt { path, .. }) => assert_eq!(path, expected),
        other => panic!(
            "expected corruption of {}, got {other:?}",
            expected.display()
        ),
    };
    // What only the full verification reads (spec/registry.md §4).
    let graph = handle.graph_artifact_digest().to_owned();
    let fully_corrupt_at = |expected: &Path| match registry.verify_artifact_files(&graph) {
        Err(RegistryError::Corrupt { path, .. }) => assert_eq!(path, expected),
        other => panic!(
            "expected corruption of {}, got {other:?}",
            expected.display()
        ),
    };

    // A mode change alone is corruption.
    let catalog = artifact.join("catalog.json");
    fs::set_permissions(&catalog, fs::Permissions::from_mode(0o644)).unwrap();
    corrupt_at(&catalog);
    fs::set_permissions(&catalog, fs::Permissions::from_mode(0o400)).unwrap();
    registry.reopen(&md, &env).unwrap();

    // Re-encoded (non-canonical) catalog bytes no longer hash to the address.
    let original = fs::read(&catalog).unwrap();
    let mut spaced = original.clone();
    spaced.push(b'\n');
    tamper(&catalog, &spaced);
    fully_corrupt_at(&catalog);
    tamper(&catalog, &original);
    registry.reopen(&md, &env).unwrap();

    // An undeclared file inside the artifact.
    let extra = artifact.join("extra.md");
    fs::write(&extra, b"x").unwrap();
    fs::set_permissions(&extra, fs::Permissions::from_mode(0o400)).unwrap();
    fully_corrupt_at(&extra);
    fs::remove_file(&extra).unwrap();

    // A manifest whose bytes no longer hash to its name.
    let bytes = fs::read(&manifest).unwrap();
    let mut altered = bytes.clone();
    altered.push(b' ');
    tamper(&manifest, &altered);
    corrupt_at(&manifest);
    tamper(&manifest, &bytes);
    registry.reopen(&md, &env).unwrap();
}

#[test]
fn published_directories_are_0700_and_files_0400() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let _handle = ingest_sample(&registry);
    let mut pending = vec![root.clone()];
    let (mut dirs, mut files) = (0, 0);
    while let Some(dir) = pending.pop() {
        assert_eq!(
            fs::metadata(&dir).unwrap().mode() & 0o7777,
            0o700,
            "{}",
            dir.display()
        );
        dirs += 1;
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n == PUBLICATION_LOCK_FILE) {
                assert_eq!(meta.mode() & 0o7777, 0o600);
            } else {
                assert_eq!(meta.mode() & 0o7777, 0o400, "{}", path.display());
                assert_eq!(meta.nlink(), 1, "{}", path.display());
                files += 1;
            }
        }
    }
    assert!(dirs >= 4 && files >= 3, "{dirs} directories, {files} files");
}

#[test]
fn an_unknown_manifest_is_not_found_and_a_wrong_environment_is_refused() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&registry);
    let unknown = digest("unknown manifest");
    match registry.reopen(&unknown, handle.planning_environment_digest()) {
        Err(RegistryError::NotFound { manifest_digest }) => assert_eq!(manifest_digest, unknown),
        other => panic!("expected not found, got {other:?}"),
    }
    assert!(matches!(
        registry.reopen(handle.manifest_digest(), &digest("another environment")),
        Err(RegistryError::EnvironmentMismatch { .. })
    ));
    assert!(matches!(
        registry.reopen("not-a-digest", handle.planning_environment_digest()),
        Err(RegistryError::InvalidInput {
            field: "manifest_digest",
            ..
        })
    ));
}

#[test]
fn the_normalizer_resolves_only_its_artifact_reference() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&registry);
    let normalizer = handle.observation_normalizer();
    assert_eq!(
        &normalizer
            .normalize(handle.observation_reference())
            .unwrap(),
        handle.observation_surrogate()
    );
    let mut other = handle.observation_reference().clone();
    other.opaque_id = format!("manifest-{}", digest("other"));
    assert_eq!(
        normalizer.normalize(&other).unwrap_err().0,
        "managed artifact observation reference is unavailable"
    );
}

#[test]
fn unsafe_roots_are_refused_with_their_path() {
    let (dir, root) = root();
    assert!(matches!(
        ArtifactRegistry::open(Path::new("relative/registry")),
        Err(RegistryError::UnsafeRoot { .. })
    ));
    assert!(matches!(
        ArtifactRegistry::open(Path::new("/")),
        Err(RegistryError::UnsafeRoot { .. })
    ));
    fs::create_dir(&root).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let err = ArtifactRegistry::open(&root).unwrap_err();
    assert!(matches!(err, RegistryError::UnsafeRoot { .. }), "{err}");
    assert!(
        err.to_string().contains(&root.display().to_string()),
        "{err}"
    );
    fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&root, &link).unwrap();
    assert!(matches!(
        ArtifactRegistry::open(&link),
        Err(RegistryError::UnsafeRoot { .. })
    ));
    ArtifactRegistry::open(&root).unwrap();
}

#[test]
fn stale_stages_are_removed_and_foreign_names_refused() {
    let (_dir, root) = root();
    drop(ArtifactRegistry::open(&root).unwrap());
    let stage = root.join(ARTIFACTS_DIR).join(".stage-1-1");
    fs::create_dir(&stage).unwrap();
    fs::write(stage.join("catalog.json"), b"partial").unwrap();
    let registry = ArtifactRegistry::open(&root).unwrap();
    assert!(!stage.exists());
    let _handle = ingest_sample(&registry);
    let stray = root.join(MANIFESTS_DIR).join("notes.txt");
    fs::write(&stray, b"x").unwrap();
    match ArtifactRegistry::open(&root) {
        Err(RegistryError::UnsafeEntry { path, .. }) => assert_eq!(path, stray),
        other => panic!("expected an unsafe entry, got {other:?}"),
    }
}

#[test]
fn inputs_that_disagree_with_the_catalog_or_carry_credentials_are_refused() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let loaded = sample();

    let mut wrong = inputs(&loaded);
    wrong.catalog_retrieval_digest = digest("other retrieval");
    assert!(matches!(
        registry.ingest(&loaded, wrong),
        Err(RegistryError::CatalogMismatch {
            field: "catalog_retrieval_digest",
            ..
        })
    ));

    let mut bad_digest = inputs(&loaded);
    bad_digest.benefit_facts_snapshot_digest = "ABC".to_owned();
    assert!(matches!(
        registry.ingest(&loaded, bad_digest),
        Err(RegistryError::InvalidInput {
            field: "benefit_facts_snapshot_digest",
            ..
        })
    ));

    let mut bad_version = inputs(&loaded);
    bad_version.planning_schema_version = "Planner V3".to_owned();
    assert!(matches!(
        registry.ingest(&loaded, bad_version),
        Err(RegistryError::InvalidInput {
            field: "planning_schema_version",
            ..
        })
    ));

    for signal in ["ghp-abc", "my-api-key", "secret", "aws_private_key"] {
        let mut leaky = inputs(&loaded);
        leaky.observation_surrogate = surrogate(&[signal]);
        assert!(
            matches!(
                registry.ingest(&loaded, leaky),
                Err(RegistryError::InvalidSurrogate { .. })
            ),
            "{signal}"
        );
    }

    let mut opaque = inputs(&loaded);
    opaque.observation_surrogate = Surrogate::new(
        "ctx.observation.opaque-ref",
        1,
        Json::object([
            ("content_digest", Json::str(digest("x"))),
            ("provider_id", Json::str("host")),
        ]),
    );
    assert!(matches!(
        registry.ingest(&loaded, opaque),
        Err(RegistryError::InvalidSurrogate { .. })
    ));
    // Nothing was published by the refused ingests.
    assert_eq!(fs::read_dir(root.join(MANIFESTS_DIR)).unwrap().count(), 0);
}

#[test]
fn captured_authority_must_match_the_artifact() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let handle = ingest_sample(&registry);
    let captured = CapturedAuthority {
        benefit_facts_snapshot_digest: handle.benefit_facts_snapshot_digest(),
        benefit_policy_snapshot_digest: handle.benefit_policy_snapshot_digest(),
        material_snapshot_digest: handle.material_snapshot_digest(),
        installation_snapshot_digest: handle.installation_snapshot_digest(),
    };
    handle.check_captured_authority(&captured).unwrap();
    let drifted = digest("drifted-facts");
    let err = handle
        .check_captured_authority(&CapturedAuthority {
            benefit_facts_snapshot_digest: &drifted,
            ..captured
        })
        .unwrap_err();
    assert!(
        matches!(
            &err,
            RegistryError::AuthorityDrift {
                field: "benefit_facts_snapshot_digest",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("snapshot does not match"), "{err}");
}

#[test]
fn a_publication_while_another_handle_holds_the_lock_times_out_naming_the_holder() {
    let (_dir, root) = root();
    let wait = std::time::Duration::from_millis(60);
    let registry = ArtifactRegistry::open_with_lock_wait(&root, wait).unwrap();
    let lock_path = root.join(PUBLICATION_LOCK_FILE);
    let held = ctx_fs::DirLock::acquire(
        &lock_path,
        &ctx_fs::LockOptions::new(std::time::Duration::ZERO)
            .self_held_grace(std::time::Duration::ZERO),
    )
    .unwrap();

    let loaded = sample();
    let started = std::time::Instant::now();
    let err = registry.ingest(&loaded, inputs(&loaded)).unwrap_err();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "bounded"
    );
    let holder_prefix = format!("pid {} (", std::process::id());
    match &err {
        RegistryError::LockTimeout {
            path,
            holder,
            waited_ms,
        } => {
            assert_eq!(path, &lock_path);
            assert!(holder.starts_with(&holder_prefix), "{holder}");
            assert!(*waited_ms >= wait.as_millis(), "{waited_ms}");
        }
        other => panic!("expected LockTimeout, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.starts_with("managed artifact registry publication lock ")
            && message.contains(lock_path.to_str().unwrap())
            && message.contains(&holder_prefix),
        "{message}"
    );
    // Nothing was published while the lock was held elsewhere.
    assert_eq!(fs::read_dir(root.join(MANIFESTS_DIR)).unwrap().count(), 0);

    // Opening and reopening wait the same bounded time.
    let err = ArtifactRegistry::open_with_lock_wait(&root, wait).unwrap_err();
    assert!(matches!(err, RegistryError::LockTimeout { .. }), "{err:?}");

    drop(held);
    let handle = ingest_sample(&registry);
    registry
        .reopen(
            handle.manifest_digest(),
            handle.planning_environment_digest(),
        )
        .unwrap();
}

#[test]
fn the_publication_lock_file_must_be_a_regular_file_others_cannot_write() {
    let (_dir, root) = root();
    let registry = ArtifactRegistry::open(&root).unwrap();
    let lock_path = root.join(PUBLICATION_LOCK_FILE);
    fs::set_permissions(&lock_path, fs::Permissions::from_mode(0o622)).unwrap();
    let loaded = sample();
    let err = registry.ingest(&loaded, inputs(&loaded)).unwrap_err();
    assert!(
        matches!(&err, RegistryError::UnsafeEntry { path, .. } if path == &lock_path),
        "{err:?}"
    );
    fs::set_permissions(&lock_path, fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(&lock_path).unwrap();
    fs::create_dir(&lock_path).unwrap();
    let err = registry.ingest(&loaded, inputs(&loaded)).unwrap_err();
    assert!(err.to_string().ends_with("is not a regular file"), "{err}");
}
