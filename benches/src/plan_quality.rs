//! `ctx-bench plan-quality`: how well ctx picks capabilities for a prompt, measured on a labelled
//! set the project owns.
//!
//! A catalog of about 270 realistic entries ([`ENTRIES`]: document, testing,
//! infrastructure, database, frontend, language, data, git, security and debugging skills;
//! subagents; MCP servers; harnesses) is generated as a `ctx.catalog-v2` directory (spec/catalog.md
//! §1, §1.4) into a temporary directory, ingested into a fresh data directory with
//! `ctx_service::ingest_catalog`, and every labelled prompt ([`PROMPTS`]) is planned
//! in-process exactly as the `user-prompt-submit` hook plans one (spec/cli.md §7): the safe default
//! install policy persisted, `Runtime::observe_work` on the prompt, a `QueryRequest` on the work
//! reference, `QueryService::prepare`, and the plan's selections; each prompt is its own session.
//!
//! Figures (spec/catalog.md §5 is what they judge):
//!
//! - **recall@5**: over prompts with a non-empty relevant set, the share with at least one
//!   relevant selection (a plan holds at most five);
//! - **precision**: over every selection of every prompt, the share relevant to its prompt;
//! - **abstention accuracy**: over prompts with an empty relevant set, the share planned with no
//!   selection at all;
//! - mean selections per prompt; each figure per kind of prompt ([`Kind`]); every miss;
//!   and the entries most often selected where they are not relevant.
//!
//! A plan's selections are a set (the planner orders them by tier, then id), so no figure reads
//! their order.
//!
//! It is a measurement: low figures are reported, never an error. A prompt the product refuses
//! to plan (an invalid value, a component refusing the work) is that prompt's outcome: the person
//! gets no plan, and the report lists it. A harness failure (the generated catalog does not
//! ingest, the runtime does not open, a file or the journal fails, every prompt is refused) is an
//! error.

mod catalog;
mod prompts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ctx_model::UtcMicros;
use ctx_service::{
    InstallConsentPolicy, Layout, QueryRequest, Runtime, RuntimeError, ServiceError, WorkRequest,
    ingest_catalog, logical_id,
};
use serde_json::{Value, json};

pub use catalog::{ENTRIES, Entry, RELATED, Shape};
pub use prompts::{Kind, Labelled, PROMPTS};

use crate::BenchResult;
use crate::catalog_scale::{self, INSTALLER_ID, sha256_hex, write_body};

/// The generated catalog's namespace (spec/catalog.md §1.1).
pub const NAMESPACE: &str = "bench.plan-quality";
/// Prompts a `--test` run plans: spread evenly over the labelled set, so every section (and
/// the no-fit prompts at its end) is represented.
pub const SMOKE_PROMPTS: usize = 20;
/// What every prompt asks for: the hook's limit (spec/catalog.md §5.1).
pub const REQUESTED_LIMIT: u8 = 5;
/// The schema of the JSON report.
pub const REPORT_SCHEMA: &str = "ctx.bench-plan-quality-v1";
/// Entries listed under "most often selected where not relevant".
const TOP_IRRELEVANT: usize = 15;

// ---------------------------------------------------------------------------------------------
// The catalog directory.

/// What [`generate`] wrote.
#[derive(Debug, Clone, Default)]
pub struct GeneratedCatalog {
    pub dir: PathBuf,
    pub entries: usize,
    /// Entries per kind (`skill`, `agent`, `mcp-server`, `harness`).
    pub kinds: BTreeMap<&'static str, usize>,
    /// Entries per actionability (`load`, `install`, `manual`).
    pub actionability: BTreeMap<&'static str, usize>,
    pub catalog_bytes: u64,
    pub body_files: u64,
    pub body_bytes: u64,
}

fn title(entry: &Entry) -> String {
    let mut out = String::new();
    for (i, word) in entry.name().split('-').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// A YAML double-quoted scalar: descriptions hold `: `, which a plain scalar may not.
fn yaml_quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The shared middle of every skill and agent body: what to do, in the entry's own terms. Plain
/// prose, no command in a code span and no `$VARIABLE`, so a `load` body derives neither flag
/// (spec/catalog.md §7).
fn workflow(entry: &Entry) -> String {
    let tags = entry.tags().join(", ");
    format!(
        "## When to use\n\n{}\n\nTopics: {tags}.\n\n## Workflow\n\n\
         1. Read the files the task names and the conventions the project already follows for \
         them before changing anything.\n\
         2. State the goal in one sentence and the check that will show it is met.\n\
         3. Make the smallest change that reaches the goal; keep unrelated edits out.\n\
         4. Run the project's own checks and read their output rather than assuming success.\n\
         5. Report what changed, what was verified and what is left open.\n\n\
         ## Pitfalls\n\n\
         - Guessing at behaviour that the code or its documentation can answer.\n\
         - Mixing a refactor into a behaviour change.\n\
         - Leaving a failing check for later.\n",
        entry.description
    )
}

fn skill_md(entry: &Entry, allowed_tools: Option<&str>, script: Option<&str>) -> String {
    let mut out = format!(
        "---\nname: {}\ndescription: {}\n",
        entry.name(),
        yaml_quoted(entry.description)
    );
    if let Some(tools) = allowed_tools {
        out.push_str(&format!("allowed-tools: {tools}\n"));
    }
    out.push_str(&format!("---\n\n# {}\n\n", title(entry)));
    if let Some(script) = script {
        out.push_str(&format!(
            "The helper {script} does the mechanical part; references/guide.md explains the \
             options it takes.\n\n"
        ));
    }
    out.push_str(&workflow(entry));
    out
}

fn agent_md(entry: &Entry, edits: bool) -> String {
    let mut out = format!(
        "---\nname: {}\ndescription: {}\ntools: Read, Grep, Glob, Edit, Bash\nmodel: inherit\n",
        entry.name(),
        yaml_quoted(entry.description)
    );
    if edits {
        out.push_str("permissionMode: acceptEdits\n");
    }
    out.push_str(&format!(
        "---\n\nYou are the {} subagent. {}\n\n",
        entry.name(),
        entry.description
    ));
    out.push_str(&workflow(entry));
    out
}

fn guide_md(entry: &Entry, script: &str) -> String {
    format!(
        "# {} guide\n\nRun {script} with the input file as its only argument; it writes its \
         result next to the input and prints a one-line summary. It never changes the input \
         file.\n\nUse it for: {}.\n",
        title(entry),
        entry.tags().join(", ")
    )
}

fn script_text(entry: &Entry) -> String {
    format!(
        "#!/usr/bin/env python3\n\"\"\"The helper of the {} skill: summarizes its input \
         file.\"\"\"\nimport sys\n\n\ndef main() -> int:\n    if len(sys.argv) != 2:\n        \
         print(\"usage: helper INPUT\", file=sys.stderr)\n        return 2\n    with \
         open(sys.argv[1], \"rb\") as f:\n        data = f.read()\n    print(f\"{{len(data)}} \
         bytes read from {{sys.argv[1]}}\")\n    return 0\n\n\nif __name__ == \"__main__\":\n    \
         sys.exit(main())\n",
        entry.name()
    )
}

/// An `.mcp.json` fragment (spec/catalog.md §3 sample layout); secrets only as `${VAR}`.
fn mcp_json(entry: &Entry) -> Value {
    let server = match entry.shape {
        Shape::McpStdio { package, env } => {
            let mut server = json!({"type": "stdio", "command": "npx", "args": ["-y", package]});
            if !env.is_empty() {
                let vars: serde_json::Map<String, Value> = env
                    .iter()
                    .map(|v| ((*v).to_owned(), Value::String(format!("${{{v}}}"))))
                    .collect();
                server["env"] = Value::Object(vars);
            }
            server
        }
        Shape::McpHttp { url, token } => {
            let mut server = json!({"type": "http", "url": url});
            if let Some(var) = token {
                server["headers"] = json!({"Authorization": format!("Bearer ${{{var}}}")});
            }
            server
        }
        _ => Value::Null,
    };
    json!({"mcpServers": {entry.name(): server}})
}

/// The `related` ids of `entry`: both ends of every [`RELATED`] edge it is on.
fn related_of(entry: &Entry) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = RELATED
        .iter()
        .filter_map(|&(a, b)| {
            if a == entry.id {
                Some(b)
            } else if b == entry.id {
                Some(a)
            } else {
                None
            }
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Writes the catalog directory: every body, then `catalog.json`.
pub fn generate(dir: &Path) -> BenchResult<GeneratedCatalog> {
    std::fs::create_dir_all(dir)?;
    let mut counts = catalog_scale::Generated::default();
    let mut generated = GeneratedCatalog {
        dir: dir.to_path_buf(),
        entries: ENTRIES.len(),
        ..GeneratedCatalog::default()
    };
    let mut capabilities = Vec::with_capacity(ENTRIES.len());
    let plan_digest = |id: &str, sha: &str| sha256_hex(format!("bench-plan:{id}:{sha}").as_bytes());
    let install = |id: &str, expansion: bool, credential: bool, result: Value, sha: &str| {
        json!({
            "installer_id": INSTALLER_ID,
            "plan_digest": plan_digest(id, sha),
            "permission_expansion": expansion,
            "credential_requirement": credential,
            "result": result,
        })
    };
    for entry in ENTRIES {
        *generated.kinds.entry(entry.kind()).or_default() += 1;
        *generated
            .actionability
            .entry(entry.actionability())
            .or_default() += 1;
        let name = entry.name();
        let mut value = json!({
            "id": entry.id,
            "kind": entry.kind(),
            "label": entry.description,
            "tags": entry.tags(),
        });
        let related = related_of(entry);
        if !related.is_empty() {
            value["related"] = json!(related);
        }
        match entry.shape {
            Shape::Load => {
                let path = format!("skills/{name}/SKILL.md");
                let (sha, size) =
                    write_body(dir, &path, &skill_md(entry, None, None), &mut counts)?;
                value["material"] = json!({
                    "path": path,
                    "sha256": sha,
                    "size_bytes": size,
                    "estimated_tokens": size.div_ceil(4),
                });
            }
            Shape::Install { tools, credential } => {
                let path = format!("skills/{name}/SKILL.md");
                let (sha, size) =
                    write_body(dir, &path, &skill_md(entry, Some(tools), None), &mut counts)?;
                let result = json!({"path": path, "sha256": sha, "size_bytes": size});
                value["install"] = install(entry.id, true, credential, result, &sha);
            }
            Shape::Tree { script } => {
                let tree = format!("skills/{name}");
                write_body(
                    dir,
                    &format!("{tree}/SKILL.md"),
                    &skill_md(entry, None, Some(script)),
                    &mut counts,
                )?;
                write_body(
                    dir,
                    &format!("{tree}/references/guide.md"),
                    &guide_md(entry, script),
                    &mut counts,
                )?;
                let script_path = format!("{tree}/{script}");
                write_body(dir, &script_path, &script_text(entry), &mut counts)?;
                {
                    use std::os::unix::fs::PermissionsExt as _;
                    std::fs::set_permissions(
                        dir.join(&script_path),
                        std::fs::Permissions::from_mode(0o755),
                    )?;
                }
                let walked = ctx_service::read_skill_tree(dir, &tree)
                    .map_err(|e| format!("the generated skill tree {tree}: {e}"))?;
                let (sha, size) = ctx_service::skill_pack_identity(&walked);
                let result = json!({"tree": tree, "sha256": sha, "size_bytes": size});
                // An executable file expands permissions (spec/catalog.md §1.4).
                value["install"] = install(entry.id, true, false, result, &sha);
            }
            Shape::Agent { edits } => {
                let path = format!("agents/{name}.md");
                let (sha, size) = write_body(dir, &path, &agent_md(entry, edits), &mut counts)?;
                let result = json!({"path": path, "sha256": sha, "size_bytes": size});
                value["install"] = install(entry.id, edits, false, result, &sha);
            }
            Shape::McpStdio { env, .. } => {
                let path = format!("mcp-servers/{name}.json");
                let text = mcp_json(entry).to_string();
                let (sha, size) = write_body(dir, &path, &text, &mut counts)?;
                let result = json!({"path": path, "sha256": sha, "size_bytes": size});
                // An MCP server always expands permissions; a `${VAR}` needs a credential
                // (spec/catalog.md §7).
                value["install"] = install(entry.id, true, !env.is_empty(), result, &sha);
            }
            Shape::McpHttp { token, .. } => {
                let path = format!("mcp-servers/{name}.json");
                let text = mcp_json(entry).to_string();
                let (sha, size) = write_body(dir, &path, &text, &mut counts)?;
                let result = json!({"path": path, "sha256": sha, "size_bytes": size});
                value["install"] = install(entry.id, true, token.is_some(), result, &sha);
            }
            Shape::Manual => {}
        }
        capabilities.push(value);
    }
    let document = json!({
        "schema": "ctx.catalog-v2",
        "namespace": NAMESPACE,
        "capabilities": capabilities,
    });
    let text = serde_json::to_string(&document)?;
    std::fs::write(dir.join("catalog.json"), &text)?;
    generated.catalog_bytes = text.len() as u64;
    generated.body_files = counts.body_files;
    generated.body_bytes = counts.body_bytes;
    Ok(generated)
}

// ---------------------------------------------------------------------------------------------
// Planning.

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Plan [`SMOKE_PROMPTS`] prompts instead of all.
    pub smoke: bool,
    /// Where the run's temporary directory (catalog and data directory) is made.
    pub dir: PathBuf,
    /// Keep that directory for inspection.
    pub keep: bool,
}

/// The indices into [`PROMPTS`] a run plans.
pub fn prompt_indices(smoke: bool) -> Vec<usize> {
    let n = PROMPTS.len();
    if !smoke || n <= SMOKE_PROMPTS {
        return (0..n).collect();
    }
    (0..SMOKE_PROMPTS).map(|i| i * n / SMOKE_PROMPTS).collect()
}

/// One selection of a plan.
#[derive(Debug, Clone)]
pub struct Selected {
    pub id: String,
    pub actionability: String,
    /// The work tokens the entry matched (spec/catalog.md §5.3): the evidence it was picked on.
    pub matching_signals: Vec<String>,
    pub relevant: bool,
}

/// One planned prompt.
#[derive(Debug, Clone)]
pub struct PromptResult {
    /// Its index in [`PROMPTS`].
    pub index: usize,
    pub kind: Kind,
    pub prompt: &'static str,
    pub relevant: &'static [&'static str],
    pub selected: Vec<Selected>,
    pub status: String,
    pub abstention_code: Option<String>,
    /// The product path refused to plan the prompt (its sentence): the person gets no plan, so
    /// the prompt counts as planned with no selection.
    pub refused: Option<String>,
    pub wall: Duration,
}

impl PromptResult {
    pub fn expects_abstention(&self) -> bool {
        self.relevant.is_empty()
    }

    pub fn relevant_selections(&self) -> usize {
        self.selected.iter().filter(|s| s.relevant).count()
    }

    /// A prompt with a fitting entry none of whose selections fits, or a no-fit prompt with a
    /// selection.
    pub fn is_miss(&self) -> bool {
        if self.expects_abstention() {
            !self.selected.is_empty()
        } else {
            self.relevant_selections() == 0
        }
    }
}

/// A share with its numerator and denominator; `None` when nothing was counted.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ratio {
    pub hits: usize,
    pub over: usize,
}

impl Ratio {
    pub fn value(self) -> Option<f64> {
        (self.over > 0).then(|| self.hits as f64 / self.over as f64)
    }

    fn text(self) -> String {
        match self.value() {
            Some(v) => format!("{v:.3} ({}/{})", self.hits, self.over),
            None => "-".to_owned(),
        }
    }

    fn to_json(self) -> Value {
        json!({"value": self.value(), "hits": self.hits, "over": self.over})
    }
}

/// The figures of a set of planned prompts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    pub prompts: usize,
    /// Prompts with at least one relevant selection, over prompts with a relevant entry.
    pub recall_at_5: Ratio,
    /// Relevant selections over all selections.
    pub precision: Ratio,
    /// No-fit prompts planned empty, over no-fit prompts.
    pub abstention_accuracy: Ratio,
    pub selections: usize,
}

impl Metrics {
    pub fn of<'a>(results: impl IntoIterator<Item = &'a PromptResult>) -> Metrics {
        let mut m = Metrics::default();
        for r in results {
            m.prompts += 1;
            m.selections += r.selected.len();
            m.precision.over += r.selected.len();
            m.precision.hits += r.relevant_selections();
            if r.expects_abstention() {
                m.abstention_accuracy.over += 1;
                m.abstention_accuracy.hits += usize::from(r.selected.is_empty());
            } else {
                m.recall_at_5.over += 1;
                m.recall_at_5.hits += usize::from(r.relevant_selections() > 0);
            }
        }
        m
    }

    pub fn mean_selections(&self) -> Option<f64> {
        (self.prompts > 0).then(|| self.selections as f64 / self.prompts as f64)
    }

    fn to_json(&self) -> Value {
        json!({
            "prompts": self.prompts,
            "recall_at_5": self.recall_at_5.to_json(),
            "precision": self.precision.to_json(),
            "abstention_accuracy": self.abstention_accuracy.to_json(),
            "selections": self.selections,
            "mean_selections": self.mean_selections(),
        })
    }
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub smoke: bool,
    pub catalog: GeneratedCatalog,
    pub results: Vec<PromptResult>,
    pub metrics: Metrics,
    pub by_kind: Vec<(Kind, Metrics)>,
    /// Entries selected where they are not relevant, most often first: (id, times).
    pub top_irrelevant: Vec<(String, usize)>,
    pub ingest_wall: Duration,
    pub plan_wall: Duration,
}

fn now() -> BenchResult<UtcMicros> {
    let micros = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros();
    Ok(UtcMicros(i64::try_from(micros)?))
}

/// Generates the catalog, ingests it into a fresh data directory and plans the prompts.
pub fn run(config: &Config) -> BenchResult<Report> {
    std::fs::create_dir_all(&config.dir)?;
    let root = tempfile::Builder::new()
        .prefix("ctx-bench-plan-quality-")
        .tempdir_in(&config.dir)?;
    let root_path = std::fs::canonicalize(root.path())?;
    let catalog_dir = root_path.join("catalog");
    let data_dir = root_path.join("data");
    let project = root_path.join("project");
    std::fs::create_dir_all(&project)?;
    eprintln!(
        "generating {} entries in {} ...",
        ENTRIES.len(),
        catalog_dir.display()
    );
    let catalog = generate(&catalog_dir)?;

    let started = Instant::now();
    let layout = Layout::new(&data_dir);
    ingest_catalog(&layout, Some(&catalog_dir))
        .map_err(|e| format!("ingesting the generated catalog: {e}"))?;
    let runtime = Runtime::open(&layout, now()?)
        .map_err(|e| format!("opening the runtime on {}: {e}", data_dir.display()))?;
    // As the prompt hook does before it plans (spec/cli.md §7): without a persisted policy no
    // signed consent would be accepted.
    let policy = runtime.policy_store();
    if !policy
        .has_persisted()
        .map_err(|e| format!("reading the install policy: {e}"))?
    {
        policy
            .persist(&InstallConsentPolicy::safe_default())
            .map_err(|e| format!("persisting the install policy: {e}"))?;
    }
    let ingest_wall = started.elapsed();

    let workspace = project.display().to_string();
    let indices = prompt_indices(config.smoke);
    eprintln!("planning {} prompts ...", indices.len());
    let started = Instant::now();
    let mut results = Vec::with_capacity(indices.len());
    for index in indices {
        let labelled = &PROMPTS[index];
        results.push(plan_one(&runtime, &workspace, index, labelled)?);
    }
    let plan_wall = started.elapsed();
    if !results.is_empty() && results.iter().all(|r| r.refused.is_some()) {
        return Err(format!(
            "every prompt was refused; the first: {}",
            results[0].refused.as_deref().unwrap_or_default()
        )
        .into());
    }
    drop(runtime);

    if config.keep {
        let kept = root.keep();
        eprintln!(
            "kept the run's directory {}: the catalog in catalog/, the data directory in data/",
            kept.display()
        );
    }
    Ok(Report::new(
        config.smoke,
        catalog,
        results,
        ingest_wall,
        plan_wall,
    ))
}

/// Why one prompt was not planned.
enum PlanFailure {
    /// The product refused the request as it stands (an invalid value, a component refusing the
    /// work): the prompt's outcome, recorded in the report.
    Refused(String),
    /// Anything else (the data directory's files, the journal): a harness error.
    Broken(String),
}

impl From<RuntimeError> for PlanFailure {
    fn from(e: RuntimeError) -> PlanFailure {
        match e {
            RuntimeError::Invalid(_)
            | RuntimeError::Component { .. }
            | RuntimeError::Service(ServiceError::Invalid(_)) => {
                PlanFailure::Refused(e.to_string())
            }
            other => PlanFailure::Broken(other.to_string()),
        }
    }
}

impl From<ServiceError> for PlanFailure {
    fn from(e: ServiceError) -> PlanFailure {
        match e {
            ServiceError::Invalid(_) => PlanFailure::Refused(e.to_string()),
            other => PlanFailure::Broken(other.to_string()),
        }
    }
}

/// Plans one prompt the way the prompt hook does, in its own session. A refusal is the
/// prompt's outcome; any other failure is an error of the run.
fn plan_one(
    runtime: &Runtime,
    workspace: &str,
    index: usize,
    labelled: &Labelled,
) -> BenchResult<PromptResult> {
    let started = Instant::now();
    let mut result = PromptResult {
        index,
        kind: labelled.kind,
        prompt: labelled.prompt,
        relevant: labelled.relevant,
        selected: Vec::new(),
        status: String::new(),
        abstention_code: None,
        refused: None,
        wall: Duration::ZERO,
    };
    match plan(runtime, workspace, index, labelled, &mut result) {
        Ok(()) => {}
        Err(PlanFailure::Refused(sentence)) => {
            result.status = "refused".to_owned();
            result.refused = Some(sentence);
        }
        Err(PlanFailure::Broken(sentence)) => {
            return Err(format!("prompt {index} ({:?}): {sentence}", labelled.prompt).into());
        }
    }
    result.wall = started.elapsed();
    Ok(result)
}

fn plan(
    runtime: &Runtime,
    workspace: &str,
    index: usize,
    labelled: &Labelled,
    result: &mut PromptResult,
) -> Result<(), PlanFailure> {
    let work = WorkRequest {
        session_id: format!("plan-quality-{index:04}"),
        workspace: workspace.to_owned(),
        prompt: labelled.prompt.to_owned(),
        signals: Vec::new(),
        languages: Vec::new(),
        requested_limit: REQUESTED_LIMIT,
    };
    let work_ref = runtime.observe_work(&work)?;
    let query = QueryRequest::new(&logical_id("query", &work_ref), &work_ref)?;
    let prepared = runtime.service().prepare(&query)?;
    let plan = prepared.prepared();
    result.selected = plan
        .selections()
        .iter()
        .map(|s| Selected {
            id: s.capability_id().to_owned(),
            actionability: s.actionability().to_owned(),
            matching_signals: s.matching_signals().to_vec(),
            relevant: labelled.relevant.contains(&s.capability_id()),
        })
        .collect();
    result.status = plan.status().to_owned();
    result.abstention_code = plan.abstention_code().map(str::to_owned);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The report.

/// `|` and line breaks would break a markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

impl Report {
    pub fn new(
        smoke: bool,
        catalog: GeneratedCatalog,
        results: Vec<PromptResult>,
        ingest_wall: Duration,
        plan_wall: Duration,
    ) -> Report {
        let metrics = Metrics::of(&results);
        let by_kind = Kind::ALL
            .iter()
            .map(|&kind| (kind, Metrics::of(results.iter().filter(|r| r.kind == kind))))
            .filter(|(_, m)| m.prompts > 0)
            .collect();
        let mut irrelevant: BTreeMap<&str, usize> = BTreeMap::new();
        for s in results.iter().flat_map(|r| &r.selected) {
            if !s.relevant {
                *irrelevant.entry(s.id.as_str()).or_default() += 1;
            }
        }
        let mut top_irrelevant: Vec<(String, usize)> = irrelevant
            .into_iter()
            .map(|(id, n)| (id.to_owned(), n))
            .collect();
        top_irrelevant.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top_irrelevant.truncate(TOP_IRRELEVANT);
        Report {
            smoke,
            catalog,
            results,
            metrics,
            by_kind,
            top_irrelevant,
            ingest_wall,
            plan_wall,
        }
    }

    pub fn misses(&self) -> impl Iterator<Item = &PromptResult> {
        self.results.iter().filter(|r| r.is_miss())
    }

    pub fn refused(&self) -> impl Iterator<Item = &PromptResult> {
        self.results.iter().filter(|r| r.refused.is_some())
    }

    /// The headline figures in a few lines.
    pub fn summary(&self) -> String {
        let m = &self.metrics;
        format!(
            "plan quality ({}, {} prompts, {} entries): recall@5 {}, precision {}, abstention \
             accuracy {}, mean selections {:.2}; {} misses, {} \
             refused",
            if self.smoke { "smoke" } else { "full set" },
            m.prompts,
            self.catalog.entries,
            m.recall_at_5.text(),
            m.precision.text(),
            m.abstention_accuracy.text(),
            m.mean_selections().unwrap_or(0.0),
            self.misses().count(),
            self.refused().count(),
        )
    }

    pub fn markdown(&self) -> String {
        let m = &self.metrics;
        let c = &self.catalog;
        let counts = |map: &BTreeMap<&str, usize>| {
            map.iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut out = format!(
            "# ctx plan quality\n\n\
             {} run: {} labelled prompts ({} with a fitting entry, {} with none) planned \
             in-process through Runtime::observe_work and QueryService::prepare, each its own \
             session, requested limit {REQUESTED_LIMIT}.\n\n\
             Catalog `{NAMESPACE}`: {} entries ({}; {}), catalog.json {} bytes, {} body files. \
             Ingest and runtime open {:.2} s; planning {:.2} s ({:.1} ms per prompt).\n\n\
             | figure | value | over |\n| --- | ---: | --- |\n\
             | recall@5 | {} | prompts with a fitting entry: at least one selection fits |\n\
             | precision | {} | all selections: the selection fits its prompt |\n\
             | abstention accuracy | {} | prompts with no fitting entry: nothing selected |\n\
             | mean selections per prompt | {:.2} | all prompts |\n\n",
            if self.smoke { "Smoke (--test)" } else { "Full" },
            m.prompts,
            m.recall_at_5.over,
            m.abstention_accuracy.over,
            c.entries,
            counts(&c.kinds),
            counts(&c.actionability),
            c.catalog_bytes,
            c.body_files,
            self.ingest_wall.as_secs_f64(),
            self.plan_wall.as_secs_f64(),
            self.plan_wall.as_secs_f64() * 1e3 / m.prompts.max(1) as f64,
            m.recall_at_5.text(),
            m.precision.text(),
            m.abstention_accuracy.text(),
            m.mean_selections().unwrap_or(0.0),
        );
        out.push_str(
            "## By kind of prompt\n\n\
             | kind | prompts | recall@5 | precision | abstention accuracy | mean selections |\n\
             | --- | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for (kind, k) in &self.by_kind {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.2} |\n",
                kind.as_str(),
                k.prompts,
                k.recall_at_5.text(),
                k.precision.text(),
                k.abstention_accuracy.text(),
                k.mean_selections().unwrap_or(0.0),
            ));
        }
        let misses: Vec<&PromptResult> = self.misses().collect();
        out.push_str(&format!(
            "\n## Misses ({})\n\n\
             A prompt with a fitting entry none of whose selections fits, or a prompt with no \
             fitting entry that got selections. Each selection shows its actionability and, in \
             brackets, the work tokens it matched.\n\n\
             | # | kind | prompt | selected | relevant |\n| ---: | --- | --- | --- | --- |\n",
            misses.len()
        ));
        for r in misses {
            let selected = if let Some(sentence) = &r.refused {
                format!("(refused: {sentence})")
            } else if r.selected.is_empty() {
                format!(
                    "(none: {}{})",
                    r.status,
                    r.abstention_code
                        .as_deref()
                        .map(|c| format!(", {c}"))
                        .unwrap_or_default()
                )
            } else {
                r.selected
                    .iter()
                    .map(|s| {
                        format!(
                            "{} ({}) [{}]",
                            s.id,
                            s.actionability,
                            s.matching_signals.join(", ")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("<br>")
            };
            let relevant = if r.relevant.is_empty() {
                "(none)".to_owned()
            } else {
                r.relevant.join(", ")
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                r.index,
                r.kind.as_str(),
                cell(r.prompt),
                cell(&selected),
                cell(&relevant)
            ));
        }
        let refused: Vec<&PromptResult> = self.refused().collect();
        out.push_str(&format!(
            "\n## Refused by the product path ({})\n\n\
             observe_work or prepare refused the prompt, so the person gets no plan; counted as \
             planned with no selection.\n\n\
             | # | kind | prompt | refusal |\n| ---: | --- | --- | --- |\n",
            refused.len()
        ));
        for r in refused {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                r.index,
                r.kind.as_str(),
                cell(r.prompt),
                cell(r.refused.as_deref().unwrap_or_default())
            ));
        }
        out.push_str(
            "\n## Most often selected where not relevant\n\n\
             | entry | times |\n| --- | ---: |\n",
        );
        for (id, n) in &self.top_irrelevant {
            out.push_str(&format!("| {id} | {n} |\n"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let c = &self.catalog;
        json!({
            "schema": REPORT_SCHEMA,
            "smoke": self.smoke,
            "requested_limit": REQUESTED_LIMIT,
            "catalog": {
                "namespace": NAMESPACE,
                "entries": c.entries,
                "kinds": c.kinds,
                "actionability": c.actionability,
                "catalog_bytes": c.catalog_bytes,
                "body_files": c.body_files,
                "body_bytes": c.body_bytes,
            },
            "ingest_wall_ms": self.ingest_wall.as_secs_f64() * 1e3,
            "plan_wall_ms": self.plan_wall.as_secs_f64() * 1e3,
            "metrics": self.metrics.to_json(),
            "refused": self.refused().count(),
            "by_kind": self.by_kind.iter().map(|(kind, m)| {
                let mut v = m.to_json();
                v["kind"] = json!(kind.as_str());
                v
            }).collect::<Vec<_>>(),
            "top_irrelevant": self.top_irrelevant.iter()
                .map(|(id, n)| json!({"id": id, "times": n}))
                .collect::<Vec<_>>(),
            "prompts": self.results.iter().map(|r| json!({
                "index": r.index,
                "kind": r.kind.as_str(),
                "prompt": r.prompt,
                "relevant": r.relevant,
                "status": r.status,
                "abstention_code": r.abstention_code,
                "refused": r.refused,
                "miss": r.is_miss(),
                "wall_ms": r.wall.as_secs_f64() * 1e3,
                "selected": r.selected.iter().map(|s| json!({
                    "id": s.id,
                    "actionability": s.actionability,
                    "matching_signals": s.matching_signals,
                    "relevant": s.relevant,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeSet;

    use super::*;

    /// Lowercased runs of ASCII letters and digits.
    fn words(text: &str) -> BTreeSet<String> {
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect()
    }

    /// Whether every hyphen-separated token of `id`'s name is a word of `prompt`.
    fn names(prompt: &str, id: &str) -> bool {
        let words = words(prompt);
        let name = id.split_once(':').map_or(id, |(_, n)| n);
        name.split('-').all(|t| words.contains(t))
    }

    fn entry(id: &str) -> Option<&'static Entry> {
        ENTRIES.iter().find(|e| e.id == id)
    }

    /// The labelled set is well formed: at least 100 prompts, at least 25 with no fitting
    /// entry, every relevant id an entry of the generated catalog, and every kind what it says.
    #[test]
    fn plan_quality_labelled_set_is_well_formed() {
        assert!(PROMPTS.len() >= 100, "{} prompts", PROMPTS.len());
        let no_fit = PROMPTS.iter().filter(|p| p.relevant.is_empty()).count();
        assert!(no_fit >= 25, "{no_fit} no-fit prompts");
        let mut seen = BTreeSet::new();
        let mut wrong = Vec::new();
        for p in PROMPTS {
            assert!(seen.insert(p.prompt), "duplicate prompt {:?}", p.prompt);
            assert_eq!(
                p.kind == Kind::NoFit,
                p.relevant.is_empty(),
                "{:?}: no-fit exactly when nothing is relevant",
                p.prompt
            );
            let unique: BTreeSet<&str> = p.relevant.iter().copied().collect();
            assert_eq!(unique.len(), p.relevant.len(), "{:?}", p.prompt);
            for id in p.relevant {
                assert!(entry(id).is_some(), "{:?}: {id} is no entry", p.prompt);
            }
            let named = p.relevant.iter().any(|id| names(p.prompt, id));
            match p.kind {
                Kind::ManualOnly
                    if !p
                        .relevant
                        .iter()
                        .all(|id| entry(id).is_some_and(|e| e.shape == Shape::Manual)) =>
                {
                    wrong.push(format!("{:?}: a relevant entry is not manual", p.prompt));
                }
                Kind::Entity if !named => {
                    wrong.push(format!("{:?} names no relevant entry", p.prompt));
                }
                Kind::Plain if named => {
                    wrong.push(format!(
                        "{:?} names a relevant entry: kind entity",
                        p.prompt
                    ));
                }
                _ => {}
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        for kind in Kind::ALL {
            assert!(
                PROMPTS.iter().filter(|p| p.kind == kind).count() >= 5,
                "fewer than 5 prompts of kind {}",
                kind.as_str()
            );
        }
        let smoke = prompt_indices(true);
        assert_eq!(smoke.len(), SMOKE_PROMPTS);
        assert!(smoke.iter().any(|&i| PROMPTS[i].relevant.is_empty()));
        assert_eq!(prompt_indices(false).len(), PROMPTS.len());
    }

    /// The catalog is written as its entries say and loads with the catalog's own loader (every
    /// body's digest, every tree's pack, every flag derived and compared, spec/catalog.md §3,
    /// §1.4, §7).
    #[test]
    fn plan_quality_catalog_generates_and_loads() {
        assert!(
            (200..=300).contains(&ENTRIES.len()),
            "{} entries",
            ENTRIES.len()
        );
        let ids: BTreeSet<&str> = ENTRIES.iter().map(|e| e.id).collect();
        assert_eq!(ids.len(), ENTRIES.len(), "duplicate ids");
        for e in ENTRIES {
            assert!(e.description.len() <= 200, "{}: label too long", e.id);
            assert!(
                e.description.contains("Use ") || e.shape == Shape::Manual,
                "{}: say when to use it",
                e.id
            );
            assert!(e.tags().len() <= 32, "{}", e.id);
        }
        for (a, b) in RELATED {
            assert!(ids.contains(a) && ids.contains(b) && a != b, "{a} - {b}");
        }
        let dir = tempfile::tempdir().unwrap();
        let catalog = dir.path().join("catalog");
        let generated = generate(&catalog).unwrap();
        let loaded = ctx_service::load_catalog_dir(&catalog).unwrap();
        let loaded_ids: BTreeSet<&str> = loaded
            .catalog()
            .entries()
            .iter()
            .map(|e| e.id.as_str())
            .collect();
        assert_eq!(loaded_ids, ids);
        assert_eq!(generated.entries, ENTRIES.len());
        for shape in ["load", "install", "manual"] {
            assert!(generated.actionability.get(shape).copied().unwrap_or(0) >= 10);
        }
    }

    /// A smoke run plans through the real path without a harness error, and every figure is
    /// consistent with its rows.
    #[test]
    fn plan_quality_smoke_run_plans_every_prompt() {
        let dir = tempfile::tempdir().unwrap();
        let report = run(&Config {
            smoke: true,
            dir: dir.path().to_path_buf(),
            keep: false,
        })
        .unwrap();
        assert_eq!(report.results.len(), SMOKE_PROMPTS);
        for r in &report.results {
            assert!(r.selected.len() <= usize::from(REQUESTED_LIMIT), "{r:?}");
            for s in &r.selected {
                assert!(entry(&s.id).is_some(), "{} is no entry", s.id);
            }
        }
        let m = &report.metrics;
        assert_eq!(m.prompts, SMOKE_PROMPTS);
        assert_eq!(
            m.recall_at_5.over + m.abstention_accuracy.over,
            SMOKE_PROMPTS
        );
        assert!(report.markdown().contains("## Misses"));
        assert_eq!(
            report.to_json()["prompts"].as_array().unwrap().len(),
            SMOKE_PROMPTS
        );
    }
}
