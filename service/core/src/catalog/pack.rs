//! The skill pack (spec/skill-tree.md §7): one text that holds a whole skill tree, so that every
//! stage that pins content by one SHA-256 over one text (the material identity a consent names,
//! the content-addressed stores, the activation store's directory name) pins a tree exactly as it
//! pins a single body.
//!
//! The pack is a function of the tree: the same files, paths and executable bits always give the
//! same bytes, and the pack names the tree's BLAKE3 digest, so its SHA-256 commits to the digest
//! and to every file. It is ASCII text without NUL (canonical JSON with every non-ASCII character
//! escaped), which every text-only stage accepts.

use ctx_model::{Json, sha256_hex_bytes};

use super::tree::SkillTree;

/// The `schema` of a skill pack.
pub const SKILL_PACK_SCHEMA: &str = "ctx.skill-pack-v1";

/// Most bytes of a skill pack. A tree holds at most 16 MiB in at most 1,000 files of paths of at
/// most 256 bytes (spec/skill-tree.md §3); escaping multiplies content by at most 6 (a control
/// character becomes `\u00XX`; hex doubles a non-UTF-8 file), and each file adds at most
/// 6 × 256 + 64 bytes of keys and path, so no tree the walk accepts reaches this bound: it exists
/// so a reader of a pack can bound its read.
pub const SKILL_PACK_MAX_BYTES: u64 = 100 * 1024 * 1024;

/// The pack of `tree`: `CJA({files: [{executable, path, text | hex}] in path order, schema,
/// tree_digest})`. A file whose content is UTF-8 is carried as `text`, any other as `hex`
/// (lowercase), so the pack is always text.
pub fn skill_pack(tree: &SkillTree) -> String {
    let files = tree
        .files()
        .iter()
        .map(|file| {
            let content = match std::str::from_utf8(file.bytes()) {
                Ok(text) => ("text", Json::str(text)),
                Err(_) => ("hex", Json::str(hex(file.bytes()))),
            };
            Json::object([
                ("executable", Json::Bool(file.executable())),
                ("path", Json::str(file.path())),
                content,
            ])
        })
        .collect();
    let pack = Json::object([
        ("files", Json::Arr(files)),
        ("schema", Json::str(SKILL_PACK_SCHEMA)),
        ("tree_digest", Json::str(tree.digest_hex())),
    ])
    .to_cja();
    // The bound is derived from the walk's limits above; a pack past it means a limit changed
    // without the bound.
    assert!(
        u64::try_from(pack.len()).is_ok_and(|n| n <= SKILL_PACK_MAX_BYTES),
        "a skill pack of {} bytes exceeds SKILL_PACK_MAX_BYTES",
        pack.len()
    );
    pack
}

/// The SHA-256 (lowercase hex) and byte length of the pack of `tree`: the content digest and size
/// a catalog declares for a skill tree and a consent pins.
pub fn skill_pack_identity(tree: &SkillTree) -> (String, u64) {
    let pack = skill_pack(tree);
    (
        sha256_hex_bytes(pack.as_bytes()),
        u64::try_from(pack.len()).unwrap_or(u64::MAX),
    )
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.
    use super::*;
    use crate::catalog::tree::read_skill_tree_at;
    use std::os::unix::fs::PermissionsExt as _;

    fn write(dir: &std::path::Path, rel: &str, bytes: &[u8], mode: u32) {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, bytes).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn the_pack_is_ascii_names_the_digest_and_changes_with_every_file_property() {
        let dir = tempfile::tempdir().expect("tempdir");
        let skill = dir.path().join("s");
        write(
            &skill,
            "SKILL.md",
            "---\nname: s\n---\nÜber \"x\"\n".as_bytes(),
            0o644,
        );
        write(&skill, "scripts/run.sh", b"#!/bin/sh\necho hi\n", 0o755);
        write(&skill, "assets/blob.bin", &[0xff, 0x00, 0x10], 0o644);
        let tree = read_skill_tree_at(&skill).expect("tree");
        let pack = skill_pack(&tree);
        assert!(pack.is_ascii() && !pack.contains('\0'), "{pack}");
        let parsed = Json::parse(&pack).expect("the pack is JSON");
        assert_eq!(parsed.get_str("schema"), Some(SKILL_PACK_SCHEMA));
        assert_eq!(
            parsed.get_str("tree_digest"),
            Some(tree.digest_hex().as_str())
        );
        let Some(Json::Arr(files)) = parsed.get("files") else {
            panic!("no files: {pack}");
        };
        let paths: Vec<_> = files.iter().filter_map(|f| f.get_str("path")).collect();
        assert_eq!(paths, ["SKILL.md", "assets/blob.bin", "scripts/run.sh"]);
        assert_eq!(files[1].get_str("hex"), Some("ff0010"));
        assert_eq!(files[2].get("executable"), Some(&Json::Bool(true)));
        assert_eq!(
            files[0].get_str("text"),
            Some("---\nname: s\n---\nÜber \"x\"\n")
        );
        let (sha, len) = skill_pack_identity(&tree);
        assert_eq!(sha, sha256_hex_bytes(pack.as_bytes()));
        assert_eq!(len, pack.len() as u64);

        // Each property of a file moves the identity: mode, content, path.
        write(&skill, "scripts/run.sh", b"#!/bin/sh\necho hi\n", 0o644);
        let moded = skill_pack_identity(&read_skill_tree_at(&skill).expect("tree")).0;
        assert_ne!(moded, sha, "the executable bit is part of the pack");
        write(&skill, "scripts/run.sh", b"#!/bin/sh\necho ho\n", 0o755);
        let edited = skill_pack_identity(&read_skill_tree_at(&skill).expect("tree")).0;
        assert_ne!(edited, sha);
        std::fs::rename(skill.join("scripts"), skill.join("bin")).expect("rename");
        let moved = skill_pack_identity(&read_skill_tree_at(&skill).expect("tree")).0;
        assert_ne!(moved, edited);
        assert_ne!(moved, sha);
    }
}
