//! Architecture invariants of the workspace (spec/architecture.md §3), checked by reading the
//! sources: a change that breaks the layering fails here instead of waiting for a reviewer.
//!
//! The checks read Rust source as text. Comments and the contents of string literals are blanked
//! before code is inspected, and `#[cfg(test)]` modules and test-only files are left out, so the
//! invariants constrain production code only (spec/architecture.md §3 says why tests may cross
//! layers).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The folders that hold the workspace's layers; each immediate subfolder with a `Cargo.toml` is a
/// crate (spec/architecture.md §1).
const LAYERS: [&str; 3] = ["journal", "projections", "service"];

/// Which workspace crates each crate may depend on (normal `[dependencies]`), bottom layer first
/// (spec/architecture.md §2). A crate missing from this table fails the test: a new crate needs a
/// stated place in the layering.
const ALLOWED_CTX_DEPENDENCIES: [(&str, &[&str]); 8] = [
    ("ctx-fs", &[]),
    ("ctx-model", &[]),
    ("ctx-journal", &["ctx-fs"]),
    ("ctx-journal-pg", &["ctx-journal", "ctx-fs"]),
    ("ctx-projections", &["ctx-model", "ctx-journal"]),
    (
        "ctx-service",
        &[
            "ctx-model",
            "ctx-projections",
            "ctx-journal",
            "ctx-journal-pg",
            "ctx-fs",
        ],
    ),
    (
        "ctx-hosts",
        &[
            "ctx-model",
            "ctx-projections",
            "ctx-journal",
            "ctx-service",
            "ctx-fs",
        ],
    ),
    (
        "ctx-cli",
        &[
            "ctx-model",
            "ctx-projections",
            "ctx-journal",
            "ctx-journal-pg",
            "ctx-service",
            "ctx-hosts",
            "ctx-fs",
        ],
    ),
];

struct Crate {
    name: String,
    dir: PathBuf,
    dependencies: BTreeSet<String>,
}

struct SourceFile {
    /// Path relative to the crate's `src/`.
    relative: PathBuf,
    /// The file with comments removed, string and character literal contents blanked and
    /// `#[cfg(test)]` modules cut out.
    code: String,
}

fn workspace_root() -> PathBuf {
    let tests_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    match tests_dir.parent() {
        Some(root) => root.to_path_buf(),
        None => panic!(
            "the tests crate at {} has no parent folder",
            tests_dir.display()
        ),
    }
}

fn read(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => panic!("cannot read {}: {error}", path.display()),
    }
}

fn crates() -> Vec<Crate> {
    let root = workspace_root();
    let mut found = Vec::new();
    for layer in LAYERS {
        let entries = match fs::read_dir(root.join(layer)) {
            Ok(entries) => entries,
            Err(error) => panic!("cannot list the layer folder {layer}: {error}"),
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.join("Cargo.toml").is_file())
            .collect();
        dirs.sort();
        for dir in dirs {
            let manifest = read(&dir.join("Cargo.toml"));
            found.push(Crate {
                name: package_name(&manifest, &dir),
                dependencies: normal_dependencies(&manifest),
                dir,
            });
        }
    }
    assert!(!found.is_empty(), "no crates found under {LAYERS:?}");
    found
}

fn package_name(manifest: &str, dir: &Path) -> String {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("name") {
            return rest
                .trim_start_matches([' ', '='])
                .trim_matches('"')
                .to_string();
        }
    }
    panic!("{} has no package name", dir.display())
}

fn normal_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut in_dependencies = false;
    let mut names = BTreeSet::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
        } else if in_dependencies && !line.is_empty() && !line.starts_with('#') {
            let key = line.split('=').next().unwrap_or_default().trim();
            names.insert(key.trim_end_matches(".workspace").to_string());
        }
    }
    names
}

fn is_test_only(relative: &Path) -> bool {
    let text = relative.to_string_lossy();
    let file = relative
        .file_name()
        .map(|name| name.to_string_lossy().into_owned());
    text.split('/')
        .any(|part| part == "testkit" || part == "tests")
        || matches!(
            file.as_deref(),
            Some("tests.rs" | "proptests.rs" | "flag_tests.rs")
        )
}

fn source_files(krate: &Crate) -> Vec<SourceFile> {
    let src = krate.dir.join("src");
    let mut files = Vec::new();
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) => panic!("cannot list {}: {error}", dir.display()),
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let relative = path.strip_prefix(&src).unwrap_or(&path).to_path_buf();
                if is_test_only(&relative) {
                    continue;
                }
                let text = read(&path);
                let (code, _) = split_code_and_comments(&text);
                files.push(SourceFile {
                    relative,
                    code: cut_test_modules(&code),
                });
            }
        }
    }
    // Files whose `mod` item is `#[cfg(test)]` (`#[cfg(test)] mod testing;`) are test code too,
    // and so is everything below them.
    let mut test_only: Vec<PathBuf> = Vec::new();
    for file in &files {
        let parent_dir = match file.relative.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "lib.rs" | "main.rs") => file
                .relative
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            _ => file.relative.with_extension(""),
        };
        for name in test_module_declarations(&file.code) {
            test_only.push(parent_dir.join(&name));
        }
    }
    files.retain(|file| {
        let stem = file.relative.with_extension("");
        !test_only
            .iter()
            .any(|dir| stem == *dir || file.relative.starts_with(dir))
    });
    files.sort_by(|a, b| a.relative.cmp(&b.relative));
    files
}

/// The names of `#[cfg(test)] mod name;` declarations in `code`.
fn test_module_declarations(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        let rest = code[at + "#[cfg(test)]".len()..].trim_start();
        let rest = rest
            .strip_prefix("pub(crate) ")
            .or_else(|| rest.strip_prefix("pub "))
            .unwrap_or(rest);
        if let Some(rest) = rest.strip_prefix("mod ") {
            let name: String = rest.chars().take_while(|c| is_identifier(*c)).collect();
            if rest[name.len()..].trim_start().starts_with(';') {
                names.push(name);
            }
        }
    }
    names
}

/// Separates code from comments. String and character literals keep their quotes but lose their
/// contents (so braces and `//` inside them do not count), except that `"ctx.…"` literals are kept
/// whole for the stream-namespace check.
fn split_code_and_comments(text: &str) -> (String, Vec<(usize, String)>) {
    let bytes: Vec<char> = text.chars().collect();
    let mut code = String::with_capacity(text.len());
    let mut comments = Vec::new();
    let mut line = 1usize;
    let mut i = 0usize;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let start = i;
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
            comments.push((line, bytes[start..i].iter().collect()));
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            let start = i;
            while i < bytes.len() {
                if bytes[i] == '/' && bytes.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if bytes[i] == '*' && bytes.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if bytes[i] == '\n' {
                        line += 1;
                        code.push('\n');
                    }
                    i += 1;
                }
            }
            comments.push((line, bytes[start..i].iter().collect()));
        } else if c == '"'
            || (c == 'r' && matches!(next, Some('"' | '#')) && is_raw_start(&bytes, i))
        {
            let (end, content) = string_literal(&bytes, i);
            line += content.matches('\n').count();
            code.push('"');
            if content.starts_with("ctx.") && !content.contains(char::is_whitespace) {
                code.push_str(&content);
            }
            code.push('"');
            code.extend(std::iter::repeat_n('\n', content.matches('\n').count()));
            i = end;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < bytes.len() && bytes[j] != '\'' {
                    j += 1;
                }
                code.push_str("' '");
                i = j + 1;
            } else if bytes.get(i + 2) == Some(&'\'') {
                code.push_str("' '");
                i += 3;
            } else {
                code.push(c);
                i += 1;
            }
        } else {
            if c == '\n' {
                line += 1;
            }
            code.push(c);
            i += 1;
        }
    }
    (code, comments)
}

fn is_raw_start(bytes: &[char], i: usize) -> bool {
    // `r"` or `r#…"` not preceded by an identifier character (so `for"` or `br"` edge cases
    // are treated as ordinary code).
    let preceded_by_ident = i > 0 && (bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_');
    if preceded_by_ident && bytes[i - 1] != 'b' {
        return false;
    }
    let mut j = i + 1;
    while j < bytes.len() && bytes[j] == '#' {
        j += 1;
    }
    bytes.get(j) == Some(&'"')
}

/// Returns the index after the literal starting at `i` and its contents.
fn string_literal(bytes: &[char], i: usize) -> (usize, String) {
    if bytes[i] == 'r' {
        let mut j = i + 1;
        let mut hashes = 0usize;
        while bytes[j] == '#' {
            hashes += 1;
            j += 1;
        }
        j += 1; // the opening quote
        let start = j;
        while j < bytes.len() {
            if bytes[j] == '"' && (0..hashes).all(|k| bytes.get(j + 1 + k) == Some(&'#')) {
                return (j + 1 + hashes, bytes[start..j].iter().collect());
            }
            j += 1;
        }
        (bytes.len(), bytes[start..].iter().collect())
    } else {
        let mut j = i + 1;
        let start = j;
        while j < bytes.len() && bytes[j] != '"' {
            if bytes[j] == '\\' {
                j += 1;
            }
            j += 1;
        }
        (j + 1, bytes[start..j.min(bytes.len())].iter().collect())
    }
}

/// Removes `#[cfg(test)] mod name { … }` blocks (braces are balanced once literals are blanked).
fn cut_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_module = ["mod ", "pub mod ", "pub(crate) mod "]
            .iter()
            .any(|prefix| trimmed.starts_with(prefix));
        let brace = trimmed.find(['{', ';']);
        if !is_module || brace.is_none_or(|b| trimmed.as_bytes()[b] == b';') {
            out.push_str(&rest[..at + "#[cfg(test)]".len()]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        let open = at + "#[cfg(test)]".len() + (after.len() - trimmed.len()) + brace.unwrap_or(0);
        let mut depth = 0usize;
        let mut end = rest.len();
        for (offset, ch) in rest[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + offset + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        // Keep the line count so reported line numbers stay meaningful.
        out.extend(std::iter::repeat_n(
            '\n',
            rest[at..end].matches('\n').count(),
        ));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The top-level module a file belongs to (`None` for the crate root and the binary).
fn top_module(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_string_lossy();
    let name = first.trim_end_matches(".rs").to_string();
    (!matches!(name.as_str(), "lib" | "main" | "bin" | "build")).then_some(name)
}

fn is_identifier(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The top-level modules `code` refers to through `crate::…` (including `use crate::{a, b}`)
/// and, in a top-level module's own file, `super::…`.
fn module_references(code: &str, top_level_file: bool) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let prefixes: &[&str] = if top_level_file {
        &["crate::", "super::"]
    } else {
        &["crate::"]
    };
    for prefix in prefixes {
        for (at, _) in code.match_indices(prefix) {
            if at > 0 && code[..at].ends_with(is_identifier) {
                continue;
            }
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 1usize;
                let mut item = String::new();
                let mut at_start = true;
                for ch in group.chars() {
                    match ch {
                        '{' => {
                            depth += 1;
                            at_start = false;
                        }
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        ',' if depth == 1 => at_start = true,
                        c if depth == 1 && at_start && is_identifier(c) => item.push(c),
                        _ => {
                            if !item.is_empty() {
                                found.insert(std::mem::take(&mut item));
                            }
                            if depth == 1 && !ch.is_whitespace() {
                                at_start = false;
                            }
                        }
                    }
                }
                if !item.is_empty() {
                    found.insert(item);
                }
            } else {
                let name: String = rest.chars().take_while(|c| is_identifier(*c)).collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        }
    }
    found
}

fn module_graph(files: &[SourceFile]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|f| top_module(&f.relative))
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(from) = top_module(&file.relative) else {
            continue;
        };
        let top_level_file = file.relative.components().count() == 1
            || file
                .relative
                .file_name()
                .is_some_and(|name| name == "mod.rs")
                && file.relative.components().count() == 2;
        for to in module_references(&file.code, top_level_file) {
            if to != from && modules.contains(&to) {
                graph.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    graph
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) {
            let index = self.index.len();
            self.index.insert(node, index);
            self.low.insert(node, index);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    component.push(member.to_string());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

fn line_of(code: &str, byte: usize) -> usize {
    code[..byte].matches('\n').count() + 1
}

/// Occurrences of `needle` in production code of `krate` (outside files under `except`).
fn occurrences(krate: &Crate, files: &[SourceFile], needle: &str, except: &[&str]) -> Vec<String> {
    let mut hits = Vec::new();
    for file in files {
        let relative = file.relative.to_string_lossy();
        if except.iter().any(|prefix| relative.starts_with(prefix)) {
            continue;
        }
        let lower = file.code.to_lowercase();
        for (at, _) in lower.match_indices(needle) {
            // `crate::redb::…` names this crate's own module, not the redb crate.
            let before = &lower[..at];
            if ["crate::", "super::", "self::"]
                .iter()
                .any(|p| before.ends_with(p))
            {
                continue;
            }
            hits.push(format!(
                "{}/src/{}:{}",
                krate.dir.display(),
                relative,
                line_of(&file.code, at)
            ));
        }
    }
    hits
}

#[test]
fn crates_depend_only_on_the_layers_below_them() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED_CTX_DEPENDENCIES.into_iter().collect();
    let mut problems = Vec::new();
    for krate in crates() {
        let Some(permitted) = allowed.get(krate.name.as_str()) else {
            problems.push(format!(
                "{} ({}) has no row in ALLOWED_CTX_DEPENDENCIES",
                krate.name,
                krate.dir.display()
            ));
            continue;
        };
        for dependency in krate.dependencies.iter().filter(|d| d.starts_with("ctx-")) {
            if !permitted.contains(&dependency.as_str()) {
                problems.push(format!("{} depends on {dependency}", krate.name));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "layering violations:\n{}",
        problems.join("\n")
    );
}

#[test]
fn production_modules_of_a_crate_form_no_import_cycle() {
    let mut problems = Vec::new();
    for krate in crates() {
        let files = source_files(&krate);
        let graph = module_graph(&files);
        for cycle in cycles(&graph) {
            let edges: Vec<String> = cycle
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| cycle.contains(to))
                        .map(move |to| format!("{from} → {to}"))
                })
                .collect();
            problems.push(format!("{}: {}", krate.name, edges.join(", ")));
        }
    }
    assert!(
        problems.is_empty(),
        "module cycles:\n{}",
        problems.join("\n")
    );
}

#[test]
fn only_the_redb_backend_module_names_redb() {
    let mut problems = Vec::new();
    for krate in crates() {
        let files = source_files(&krate);
        if krate.dependencies.contains("redb") && krate.name != "ctx-journal" {
            problems.push(format!("{} depends on redb", krate.name));
        }
        let except: &[&str] = if krate.name == "ctx-journal" {
            &["redb/"]
        } else {
            &[]
        };
        problems.extend(occurrences(&krate, &files, "redb::", except));
    }
    assert!(
        problems.is_empty(),
        "redb named outside journal/core/src/redb/:\n{}",
        problems.join("\n")
    );
}

#[test]
fn only_the_host_adapters_and_the_cli_name_an_agent_host() {
    let mut problems = Vec::new();
    for krate in crates() {
        if matches!(krate.name.as_str(), "ctx-hosts" | "ctx-cli") {
            continue;
        }
        let files = source_files(&krate);
        for host in ["claude", "codex"] {
            problems.extend(occurrences(&krate, &files, host, &[]));
        }
    }
    assert!(
        problems.is_empty(),
        "an agent host named outside ctx-hosts and ctx-cli:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_domain_kernel_does_no_io_and_reads_no_clock() {
    let mut problems = Vec::new();
    for krate in crates().into_iter().filter(|k| k.name == "ctx-model") {
        let files = source_files(&krate);
        for needle in [
            "std::fs",
            "std::net",
            "std::process",
            "std::env",
            "systemtime::now",
            "instant::now",
        ] {
            problems.extend(occurrences(&krate, &files, needle, &[]));
        }
    }
    assert!(
        problems.is_empty(),
        "I/O or a clock in ctx-model:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_stream_namespace_is_declared_once_in_the_stream_table() {
    let table_crate = crates().into_iter().find(|k| k.name == "ctx-projections");
    let Some(table_crate) = table_crate else {
        panic!("ctx-projections, which holds the stream table, was not found");
    };
    let table = source_files(&table_crate)
        .into_iter()
        .find(|f| f.relative == Path::new("streams.rs"));
    let Some(table) = table else {
        panic!("projections/core/src/streams.rs, the stream table, was not found");
    };
    let declared: BTreeSet<String> = quoted_ctx_literals(&table.code).into_iter().collect();
    assert!(
        !declared.is_empty(),
        "the stream table declares no namespace"
    );
    let mut problems = Vec::new();
    for krate in crates() {
        for file in source_files(&krate) {
            if krate.name == "ctx-projections" && file.relative == Path::new("streams.rs") {
                continue;
            }
            for literal in quoted_ctx_literals(&file.code) {
                if declared.contains(&literal) {
                    problems.push(format!(
                        "{}/src/{} restates \"{literal}\"",
                        krate.dir.display(),
                        file.relative.display()
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "stream names defined outside streams.rs:\n{}",
        problems.join("\n")
    );
}

fn quoted_ctx_literals(code: &str) -> Vec<String> {
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("ctx."))
        .map(str::to_string)
        .collect()
}

#[test]
fn comments_cite_only_documents_in_the_repository() {
    let root = workspace_root();
    // The reference documents are cited as `reference <name> §x`, `<name> §x` or `<name>.md`; the
    // same words without a section sign are ordinary prose ("managed-service operations").
    let mut outside: Vec<String> = ["../shared", "shared/notes", "shared/reference"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for name in [
        "engine-core",
        "managed-service",
        "planner-and-install",
        "consent-and-skill-cas",
    ] {
        outside.extend([
            format!("{name} §"),
            format!("{name}.md"),
            format!("reference {name}"),
        ]);
    }
    for note in [
        "hosts",
        "anchors",
        "platform-facts",
        "real-catalogs",
        "architecture-review",
    ] {
        outside.push(format!("notes {note}.md"));
    }
    let mut problems = Vec::new();
    let mut pending = vec![root.clone()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | ".git" | "corpus" | "artifacts") {
                    pending.push(path);
                }
            } else if name.ends_with(".rs") {
                let (_, comments) = split_code_and_comments(&read(&path));
                for (line, comment) in comments {
                    if let Some(found) = outside
                        .iter()
                        .find(|needle| comment.contains(needle.as_str()))
                    {
                        problems.push(format!(
                            "{}:{line} cites {found}",
                            path.strip_prefix(&root).unwrap_or(&path).display()
                        ));
                    }
                }
            }
        }
    }
    problems.sort();
    assert!(
        problems.is_empty(),
        "{} comments cite documents outside the repository:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn library_errors_are_typed() {
    // A `String` error cannot be matched on by an embedder; library code returns typed errors
    // (spec/architecture.md §3, rule 4).
    let mut problems = Vec::new();
    for krate in crates() {
        for file in source_files(&krate) {
            for (index, line) in file.code.lines().enumerate() {
                if line.contains("Result<") && line.contains(", String>") {
                    problems.push(format!(
                        "{}/src/{}:{}",
                        krate.dir.display(),
                        file.relative.display(),
                        index + 1
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "Result<_, String> in library code:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_source_reader_sees_what_it_must() {
    // The checks above are only as good as the reader: a cycle, a `redb::` path and a namespace
    // literal must be found in a synthetic crate, and comments and test modules must not count.
    let text = "use crate::{a::X, b};\n// crate::c and redb:: in a comment\n\
                const N: &str = \"ctx.sample-stream\";\nconst S: &str = \"crate::d {\";\n\
                #[cfg(test)]\nmod tests { use crate::e; }\nfn f() { redb::x(); }\n";
    let (code, comments) = split_code_and_comments(text);
    let code = cut_test_modules(&code);
    let references = module_references(&code, true);
    assert_eq!(
        references,
        ["a", "b"]
            .into_iter()
            .map(String::from)
            .collect::<BTreeSet<_>>()
    );
    assert_eq!(comments.len(), 1);
    assert_eq!(
        quoted_ctx_literals(&code),
        vec!["ctx.sample-stream".to_string()]
    );
    assert!(code.contains("redb::x"));
    assert_eq!(code.lines().count(), text.lines().count());
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string()].into()),
        ("b".to_string(), ["c".to_string()].into()),
        ("c".to_string(), ["a".to_string()].into()),
        ("d".to_string(), ["a".to_string()].into()),
    ]
    .into();
    assert_eq!(
        cycles(&graph),
        vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]
    );
}
