//! `ctx catalog ingest --catalog-dir DIR` applies the catalog file rules (spec/catalog.md §3):
//! `catalog.json` and every body are regular files with one link, opened inside the catalog
//! directory without following a symbolic link, so a catalog cannot pin a file outside it.

use std::path::Path;

use ctx_model::Json;

use crate::support::{self, run_ctx};

/// Copies the sample catalog into `to`.
fn copy_sample(to: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("a catalog directory");
        for entry in std::fs::read_dir(from).expect("the sample catalog") {
            let entry = entry.expect("an entry");
            let target = to.join(entry.file_name());
            if entry.file_type().expect("a type").is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).expect("a copy");
            }
        }
    }
    copy(&ctx_service::sample_catalog_dir(), to);
}

/// Runs `ctx catalog ingest --catalog-dir catalog` on `data`, which must be refused as bad input
/// (status 2, code `invalid`) with nothing ingested; returns the sentence.
fn ingest_refused(data: &Path, catalog: &Path) -> String {
    let dir = catalog.to_str().expect("a UTF-8 path");
    let run = run_ctx(data, &["catalog", "ingest", "--catalog-dir", dir], "");
    assert_eq!(run.code, 2, "{} {}", run.stdout, run.stderr);
    let value = Json::parse(run.stdout.trim_end()).expect("one JSON line");
    assert_eq!(value.get("ok"), Some(&Json::Bool(false)), "{}", run.stdout);
    let error = value.get("error").expect("an error object");
    assert_eq!(error.get_str("code"), Some("invalid"), "{}", run.stdout);
    assert!(
        !data.join("catalog").exists(),
        "a refused catalog is not ingested"
    );
    error.get_str("message").expect("a message").to_owned()
}

#[test]
fn a_catalog_that_reaches_outside_its_directory_is_refused_with_a_sentence_naming_the_file() {
    let dir = support::tempdir();
    let data = dir.path().join("ctx");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("a directory outside the catalog");
    let body = "skills/rust/SKILL.md";

    // A symbolic link as catalog.json, to a catalog outside the directory.
    let catalog = dir.path().join("linked-catalog");
    copy_sample(&catalog);
    std::fs::rename(catalog.join("catalog.json"), outside.join("catalog.json")).expect("move");
    std::os::unix::fs::symlink(outside.join("catalog.json"), catalog.join("catalog.json"))
        .expect("a symlink");
    let shown = catalog.display();
    assert_eq!(
        ingest_refused(&data, &catalog),
        format!(
            "the catalog in {shown} does not load: catalog file {shown}/catalog.json is a \
             symbolic link; ctx reads only regular files inside the catalog directory"
        )
    );

    // A symbolic link as a body, to the same bytes outside.
    let catalog = dir.path().join("linked-body");
    copy_sample(&catalog);
    std::fs::rename(catalog.join(body), outside.join("SKILL.md")).expect("move");
    std::os::unix::fs::symlink(outside.join("SKILL.md"), catalog.join(body)).expect("a symlink");
    let shown = catalog.display();
    assert_eq!(
        ingest_refused(&data, &catalog),
        format!(
            "the catalog in {shown} does not load: catalog body {shown}/{body} is a symbolic \
             link; ctx reads only regular files inside the catalog directory"
        )
    );

    // A symbolic link as a directory on the way to a body.
    let catalog = dir.path().join("linked-directory");
    copy_sample(&catalog);
    std::fs::rename(catalog.join("skills/rust"), outside.join("rust")).expect("move");
    std::os::unix::fs::symlink(outside.join("rust"), catalog.join("skills/rust"))
        .expect("a symlink");
    let shown = catalog.display();
    assert_eq!(
        ingest_refused(&data, &catalog),
        format!(
            "the catalog in {shown} does not load: catalog body {shown}/{body} passes through \
             the symbolic link {shown}/skills/rust; ctx reads only regular files inside the \
             catalog directory"
        )
    );

    // A body with a second name outside the directory: whoever can write that name changes
    // the body.
    let catalog = dir.path().join("hard-linked-body");
    copy_sample(&catalog);
    std::fs::hard_link(catalog.join(body), outside.join("hard-linked.md")).expect("a hard link");
    let shown = catalog.display();
    assert_eq!(
        ingest_refused(&data, &catalog),
        format!(
            "the catalog in {shown} does not load: catalog body {shown}/{body} has 2 hard \
             links; ctx refuses a body that another path can change"
        )
    );

    // A body path with a `..` segment, naming a file beside the directory.
    let catalog = dir.path().join("dotdot");
    copy_sample(&catalog);
    std::fs::copy(catalog.join(body), dir.path().join("SKILL.md")).expect("a copy beside");
    let text = std::fs::read_to_string(catalog.join("catalog.json")).expect("catalog.json");
    let edited = text.replacen(
        &format!("\"path\": \"{body}\""),
        "\"path\": \"../SKILL.md\"",
        1,
    );
    assert_ne!(edited, text, "the sample names {body}");
    std::fs::write(catalog.join("catalog.json"), edited).expect("write");
    let shown = catalog.display();
    assert_eq!(
        ingest_refused(&data, &catalog),
        format!(
            "the catalog in {shown} does not load: catalog entry 0 (\"skill:rust\") field \
             \"material.path\" has the value \"../SKILL.md\", which is not a relative POSIX path \
             of at most 256 bytes without empty, '.' or '..' segments"
        )
    );

    // The same catalog, plain, ingests.
    let catalog = dir.path().join("plain");
    copy_sample(&catalog);
    let run = run_ctx(
        &data,
        &[
            "catalog",
            "ingest",
            "--catalog-dir",
            catalog.to_str().expect("utf-8"),
        ],
        "",
    );
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    assert!(data.join("catalog/catalog.json").is_file());
}
