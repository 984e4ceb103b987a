//! Tests of the catalog format, loader and retrieval over the shipped sample catalog.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use ctx_model::CapabilityKind;
use std::fs;
use std::path::Path;

use ctx_model::{
    Json, validate_catalog_identity, validate_install_plan_descriptor, validate_material_descriptor,
};

use super::*;

fn sample() -> LoadedCatalog {
    load_catalog_dir(&sample_catalog_dir()).expect("the sample catalog loads and verifies")
}

fn sample_text() -> String {
    fs::read_to_string(sample_catalog_dir().join(CATALOG_FILE_NAME)).expect("sample readable")
}

#[test]
fn sample_catalog_loads_verifies_and_is_realistic() {
    let loaded = sample();
    let catalog = loaded.catalog();
    assert!(catalog.entries().len() >= 40, "at least 40 capabilities");
    for kind in CapabilityKind::ALL {
        assert!(
            catalog.entries().iter().any(|e| e.kind == kind),
            "the sample has a {kind}"
        );
    }
    let mut loads = 0;
    let mut installs = 0;
    for entry in catalog.entries() {
        if entry.kind == CapabilityKind::Harness {
            assert!(entry.install.is_none() && entry.material.is_none());
        }
        if entry.material.is_some() {
            loads += 1;
            let text = loaded.material_text(&entry.id).expect("material body");
            assert!(text.len() <= 6000 && text.starts_with("---\nname: "));
        }
        if entry.install.is_some() {
            installs += 1;
            let text = loaded.install_result_text(&entry.id).expect("install body");
            assert!(!text.is_empty() && text.len() <= 6000);
        }
        // Every skill that can be loaded or installed ships its SKILL.md.
        if entry.kind == CapabilityKind::Skill
            && (entry.material.is_some() || entry.install.is_some())
        {
            let path = format!("skills/{}/SKILL.md", entry.name);
            assert!(loaded.body_at(&path).is_some(), "{} ships {path}", entry.id);
        }
    }
    assert!(
        loads >= 10 && installs >= 10,
        "loads {loads}, installs {installs}"
    );
}

#[test]
fn descriptors_are_valid_engine_documents() {
    let loaded = sample();
    let catalog = loaded.catalog();
    for entry in catalog.entries() {
        let material = catalog.material_descriptor(&entry.id).expect("descriptor");
        validate_material_descriptor(material).expect("valid material descriptor");
        assert_eq!(
            material.get_str("material_snapshot_digest"),
            Some(catalog.material_snapshot_digest())
        );
        let expected = if entry.material.is_some() {
            "load"
        } else {
            "manual"
        };
        assert_eq!(material.get_str("actionability"), Some(expected));
        match catalog.install_descriptor(&entry.id) {
            Some(d) => {
                validate_install_plan_descriptor(d).expect("valid install descriptor");
                assert_eq!(
                    d.get_str("provenance_digest"),
                    Some(catalog.installation_snapshot_digest())
                );
                let identity = catalog.material_identity(&entry.id).expect("identity");
                assert_eq!(
                    d.get_str("result_material_identity_digest"),
                    identity.get_str("identity_digest")
                );
            }
            None => assert!(entry.install.is_none()),
        }
        validate_catalog_identity(&catalog.catalog_identity(&entry.id).expect("identity"))
            .expect("valid catalog identity");
    }
}

#[test]
fn digests_depend_on_content_not_layout() {
    let text = sample_text();
    let a = Catalog::parse(&text).expect("parses");
    // Canonical text, reversed entry order and compact layout give the same catalog.
    let mut doc = Json::parse(&text).expect("json");
    if let Json::Obj(m) = &mut doc
        && let Some(Json::Arr(items)) = m.get_mut("capabilities")
    {
        items.reverse();
    }
    let b = Catalog::parse(&doc.to_cj()).expect("reordered parses");
    let c = Catalog::parse(&a.to_json().to_cj()).expect("canonical parses");
    assert_eq!(a, b);
    assert_eq!(a, c);
    for d in [
        a.content_digest(),
        a.namespace_digest(),
        a.material_snapshot_digest(),
        a.installation_snapshot_digest(),
        a.retrieval_snapshot_digest(),
    ] {
        assert!(ctx_model::is_sha(d));
    }
    // A label change moves the content and retrieval digests, not the material snapshot.
    let changed = text.replacen("Idiomatic Rust:", "Idiomatic Rust -", 1);
    let d = Catalog::parse(&changed).expect("parses");
    assert_ne!(a.content_digest(), d.content_digest());
    assert_ne!(a.retrieval_snapshot_digest(), d.retrieval_snapshot_digest());
    assert_eq!(a.material_snapshot_digest(), d.material_snapshot_digest());
}

// ---------------------------------------------------------------------------------------------
// Malformed catalogs

const D1: &str = "1111111111111111111111111111111111111111111111111111111111111111";

/// A small valid catalog: a loadable skill, an installable agent, a harness.
fn base() -> Json {
    let text = format!(
        r#"{{"schema":"ctx.catalog-v1","namespace":"test","capabilities":[
        {{"id":"skill:demo","kind":"skill","label":"Demo skill","tags":["demo","rust"],
          "related":["agent:helper"],
          "material":{{"path":"skills/demo/SKILL.md","sha256":"{D1}","size_bytes":5,"estimated_tokens":2}}}},
        {{"id":"agent:helper","kind":"agent","label":"Helper agent","tags":["help"],
          "install":{{"installer_id":"ctx-install-plan-executor-v1","plan_digest":"{D1}",
            "permission_expansion":false,"credential_requirement":true,
            "result":{{"path":"agents/helper.md","sha256":"{D1}","size_bytes":10}}}}}},
        {{"id":"harness:loop","kind":"harness","label":"Loop harness","tags":[]}}]}}"#
    );
    Json::parse(&text).expect("base json")
}

/// Applies `f` to entry `i` of the base catalog.
fn edit(i: usize, f: impl FnOnce(&mut ctx_model::JsonMap)) -> String {
    let mut doc = base();
    if let Json::Obj(m) = &mut doc
        && let Some(Json::Arr(items)) = m.get_mut("capabilities")
        && let Some(Json::Obj(entry)) = items.get_mut(i)
    {
        f(entry);
    }
    doc.to_cj()
}

fn set(path: &str, value: Json) -> impl FnOnce(&mut ctx_model::JsonMap) {
    let path: Vec<String> = path.split('.').map(str::to_owned).collect();
    move |m| {
        let mut cur = m;
        for key in &path[..path.len() - 1] {
            let Some(Json::Obj(next)) = cur.get_mut(key) else {
                panic!("no object at {key}")
            };
            cur = next;
        }
        let last = &path[path.len() - 1];
        if value == Json::Str("<remove>".into()) {
            cur.remove(last);
        } else {
            cur.insert(last.clone(), value);
        }
    }
}

fn strs(items: &[&str]) -> Json {
    Json::Arr(items.iter().map(|s| Json::str(*s)).collect())
}

#[test]
fn base_catalog_is_valid() {
    let c = Catalog::parse(&base().to_cj()).expect("base parses");
    assert_eq!(c.entries().len(), 3);
    assert_eq!(c.entries()[0].id, "agent:helper");
}

#[test]
fn malformed_entries_name_entry_and_field() {
    let remove = || Json::str("<remove>");
    let long_label = Json::str("x".repeat(LABEL_MAX_BYTES + 1));
    let many_tags: Vec<String> = (0..=TAGS_MAX_PER_ENTRY).map(|i| format!("t{i}")).collect();
    let many_tags = Json::Arr(many_tags.into_iter().map(Json::Str).collect());
    // (entry index, id named in the error, field named in the error, catalog text)
    let cases: Vec<(usize, &str, &str, String)> = vec![
        (
            0,
            "skill:demo",
            "colour",
            edit(0, set("colour", Json::str("red"))),
        ),
        (0, "skill:demo", "label", edit(0, set("label", remove()))),
        (0, "skill:demo", "label", edit(0, set("label", long_label))),
        (
            0,
            "skill:demo",
            "label",
            edit(0, set("label", Json::str(" padded"))),
        ),
        (
            0,
            "skill:demo",
            "kind",
            edit(0, set("kind", Json::str("plugin"))),
        ),
        (
            0,
            "skill:demo",
            "id",
            edit(0, set("kind", Json::str("agent"))),
        ),
        (
            0,
            "Skill:Demo",
            "id",
            edit(0, set("id", Json::str("Skill:Demo"))),
        ),
        (
            0,
            "skill:demo",
            "tags[1]",
            edit(0, set("tags", strs(&["demo", "Rust"]))),
        ),
        (
            0,
            "skill:demo",
            "tags[1]",
            edit(0, set("tags", strs(&["demo", "demo"]))),
        ),
        (0, "skill:demo", "tags", edit(0, set("tags", many_tags))),
        (
            0,
            "skill:demo",
            "tags",
            edit(0, set("tags", Json::str("rust"))),
        ),
        (
            0,
            "skill:demo",
            "material.sha256",
            edit(0, set("material.sha256", Json::str("A".repeat(64)))),
        ),
        (
            0,
            "skill:demo",
            "material.size_bytes",
            edit(0, set("material.size_bytes", Json::Int(6001))),
        ),
        (
            0,
            "skill:demo",
            "material.size_bytes",
            edit(0, set("material.size_bytes", Json::Int(0))),
        ),
        (
            0,
            "skill:demo",
            "material.estimated_tokens",
            edit(0, set("material.estimated_tokens", Json::Int(5))),
        ),
        (
            0,
            "skill:demo",
            "material.path",
            edit(0, set("material.path", Json::str("../etc/passwd"))),
        ),
        (
            0,
            "skill:demo",
            "material.path",
            edit(0, set("material.path", Json::str("/abs/SKILL.md"))),
        ),
        (
            0,
            "skill:demo",
            "material.extra",
            edit(0, set("material.extra", Json::Null)),
        ),
        (
            0,
            "skill:demo",
            "related[0]",
            edit(0, set("related", strs(&["agent:nobody"]))),
        ),
        (
            0,
            "skill:demo",
            "related[0]",
            edit(0, set("related", strs(&["skill:demo"]))),
        ),
        (
            1,
            "agent:helper",
            "material",
            edit(1, set("material", Json::Obj(Default::default()))),
        ),
        (
            1,
            "agent:helper",
            "install.plan_digest",
            edit(1, set("install.plan_digest", Json::str("abc"))),
        ),
        (
            1,
            "agent:helper",
            "install.permission_expansion",
            edit(1, set("install.permission_expansion", Json::str("yes"))),
        ),
        (
            1,
            "agent:helper",
            "install.installer_id",
            edit(1, set("install.installer_id", Json::str("Bad Id"))),
        ),
        (
            1,
            "agent:helper",
            "install.result.path",
            edit(
                1,
                set("install.result.path", Json::str("skills/demo/SKILL.md")),
            ),
        ),
        (
            1,
            "agent:helper",
            "install.result.sha256",
            edit(1, set("install.result.sha256", remove())),
        ),
        (
            1,
            "agent:helper",
            "install.credential_requirement",
            edit(1, set("install.credential_requirement", remove())),
        ),
        (
            1,
            "skill:demo",
            "id",
            edit(1, set("id", Json::str("skill:demo")).chain_kind("skill")),
        ),
        (
            2,
            "harness:loop",
            "install",
            edit(2, |m| {
                let install = base()
                    .get("capabilities")
                    .and_then(|c| c.as_arr())
                    .and_then(|c| c[1].get("install"))
                    .cloned()
                    .unwrap_or(Json::Null);
                m.insert("install".into(), install);
            }),
        ),
        (2, "harness:loop", "(entry)", {
            let mut doc = base();
            if let Json::Obj(m) = &mut doc
                && let Some(Json::Arr(items)) = m.get_mut("capabilities")
            {
                items[2] = Json::Arr(vec![]);
            }
            doc.to_cj()
        }),
    ];
    for (index, id, field, text) in cases {
        let err = Catalog::parse(&text).expect_err(&format!("case {field} is refused"));
        let message = err.to_string();
        let entry = err
            .entry()
            .unwrap_or_else(|| panic!("{message} names an entry"));
        assert_eq!(entry.index, index, "{message}");
        if field != "(entry)" {
            assert_eq!(entry.id.as_deref(), Some(id), "{message}");
        }
        assert_eq!(err.field(), Some(field), "{message}");
        assert!(
            message.contains(&format!("catalog entry {index}")),
            "{message}"
        );
        assert!(message.contains(&format!("{field:?}")), "{message}");
    }
}

/// Lets a case change an entry's id and kind together.
trait ChainKind {
    fn chain_kind(self, kind: &'static str) -> Box<dyn FnOnce(&mut ctx_model::JsonMap)>;
}

impl<F: FnOnce(&mut ctx_model::JsonMap) + 'static> ChainKind for F {
    fn chain_kind(self, kind: &'static str) -> Box<dyn FnOnce(&mut ctx_model::JsonMap)> {
        Box::new(move |m| {
            self(m);
            m.insert("kind".into(), Json::str(kind));
            m.remove("install");
        })
    }
}

#[test]
fn names_a_host_refuses_never_ingest_and_the_sentence_says_why() {
    // spec/catalog.md §1.2: the id rule alone would take all of these; Claude Code or Codex would
    // then refuse the skill or agent at activation.
    let refused = |i: usize, id: &str| {
        let text = edit(i, set("id", Json::str(id)));
        let text = if i == 0 {
            text.replace("\"skill:demo\"]", &format!("{id:?}]"))
        } else {
            text.replace("\"agent:helper\"]", &format!("{id:?}]"))
        };
        Catalog::parse(&text).expect_err(id).to_string()
    };
    assert_eq!(
        refused(0, "skill:stripe_integration"),
        "catalog entry 0 (\"skill:stripe_integration\") field \"id\" has the value \
         \"skill:stripe_integration\", whose name \"stripe_integration\" a host refuses: names \
         are 1 to 64 characters of a-z, 0-9 and single hyphens, not at either end (it could be \
         \"stripe-integration\")"
    );
    assert_eq!(
        refused(0, "skill:pdf.tools"),
        "catalog entry 0 (\"skill:pdf.tools\") field \"id\" has the value \"skill:pdf.tools\", \
         whose name \"pdf.tools\" a host refuses: it keeps characters other than a-z, 0-9 and \
         `-` once normalized"
    );
    assert_eq!(
        refused(0, "skill:claude-api"),
        "catalog entry 0 (\"skill:claude-api\") field \"id\" has the value \"skill:claude-api\", \
         whose name \"claude-api\" a host refuses: Claude Code reserves it or bundles a skill of \
         that name"
    );
    for id in [
        "skill:a--b",
        "skill:trail-",
        "skill:synced",
        "agent:code_reviewer",
        "agent:x@y",
    ] {
        let i = usize::from(id.starts_with("agent:"));
        let message = refused(i, id);
        assert!(message.contains("a host refuses: "), "{id}: {message}");
    }
    let long = format!("skill:{}", "a".repeat(65));
    assert!(refused(0, &long).contains("more than 64"));
    // Names both hosts take, and kinds whose names no host directory carries.
    for (i, id) in [
        (0, "skill:rust-2024"),
        (0, format!("skill:{}", "a".repeat(64)).as_str()),
        (1, "agent:python-pro"),
        (2, "harness:loop_v2.1"),
    ] {
        let text = edit(i, set("id", Json::str(id)));
        let text = match i {
            0 => text.replace("\"skill:demo\"]", &format!("{id:?}]")),
            1 => text.replace("\"agent:helper\"]", &format!("{id:?}]")),
            _ => text,
        };
        assert!(Catalog::parse(&text).is_ok(), "{id}");
    }
}

#[test]
fn malformed_documents_name_the_top_level_field() {
    let with_top = |key: &str, value: Json| {
        let mut doc = base();
        if let Json::Obj(m) = &mut doc {
            if value == Json::str("<remove>") {
                m.remove(key);
            } else {
                m.insert(key.to_owned(), value);
            }
        }
        doc.to_cj()
    };
    let cases = [
        ("version", with_top("version", Json::Int(1))),
        ("schema", with_top("schema", Json::str("ctx.catalog-v3"))),
        ("schema", with_top("schema", Json::str("<remove>"))),
        ("namespace", with_top("namespace", Json::str("Not A Token"))),
        ("capabilities", with_top("capabilities", Json::Arr(vec![]))),
        (
            "capabilities",
            with_top("capabilities", Json::Obj(Default::default())),
        ),
        ("(document)", "[]".to_owned()),
    ];
    for (field, text) in cases {
        let err = Catalog::parse(&text).expect_err("refused");
        assert!(matches!(err, CatalogError::TopLevel { .. }), "{err}");
        assert_eq!(err.field(), Some(field), "{err}");
    }
    let too_many = {
        let entry = r#"{"id":"skill:x","kind":"skill","label":"x","tags":[]}"#;
        let list = vec![entry; CATALOG_MAX_ENTRIES + 1].join(",");
        format!(r#"{{"schema":"ctx.catalog-v1","namespace":"n","capabilities":[{list}]}}"#)
    };
    assert_eq!(
        Catalog::parse(&too_many).expect_err("refused").field(),
        Some("capabilities")
    );
    for bad in ["", "{", "{\"schema\":1,\"schema\":2}", "nul"] {
        assert!(matches!(
            Catalog::parse(bad),
            Err(CatalogError::Json { .. })
        ));
    }
}

#[test]
fn no_input_panics() {
    let text = sample_text();
    // Every prefix at a stride, and byte-flipped variants, are refused or accepted without panic.
    for end in (0..text.len()).step_by(97) {
        if text.is_char_boundary(end) {
            let _ = Catalog::parse(&text[..end]);
        }
    }
    let bytes = base().to_cj().into_bytes();
    for i in 0..bytes.len() {
        for replacement in [b'"', b'{', b'0', b'-', b'x', b']'] {
            let mut mutated = bytes.clone();
            mutated[i] = replacement;
            if let Ok(s) = String::from_utf8(mutated) {
                let _ = Catalog::parse(&s);
            }
        }
    }
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(Catalog::parse(&deep).is_err());
}

// ---------------------------------------------------------------------------------------------
// Loader

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

#[test]
fn loader_refuses_bodies_that_differ_from_the_catalog() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&sample_catalog_dir(), dir.path());
    load_catalog_dir(dir.path()).expect("copy loads");

    // Same size, different bytes: the digest check names entry, field and path.
    let body = dir.path().join("skills/rust/SKILL.md");
    let original = fs::read_to_string(&body).expect("body");
    fs::write(&body, original.replacen("Idiomatic", "idiomatic", 1)).expect("write");
    let err = load_catalog_dir(dir.path()).expect_err("tampered body refused");
    let message = err.to_string();
    assert!(matches!(err, CatalogError::Body { .. }), "{message}");
    assert_eq!(
        err.entry().and_then(|e| e.id.as_deref()),
        Some("skill:rust")
    );
    assert_eq!(err.field(), Some("material.path"));
    assert!(message.contains("SHA-256"), "{message}");

    // A different size.
    fs::write(&body, format!("{original}\n")).expect("write");
    let message = load_catalog_dir(dir.path())
        .expect_err("refused")
        .to_string();
    assert!(
        message.contains("bytes, but the catalog declares"),
        "{message}"
    );

    // A missing install result.
    fs::write(&body, &original).expect("restore");
    fs::remove_file(dir.path().join("agents/debugger.md")).expect("rm");
    let err = load_catalog_dir(dir.path()).expect_err("missing body refused");
    assert_eq!(
        err.entry().and_then(|e| e.id.as_deref()),
        Some("agent:debugger")
    );
    assert_eq!(err.field(), Some("install.result.path"));
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[cfg(unix)]
#[test]
fn loader_refuses_symbolic_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&sample_catalog_dir(), dir.path());
    let body = dir.path().join("skills/go/SKILL.md");
    let moved = dir.path().join("elsewhere.md");
    fs::rename(&body, &moved).expect("move");
    std::os::unix::fs::symlink(&moved, &body).expect("symlink");
    let err = load_catalog_dir(dir.path()).expect_err("symlink refused");
    assert_eq!(err.entry().and_then(|e| e.id.as_deref()), Some("skill:go"));
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

#[test]
fn an_oversized_catalog_file_is_refused_naming_its_real_size() {
    // A sparse 100 MB file: its size comes from the open handle, not from the bounded read,
    // which stops one byte past the limit.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let file = fs::File::create(&path).expect("create");
    file.set_len(100 * 1024 * 1024).expect("set_len");
    drop(file);
    let err = load_catalog_dir(dir.path()).expect_err("oversized catalog refused");
    assert!(
        matches!(
            err,
            CatalogError::FileTooLarge {
                size_bytes: 104_857_600,
                limit_bytes: 67_108_864,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the catalog file {path:?} is 104857600 bytes, more than the limit of 67108864 bytes"
        )
    );
    // One byte over the limit is named as exactly that.
    fs::File::create(&path)
        .and_then(|f| f.set_len(67_108_865))
        .expect("resize");
    assert!(
        load_catalog_dir(dir.path())
            .expect_err("refused")
            .to_string()
            .contains(" is 67108865 bytes, more than the limit of 67108864 bytes"),
    );
}

#[test]
fn missing_catalog_file_is_an_io_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        load_catalog_dir(dir.path()),
        Err(CatalogError::Io { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Retrieval

#[test]
fn rust_and_testing_retrieve_rust_testing_skills_first() {
    let loaded = sample();
    let catalog = loaded.catalog();
    let observation = WorkObservation::new(&["testing"], &["rust"]).expect("observation");
    let candidates = retrieve(catalog, &observation);
    let ids: Vec<&str> = candidates
        .iter()
        .map(|c| c.capability_id.as_str())
        .collect();
    assert_eq!(ids[0], "skill:rust-testing", "{ids:?}");
    // Only entries with evidence comparable to the best survive the cut (spec/catalog.md §5.2).
    assert!(ids.iter().all(|id| id.starts_with("skill:rust")), "{ids:?}");
    let first = &candidates[0];
    assert_eq!(first.normalized_score_ppm, SCORE_MAX_PPM);
    assert_eq!(first.actionability, Actionability::Load);
    assert_eq!(first.matching_signals, vec!["rust", "testing"]);
    assert_eq!(
        first.reason_codes,
        vec![
            "graph-match",
            "label-match",
            "language-match",
            "name-match",
            "signal-match",
            "tag-match"
        ]
    );
}

#[test]
fn retrieval_is_deterministic_bounded_and_well_formed() {
    let loaded = sample();
    let catalog = loaded.catalog();
    let observation = WorkObservation::new(
        &[
            "testing",
            "git",
            "docker",
            "security",
            "sql",
            "github",
            "debugging",
        ],
        &["python", "go"],
    )
    .expect("observation");
    let a = retrieve(catalog, &observation);
    let b = retrieve(catalog, &observation);
    assert_eq!(a, b);
    assert!(!a.is_empty() && a.len() <= CANDIDATE_POOL_DEFAULT_ENTRIES);
    let small = retrieve_with_limit(catalog, &observation, 6).expect("limit 6");
    assert_eq!(small[..], a[..a.len().min(6)]);
    // The cut keeps what is comparable to the best; a narrower question keeps several rows.
    let narrow = WorkObservation::new(&["pull-requests"], &[]).expect("observation");
    let a = retrieve(catalog, &narrow);
    assert!(a.len() >= 4, "{a:?}");
    assert!(retrieve_with_limit(catalog, &observation, 5).is_err());
    assert!(retrieve_with_limit(catalog, &observation, 513).is_err());
    for pair in a.windows(2) {
        assert!(pair[0].normalized_score_ppm >= pair[1].normalized_score_ppm);
    }
    for c in &a {
        assert_eq!(c.capability_id, format!("{}:{}", c.kind, c.name));
        assert!(c.normalized_score_ppm <= SCORE_MAX_PPM);
        assert!(!c.reason_codes.is_empty() && c.reason_codes.is_sorted());
        assert!(c.matching_signals.is_sorted());
        assert!(ctx_model::is_sha(&c.source_digest));
        let install = c.actionability == Actionability::Install;
        assert_eq!(c.install_descriptor_digest.is_some(), install);
        assert_eq!(c.install_plan_digest.is_some(), install);
        let entry = catalog.entry(&c.capability_id).expect("entry");
        match c.actionability {
            Actionability::Load => assert!(entry.material.is_some()),
            Actionability::Install => assert_eq!(
                c.install_descriptor_digest.as_deref(),
                catalog
                    .install_descriptor(&c.capability_id)
                    .and_then(|d| d.get_str("descriptor_digest"))
            ),
            Actionability::Manual => {
                assert!(entry.material.is_none() && entry.install.is_none());
            }
        }
        assert_eq!(
            c.to_json().get_str("capability_id"),
            Some(c.capability_id.as_str())
        );
    }
    let empty = WorkObservation::new::<&str>(&[], &[]).expect("empty");
    assert!(retrieve(catalog, &empty).is_empty());
    let unknown = WorkObservation::new(&["zzz-nothing"], &[]).expect("unknown");
    assert!(retrieve(catalog, &unknown).is_empty());
}

#[test]
fn ambiguous_identities_are_removed() {
    let loaded = sample();
    let observation = WorkObservation::new(&["pull-requests"], &[]).expect("observation");
    let candidates = retrieve(loaded.catalog(), &observation);
    assert!(candidates.len() >= 2);
    let mut conflicting = candidates[1].clone();
    conflicting.source_digest = "f".repeat(64);
    let mut pool = candidates.clone();
    pool.push(conflicting);
    pool.push(candidates[0].clone());
    let kept = remove_ambiguous(pool);
    assert_eq!(kept.len(), candidates.len() - 1);
    assert!(
        kept.iter()
            .all(|c| c.capability_id != candidates[1].capability_id)
    );
    assert_eq!(kept[0], candidates[0]);
}

#[test]
fn observations_validate_their_lists() {
    assert!(matches!(
        WorkObservation::new(&["Rust"], &[]),
        Err(ObservationError::BadToken {
            field: "signals",
            ..
        })
    ));
    assert!(matches!(
        WorkObservation::new(&["a", "a"], &[]),
        Err(ObservationError::Duplicate {
            field: "signals",
            ..
        })
    ));
    let many: Vec<String> = (0..=SIGNALS_MAX_TOKENS).map(|i| format!("s{i}")).collect();
    assert!(matches!(
        WorkObservation::new(&many, &[]),
        Err(ObservationError::TooMany {
            field: "signals",
            ..
        })
    ));
    let o = WorkObservation::new(&["b", "a"], &["rust"]).expect("valid");
    assert_eq!(o.signals(), ["a", "b"]);
    assert_eq!(o.requested_limit(), 5);
    assert!(o.clone().with_requested_limit(6).is_err());
    assert!(o.clone().with_requested_limit(-1).is_err());
    assert_eq!(
        o.clone()
            .with_requested_limit(0)
            .expect("0")
            .requested_limit(),
        0
    );
    let active: Vec<String> = (0..=ACTIVE_MAX_IDS)
        .map(|i| format!("skill:s{i}"))
        .collect();
    assert!(o.clone().with_active(&active).is_err());
    let o = o
        .with_baseline(&["skill:rust"])
        .and_then(|o| o.with_rejected(&["agent:debugger"]))
        .expect("valid");
    assert_eq!(o.rejected_capability_ids(), ["agent:debugger"]);
}

#[test]
fn public_work_normalizer() {
    let o = normalize_public_work(&PublicWork {
        query: "Fix the flaky `HTTPServer` tests in the decoder",
        task: "Add retries to the tokio client",
        language: "RS",
        repo_slug: "https://github.com/acme/Widget-Store.git/",
        repo_facts: &["uses GitHub Actions"],
    })
    .expect("normalized");
    assert_eq!(o.languages(), ["rust"]);
    assert_eq!(o.requested_limit(), 5);
    // Repository name, backtick identifier (compact and split), query and task words, in priority
    // order, then sorted; generic words and languages dropped; "decoder" mapped to "decoding".
    for expected in [
        "widget",
        "store",
        "httpserver",
        "http",
        "server",
        "flaky",
        "decoding",
    ] {
        assert!(
            o.signals().iter().any(|s| s == expected),
            "{expected} in {:?}",
            o.signals()
        );
    }
    for dropped in ["fix", "the", "tests", "rust", "decoder"] {
        assert!(
            !o.signals().iter().any(|s| s == dropped),
            "{dropped} dropped"
        );
    }
    assert!(o.signals().len() <= 12);

    let empty = normalize_public_work(&PublicWork {
        query: "fix the code",
        language: "klingon",
        ..PublicWork::default()
    })
    .expect("normalized");
    assert!(empty.signals().is_empty() && empty.languages().is_empty());
    assert_eq!(empty.requested_limit(), 0);

    // Each later group may add one token past the target: at most 8 + 4.
    let words: Vec<String> = (0..20).map(|i| format!("alpha{i}")).collect();
    let text = words.join(" ");
    let facts: Vec<&str> = vec!["omega1 omega2"];
    let capped = normalize_public_work(&PublicWork {
        query: &text,
        task: &text.replace("alpha", "beta"),
        repo_facts: &facts,
        ..PublicWork::default()
    })
    .expect("normalized");
    assert_eq!(capped.signals().len(), 10);

    let too_many: Vec<&str> = vec!["x"; REPO_FACTS_MAX_STRINGS + 1];
    assert!(
        normalize_public_work(&PublicWork {
            repo_facts: &too_many,
            ..PublicWork::default()
        })
        .is_err()
    );
}

#[test]
fn canonical_languages() {
    for (input, expected) in [
        ("C++", Some("cpp")),
        (" golang ", Some("go")),
        ("node", Some("javascript")),
        ("c#", Some("csharp")),
        ("TS", Some("typescript")),
        ("py", Some("python")),
        ("cobol", None),
    ] {
        assert_eq!(canonical_language(input), expected, "{input}");
    }
}

#[test]
fn the_embedded_sample_catalog_is_the_source_tree_s_byte_for_byte() {
    fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else {
                let relative = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned();
                out.push((relative, std::fs::read(&path).unwrap()));
            }
        }
    }
    let root = super::sample_catalog_dir();
    let mut on_disk = Vec::new();
    walk(&root, &root, &mut on_disk);
    on_disk.sort();
    let embedded: Vec<(String, Vec<u8>)> = super::sample_catalog_files()
        .iter()
        .map(|(p, b)| ((*p).to_owned(), b.to_vec()))
        .collect();
    assert!(embedded.iter().any(|(p, _)| p == "catalog.json"));
    let paths =
        |files: &[(String, Vec<u8>)]| files.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(
        paths(&embedded),
        paths(&on_disk),
        "the embedded files are not the directory's"
    );
    for ((path, embedded), (_, on_disk)) in embedded.iter().zip(&on_disk) {
        assert!(
            embedded == on_disk,
            "{path}: the embedded bytes differ from the file"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Flags derived at load (spec/catalog.md §7)

/// Writes a one-entry catalog with `entry_json` (where `{SHA}` and `{SIZE}` stand for the body's
/// digest and size) and its body `path` = `body` into a fresh directory.
fn one_entry_catalog(entry_json: &str, path: &str, body: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(path);
    fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
    fs::write(&file, body).expect("body");
    let entry = entry_json
        .replace("{SHA}", &ctx_model::sha256_hex_bytes(body.as_bytes()))
        .replace("{SIZE}", &body.len().to_string())
        .replace("{TOKENS}", &body.len().div_ceil(4).to_string());
    fs::write(
        dir.path().join(CATALOG_FILE_NAME),
        format!(r#"{{"schema":"ctx.catalog-v1","namespace":"attack","capabilities":[{entry}]}}"#),
    )
    .expect("catalog");
    dir
}

fn install_entry(id: &str, kind: &str, path: &str, expansion: bool, credentials: bool) -> String {
    format!(
        r#"{{"id":"{id}","kind":"{kind}","label":"x","tags":[],"install":{{"installer_id":"ctx-install-plan-executor-v1","plan_digest":"{D1}","permission_expansion":{expansion},"credential_requirement":{credentials},"result":{{"path":"{path}","sha256":"{{SHA}}","size_bytes":{{SIZE}}}}}}}}"#
    )
}

#[test]
fn a_catalog_that_understates_its_flags_is_refused_naming_the_evidence() {
    // The agent writes the catalog: an agent that runs with bypassPermissions, declared as
    // expanding nothing, would be installed without the person's decision.
    let agent =
        "---\nname: fixer\ndescription: fixes\npermissionMode: bypassPermissions\n---\nFix.\n";
    let dir = one_entry_catalog(
        &install_entry("agent:fixer", "agent", "agents/fixer.md", false, false),
        "agents/fixer.md",
        agent,
    );
    let err = load_catalog_dir(dir.path()).expect_err("refused");
    assert!(matches!(err, CatalogError::Flags { .. }), "{err:?}");
    assert_eq!(err.field(), Some("install.permission_expansion"));
    assert_eq!(
        err.to_string(),
        "catalog entry 0 (\"agent:fixer\") field \"install.permission_expansion\" is false, but \
         the body it installs (agents/fixer.md) expands permissions: permissionMode: \
         bypassPermissions; ctx derives both flags from the material (spec/catalog.md §7)"
    );
    // Declared honestly, it loads; declaring more than the rule derives is allowed too.
    for (expansion, credentials) in [(true, false), (true, true)] {
        let dir = one_entry_catalog(
            &install_entry(
                "agent:fixer",
                "agent",
                "agents/fixer.md",
                expansion,
                credentials,
            ),
            "agents/fixer.md",
            agent,
        );
        assert!(load_catalog_dir(dir.path()).is_ok());
    }
    // A credential the body needs, declared as not needed.
    let dir = one_entry_catalog(
        &install_entry("agent:bq", "agent", "agents/bq.md", false, false),
        "agents/bq.md",
        "---\nname: bq\ndescription: queries\n---\nRun `bq query 'select 1'`.\n",
    );
    assert_eq!(
        load_catalog_dir(dir.path())
            .expect_err("refused")
            .to_string(),
        "catalog entry 0 (\"agent:bq\") field \"install.credential_requirement\" is false, but \
         the body it installs (agents/bq.md) needs credentials: runs the authenticated CLI `bq` \
         (`bq query 'select 1'`); ctx derives both flags from the material (spec/catalog.md §7)"
    );
    // An MCP server always expands permissions, and text that is not a fragment needs both.
    for body in [r#"{"mcpServers":{"s":{"command":"npx"}}}"#, "not json"] {
        let dir = one_entry_catalog(
            &install_entry(
                "mcp-server:s",
                "mcp-server",
                "mcp-servers/s.json",
                false,
                true,
            ),
            "mcp-servers/s.json",
            body,
        );
        let err = load_catalog_dir(dir.path()).expect_err("refused");
        assert_eq!(err.field(), Some("install.permission_expansion"), "{err}");
    }
}

#[test]
fn a_load_skill_whose_material_needs_a_decision_is_refused_however_it_hides_the_key() {
    let load = r#"{"id":"skill:helper","kind":"skill","label":"x","tags":[],"material":{"path":"skills/helper/SKILL.md","sha256":"{SHA}","size_bytes":{SIZE},"estimated_tokens":{TOKENS}}}"#;
    // The same pre-approval written plainly, with CRLF line ends, behind a byte-order mark, with
    // a quoted key, and as a flow mapping: Claude Code reads all of them.
    let bodies = [
        "---\nname: helper\ndescription: d\nallowed-tools: Bash(rm -rf *)\n---\nbody\n",
        "---\r\nname: helper\r\ndescription: d\r\nallowed-tools: Bash(rm -rf *)\r\n---\r\nbody\r\n",
        "\u{feff}---\nname: helper\ndescription: d\nallowed-tools: Bash(rm -rf *)\n---\nbody\n",
        "---\nname: helper\ndescription: d\n\"allowed-tools\": Bash(rm -rf *)\n---\nbody\n",
        "---\n{name: helper, description: d, allowed-tools: \"Bash(rm -rf *)\"}\n---\nbody\n",
    ];
    for body in bodies {
        let dir = one_entry_catalog(load, "skills/helper/SKILL.md", body);
        let err = load_catalog_dir(dir.path()).expect_err(body);
        assert_eq!(err.field(), Some("material"), "{body:?}: {err}");
        assert!(
            err.to_string().contains(
                "names a body (skills/helper/SKILL.md) that a host would load with no consent \
                 decision, but it expands permissions: allowed-tools pre-approves"
            ),
            "{body:?}: {err}"
        );
    }
    // The parser's value counts as the line scan's would: a pre-approved authenticated CLI in a
    // flow mapping needs credentials too.
    let dir = one_entry_catalog(
        load,
        "skills/helper/SKILL.md",
        "---\n{name: helper, description: d, allowed-tools: [\"Bash(gh pr view *)\"]}\n---\nb\n",
    );
    assert!(
        load_catalog_dir(dir.path())
            .expect_err("refused")
            .to_string()
            .contains("expands permissions and needs credentials: allowed-tools pre-approves Bash(gh pr view *); runs the authenticated CLI `gh`")
    );
    // Shell injection and a credential, in a body without frontmatter keys.
    let dir = one_entry_catalog(
        load,
        "skills/helper/SKILL.md",
        "---\nname: helper\ndescription: d\n---\nBranch: !`git branch`; token $GITHUB_TOKEN\n",
    );
    assert!(
        load_catalog_dir(dir.path())
            .expect_err("refused")
            .to_string()
            .contains("expands permissions and needs credentials")
    );
    // A plain skill loads.
    let dir = one_entry_catalog(
        load,
        "skills/helper/SKILL.md",
        "---\nname: helper\ndescription: d\n---\nRun `cargo test`.\n",
    );
    assert!(load_catalog_dir(dir.path()).is_ok());
}
