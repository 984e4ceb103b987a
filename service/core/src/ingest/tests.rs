//! Tests of the ingest copy's bounded reads.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use super::*;

#[test]
fn the_copy_limits_are_the_catalogs_own() {
    assert_eq!(
        copy_limit_bytes(CATALOG_FILE_NAME),
        u64::try_from(CATALOG_TEXT_MAX_BYTES).unwrap()
    );
    assert_eq!(
        copy_limit_bytes("skills/rust/SKILL.md"),
        u64::try_from(BODY_V2_MAX_BYTES).unwrap()
    );
}

#[test]
fn a_source_file_over_its_copy_limit_is_refused_naming_the_file_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("SKILL.md");
    let limit = BODY_FILE_COPY_MAX_BYTES;
    std::fs::write(&body, vec![b'x'; usize::try_from(limit).unwrap()]).unwrap();
    assert_eq!(
        read_source_file(dir.path(), "SKILL.md", limit)
            .unwrap()
            .len(),
        usize::try_from(limit).unwrap()
    );

    std::fs::write(&body, vec![b'x'; usize::try_from(limit + 1).unwrap()]).unwrap();
    let err = read_source_file(dir.path(), "SKILL.md", limit).unwrap_err();
    assert!(
        matches!(&err, IngestError::Io { path, .. } if path == &body),
        "{err:?}"
    );
    assert_eq!(err.code(), "internal");
    let message = err.to_string();
    assert!(message.contains(body.to_str().unwrap()), "{message}");
    assert!(
        message.contains(&format!("over the limit of {limit} bytes")),
        "{message}"
    );

    // catalog.json is held to the catalog text limit, which a small test limit stands in for.
    let catalog = dir.path().join(CATALOG_FILE_NAME);
    std::fs::write(&catalog, b"{\"schema\": \"ctx.catalog-v1\"}").unwrap();
    let err = read_source_file(dir.path(), CATALOG_FILE_NAME, 8).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(catalog.to_str().unwrap()) && message.contains("limit of 8 bytes"),
        "{message}"
    );

    // A missing file keeps its operating-system error.
    let err = read_source_file(dir.path(), "missing", limit).unwrap_err();
    assert!(
        matches!(&err, IngestError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
}

#[test]
fn a_source_file_replaced_by_a_link_after_it_loaded_is_refused_by_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("SKILL.md"), b"body").unwrap();
    std::os::unix::fs::symlink(root.join("SKILL.md"), root.join("linked.md")).unwrap();
    let err = read_source_file(root, "linked.md", BODY_FILE_COPY_MAX_BYTES).unwrap_err();
    assert!(matches!(err, IngestError::File(_)), "{err:?}");
    assert_eq!(err.code(), "invalid");
    assert_eq!(
        err.to_string(),
        format!(
            "catalog body {}/linked.md is a symbolic link; ctx reads only regular files inside \
             the catalog directory",
            root.display()
        )
    );
    std::fs::hard_link(root.join("SKILL.md"), root.join("again.md")).unwrap();
    let err = read_source_file(root, "SKILL.md", BODY_FILE_COPY_MAX_BYTES).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "catalog body {}/SKILL.md has 2 hard links; ctx refuses a body that another path \
             can change",
            root.display()
        )
    );
}

#[test]
fn an_ingest_publishes_the_catalogs_artifact_so_the_first_prompt_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(&dir.path().join("ctx"));
    let first = ingest_catalog(&layout, None).unwrap();
    assert!(first.changed);
    let catalog = Catalog::open_projection(&layout.catalog()).unwrap();
    let artifact = layout
        .registry()
        .join("artifacts")
        .join(catalog.content_digest());
    assert!(artifact.join(CATALOG_FILE_NAME).is_file(), "{artifact:?}");
    let projection = std::fs::read(artifact.join(PROJECTION_FILE_NAME)).unwrap();
    assert_eq!(projection, catalog.projection_bytes().unwrap());
    // The registry verifies what it published, whole.
    ArtifactRegistry::open(&layout.registry())
        .unwrap()
        .verify_artifact_files(catalog.content_digest())
        .unwrap();
    // An unchanged ingest leaves the one artifact as it is.
    let again = ingest_catalog(&layout, None).unwrap();
    assert!(!again.changed);
    let artifacts: Vec<_> = std::fs::read_dir(layout.registry().join("artifacts"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
}
