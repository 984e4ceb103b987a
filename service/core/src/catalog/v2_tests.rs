//! `ctx.catalog-v2`: skill trees, provenance and the version's limits (spec/catalog.md §1.4).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use ctx_model::Json;

use super::*;

fn write(path: &Path, text: &str, mode: u32) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A catalog directory with one skill tree, `skills/tool` (SKILL.md, references/api.md and,
/// when `executable`, scripts/run.sh mode 0755), declared as loadable material or an install.
fn tree_catalog(dir: &Path, executable: bool, install: bool) -> Json {
    let skill = dir.join("skills/tool");
    write(
        &skill.join("SKILL.md"),
        "---\nname: tool\ndescription: Runs the tool\n---\nRun scripts/run.sh.\n",
        0o644,
    );
    write(&skill.join("references/api.md"), "# API\n", 0o644);
    write(
        &skill.join("scripts/run.sh"),
        "#!/bin/sh\necho hi\n",
        if executable { 0o755 } else { 0o644 },
    );
    let tree = read_skill_tree(dir, "skills/tool").unwrap();
    let (sha, size) = skill_pack_identity(&tree);
    let body = |extra: Vec<(&str, Json)>| {
        let mut fields = vec![
            ("sha256", Json::str(&sha)),
            ("size_bytes", Json::Int(size as i64)),
            ("tree", Json::str("skills/tool")),
        ];
        fields.extend(extra);
        Json::object(fields)
    };
    let tokens = (tree.skill_md().len() as i64 + 3) / 4;
    let entry = if install {
        Json::object([
            ("id", Json::str("skill:tool")),
            ("kind", Json::str("skill")),
            ("label", Json::str("Runs the tool")),
            ("tags", Json::Arr(vec![])),
            (
                "install",
                Json::object([
                    ("credential_requirement", Json::Bool(false)),
                    ("installer_id", Json::str("ctx-install-plan-executor-v1")),
                    ("permission_expansion", Json::Bool(executable)),
                    ("plan_digest", Json::str("a".repeat(64))),
                    ("result", body(vec![])),
                ]),
            ),
            (
                "source",
                Json::object([
                    ("origin", Json::str("plugin tools: skills/tool/SKILL.md")),
                    ("version", Json::str("1.2.0")),
                ]),
            ),
        ])
    } else {
        Json::object([
            ("id", Json::str("skill:tool")),
            ("kind", Json::str("skill")),
            ("label", Json::str("Runs the tool")),
            ("tags", Json::Arr(vec![])),
            (
                "material",
                body(vec![("estimated_tokens", Json::Int(tokens))]),
            ),
        ])
    };
    let doc = Json::object([
        ("capabilities", Json::Arr(vec![entry])),
        ("namespace", Json::str("local")),
        ("schema", Json::str(CATALOG_SCHEMA_V2)),
    ]);
    fs::write(dir.join(CATALOG_FILE_NAME), doc.to_cj()).unwrap();
    doc
}

fn set(doc: &Json, path: &[&str], value: Json) -> Json {
    fn go(v: &Json, path: &[&str], value: &Json) -> Json {
        match (v, path) {
            (_, []) => value.clone(),
            (Json::Obj(m), [k, rest @ ..]) => {
                let mut m = m.clone();
                let inner = m.get(*k).cloned().unwrap_or(Json::Null);
                m.insert((*k).to_owned(), go(&inner, rest, value));
                Json::Obj(m)
            }
            (Json::Arr(items), [i, rest @ ..]) => {
                let i: usize = i.parse().unwrap();
                let mut items = items.clone();
                items[i] = go(&items[i], rest, value);
                Json::Arr(items)
            }
            _ => panic!("bad path"),
        }
    }
    go(doc, path, &value)
}

#[test]
fn a_tree_loads_with_its_pack_and_every_file() {
    let dir = tempfile::tempdir().unwrap();
    tree_catalog(dir.path(), true, true);
    let loaded = load_catalog_dir(dir.path()).unwrap();
    let tree = loaded.install_result_tree("skill:tool").unwrap();
    let paths: Vec<_> = tree.files().iter().map(|f| f.path()).collect();
    assert_eq!(paths, ["SKILL.md", "references/api.md", "scripts/run.sh"]);
    // The text a content store receives is the pack, whose SHA-256 the catalog declares.
    let entry = loaded.catalog().entry("skill:tool").unwrap();
    let declared = &entry.install.as_ref().unwrap().result.sha256;
    let pack = loaded.install_result_text("skill:tool").unwrap();
    assert_eq!(&ctx_model::sha256_hex_bytes(pack.as_bytes()), declared);
    assert_eq!(
        entry.source.as_ref().unwrap().version.as_deref(),
        Some("1.2.0")
    );
    // The descriptor pins the pack.
    let descriptor = loaded.catalog().install_descriptor("skill:tool").unwrap();
    assert!(
        descriptor
            .to_cj()
            .contains("result_material_identity_digest")
    );
}

#[test]
fn a_changed_file_mode_or_extra_file_in_a_tree_stops_the_load_naming_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    tree_catalog(dir.path(), true, true);
    let run = dir.path().join("skills/tool/scripts/run.sh");
    fs::set_permissions(&run, fs::Permissions::from_mode(0o644)).unwrap();
    let err = load_catalog_dir(dir.path()).unwrap_err();
    assert!(matches!(err, CatalogError::Tree { .. }), "{err}");
    assert_eq!(err.field(), Some("install.result.tree"));
    assert!(
        err.to_string().starts_with(
            "catalog entry 0 (\"skill:tool\") field \"install.result.tree\" names the skill \
             tree \"skills/tool\", which has a pack "
        ),
        "{err}"
    );
    fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).unwrap();
    load_catalog_dir(dir.path()).unwrap();
    write(&dir.path().join("skills/tool/extra.md"), "x\n", 0o644);
    assert!(matches!(
        load_catalog_dir(dir.path()).unwrap_err(),
        CatalogError::Tree { .. }
    ));
    fs::remove_file(dir.path().join("skills/tool/extra.md")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("skills/tool/link")).unwrap();
    let err = load_catalog_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
}

#[test]
fn an_executable_in_a_loadable_tree_or_an_understated_install_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    tree_catalog(dir.path(), true, false);
    let err = load_catalog_dir(dir.path()).unwrap_err();
    assert!(matches!(err, CatalogError::Flags { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("ships the executable file scripts/run.sh"),
        "{err}"
    );
    // The same tree as an install that says it expands nothing.
    let dir = tempfile::tempdir().unwrap();
    let doc = tree_catalog(dir.path(), true, true);
    let understated = set(
        &doc,
        &["capabilities", "0", "install", "permission_expansion"],
        Json::Bool(false),
    );
    fs::write(dir.path().join(CATALOG_FILE_NAME), understated.to_cj()).unwrap();
    let err = load_catalog_dir(dir.path()).unwrap_err();
    assert_eq!(err.field(), Some("install.permission_expansion"), "{err}");
    // Without the executable bit the tree is plain loadable material.
    let dir = tempfile::tempdir().unwrap();
    tree_catalog(dir.path(), false, false);
    let loaded = load_catalog_dir(dir.path()).unwrap();
    assert!(loaded.material_tree("skill:tool").is_some());
}

#[test]
fn v2_fields_are_refused_in_a_v1_document_and_trees_only_belong_to_skills() {
    let dir = tempfile::tempdir().unwrap();
    let doc = tree_catalog(dir.path(), false, true);
    let v1 = set(&doc, &["schema"], Json::str("ctx.catalog-v1"));
    let err = Catalog::parse(&v1.to_cj()).unwrap_err();
    assert_eq!(err.field(), Some("install.result.tree"), "{err}");
    assert!(
        err.to_string().contains("is a ctx.catalog-v2 field"),
        "{err}"
    );
    let no_tree = set(
        &v1,
        &["capabilities", "0", "install", "result"],
        Json::object([
            ("path", Json::str("skills/tool/SKILL.md")),
            ("sha256", Json::str("b".repeat(64))),
            ("size_bytes", Json::Int(10)),
        ]),
    );
    let err = Catalog::parse(&no_tree.to_cj()).unwrap_err();
    assert_eq!(err.field(), Some("source"), "{err}");

    let agent = set(
        &set(&doc, &["capabilities", "0", "id"], Json::str("agent:tool")),
        &["capabilities", "0", "kind"],
        Json::str("agent"),
    );
    let err = Catalog::parse(&agent.to_cj()).unwrap_err();
    assert_eq!(err.field(), Some("install.result.tree"), "{err}");
    assert!(err.to_string().contains("only for skills"), "{err}");
}

#[test]
fn no_other_body_may_lie_inside_a_tree() {
    let dir = tempfile::tempdir().unwrap();
    let doc = tree_catalog(dir.path(), false, true);
    let Some(Json::Arr(entries)) = doc.get("capabilities") else {
        panic!()
    };
    let inner = Json::object([
        ("id", Json::str("skill:inner")),
        ("kind", Json::str("skill")),
        ("label", Json::str("Inner")),
        ("tags", Json::Arr(vec![])),
        (
            "material",
            Json::object([
                ("estimated_tokens", Json::Int(3)),
                ("path", Json::str("skills/tool/references/api.md")),
                ("sha256", Json::str("c".repeat(64))),
                ("size_bytes", Json::Int(10)),
            ]),
        ),
    ]);
    let mut entries = entries.clone();
    entries.push(inner);
    let doc = set(&doc, &["capabilities"], Json::Arr(entries));
    let err = Catalog::parse(&doc.to_cj()).unwrap_err();
    assert_eq!(
        err.entry().and_then(|e| e.id.as_deref()),
        Some("skill:inner")
    );
    assert!(
        err.to_string()
            .contains("lies inside the skill tree \"skills/tool\" of another declaration"),
        "{err}"
    );
}

#[test]
fn the_entry_limit_follows_the_version() {
    let entry = |i: usize| format!(r#"{{"id":"skill:s{i}","kind":"skill","label":"x","tags":[]}}"#);
    let doc = |schema: &str, n: usize| {
        let list: Vec<String> = (0..n).map(entry).collect();
        format!(
            r#"{{"schema":"{schema}","namespace":"n","capabilities":[{}]}}"#,
            list.join(",")
        )
    };
    assert!(Catalog::parse(&doc("ctx.catalog-v1", CATALOG_MAX_ENTRIES + 1)).is_err());
    let v2 = Catalog::parse(&doc(CATALOG_SCHEMA_V2, CATALOG_MAX_ENTRIES + 1)).unwrap();
    assert_eq!(v2.entries().len(), CATALOG_MAX_ENTRIES + 1);
    assert!(v2.to_json().to_cj().contains(CATALOG_SCHEMA_V2));
    let err = Catalog::parse(&doc(CATALOG_SCHEMA_V2, CATALOG_V2_MAX_ENTRIES + 1)).unwrap_err();
    assert!(
        err.to_string()
            .contains("outside the range 1 through 100000 entries"),
        "{err}"
    );
}
