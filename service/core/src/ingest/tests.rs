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
        u64::try_from(BODY_MAX_BYTES).unwrap()
    );
}

#[test]
fn a_source_file_over_its_copy_limit_is_refused_naming_the_file_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("SKILL.md");
    let limit = BODY_FILE_COPY_MAX_BYTES;
    std::fs::write(&body, vec![b'x'; usize::try_from(limit).unwrap()]).unwrap();
    assert_eq!(
        read_source_file(&body, limit).unwrap().len(),
        usize::try_from(limit).unwrap()
    );

    std::fs::write(&body, vec![b'x'; usize::try_from(limit + 1).unwrap()]).unwrap();
    let err = read_source_file(&body, limit).unwrap_err();
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
    let err = read_source_file(&catalog, 8).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(catalog.to_str().unwrap()) && message.contains("limit of 8 bytes"),
        "{message}"
    );

    // A missing file keeps its operating-system error.
    let err = read_source_file(&dir.path().join("missing"), limit).unwrap_err();
    assert!(
        matches!(&err, IngestError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
}
