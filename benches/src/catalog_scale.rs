//! `ctx-bench catalog-scale`: what a catalog at the `ctx.catalog-v2` entry limit (spec/catalog.md
//! §1.4: 100,000 entries) costs the `ctx` process that ingests, lists and plans with it.
//!
//! A catalog directory of `--entries` entries is generated (deterministically: every entry is a
//! function of its index), in these shares:
//!
//! - 55 % skills as loadable single bodies (`material`, spec/catalog.md §1.2);
//! - 10 % skills as trees (`SKILL.md`, `references/guide.md`, an executable `scripts/run.sh`) with
//!   an `install` whose `result` is the tree (§1.4), flagged as expanding permissions (§7);
//! - 20 % agents (`agents/<name>.md`), an `install` with both flags false;
//! - 15 % MCP servers (`mcp-servers/<name>.json`), an `install` expanding permissions (§7).
//!
//! Then, each a fresh `ctx` process on one data directory, timed from spawn to exit with its peak
//! resident memory (`ru_maxrss` of the process, as `/usr/bin/time -f %M` reports it from
//! `wait4`): `ctx catalog ingest --catalog-dir <generated>` into the empty data directory; the same
//! ingest again (the catalog is unchanged, so it must write nothing: the data directory's files
//! are compared before and after); `ctx catalog list` and `ctx catalog list --json` (spec/cli.md
//! §5.8); `ctx query prepare` twice (the first also creates the journal, the second is a new
//! session on it); and one `ctx hook claude user-prompt-submit`.
//!
//! Figures only: a failing step is reported with its exit status and its error, and the others
//! still run.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::BenchResult;
use crate::hook_latency::{World, timed};

/// Entries when `--entries` is not given: `CATALOG_V2_MAX_ENTRIES` (spec/catalog.md §1.4).
pub const DEFAULT_ENTRIES: usize = 100_000;
/// Up to this many entries the generated directory is also loaded in this process before anything
/// is measured, so that a generator mistake fails fast with the loader's sentence.
pub const CHECK_MAX_ENTRIES: usize = 2_000;
/// The generated catalog's namespace (spec/catalog.md §1.1).
pub const NAMESPACE: &str = "bench.generated";
/// The installer every generated install names (the data directory's own, spec/cli.md §4).
pub const INSTALLER_ID: &str = "ctx-install-plan-executor-v1";
/// How much of a failed step's standard error the report keeps (the table shows its first line).
const ERROR_MAX_CHARS: usize = 4_000;
/// The program that reports a child's peak resident memory (`%M`, from `wait4`'s `ru_maxrss`).
pub const TIME_BIN: &str = "/usr/bin/time";

/// What one generated entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A skill whose `SKILL.md` is its `material`.
    SkillMaterial,
    /// A skill directory whose install result is the tree (spec/catalog.md §1.4).
    SkillTree,
    Agent,
    McpServer,
}

/// The shape of entry `index`: 11, 2, 4 and 3 of every 20 consecutive entries.
pub fn shape_of(index: usize) -> Shape {
    match index % 20 {
        0..=10 => Shape::SkillMaterial,
        11 | 12 => Shape::SkillTree,
        13..=16 => Shape::Agent,
        _ => Shape::McpServer,
    }
}

/// A fixed entry that a bench prompt is written to select (`ctx-bench hook-latency`): the same
/// at every catalog size, so every size plans, activates and asks for the same capabilities,
/// and a size's cost is the catalog's alone. Its words are outside the generated vocabulary
/// ([`indexed_words`]), and so are the prompts' (test `hook_prompts_match_only_anchors`).
#[derive(Debug, Clone, Copy)]
pub struct Anchor {
    pub name: &'static str,
    pub shape: Shape,
    pub label: &'static str,
    pub tags: &'static [&'static str],
}

const fn anchor(
    name: &'static str,
    shape: Shape,
    label: &'static str,
    tags: &'static [&'static str],
) -> Anchor {
    Anchor {
        name,
        shape,
        label,
        tags,
    }
}

/// Two loadable skills per timed prompt of `ctx-bench hook-latency` ([`ANCHOR_PROMPTS`]), then
/// a skill and two agents (installs the person decides) for its traced prompt
/// ([`ANCHOR_TRACED_PROMPT`]).
pub const ANCHORS: &[Anchor] = &[
    anchor(
        "storybook-stories",
        Shape::SkillMaterial,
        "Storybook stories for a component",
        &["storybook", "stories", "component"],
    ),
    anchor(
        "navbar-component",
        Shape::SkillMaterial,
        "Navbar component conventions and stories",
        &["navbar", "component", "stories"],
    ),
    anchor(
        "ffmpeg-transcode",
        Shape::SkillMaterial,
        "Transcode clips with ffmpeg",
        &["ffmpeg", "transcode", "clips"],
    ),
    anchor(
        "lecture-clips",
        Shape::SkillMaterial,
        "Lecture clips: cut, transcode and caption",
        &["lecture", "clips", "transcode"],
    ),
    anchor(
        "valgrind-leaks",
        Shape::SkillMaterial,
        "Find a memory leak with valgrind",
        &["valgrind", "leak", "memory"],
    ),
    anchor(
        "memory-leak-hunt",
        Shape::SkillMaterial,
        "Hunt a memory leak down to its allocation",
        &["memory", "leak", "valgrind"],
    ),
    anchor(
        "tailwind-palette",
        Shape::SkillMaterial,
        "Tailwind palette and dark mode tokens",
        &["tailwind", "palette", "dark"],
    ),
    anchor(
        "dark-mode",
        Shape::SkillMaterial,
        "Dark mode for a tailwind palette",
        &["dark", "mode", "tailwind"],
    ),
    anchor(
        "sentry-alerts",
        Shape::SkillMaterial,
        "Sentry alerts routed into a pager rotation",
        &["sentry", "alerts", "pager"],
    ),
    anchor(
        "pager-rotation",
        Shape::SkillMaterial,
        "Pager rotation and sentry alert routing",
        &["pager", "rotation", "sentry"],
    ),
    anchor(
        "renovate-bumps",
        Shape::SkillMaterial,
        "Renovate dependency bumps",
        &["renovate", "bumps", "dependency"],
    ),
    anchor(
        "dependency-bumps",
        Shape::SkillMaterial,
        "Dependency bumps with renovate",
        &["dependency", "bumps", "renovate"],
    ),
    anchor(
        "pandas-dataframe",
        Shape::SkillMaterial,
        "Pandas dataframe outliers",
        &["pandas", "dataframe", "outliers"],
    ),
    anchor(
        "outlier-scrub",
        Shape::SkillMaterial,
        "Scrub outliers from a pandas dataframe",
        &["outliers", "scrub", "pandas"],
    ),
    anchor(
        "mermaid-diagrams",
        Shape::SkillMaterial,
        "Mermaid sequence diagrams",
        &["mermaid", "diagram", "sequence"],
    ),
    anchor(
        "sequence-diagram",
        Shape::SkillMaterial,
        "Sequence diagram drawn with mermaid",
        &["sequence", "diagram", "mermaid"],
    ),
    anchor(
        "protobuf-contracts",
        Shape::SkillMaterial,
        "Protobuf contracts vetted with buf",
        &["protobuf", "contracts", "buf"],
    ),
    anchor(
        "buf-reviewer",
        Shape::Agent,
        "Buf reviewer of protobuf contracts",
        &["buf", "protobuf", "contracts"],
    ),
    anchor(
        "contract-vetting",
        Shape::Agent,
        "Vet protobuf contracts before they ship",
        &["contracts", "vet", "protobuf"],
    ),
];

/// The timed prompts of `ctx-bench hook-latency --catalog-size`: each selects its two
/// [`ANCHORS`] and nothing else, at every size.
pub const ANCHOR_PROMPTS: &[&str] = &[
    "add storybook stories for the navbar component",
    "transcode the lecture clips with ffmpeg",
    "find the memory leak with valgrind",
    "tune the tailwind palette for dark mode",
    "wire sentry alerts into the pager rotation",
    "set up renovate for dependency bumps",
    "scrub the pandas dataframe of outliers",
    "draw the sequence diagram with mermaid",
];

/// The traced prompt of `ctx-bench hook-latency --catalog-size`: one skill to load and two
/// agents to ask for.
pub const ANCHOR_TRACED_PROMPT: &str = "vet the protobuf contracts with buf";

/// What the generator wrote.
#[derive(Debug, Clone, Default)]
pub struct Generated {
    pub dir: PathBuf,
    pub entries: usize,
    pub skill_material: usize,
    pub skill_tree: usize,
    pub agents: usize,
    pub mcp_servers: usize,
    /// Bytes of `catalog.json`.
    pub catalog_bytes: u64,
    /// Body files written (a tree's three files count three) and their bytes on disk.
    pub body_files: u64,
    pub body_bytes: u64,
    /// The sum of the declared `size_bytes` (a tree declares its pack's length).
    pub declared_bytes: u64,
    pub wall: Duration,
}

// ---------------------------------------------------------------------------------------------
// Deterministic text.

/// splitmix64, seeded by the entry's index: the same index always yields the same entry.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5851_f42d_4c95_7f2d)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// An index below `n`, skewed towards 0 (u², so the first 1 % of a list draws 10 % of the
    /// picks): tags then have the uneven document frequencies real catalogs have.
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((u * u * n as f64) as usize).min(n.saturating_sub(1))
    }
}

const TOPICS: &[&str] = &[
    "api",
    "auth",
    "billing",
    "cache",
    "cli",
    "config",
    "cron",
    "csv",
    "database",
    "deploy",
    "docs",
    "email",
    "events",
    "frontend",
    "graph",
    "http",
    "images",
    "infra",
    "inventory",
    "invoice",
    "jobs",
    "json",
    "kernel",
    "ledger",
    "logging",
    "mail",
    "maps",
    "media",
    "metrics",
    "mobile",
    "network",
    "notebook",
    "orders",
    "parser",
    "payments",
    "pipeline",
    "plugin",
    "queue",
    "release",
    "reports",
    "router",
    "schema",
    "search",
    "session",
    "shell",
    "storage",
    "stream",
    "styles",
    "sync",
    "telemetry",
    "template",
    "tenant",
    "theme",
    "tickets",
    "upload",
    "users",
    "vector",
    "video",
    "webhook",
    "widget",
    "wiki",
    "worker",
    "workflow",
    "xml",
];

const VERBS: &[&str] = &[
    "audit", "build", "check", "clean", "convert", "debug", "deploy", "design", "document",
    "explain", "format", "generate", "index", "inspect", "lint", "migrate", "monitor", "optimize",
    "plan", "profile", "refactor", "release", "review", "scaffold", "harden", "sync", "test",
    "trace", "triage", "upgrade", "validate", "write",
];

/// Languages, tools and practices: the head of the tag vocabulary (drawn most often).
const TECH: &[&str] = &[
    "rust",
    "python",
    "typescript",
    "go",
    "javascript",
    "java",
    "kotlin",
    "swift",
    "ruby",
    "php",
    "sql",
    "cpp",
    "csharp",
    "c",
    "testing",
    "security",
    "performance",
    "refactoring",
    "ci",
    "docker",
    "kubernetes",
    "terraform",
    "postgres",
    "mysql",
    "sqlite",
    "redis",
    "kafka",
    "graphql",
    "grpc",
    "rest",
    "yaml",
    "toml",
    "markdown",
    "git",
    "github-actions",
    "cargo",
    "npm",
    "pip",
    "poetry",
    "pytest",
    "jest",
    "vitest",
    "playwright",
    "selenium",
    "react",
    "vue",
    "svelte",
    "angular",
    "nextjs",
    "django",
    "flask",
    "fastapi",
    "rails",
    "spring",
    "dotnet",
    "node",
    "deno",
    "bun",
    "webassembly",
    "linux",
    "macos",
    "windows",
    "bash",
    "zsh",
    "makefile",
    "cmake",
    "bazel",
    "llvm",
    "helm",
    "ansible",
    "nginx",
    "prometheus",
    "grafana",
    "opentelemetry",
    "elasticsearch",
    "s3",
    "gcs",
    "oauth",
    "jwt",
    "tls",
    "accessibility",
    "i18n",
    "unit-tests",
    "integration-tests",
    "fuzzing",
    "benchmarks",
    "profiling",
    "tracing",
    "migrations",
    "caching",
    "concurrency",
    "async",
    "errors",
    "typing",
    "linting",
    "formatting",
    "packaging",
    "monorepo",
    "observability",
    "incident-response",
    "code-review",
    "documentation",
    "data-modeling",
];

/// Suffixes that make `<topic>-<suffix>` tags: the long tail of the vocabulary.
const TAG_SUFFIXES: &[&str] = &["testing", "patterns", "migration", "tooling"];

const NOUNS: &[&str] = &[
    "changes",
    "code",
    "services",
    "modules",
    "handlers",
    "schemas",
    "pipelines",
    "tests",
    "configs",
    "clients",
    "endpoints",
    "jobs",
];

const COMMANDS: &[&str] = &[
    "cargo test",
    "cargo clippy --all-targets",
    "npm test",
    "npm run lint",
    "pytest -q",
    "go test ./...",
    "make check",
    "git diff --stat",
    "git log --oneline -20",
    "docker compose up -d",
    "kubectl get pods",
    "terraform plan",
    "ruff check .",
    "mypy --strict src",
];

const FILES: &[&str] = &[
    "Cargo.toml",
    "package.json",
    "pyproject.toml",
    "go.mod",
    "Makefile",
    "README.md",
    "docker-compose.yml",
    "src/main.rs",
    "src/index.ts",
    "app/settings.py",
];

const SECTIONS: &[&str] = &[
    "Before you start",
    "Workflow",
    "Checks",
    "Common mistakes",
    "Examples",
    "Edge cases",
    "Finish",
];

/// Sentences of the bodies; `{topic}`, `{verb}`, `{tag}`, `{noun}`, `{cmd}` and `{file}` are
/// filled in per use. No authenticated CLI, credential variable or render-time shell injection
/// (spec/catalog.md §7): a `material` body must derive neither flag.
const SENTENCES: &[&str] = &[
    "Read `{file}` first and follow the conventions the project already uses for {topic} {noun}.",
    "Run `{cmd}` before and after every change so a regression shows up at once.",
    "Keep each {topic} change small: one concern per commit, with a message that says why.",
    "Prefer the {tag} idioms the codebase already has over introducing a new pattern.",
    "When a {topic} test fails, reproduce it alone before reading the rest of the output.",
    "Write down the invariant a {topic} function relies on next to the code that keeps it.",
    "Check the {tag} configuration for settings that differ between development and production.",
    "Name {noun} after what they mean in the {topic} domain, not after how they are stored.",
    "If `{cmd}` is slow, run the narrowest subset that covers the {topic} code you touched.",
    "Log at the boundary of the {topic} module and return errors that name the value at fault.",
    "Compare the output with the previous release before you {verb} anything else.",
    "Look for {tag} usages that bypass the shared helpers, and route them through the helpers.",
    "Remove dead {topic} code paths only after a search shows nothing calls them.",
    "Document every {topic} flag with its default, its unit and who reads it.",
    "Treat warnings from `{cmd}` as errors in continuous integration.",
    "Keep the {tag} and {tag} parts separate so each can be tested on its own.",
    "Measure before you {verb} for speed; keep the numbers with the change.",
    "Ask for review of {topic} {noun} that touch persistence, money or permissions.",
    "Update `{file}` when the {topic} interface changes, in the same commit.",
    "Prefer explicit types at the {topic} boundary and inference inside functions.",
    "Cover the empty, the single and the largest {topic} input in the tests.",
    "Stop and report when the {topic} behaviour is ambiguous instead of guessing.",
];

const BULLETS: &[&str] = &[
    "the task names {topic} {noun} or their {tag} setup",
    "a {tag} build or test step fails and the cause is unclear",
    "you need to {verb} {topic} code written by someone else",
    "the change spans several {topic} modules",
    "a review asks for {tag} cleanups before merging",
    "the {topic} {noun} have no tests yet",
];

const WHENS: &[&str] = &[
    "working on {topic} {noun}",
    "asked to {verb} {topic} code",
    "a {tag} project needs its {topic} layer reviewed",
    "{topic} tests fail after a dependency upgrade",
];

/// `template` with each placeholder replaced by a fresh pick.
fn fill(template: &str, words: &Words, rng: &mut Rng) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        match &after[..close] {
            "topic" => out.push_str(words.topic),
            "verb" => out.push_str(words.verb),
            "tag" => out.push_str(&words.tags[rng.below(words.tags.len())]),
            "noun" => out.push_str(rng.pick(NOUNS)),
            "cmd" => out.push_str(rng.pick(COMMANDS)),
            "file" => out.push_str(rng.pick(FILES)),
            other => {
                out.push('{');
                out.push_str(other);
                out.push('}');
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

/// The words one entry's texts are made of.
struct Words {
    name: String,
    topic: &'static str,
    verb: &'static str,
    tags: Vec<String>,
}

impl Words {
    fn new(index: usize, vocabulary: &[String], rng: &mut Rng) -> Words {
        let topic = rng.pick(TOPICS);
        let verb = rng.pick(VERBS);
        let count = 2 + rng.below(5);
        let mut tags: Vec<String> = Vec::with_capacity(count);
        if rng.below(2) == 0 {
            tags.push(topic.to_owned());
        }
        while tags.len() < count {
            let tag = &vocabulary[rng.skewed(vocabulary.len())];
            if !tags.contains(tag) {
                tags.push(tag.clone());
            }
        }
        tags.sort();
        Words {
            name: format!("{topic}-{verb}-{index}"),
            topic,
            verb,
            tags,
        }
    }

    /// A label of at most 200 bytes (spec/catalog.md §1.2).
    fn label(&self, rng: &mut Rng) -> String {
        let noun = rng.pick(NOUNS);
        let mut label = format!("{} {} {noun}", capitalized(self.verb), self.topic);
        for (i, tag) in self.tags.iter().take(3).enumerate() {
            let joint = match i {
                0 => " with ",
                _ if i + 1 == self.tags.len().min(3) => " and ",
                _ => ", ",
            };
            if label.len() + joint.len() + tag.len() > 200 {
                break;
            }
            label.push_str(joint);
            label.push_str(tag);
        }
        label
    }

    /// A frontmatter `description`: one line, a plain YAML scalar (no `: `, no `#`).
    fn description(&self, rng: &mut Rng) -> String {
        let when = fill(rng.pick(WHENS), self, rng);
        let tag = &self.tags[rng.below(self.tags.len())];
        format!(
            "{}s {} {} in {tag} projects - {}. Use when {when}.",
            capitalized(self.verb),
            self.topic,
            rng.pick(NOUNS),
            fill(rng.pick(SENTENCES), self, rng)
                .trim_end_matches('.')
                .replace('`', "")
        )
    }
}

/// Appends generated markdown lines to `out` while it stays within `target` bytes.
fn prose(out: &mut String, words: &Words, rng: &mut Rng, target: usize) {
    let mut section = rng.below(SECTIONS.len());
    loop {
        let mut block = format!("## {}\n\n", SECTIONS[section % SECTIONS.len()]);
        section += 1;
        match rng.below(3) {
            0 => {
                block.push_str("Use this when:\n");
                for _ in 0..3 + rng.below(3) {
                    block.push_str(&format!("- {}\n", fill(rng.pick(BULLETS), words, rng)));
                }
            }
            1 => {
                for step in 1..=3 + rng.below(5) {
                    block.push_str(&format!(
                        "{step}. {}\n",
                        fill(rng.pick(SENTENCES), words, rng)
                    ));
                }
            }
            _ => {
                let mut paragraph = String::new();
                for _ in 0..2 + rng.below(4) {
                    if !paragraph.is_empty() {
                        paragraph.push(' ');
                    }
                    paragraph.push_str(&fill(rng.pick(SENTENCES), words, rng));
                }
                block.push_str(&paragraph);
                block.push('\n');
            }
        }
        block.push('\n');
        if out.len() + block.len() > target {
            // Top up with single lines so the body lands close to its target size.
            loop {
                let line = format!("- {}\n", fill(rng.pick(SENTENCES), words, rng));
                if out.len() + line.len() > target {
                    return;
                }
                out.push_str(&line);
            }
        }
        out.push_str(&block);
    }
}

fn skill_md(words: &Words, rng: &mut Rng, tree: bool) -> String {
    let target = 1_500 + rng.below(4_500);
    let mut out = format!(
        "---\nname: {}\ndescription: {}\n---\n\n# {} {}\n\n",
        words.name,
        words.description(rng),
        capitalized(words.verb),
        words.topic
    );
    if tree {
        out.push_str(
            "Run `sh scripts/run.sh` for the checks, and read references/guide.md for the \
             details of each step.\n\n",
        );
    }
    prose(&mut out, words, rng, target);
    out
}

fn agent_md(words: &Words, rng: &mut Rng) -> String {
    let target = 800 + rng.below(2_200);
    let mut out = format!(
        "---\nname: {}\ndescription: {}\ntools: Read, Grep\n---\n\nYou {} {} {} and report what \
         you found; you do not modify files.\n\n",
        words.name,
        words.description(rng),
        words.verb,
        words.topic,
        rng.pick(NOUNS),
    );
    prose(&mut out, words, rng, target);
    out
}

fn guide_md(words: &Words, rng: &mut Rng) -> String {
    let target = 1_000 + rng.below(2_000);
    let mut out = format!("# {} guide\n\n", capitalized(words.topic));
    prose(&mut out, words, rng, target);
    out
}

fn run_sh(words: &Words) -> String {
    format!(
        "#!/bin/sh\n# The checks of the {} skill.\nset -eu\ncd \"$(dirname \"$0\")/..\"\necho \
         \"running the {} checks in $PWD\"\n",
        words.name, words.name
    )
}

/// The tag vocabulary: [`TECH`] first (drawn most often), then topics, verbs and the
/// `<topic>-<suffix>` tail; every one a lowercase safe token (spec/catalog.md §1.2).
pub fn vocabulary() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |tag: String| {
        if !out.contains(&tag) {
            out.push(tag);
        }
    };
    for tag in TECH.iter().chain(TOPICS).chain(VERBS) {
        push((*tag).to_owned());
    }
    for topic in TOPICS {
        for suffix in TAG_SUFFIXES {
            push(format!("{topic}-{suffix}"));
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

// ---------------------------------------------------------------------------------------------
// The generator.

/// Writes a catalog of `entries` entries into the empty or missing directory `dir`: the bodies,
/// then `catalog.json` (compact, one entry at a time).
pub fn generate(dir: &Path, entries: usize) -> BenchResult<Generated> {
    generate_with(dir, entries, &[])
}

/// [`generate`] with `anchors` as the first entries (as many as fit in `entries`); the generated
/// entries follow them, numbered from there.
pub fn generate_with(dir: &Path, entries: usize, anchors: &[Anchor]) -> BenchResult<Generated> {
    if entries == 0 {
        return Err("a catalog needs at least one entry (spec/catalog.md §1.1)".into());
    }
    let started = Instant::now();
    std::fs::create_dir_all(dir)?;
    for sub in ["skills", "agents", "mcp-servers"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let vocabulary = vocabulary();
    let mut generated = Generated {
        dir: dir.to_path_buf(),
        entries,
        ..Generated::default()
    };
    let catalog_path = dir.join("catalog.json");
    let mut catalog = std::io::BufWriter::new(std::fs::File::create(&catalog_path)?);
    catalog.write_all(
        format!("{{\"schema\":\"ctx.catalog-v2\",\"namespace\":\"{NAMESPACE}\",\"capabilities\":[")
            .as_bytes(),
    )?;
    let anchored = anchors.len().min(entries);
    for index in 0..entries {
        let entry = match anchors.get(index).filter(|_| index < anchored) {
            Some(anchor) => anchor_entry(dir, index, anchor, &mut generated)?,
            None => entry(dir, index, &vocabulary, &mut generated)?,
        };
        if index > 0 {
            catalog.write_all(b",")?;
        }
        serde_json::to_writer(&mut catalog, &entry)?;
    }
    catalog.write_all(b"]}")?;
    catalog.flush()?;
    drop(catalog);
    generated.catalog_bytes = std::fs::metadata(&catalog_path)?.len();
    generated.wall = started.elapsed();
    Ok(generated)
}

/// Writes one body file; returns its SHA-256 and size.
pub(crate) fn write_body(
    dir: &Path,
    path: &str,
    text: &str,
    generated: &mut Generated,
) -> BenchResult<(String, u64)> {
    let file = dir.join(path);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&file, text)?;
    generated.body_files += 1;
    generated.body_bytes += text.len() as u64;
    Ok((sha256_hex(text.as_bytes()), text.len() as u64))
}

/// Entry `index`: its files written under `dir`, its catalog JSON returned.
fn entry(
    dir: &Path,
    index: usize,
    vocabulary: &[String],
    generated: &mut Generated,
) -> BenchResult<Value> {
    let mut rng = Rng::new(index as u64);
    let words = Words::new(index, vocabulary, &mut rng);
    let label = words.label(&mut rng);
    entry_of(dir, &words, label, shape_of(index), &mut rng, generated)
}

/// Anchor `anchor` as entry `index` (its body text drawn as a generated entry's).
fn anchor_entry(
    dir: &Path,
    index: usize,
    anchor: &Anchor,
    generated: &mut Generated,
) -> BenchResult<Value> {
    let mut rng = Rng::new(index as u64);
    let words = Words {
        name: anchor.name.to_owned(),
        topic: anchor.tags.first().copied().unwrap_or("bench"),
        verb: "review",
        tags: anchor.tags.iter().map(|t| (*t).to_owned()).collect(),
    };
    entry_of(
        dir,
        &words,
        anchor.label.to_owned(),
        anchor.shape,
        &mut rng,
        generated,
    )
}

/// The entry of `words` with `label` and `shape`: its files written under `dir`, its catalog
/// JSON returned.
fn entry_of(
    dir: &Path,
    words: &Words,
    label: String,
    shape: Shape,
    rng: &mut Rng,
    generated: &mut Generated,
) -> BenchResult<Value> {
    let name = &words.name;
    let plan_digest = |id: &str, sha: &str| sha256_hex(format!("bench-plan:{id}:{sha}").as_bytes());
    let install = |id: &str, expansion: bool, result: Value, sha: &str| {
        json!({
            "installer_id": INSTALLER_ID,
            "plan_digest": plan_digest(id, sha),
            "permission_expansion": expansion,
            "credential_requirement": false,
            "result": result,
        })
    };
    let value = match shape {
        Shape::SkillMaterial => {
            generated.skill_material += 1;
            let path = format!("skills/{name}/SKILL.md");
            let (sha, size) = write_body(dir, &path, &skill_md(words, rng, false), generated)?;
            generated.declared_bytes += size;
            json!({
                "id": format!("skill:{name}"),
                "kind": "skill",
                "label": label,
                "tags": words.tags,
                "material": {
                    "path": path,
                    "sha256": sha,
                    "size_bytes": size,
                    "estimated_tokens": size.div_ceil(4),
                },
            })
        }
        Shape::SkillTree => {
            generated.skill_tree += 1;
            let tree = format!("skills/{name}");
            write_body(
                dir,
                &format!("{tree}/SKILL.md"),
                &skill_md(words, rng, true),
                generated,
            )?;
            write_body(
                dir,
                &format!("{tree}/references/guide.md"),
                &guide_md(words, rng),
                generated,
            )?;
            let script = format!("{tree}/scripts/run.sh");
            write_body(dir, &script, &run_sh(words), generated)?;
            {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(
                    dir.join(&script),
                    std::fs::Permissions::from_mode(0o755),
                )?;
            }
            let walked = ctx_service::read_skill_tree(dir, &tree)
                .map_err(|e| format!("the generated skill tree {tree}: {e}"))?;
            let (sha, size) = ctx_service::skill_pack_identity(&walked);
            generated.declared_bytes += size;
            let id = format!("skill:{name}");
            json!({
                "id": id,
                "kind": "skill",
                "label": label,
                "tags": words.tags,
                "install": install(
                    &id,
                    true,
                    json!({"tree": tree, "sha256": sha, "size_bytes": size}),
                    &sha,
                ),
            })
        }
        Shape::Agent => {
            generated.agents += 1;
            let path = format!("agents/{name}.md");
            let (sha, size) = write_body(dir, &path, &agent_md(words, rng), generated)?;
            generated.declared_bytes += size;
            let id = format!("agent:{name}");
            json!({
                "id": id,
                "kind": "agent",
                "label": label,
                "tags": words.tags,
                "install": install(
                    &id,
                    false,
                    json!({"path": path, "sha256": sha, "size_bytes": size}),
                    &sha,
                ),
            })
        }
        Shape::McpServer => {
            generated.mcp_servers += 1;
            let path = format!("mcp-servers/{name}.json");
            let text = json!({"mcpServers": {name.clone(): {
                "command": "npx",
                "args": ["-y", format!("@example/{name}")],
            }}})
            .to_string();
            let (sha, size) = write_body(dir, &path, &text, generated)?;
            generated.declared_bytes += size;
            let id = format!("mcp-server:{name}");
            json!({
                "id": id,
                "kind": "mcp-server",
                "label": label,
                "tags": words.tags,
                "install": install(
                    &id,
                    true,
                    json!({"path": path, "sha256": sha, "size_bytes": size}),
                    &sha,
                ),
            })
        }
    };
    Ok(value)
}

/// Loads `dir` in this process (spec/catalog.md §3) and checks it holds what `generated` says.
pub fn check(generated: &Generated) -> BenchResult<Duration> {
    let started = Instant::now();
    let loaded = ctx_service::load_catalog_dir(&generated.dir)
        .map_err(|e| format!("the generated catalog does not load: {e}"))?;
    let wall = started.elapsed();
    let counts = kind_counts(&loaded);
    let expected = (
        generated.skill_material,
        generated.skill_tree,
        generated.agents,
        generated.mcp_servers,
    );
    if counts != expected {
        return Err(format!(
            "the generated catalog loads as {counts:?} (material skills, skill trees, agents, MCP \
             servers), but {expected:?} were generated"
        )
        .into());
    }
    Ok(wall)
}

/// (material skills, skill-tree skills, agents, MCP servers) of a loaded catalog.
fn kind_counts(loaded: &ctx_service::LoadedCatalog) -> (usize, usize, usize, usize) {
    let mut counts = (0, 0, 0, 0);
    for entry in loaded.catalog().entries() {
        let tree = entry.install.as_ref().is_some_and(|i| i.result.tree);
        match entry.id.split_once(':').map(|(kind, _)| kind) {
            Some("skill") if entry.material.is_some() => counts.0 += 1,
            Some("skill") if tree => counts.1 += 1,
            Some("agent") => counts.2 += 1,
            Some("mcp-server") => counts.3 += 1,
            _ => {}
        }
    }
    counts
}

// ---------------------------------------------------------------------------------------------
// The measurement.

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    pub ctx: PathBuf,
    pub entries: usize,
    /// Where the run's directory (catalog and data directory) is made.
    pub dir: PathBuf,
    pub keep: bool,
    /// Load the generated directory in this process first even above [`CHECK_MAX_ENTRIES`].
    pub check: bool,
}

/// One measured `ctx` process.
#[derive(Debug, Clone)]
pub struct Step {
    pub key: &'static str,
    pub label: &'static str,
    pub wall: Duration,
    pub peak_rss_bytes: Option<u64>,
    /// The exit status; `None` when killed by a signal.
    pub exit: Option<i32>,
    pub stdout_bytes: u64,
    /// Standard error of a failed step, trimmed.
    pub error: Option<String>,
    /// What the output said (capability counts, `changed`, selections).
    pub detail: String,
}

impl Step {
    pub fn ok(&self) -> bool {
        self.exit == Some(0)
    }
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub ctx: PathBuf,
    pub ctx_version: String,
    pub fs_type: String,
    pub rss_method: String,
    pub generated: Generated,
    /// The in-process load of the generated directory, when it ran.
    pub check_wall: Option<Duration>,
    pub steps: Vec<Step>,
    /// The data directory after the first ingest: files and their bytes.
    pub data_dir_files: u64,
    pub data_dir_bytes: u64,
    /// Paths of the data directory the unchanged ingest added, removed or modified.
    pub reingest_touched: Vec<String>,
    pub notes: Vec<String>,
}

impl Report {
    /// The steps that did not exit 0.
    pub fn failed(&self) -> Vec<&Step> {
        self.steps.iter().filter(|s| !s.ok()).collect()
    }

    pub fn markdown(&self) -> String {
        let mb = |b: u64| b as f64 / 1e6;
        let g = &self.generated;
        let mut out = format!(
            "catalog scale: {} entries ({} material skills, {} skill trees, {} agents, {} MCP \
             servers), namespace {NAMESPACE}\n\
             catalog.json {:.2} MB; {} body files, {:.2} MB on disk ({:.2} MB declared); \
             generated in {:.1} s on {}\n",
            g.entries,
            g.skill_material,
            g.skill_tree,
            g.agents,
            g.mcp_servers,
            mb(g.catalog_bytes),
            g.body_files,
            mb(g.body_bytes),
            mb(g.declared_bytes),
            g.wall.as_secs_f64(),
            self.fs_type,
        );
        if let Some(wall) = self.check_wall {
            out.push_str(&format!(
                "in-process load_catalog_dir of the generated directory: {:.2} s\n",
                wall.as_secs_f64()
            ));
        }
        out.push_str(&format!(
            "data directory after the first ingest: {} files, {:.2} MB\n{} ({})\n\n\
             | step | exit | wall s | peak RSS MiB | stdout bytes | detail |\n\
             | --- | ---: | ---: | ---: | ---: | --- |\n",
            self.data_dir_files,
            mb(self.data_dir_bytes),
            self.ctx_version,
            self.rss_method,
        ));
        for s in &self.steps {
            out.push_str(&format!(
                "| {} | {} | {:.3} | {} | {} | {} |\n",
                s.label,
                s.exit
                    .map_or_else(|| "signal".to_owned(), |c| c.to_string()),
                s.wall.as_secs_f64(),
                s.peak_rss_bytes.map_or_else(
                    || "-".to_owned(),
                    |b| format!("{:.1}", b as f64 / (1024.0 * 1024.0))
                ),
                s.stdout_bytes,
                s.detail,
            ));
        }
        for s in self.failed() {
            out.push_str(&format!(
                "\nFAILED {} (exit {:?}): {}\n",
                s.label,
                s.exit,
                s.error
                    .as_deref()
                    .and_then(|e| e.lines().next())
                    .unwrap_or("")
            ));
        }
        for note in &self.notes {
            out.push_str(&format!("\nnote: {note}\n"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let g = &self.generated;
        json!({
            "schema": "ctx.bench-catalog-scale-v1",
            "ctx": self.ctx.display().to_string(),
            "ctx_version": self.ctx_version,
            "fs_type": self.fs_type,
            "rss_method": self.rss_method,
            "entries": g.entries,
            "skill_material": g.skill_material,
            "skill_tree": g.skill_tree,
            "agents": g.agents,
            "mcp_servers": g.mcp_servers,
            "catalog_bytes": g.catalog_bytes,
            "body_files": g.body_files,
            "body_bytes": g.body_bytes,
            "declared_bytes": g.declared_bytes,
            "generate_wall_ms": g.wall.as_millis() as u64,
            "check_load_wall_ms": self.check_wall.map(|d| d.as_millis() as u64),
            "data_dir_files": self.data_dir_files,
            "data_dir_bytes": self.data_dir_bytes,
            "reingest_touched": self.reingest_touched,
            "steps": self.steps.iter().map(|s| json!({
                "key": s.key,
                "label": s.label,
                "wall_ms": s.wall.as_secs_f64() * 1e3,
                "peak_rss_bytes": s.peak_rss_bytes,
                "exit": s.exit,
                "stdout_bytes": s.stdout_bytes,
                "error": s.error,
                "detail": s.detail,
            })).collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}

/// `ctx --data-dir <data> <args>` in `world`'s environment, as [`World::ctx`] builds it, under
/// [`TIME_BIN`] writing the peak resident memory to `rss_file` when there is one.
fn ctx_command(ctx: &Path, world: &World, rss_file: Option<&Path>, args: &[&str]) -> Command {
    let mut command = match rss_file {
        Some(file) => {
            let mut command = Command::new(TIME_BIN);
            command.args(["-f", "%M", "-o"]).arg(file).arg(ctx);
            command
        }
        None => Command::new(ctx),
    };
    command
        .env_clear()
        .env("HOME", &world.home)
        .env("CLAUDE_PROJECT_DIR", &world.project)
        .current_dir(&world.project)
        .arg("--data-dir")
        .arg(&world.data)
        .args(args);
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    command
}

/// The `%M` figure (KiB) [`TIME_BIN`] wrote: the file's last line.
fn read_rss(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let kib: u64 = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

struct Runner<'a> {
    ctx: &'a Path,
    world: &'a World,
    rss_file: Option<PathBuf>,
}

impl Runner<'_> {
    fn run(
        &self,
        key: &'static str,
        label: &'static str,
        args: &[&str],
        stdin: &[u8],
    ) -> BenchResult<(Step, Output)> {
        if let Some(file) = &self.rss_file {
            // A stale figure must never stand in for this run's.
            match std::fs::remove_file(file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        eprintln!("running ctx {} ...", args.join(" "));
        let mut command = ctx_command(self.ctx, self.world, self.rss_file.as_deref(), args);
        let (wall, output) = timed(&mut command, stdin)?;
        let exit = output.status.code();
        let step = Step {
            key,
            label,
            wall,
            peak_rss_bytes: self.rss_file.as_deref().and_then(read_rss),
            exit,
            stdout_bytes: output.stdout.len() as u64,
            error: (exit != Some(0)).then(|| {
                let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
                let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
                let text = if stderr.is_empty() { stdout } else { stderr };
                text.chars().take(ERROR_MAX_CHARS).collect()
            }),
            detail: String::new(),
        };
        eprintln!(
            "  exit {:?}, {:.3} s, peak RSS {}",
            step.exit,
            wall.as_secs_f64(),
            step.peak_rss_bytes.map_or_else(
                || "-".to_owned(),
                |b| format!("{:.1} MiB", b as f64 / 1048576.0)
            )
        );
        Ok((step, output))
    }
}

/// The JSON object a host command printed, if it printed one.
fn stdout_json(output: &Output) -> Option<Value> {
    serde_json::from_slice(output.stdout.trim_ascii()).ok()
}

/// Every path under `root`: its length, modification time and whether it is a directory.
pub(crate) type Snapshot = BTreeMap<PathBuf, (u64, Option<SystemTime>, bool)>;

/// Every file and directory under `root` with its length and modification time.
pub(crate) fn snapshot(root: &Path) -> BenchResult<Snapshot> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for item in std::fs::read_dir(&dir)? {
            let item = item?;
            let meta = std::fs::symlink_metadata(item.path())?;
            let rel = item.path().strip_prefix(root)?.to_path_buf();
            out.insert(rel, (meta.len(), meta.modified().ok(), meta.is_dir()));
            if meta.is_dir() {
                stack.push(item.path());
            }
        }
    }
    Ok(out)
}

pub(crate) fn touched(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (path, meta) in after {
        match before.get(path) {
            None => out.push(format!("added {}", path.display())),
            Some(old) if old != meta => out.push(format!("modified {}", path.display())),
            _ => {}
        }
    }
    for path in before.keys().filter(|p| !after.contains_key(*p)) {
        out.push(format!("removed {}", path.display()));
    }
    out
}

/// The prompt of `query prepare` and the hook (and of the traced sessions of `ctx-bench
/// hook-latency --catalog-size`): common tags of the vocabulary, so retrieval has candidates to
/// score.
pub(crate) const PROMPT: &str = "Please review the database migration and add integration tests for the \
                      rust api; check the logging, caching and security of the payments worker.";

/// Generates, then measures as `config` says.
pub fn run(config: &Config) -> BenchResult<Report> {
    let ctx = std::fs::canonicalize(&config.ctx)
        .map_err(|e| format!("the ctx binary {}: {e}", config.ctx.display()))?;
    std::fs::create_dir_all(&config.dir)?;
    let root = tempfile::Builder::new()
        .prefix("ctx-bench-catalog-scale-")
        .tempdir_in(&config.dir)?;
    let root_path = std::fs::canonicalize(root.path())?;
    let catalog_dir = root_path.join("catalog");
    eprintln!(
        "generating {} entries in {} ...",
        config.entries,
        catalog_dir.display()
    );
    let generated = generate(&catalog_dir, config.entries)?;
    eprintln!(
        "generated in {:.1} s: catalog.json {} bytes, {} body files of {} bytes",
        generated.wall.as_secs_f64(),
        generated.catalog_bytes,
        generated.body_files,
        generated.body_bytes
    );
    let check_wall = if config.check || config.entries <= CHECK_MAX_ENTRIES {
        Some(check(&generated)?)
    } else {
        None
    };

    let world = World::new(&root_path, None)?;
    let mut notes = Vec::new();
    let rss_file = if Path::new(TIME_BIN).is_file() {
        Some(root_path.join("peak-rss"))
    } else {
        notes.push(format!(
            "{TIME_BIN} does not exist here: peak RSS was not measured"
        ));
        None
    };
    let rss_method = match &rss_file {
        Some(_) => format!("peak RSS: {TIME_BIN} -f %M, ru_maxrss from wait4"),
        None => "peak RSS not measured".to_owned(),
    };
    let runner = Runner {
        ctx: &ctx,
        world: &world,
        rss_file,
    };
    let version = ctx_command(&ctx, &world, None, &["--version"]).output()?;
    let ctx_version = String::from_utf8_lossy(&version.stdout).trim().to_owned();

    let catalog_arg = catalog_dir.display().to_string();
    let ingest_args = ["catalog", "ingest", "--catalog-dir", catalog_arg.as_str()];
    let mut steps = Vec::new();

    let ingest_detail = |output: &Output| {
        stdout_json(output)
            .and_then(|v| {
                let r = v.get("result")?;
                Some(format!(
                    "changed={}, {} capabilities",
                    r.get("changed")?,
                    r.get("capabilities")?
                ))
            })
            .unwrap_or_default()
    };
    let (mut first, output) = runner.run(
        "ingest",
        "catalog ingest (fresh data dir)",
        &ingest_args,
        b"",
    )?;
    first.detail = ingest_detail(&output);
    steps.push(first);
    let before = snapshot(&world.data)?;
    let data_dir_files = before.values().filter(|m| !m.2).count() as u64;
    let data_dir_bytes = before.values().filter(|m| !m.2).map(|m| m.0).sum();

    let (mut again, output) = runner.run(
        "ingest_unchanged",
        "catalog ingest again (unchanged)",
        &ingest_args,
        b"",
    )?;
    let after = snapshot(&world.data)?;
    let reingest_touched = touched(&before, &after);
    // A lock file records its holder's pid at every acquire; that is the lock, not the catalog:
    // the catalog's `.catalog.lock` and the registry's publication lock (spec/registry.md §1),
    // which the ingest takes to find the artifact already published.
    let (locks, others): (Vec<&String>, Vec<&String>) = reingest_touched
        .iter()
        .partition(|t| t.ends_with(".lock") || t.ends_with("registry/registry-publication"));
    again.detail = format!(
        "{}; {}",
        ingest_detail(&output),
        match (others.len(), locks.len()) {
            (0, 0) => "wrote nothing".to_owned(),
            (0, _) => format!(
                "wrote nothing but its lock's holder ({})",
                locks
                    .iter()
                    .map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (n, _) => format!("touched {n} paths besides lock files"),
        }
    );
    if !others.is_empty() {
        notes.push(format!(
            "the unchanged ingest touched the data directory: {}",
            reingest_touched
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    steps.push(again);

    let (mut list, output) = runner.run("list_text", "catalog list", &["catalog", "list"], b"")?;
    list.detail = format!(
        "{} lines",
        output.stdout.iter().filter(|&&b| b == b'\n').count()
    );
    steps.push(list);
    let (mut list, output) = runner.run(
        "list_json",
        "catalog list --json",
        &["catalog", "list", "--json"],
        b"",
    )?;
    list.detail = stdout_json(&output)
        .and_then(|v| Some(format!("{} entries", v.get("entries")?.as_array()?.len())))
        .unwrap_or_default();
    steps.push(list);

    // The first command that opens the runtime also creates the journal and the data
    // directory's stores; the second is a new session on them.
    for (key, label, session) in [
        (
            "query_prepare_first",
            "query prepare (first: creates the journal)",
            "bench-catalog-scale-1",
        ),
        (
            "query_prepare",
            "query prepare (second session)",
            "bench-catalog-scale-2",
        ),
    ] {
        let request = json!({
            "session_id": session,
            "workspace": world.project.display().to_string(),
            "prompt": PROMPT,
        })
        .to_string();
        let (mut prepare, output) =
            runner.run(key, label, &["query", "prepare"], request.as_bytes())?;
        prepare.detail = stdout_json(&output)
            .and_then(|v| {
                let r = v.get("result")?;
                let ids: Vec<&str> = r
                    .get("selections")?
                    .as_array()?
                    .iter()
                    .filter_map(|s| s.get("capability_id")?.as_str())
                    .collect();
                Some(format!(
                    "status {}, {} selections: {}",
                    r.get("status")?,
                    ids.len(),
                    ids.join(" ")
                ))
            })
            .unwrap_or_default();
        steps.push(prepare);
    }

    let input = world.hook_input("bench-catalog-scale-hook", PROMPT)?;
    let (mut hook, output) = runner.run(
        "hook_prompt",
        "hook claude user-prompt-submit",
        &["hook", "claude", "user-prompt-submit"],
        &input,
    )?;
    hook.detail = match stdout_json(&output) {
        Some(Value::Object(reply)) => format!(
            "replied with {}",
            reply.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        _ if output.stdout.trim_ascii().is_empty() => "no reply".to_owned(),
        _ => "printed something other than one JSON object".to_owned(),
    };
    steps.push(hook);

    if config.keep {
        let world_dir = world.keep();
        let root_dir = root.keep();
        eprintln!(
            "kept the run's directory {}: the catalog {} and the data directory {}",
            root_dir.display(),
            catalog_dir.display(),
            world_dir.join("data").display()
        );
    } else {
        drop(world);
        drop(root);
    }
    Ok(Report {
        ctx,
        ctx_version,
        fs_type: crate::hook_latency::fs_type(&config.dir),
        rss_method,
        generated,
        check_wall,
        steps,
        data_dir_files,
        data_dir_bytes,
        reingest_touched,
        notes,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// 40 generated entries load with the catalog's own loader (every body's digest, every tree's
    /// pack and every flag checked, spec/catalog.md §3, §1.4, §7), in the stated shares.
    #[test]
    fn catalog_scale_generated_catalog_loads() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = dir.path().join("catalog");
        let generated = generate(&catalog, 40).unwrap();
        assert_eq!(
            (
                generated.skill_material,
                generated.skill_tree,
                generated.agents,
                generated.mcp_servers
            ),
            (22, 4, 8, 6)
        );
        check(&generated).unwrap();
        let loaded = ctx_service::load_catalog_dir(&catalog).unwrap();
        assert_eq!(loaded.catalog().entries().len(), 40);
        assert_eq!(loaded.catalog().namespace(), NAMESPACE);
        assert_eq!(kind_counts(&loaded), (22, 4, 8, 6));
        // Sizes are the files' own: every body is counted, and the catalog is compact JSON.
        assert_eq!(generated.body_files, 22 + 4 * 3 + 8 + 6);
        let text = std::fs::read_to_string(catalog.join("catalog.json")).unwrap();
        assert_eq!(text.len() as u64, generated.catalog_bytes);
        assert!(!text.contains('\n'));
        // Deterministic: the same index always gives the same catalog.
        let again = dir.path().join("again");
        generate(&again, 40).unwrap();
        assert_eq!(
            std::fs::read_to_string(again.join("catalog.json")).unwrap(),
            text
        );
    }

    /// The words a generated (not anchored) entry's name, label and tags can hold.
    fn generated_words() -> std::collections::BTreeSet<String> {
        let mut words = std::collections::BTreeSet::new();
        let lists = [TOPICS, VERBS, NOUNS, TECH, TAG_SUFFIXES];
        for word in lists.iter().flat_map(|l| l.iter()) {
            for part in word.split(|c: char| !c.is_ascii_alphanumeric()) {
                words.insert(part.to_ascii_lowercase());
            }
        }
        words
    }

    fn prompt_words(prompt: &str) -> Vec<String> {
        prompt
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect()
    }

    /// The anchored prompts share no word with generated entries, so at every catalog size
    /// they select their anchors and nothing else; planned in process at 120 entries.
    #[test]
    fn hook_prompts_match_only_anchors() {
        let generated = generated_words();
        let prompts = ANCHOR_PROMPTS.iter().chain([&ANCHOR_TRACED_PROMPT]);
        for prompt in prompts.clone() {
            for word in prompt_words(prompt) {
                assert!(!generated.contains(&word), "{word:?} of {prompt:?}");
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let catalog = dir.path().join("catalog");
        generate_with(&catalog, 120, ANCHORS).unwrap();
        let layout = ctx_service::Layout::new(&dir.path().join("data"));
        ctx_service::ingest_catalog(&layout, Some(&catalog)).unwrap();
        let runtime =
            ctx_service::Runtime::open(&layout, ctx_model::UtcMicros(1_800_000_000_000_000))
                .unwrap();
        runtime
            .policy_store()
            .persist(&ctx_service::InstallConsentPolicy::safe_default())
            .unwrap();
        let anchors_of = |prompt: &str| -> Vec<String> {
            let words = prompt_words(prompt);
            let mut ids: Vec<String> = ANCHORS
                .iter()
                .filter(|a| {
                    a.name.split('-').all(|w| words.contains(&w.to_owned())) || {
                        a.tags
                            .iter()
                            .filter(|t| words.contains(&(**t).to_owned()))
                            .count()
                            >= 2
                    }
                })
                .map(|a| match a.shape {
                    Shape::Agent => format!("agent:{}", a.name),
                    _ => format!("skill:{}", a.name),
                })
                .collect();
            ids.sort();
            ids
        };
        for (i, prompt) in prompts.enumerate() {
            let work = ctx_service::WorkRequest {
                session_id: format!("anchors-{i}"),
                workspace: dir.path().display().to_string(),
                prompt: format!("{prompt} (run {})", crate::hook_latency::run_code(i)),
                signals: Vec::new(),
                languages: Vec::new(),
                requested_limit: 5,
            };
            let work_ref = runtime.observe_work(&work).unwrap();
            let query = ctx_service::QueryRequest::new(
                &ctx_service::logical_id("query", &work_ref),
                &work_ref,
            )
            .unwrap();
            let prepared = runtime.service().prepare(&query).unwrap();
            let mut selected: Vec<String> = prepared
                .prepared()
                .selections()
                .iter()
                .map(|s| s.capability_id().to_owned())
                .collect();
            selected.sort();
            let expected = anchors_of(prompt);
            assert!(expected.len() >= 2, "{prompt:?}: {expected:?}");
            assert_eq!(selected, expected, "{prompt:?}");
        }
    }

    #[test]
    fn catalog_scale_bodies_stay_in_their_bounds() {
        let vocabulary = vocabulary();
        assert!(vocabulary.len() >= 300, "{}", vocabulary.len());
        for index in 0..500 {
            let mut rng = Rng::new(index as u64);
            let words = Words::new(index, &vocabulary, &mut rng);
            assert!((2..=6).contains(&words.tags.len()));
            assert!(words.label(&mut rng).len() <= 200);
            let skill = skill_md(&words, &mut rng, false);
            assert!((1_000..=6_000).contains(&skill.len()), "{}", skill.len());
            assert!(!skill.contains("!`"));
            assert!(words.name.len() <= 64);
        }
    }
}
