//! MCP server importers: the servers of a Claude Code `.mcp.json`, of the `[mcp_servers]` tables
//! of a Codex `config.toml`, and of an MCP Registry `server.json`, each made into a catalog entry
//! whose body is the `.mcp.json` fragment ctx installs (spec/mcp-import.md).
//!
//! Each server is handled alone, so one bad server never stops the others, and a literal secret
//! never reaches a body, a label or a finding: a catalog is shared, and a token written into one
//! is a token given to everyone who reads it (spec/mcp-import.md §4).

use std::collections::BTreeSet;

use ctx_model::{CapabilityKind, Json, JsonMap};

use super::{Finding, FindingSeverity, ImportedEntry, Provenance};

/// The largest source file an importer reads: a hand-written host config or a registry document
/// is a few kilobytes, so anything this large is not one (spec/mcp-import.md §5).
pub(crate) const MCP_SOURCE_MAX_BYTES: usize = 1024 * 1024;

/// The longest normalized server name: with the `mcp-server:` prefix the id stays within the
/// catalog's 128 characters (spec/catalog.md §1.2).
const SERVER_NAME_MAX_CHARS: usize = 100;

/// The catalog's label limit (spec/catalog.md §1.3).
const LABEL_MAX_BYTES: usize = 200;

/// The catalog's tag limit (spec/catalog.md §1.3).
const TAGS_MAX_PER_ENTRY: usize = 32;

/// How much of a source's own spelling (a server key) a finding quotes.
const QUOTED_MAX_CHARS: usize = 80;

/// Name endings that mark an environment variable or header as holding a secret, compared on the
/// upper-snake-cased name (spec/mcp-import.md §4).
const SECRET_NAME_SUFFIXES: [&str; 6] =
    ["_TOKEN", "_KEY", "_API_KEY", "_SECRET", "_PASSWORD", "_PAT"];

/// Prefixes of well-known credential formats: such a value is a secret whatever it is named
/// (spec/mcp-import.md §4).
const SECRET_VALUE_PREFIXES: [&str; 12] = [
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "sk-",
    "sk_live_",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "npm_",
    "hf_",
];

/// Authorization schemes: a value that is a scheme followed only by references holds no literal.
const AUTH_SCHEMES: [&str; 3] = ["bearer", "basic", "token"];

/// Runners ctx writes as a stdio server's `command` for a registry package (spec/mcp-import.md §3).
const RUNNERS: [&str; 3] = ["npx", "uvx", "docker"];

/// Keys of an `.mcp.json` entry ctx installs, by transport (spec/mcp-import.md §1).
const STDIO_KEYS: [&str; 5] = ["type", "command", "args", "env", "timeout"];
const REMOTE_KEYS: [&str; 6] = [
    "type",
    "url",
    "headers",
    "oauth",
    "headersHelper",
    "timeout",
];
const OAUTH_KEYS: [&str; 4] = [
    "clientId",
    "callbackPort",
    "authServerMetadataUrl",
    "scopes",
];

/// Codex settings the hosts treat differently, so a body for both cannot carry them
/// (spec/mcp-import.md §2).
const CONFIG_TOML_HOST_SPECIFIC: [&str; 7] = [
    "cwd",
    "startup_timeout_sec",
    "startup_timeout_ms",
    "tool_timeout_sec",
    "enabled_tools",
    "disabled_tools",
    "required",
];

/// What is wrong with a source or a server; the text is the finding's `problem`.
#[derive(Debug, thiserror::Error)]
enum Problem {
    #[error("the file is {size} bytes, more than the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("{detail}")]
    Unparseable { detail: String },
    #[error("the file has no \"mcpServers\" object")]
    NoMcpServers,
    #[error("the file has no [mcp_servers] table")]
    NoConfigTomlServers,
    #[error("the file's \"mcp_servers\" is {found}, not a table")]
    ConfigTomlServersNotTable { found: &'static str },
    #[error("the file is {found}, not a server.json object")]
    NotServerJson { found: &'static str },
    #[error("the file has no \"name\" string")]
    NoRegistryName,
    #[error("the server name {raw} is not a catalog name")]
    NameChanged { raw: String },
    #[error("the server name {raw} keeps no character a catalog name allows")]
    NameEmpty { raw: String },
    #[error(
        "the server name {raw} normalizes to \"{name}\", which an earlier server of this file has"
    )]
    NameTaken { raw: String, name: String },
    #[error("the server's entry is {found}, not an object")]
    NotObject { found: &'static str },
    #[error("the key \"{key}\" is {found}, where {expected} is expected")]
    WrongType {
        key: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error("the server has type \"ws\", which Codex cannot run")]
    Websocket,
    #[error("the server has type \"{kind}\", which is not stdio, http or sse")]
    UnknownType { kind: String },
    #[error("the server has a \"url\" but no \"type\" (http or sse)")]
    UrlWithoutType,
    #[error("the stdio server has no \"command\"")]
    NoCommand,
    #[error("the {transport} server has no \"url\"")]
    NoUrl { transport: &'static str },
    #[error("the key \"{key}\" is not one ctx installs for a {transport} server")]
    DroppedKey {
        key: String,
        transport: &'static str,
    },
    #[error(
        "the setting \"{key}\" is not carried over because Claude Code and Codex treat it differently"
    )]
    HostSpecific { key: String },
    #[error("the server is disabled in the source (enabled = false)")]
    Disabled,
    #[error("the server has both \"command\" and \"url\", so its transport is ambiguous")]
    BothTransports,
    #[error("the server has neither \"command\" nor \"url\" (invalid transport)")]
    NoTransport,
    #[error("the setting \"bearer_token\" holds a literal token, which Codex refuses")]
    InlineBearer,
    #[error("the environment variable {name} holds a literal secret")]
    SecretEnv { name: String },
    #[error("the header {name} holds a literal secret")]
    SecretHeader { name: String },
    #[error("the url holds a password")]
    UrlPassword,
    #[error("argument {index}{how} holds a literal secret")]
    SecretArgument { index: usize, how: String },
    #[error("package {index} is not an object with an \"identifier\" and a \"registryType\"")]
    PackageMalformed { index: usize },
    #[error(
        "the package \"{identifier}\" is a {registry} package, which no host runs without a \
         download ctx does not make"
    )]
    PackageUnrunnable {
        identifier: String,
        registry: String,
    },
    #[error(
        "the package \"{identifier}\" has the registry type \"{registry}\", which ctx does not know"
    )]
    PackageUnknownRegistry {
        identifier: String,
        registry: String,
    },
    #[error(
        "the package \"{identifier}\" serves {transport}, which a host reaches only after \
         something else starts the package"
    )]
    PackageNotStdio {
        identifier: String,
        transport: String,
    },
    #[error("the runtimeHint \"{hint}\" is not one of npx, uvx or docker")]
    RuntimeHint { hint: String },
    #[error("the optional environment {noun} {names} {verb} no default")]
    OptionalEnv {
        noun: &'static str,
        names: String,
        verb: &'static str,
    },
    #[error("environment variable {index} has no \"name\" string")]
    EnvNoName { index: usize },
    #[error("argument {index} is not a positional or named argument with the fields it needs")]
    ArgMalformed { index: usize },
    #[error("the required argument \"{arg}\" has no value")]
    ArgRequired { arg: String },
    #[error("the optional argument \"{arg}\" has no value")]
    ArgOptional { arg: String },
    #[error("the argument \"{arg}\" is secret")]
    ArgSecret { arg: String },
    #[error("remote {index} is not a streamable-http or sse remote with a \"url\"")]
    RemoteUnusable { index: usize },
    #[error("header {index} of the remote has no \"name\" string")]
    HeaderNoName { index: usize },
    #[error("the server has no npm, pypi or oci package and no remote ctx can install")]
    NothingToRun,
}

/// The findings of one source file.
struct Report<'a> {
    path: &'a str,
    findings: Vec<Finding>,
}

impl<'a> Report<'a> {
    fn new(path: &'a str) -> Self {
        Report {
            path,
            findings: Vec::new(),
        }
    }

    fn push(
        &mut self,
        severity: FindingSeverity,
        entry: Option<&str>,
        problem: &Problem,
        action: &str,
    ) {
        self.findings.push(Finding {
            severity,
            path: self.path.to_owned(),
            entry: entry.map(str::to_owned),
            problem: problem.to_string(),
            action: action.to_owned(),
        });
    }

    fn refuse_file(mut self, problem: &Problem) -> (Vec<ImportedEntry>, Vec<Finding>) {
        self.push(FindingSeverity::Refused, None, problem, "file refused");
        (Vec::new(), self.findings)
    }

    fn warnings(&mut self, name: &str, notes: Vec<(Problem, String)>) {
        let id = server_id(name);
        for (problem, action) in notes {
            self.push(FindingSeverity::Warning, Some(&id), &problem, &action);
        }
    }
}

/// Warnings gathered while a server is built: (problem, action).
type Notes = Vec<(Problem, String)>;

fn server_id(name: &str) -> String {
    format!("mcp-server:{name}")
}

/// A source's own spelling as a finding quotes it: escaped, and cut so a finding stays a line.
fn quoted(raw: &str) -> String {
    let escaped: String = raw.escape_debug().collect();
    match escaped.char_indices().nth(QUOTED_MAX_CHARS) {
        Some((cut, _)) => format!("\"{}…\"", &escaped[..cut]),
        None => format!("\"{escaped}\""),
    }
}

fn described(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Int(_) | Json::Float(_) => "a number",
        Json::Str(_) => "a string",
        Json::Arr(_) => "a list",
        Json::Obj(_) => "an object",
    }
}

fn wrong(key: &str, value: &Json, expected: &'static str) -> Problem {
    Problem::WrongType {
        key: key.to_owned(),
        found: described(value),
        expected,
    }
}

fn string_of(key: &str, value: &Json) -> Result<String, Problem> {
    match value {
        Json::Str(s) if !s.trim().is_empty() => Ok(s.clone()),
        _ => Err(wrong(key, value, "a non-empty string")),
    }
}

fn strings_of(key: &str, value: &Json) -> Result<Vec<Json>, Problem> {
    match value {
        Json::Arr(items) if items.iter().all(|i| matches!(i, Json::Str(_))) => Ok(items.clone()),
        _ => Err(wrong(key, value, "a list of strings")),
    }
}

fn string_map_of(key: &str, value: &Json) -> Result<JsonMap, Problem> {
    match value {
        Json::Obj(map) if map.values().all(|v| matches!(v, Json::Str(_))) => Ok(map.clone()),
        _ => Err(wrong(key, value, "an object of strings")),
    }
}

/// The catalog name for a server key (spec/mcp-import.md §5): ASCII-lowercased, `_` and spaces
/// made `-`, other characters outside `[a-z0-9._@-]` dropped, leading non-alphanumerics dropped,
/// at most [`SERVER_NAME_MAX_CHARS`].
fn normalized_name(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars().map(|c| c.to_ascii_lowercase()) {
        match c {
            'a'..='z' | '0'..='9' | '.' | '@' | '-' => out.push(c),
            '_' | ' ' => out.push('-'),
            _ => {}
        }
    }
    out.trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .chars()
        .take(SERVER_NAME_MAX_CHARS)
        .collect()
}

/// Normalizes a server's name and records what that changed; `None` when the server is refused
/// (no usable name, or a name an earlier server of the file has).
fn server_name(report: &mut Report<'_>, raw: &str, seen: &mut BTreeSet<String>) -> Option<String> {
    let name = normalized_name(raw);
    if name.is_empty() {
        let problem = Problem::NameEmpty { raw: quoted(raw) };
        report.push(FindingSeverity::Refused, None, &problem, "server refused");
        return None;
    }
    let id = server_id(&name);
    if !seen.insert(name.clone()) {
        let problem = Problem::NameTaken {
            raw: quoted(raw),
            name,
        };
        report.push(
            FindingSeverity::Refused,
            Some(&id),
            &problem,
            "server refused",
        );
        return None;
    }
    if name != raw {
        let problem = Problem::NameChanged { raw: quoted(raw) };
        let action = format!("normalized to \"{name}\"");
        report.push(FindingSeverity::Warning, Some(&id), &problem, &action);
    }
    Some(name)
}

/// `my-server.v2` → `MY_SERVER_V2`: ASCII letters and digits upper-cased, every run of other
/// characters one `_`, none at either end.
fn upper_snake(text: &str) -> String {
    let mut out = String::new();
    let mut gap = false;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if gap && !out.is_empty() {
                out.push('_');
            }
            gap = false;
            out.push(c.to_ascii_uppercase());
        } else {
            gap = true;
        }
    }
    if out.is_empty() {
        "SECRET".to_owned()
    } else {
        out
    }
}

/// What is left of a value once `${…}` references and a leading authorization scheme are taken
/// out; empty when the value carries no literal.
fn literal_part(value: &str) -> String {
    let mut rest = value.trim();
    if let Some((word, after)) = rest.split_once(' ')
        && AUTH_SCHEMES.iter().any(|s| word.eq_ignore_ascii_case(s))
    {
        rest = after;
    }
    let mut out = String::new();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        match rest[start..].find('}') {
            Some(end) => rest = &rest[start + end + 1..],
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.trim().to_owned()
}

fn secret_name(name: &str) -> bool {
    let name = upper_snake(name);
    name == "AUTHORIZATION"
        || SECRET_NAME_SUFFIXES
            .iter()
            .any(|s| name.ends_with(s) || name == s[1..])
}

fn bearer(value: &str) -> bool {
    value
        .trim_start()
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("bearer "))
}

/// Whether an env or header value named `name` holds a literal secret (spec/mcp-import.md §4).
fn literal_secret(name: &str, value: &str) -> bool {
    let literal = literal_part(value);
    !literal.is_empty()
        && (secret_name(name)
            || bearer(value)
            || SECRET_VALUE_PREFIXES.iter().any(|p| literal.starts_with(p)))
}

/// The URL with its password replaced by `${<SERVER>_PASSWORD}`; `None` when it has no literal
/// password.
fn without_password(url: &str, server: &str) -> Option<String> {
    let scheme_end = url.find("://")? + 3;
    let rest = url.get(scheme_end..)?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (userinfo, host) = rest.get(..authority_end)?.rsplit_once('@')?;
    let (user, password) = userinfo.split_once(':')?;
    if literal_part(password).is_empty() {
        return None;
    }
    Some(format!(
        "{}{user}:${{{}_PASSWORD}}@{host}{}",
        url.get(..scheme_end)?,
        upper_snake(server),
        rest.get(authority_end..)?
    ))
}

/// Replaces every literal secret of an entry's `env`, `headers` and `url` by a reference, with a
/// warning that names what was replaced and never the value.
fn scrub(name: &str, entry: &mut JsonMap, notes: &mut Notes) {
    if let Some(Json::Obj(env)) = entry.get_mut("env") {
        for (key, value) in env.iter_mut() {
            if let Json::Str(text) = value
                && literal_secret(key, text)
            {
                let reference = format!("${{{key}}}");
                notes.push((
                    Problem::SecretEnv { name: key.clone() },
                    format!("replaced by \"{reference}\""),
                ));
                *value = Json::Str(reference);
            }
        }
    }
    if let Some(Json::Obj(headers)) = entry.get_mut("headers") {
        for (key, value) in headers.iter_mut() {
            if let Json::Str(text) = value
                && literal_secret(key, text)
            {
                let reference = if key.eq_ignore_ascii_case("authorization") || bearer(text) {
                    format!("Bearer ${{{}_TOKEN}}", upper_snake(name))
                } else {
                    format!("${{{}}}", upper_snake(key))
                };
                notes.push((
                    Problem::SecretHeader { name: key.clone() },
                    format!("replaced by \"{reference}\""),
                ));
                *value = Json::Str(reference);
            }
        }
    }
    if let Some(Json::Arr(args)) = entry.get_mut("args") {
        scrub_arguments(name, args, notes);
    }
    if let Some(Json::Str(url)) = entry.get_mut("url")
        && let Some(safe) = without_password(url, name)
    {
        notes.push((
            Problem::UrlPassword,
            format!(
                "the password replaced by \"${{{}_PASSWORD}}\"",
                upper_snake(name)
            ),
        ));
        *url = safe;
    }
}

/// Replaces literal secrets among a stdio server's arguments (spec/mcp-import.md §4): the value
/// after a flag with a secret's name (`--api-key VALUE`), the value of `--flag=VALUE`, and any
/// argument in a well-known credential format. The reference is `${<SERVER>_<FLAG>}`, or
/// `${<SERVER>_TOKEN}` for an argument without a flag. Arguments are numbered from 1.
fn scrub_arguments(server: &str, args: &mut [Json], notes: &mut Notes) {
    let mut after: Option<String> = None;
    for (i, arg) in args.iter_mut().enumerate() {
        let flag = after.take();
        let Json::Str(text) = arg else {
            continue;
        };
        let reference = |flag: &str| format!("${{{}_{}}}", upper_snake(server), upper_snake(flag));
        let known = |value: &str| {
            let literal = literal_part(value);
            !literal.is_empty() && SECRET_VALUE_PREFIXES.iter().any(|p| literal.starts_with(p))
        };
        let replacement = if let Some(flag) = flag
            && !text.starts_with('-')
            && !literal_part(text).is_empty()
        {
            Some((reference(&flag), format!(" (after --{flag})")))
        } else if let Some(body) = text.strip_prefix("--")
            && let Some((flag, value)) = body.split_once('=')
            && (secret_name(flag) || known(value))
            && !literal_part(value).is_empty()
        {
            Some((
                format!("--{flag}={}", reference(flag)),
                format!(" (--{flag}=…)"),
            ))
        } else if !text.starts_with('-') && known(text) {
            Some((reference("token"), String::new()))
        } else {
            if let Some(flag) = text.strip_prefix("--")
                && !flag.contains('=')
                && secret_name(flag)
            {
                after = Some(flag.to_owned());
            }
            None
        };
        if let Some((safe, how)) = replacement {
            let shown = safe
                .rsplit_once('=')
                .map_or(safe.as_str(), |(_, reference)| reference)
                .to_owned();
            notes.push((
                Problem::SecretArgument { index: i + 1, how },
                format!("replaced by \"{shown}\""),
            ));
            *text = safe;
        }
    }
}

/// The host of a URL, without user information or port.
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split_inclusive(']').next()?
    } else {
        host.split(':').next()?
    };
    (!host.is_empty()).then_some(host)
}

/// One line of at most [`LABEL_MAX_BYTES`], cut at a character boundary; `None` when empty.
fn one_line(text: &str) -> Option<String> {
    let line = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut end = line.len().min(LABEL_MAX_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let label = line[..end].trim_end();
    (!label.is_empty()).then(|| label.to_owned())
}

fn default_label(name: &str, entry: &JsonMap) -> String {
    let base = format!("MCP server {name}");
    let detail = match (entry.get("command"), entry.get("url")) {
        (Some(Json::Str(command)), _) => Some(command.as_str()),
        (_, Some(Json::Str(url))) => url_host(url),
        _ => None,
    };
    let text = match detail {
        Some(detail) => format!("{base} ({detail})"),
        None => base.clone(),
    };
    one_line(&text).unwrap_or(base)
}

fn tags(name: &str, registry: Option<&str>) -> Vec<String> {
    let mut tags: Vec<String> = ["mcp"]
        .into_iter()
        .chain(registry)
        .map(str::to_owned)
        .collect();
    let tokens: BTreeSet<&str> = name
        .split(['-', '.'])
        .map(|t| t.trim_start_matches(|c: char| !c.is_ascii_alphanumeric()))
        .filter(|t| !t.is_empty())
        .collect();
    for token in tokens {
        if tags.len() >= TAGS_MAX_PER_ENTRY {
            break;
        }
        if !tags.iter().any(|t| t == token) {
            tags.push(token.to_owned());
        }
    }
    tags.sort();
    tags
}

/// What a format's builder hands to [`finish`] besides the entry.
#[derive(Default)]
struct Extra {
    description: Option<String>,
    registry: Option<&'static str>,
    version: Option<String>,
}

/// Scrubs secrets, then makes the catalog entry: label, tags, canonical body, provenance.
fn finish(
    report: &mut Report<'_>,
    name: &str,
    mut entry: JsonMap,
    extra: Extra,
    mut notes: Notes,
) -> ImportedEntry {
    scrub(name, &mut entry, &mut notes);
    report.warnings(name, notes);
    let label = extra
        .description
        .as_deref()
        .and_then(one_line)
        .unwrap_or_else(|| default_label(name, &entry));
    let servers = Json::object([(name, Json::Obj(entry))]);
    let body = Json::object([("mcpServers", servers)]).to_cj().into_bytes();
    ImportedEntry {
        kind: CapabilityKind::McpServer,
        name: name.to_owned(),
        label,
        tags: tags(name, extra.registry),
        body,
        tree: None,
        provenance: Provenance {
            path: report.path.to_owned(),
            plugin: None,
            marketplace: None,
            version: extra.version,
        },
    }
}

/// Runs one server's builder and records its outcome.
fn build_one(
    report: &mut Report<'_>,
    entries: &mut Vec<ImportedEntry>,
    name: &str,
    build: impl FnOnce(&mut Notes) -> Result<(JsonMap, Extra), Problem>,
) {
    let mut notes = Notes::new();
    match build(&mut notes) {
        Ok((entry, extra)) => entries.push(finish(report, name, entry, extra, notes)),
        Err(problem) => {
            report.warnings(name, notes);
            let id = server_id(name);
            report.push(
                FindingSeverity::Refused,
                Some(&id),
                &problem,
                "server refused",
            );
        }
    }
}

fn too_large(report: Report<'_>, text: &str) -> Option<(Vec<ImportedEntry>, Vec<Finding>)> {
    (text.len() > MCP_SOURCE_MAX_BYTES).then(|| {
        report.refuse_file(&Problem::TooLarge {
            size: text.len(),
            limit: MCP_SOURCE_MAX_BYTES,
        })
    })
}

/// The servers of a Claude Code `.mcp.json` (spec/mcp-import.md §1).
pub(crate) fn import_mcp_json(path: &str, text: &str) -> (Vec<ImportedEntry>, Vec<Finding>) {
    if let Some(refused) = too_large(Report::new(path), text) {
        return refused;
    }
    let report = Report::new(path);
    let doc = match Json::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            return report.refuse_file(&Problem::Unparseable {
                detail: e.to_string(),
            });
        }
    };
    let Some(servers) = doc.get("mcpServers").and_then(Json::as_obj) else {
        return report.refuse_file(&Problem::NoMcpServers);
    };
    let mut report = report;
    let mut entries = Vec::new();
    let mut seen = BTreeSet::new();
    for (raw, value) in servers {
        let Some(name) = server_name(&mut report, raw, &mut seen) else {
            continue;
        };
        build_one(&mut report, &mut entries, &name, |notes| {
            Ok((mcp_json_entry(value, notes)?, Extra::default()))
        });
    }
    (entries, report.findings)
}

fn mcp_json_entry(value: &Json, notes: &mut Notes) -> Result<JsonMap, Problem> {
    let Json::Obj(fields) = value else {
        return Err(Problem::NotObject {
            found: described(value),
        });
    };
    let kind = fields
        .get("type")
        .map(|t| string_of("type", t))
        .transpose()?;
    let transport = match kind.as_deref() {
        None if !fields.contains_key("command") && fields.contains_key("url") => {
            return Err(Problem::UrlWithoutType);
        }
        None | Some("stdio") => "stdio",
        Some("http") => "http",
        Some("sse") => "sse",
        Some("ws") => return Err(Problem::Websocket),
        Some(other) => {
            return Err(Problem::UnknownType {
                kind: other.to_owned(),
            });
        }
    };
    let allowed: &[&str] = if transport == "stdio" {
        &STDIO_KEYS
    } else {
        &REMOTE_KEYS
    };
    let mut entry = JsonMap::new();
    for (key, value) in fields {
        if !allowed.contains(&key.as_str()) {
            notes.push((
                Problem::DroppedKey {
                    key: key.clone(),
                    transport,
                },
                "dropped".to_owned(),
            ));
            continue;
        }
        let kept = match key.as_str() {
            "type" | "command" | "url" | "headersHelper" => Json::Str(string_of(key, value)?),
            "args" => Json::Arr(strings_of(key, value)?),
            "env" | "headers" => Json::Obj(string_map_of(key, value)?),
            "timeout" => match value {
                Json::Int(n) if *n >= 0 => value.clone(),
                _ => return Err(wrong(key, value, "a non-negative integer")),
            },
            _ => oauth(value, transport, notes)?,
        };
        entry.insert(key.clone(), kept);
    }
    if transport == "stdio" && !entry.contains_key("command") {
        return Err(Problem::NoCommand);
    }
    if transport != "stdio" && !entry.contains_key("url") {
        return Err(Problem::NoUrl { transport });
    }
    Ok(entry)
}

/// An `oauth` object with only the keys Claude Code documents: an unknown key could carry a
/// client secret, which has no place in a catalog.
fn oauth(value: &Json, transport: &'static str, notes: &mut Notes) -> Result<Json, Problem> {
    let Json::Obj(fields) = value else {
        return Err(wrong("oauth", value, "an object"));
    };
    let mut kept = JsonMap::new();
    for (key, value) in fields {
        if OAUTH_KEYS.contains(&key.as_str()) {
            kept.insert(key.clone(), value.clone());
        } else {
            notes.push((
                Problem::DroppedKey {
                    key: format!("oauth.{key}"),
                    transport,
                },
                "dropped".to_owned(),
            ));
        }
    }
    Ok(Json::Obj(kept))
}

/// A TOML value as JSON (a datetime as its text, a non-finite float as its text).
fn toml_value_json(value: &toml_edit::Value) -> Json {
    use toml_edit::Value as V;
    match value {
        V::String(s) => Json::str(s.value().as_str()),
        V::Integer(i) => Json::Int(*i.value()),
        V::Float(f) => Json::float(*f.value()).unwrap_or_else(|| Json::str(f.to_string())),
        V::Boolean(b) => Json::Bool(*b.value()),
        V::Datetime(d) => Json::str(d.value().to_string()),
        V::Array(a) => Json::Arr(a.iter().map(toml_value_json).collect()),
        V::InlineTable(t) => Json::object(t.iter().map(|(k, v)| (k, toml_value_json(v)))),
    }
}

fn toml_item_json(item: &toml_edit::Item) -> Json {
    use toml_edit::Item;
    match item {
        Item::None => Json::Null,
        Item::Value(v) => toml_value_json(v),
        Item::Table(t) => Json::object(t.iter().map(|(k, v)| (k, toml_item_json(v)))),
        Item::ArrayOfTables(a) => Json::Arr(
            a.iter()
                .map(|t| Json::object(t.iter().map(|(k, v)| (k, toml_item_json(v)))))
                .collect(),
        ),
    }
}

/// The parser's sentence with the place it names as a line and column (the parser's own display
/// quotes the source line, which may hold a secret).
fn toml_error(text: &str, error: &toml_edit::TomlError) -> String {
    let message = error
        .message()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let start = error.span().map_or(0, |s| s.start);
    match text.get(..start) {
        Some(before) => {
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("the TOML is not valid at line {line}, column {column}: {message}")
        }
        None => format!("the TOML is not valid: {message}"),
    }
}

/// The `[mcp_servers.<name>]` tables of a Codex `config.toml` (spec/mcp-import.md §2); every
/// other table of the file is ignored.
pub(crate) fn import_config_toml(path: &str, text: &str) -> (Vec<ImportedEntry>, Vec<Finding>) {
    if let Some(refused) = too_large(Report::new(path), text) {
        return refused;
    }
    let mut report = Report::new(path);
    let doc = match text.parse::<toml_edit::DocumentMut>() {
        Ok(doc) => doc,
        Err(e) => {
            return report.refuse_file(&Problem::Unparseable {
                detail: toml_error(text, &e),
            });
        }
    };
    let Some(item) = doc.get("mcp_servers") else {
        report.push(
            FindingSeverity::Warning,
            None,
            &Problem::NoConfigTomlServers,
            "nothing imported",
        );
        return (Vec::new(), report.findings);
    };
    let Some(servers) = item.as_table_like() else {
        let found = described(&toml_item_json(item));
        return report.refuse_file(&Problem::ConfigTomlServersNotTable { found });
    };
    let mut entries = Vec::new();
    let mut seen = BTreeSet::new();
    for (raw, item) in servers.iter() {
        let Some(name) = server_name(&mut report, raw, &mut seen) else {
            continue;
        };
        let value = toml_item_json(item);
        build_one(&mut report, &mut entries, &name, |notes| {
            Ok((config_toml_entry(&name, &value, notes)?, Extra::default()))
        });
    }
    (entries, report.findings)
}

fn config_toml_entry(name: &str, value: &Json, notes: &mut Notes) -> Result<JsonMap, Problem> {
    let Json::Obj(fields) = value else {
        return Err(Problem::NotObject {
            found: described(value),
        });
    };
    match fields.get("enabled") {
        None | Some(Json::Bool(true)) => {}
        Some(Json::Bool(false)) => return Err(Problem::Disabled),
        Some(other) => return Err(wrong("enabled", other, "a boolean")),
    }
    let transport = match (fields.contains_key("command"), fields.contains_key("url")) {
        (true, true) => return Err(Problem::BothTransports),
        (false, false) => return Err(Problem::NoTransport),
        (true, false) => "stdio",
        (false, true) => "http",
    };
    let mut entry = JsonMap::new();
    let mut env = JsonMap::new();
    let mut headers = JsonMap::new();
    if transport == "http" {
        entry.insert("type".to_owned(), Json::str("http"));
    }
    for (key, value) in fields {
        match (transport, key.as_str()) {
            (_, "enabled") => {}
            ("stdio", "command") | ("http", "url") => {
                entry.insert(key.clone(), Json::Str(string_of(key, value)?));
            }
            ("stdio", "args") => {
                entry.insert(key.clone(), Json::Arr(strings_of(key, value)?));
            }
            ("stdio", "env") => env.extend(string_map_of(key, value)?),
            ("stdio", "env_vars") => {
                for var in forwarded(value)? {
                    env.insert(var.clone(), Json::str(format!("${{{var}}}")));
                }
            }
            ("http", "bearer_token_env_var") => {
                let var = string_of(key, value)?;
                headers.insert(
                    "Authorization".to_owned(),
                    Json::str(format!("Bearer ${{{var}}}")),
                );
            }
            ("http", "bearer_token") => {
                let reference = format!("Bearer ${{{}_TOKEN}}", upper_snake(name));
                notes.push((
                    Problem::InlineBearer,
                    format!("replaced by the header Authorization: \"{reference}\""),
                ));
                headers
                    .entry("Authorization".to_owned())
                    .or_insert(Json::Str(reference));
            }
            ("http", "http_headers") => headers.extend(string_map_of(key, value)?),
            ("http", "env_http_headers") => {
                for (header, var) in string_map_of(key, value)? {
                    let var = string_of(&format!("{key}.{header}"), &var)?;
                    headers.insert(header, Json::str(format!("${{{var}}}")));
                }
            }
            (_, key) if CONFIG_TOML_HOST_SPECIFIC.contains(&key) => notes.push((
                Problem::HostSpecific {
                    key: key.to_owned(),
                },
                "dropped".to_owned(),
            )),
            (transport, key) => notes.push((
                Problem::DroppedKey {
                    key: key.to_owned(),
                    transport,
                },
                "dropped".to_owned(),
            )),
        }
    }
    if !env.is_empty() {
        entry.insert("env".to_owned(), Json::Obj(env));
    }
    if !headers.is_empty() {
        entry.insert("headers".to_owned(), Json::Obj(headers));
    }
    Ok(entry)
}

/// Codex `env_vars`: names, or (newer versions) tables with a `name`.
fn forwarded(value: &Json) -> Result<Vec<String>, Problem> {
    let expected = "a list of names or of tables with a \"name\"";
    let Json::Arr(items) = value else {
        return Err(wrong("env_vars", value, expected));
    };
    items
        .iter()
        .map(|item| match item {
            Json::Str(name) if !name.is_empty() => Ok(name.clone()),
            Json::Obj(_) => match item.get("name") {
                Some(Json::Str(name)) if !name.is_empty() => Ok(name.clone()),
                _ => Err(wrong("env_vars", item, expected)),
            },
            _ => Err(wrong("env_vars", item, expected)),
        })
        .collect()
}

/// The server of an MCP Registry `server.json` (spec/mcp-import.md §3): the first npm, pypi or
/// oci package with a stdio transport, else the first usable remote.
pub(crate) fn import_server_json(path: &str, text: &str) -> (Vec<ImportedEntry>, Vec<Finding>) {
    if let Some(refused) = too_large(Report::new(path), text) {
        return refused;
    }
    let mut report = Report::new(path);
    let doc = match Json::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            return report.refuse_file(&Problem::Unparseable {
                detail: e.to_string(),
            });
        }
    };
    if doc.as_obj().is_none() {
        let found = described(&doc);
        return report.refuse_file(&Problem::NotServerJson { found });
    }
    let Some(full_name) = doc.get_str("name") else {
        return report.refuse_file(&Problem::NoRegistryName);
    };
    let raw = full_name.rsplit('/').next().unwrap_or(full_name);
    let mut entries = Vec::new();
    if let Some(name) = server_name(&mut report, raw, &mut BTreeSet::new()) {
        build_one(&mut report, &mut entries, &name, |notes| {
            registry_entry(&name, &doc, notes)
        });
    }
    (entries, report.findings)
}

fn registry_entry(name: &str, doc: &Json, notes: &mut Notes) -> Result<(JsonMap, Extra), Problem> {
    let description = doc
        .get_str("description")
        .and_then(one_line)
        .or_else(|| doc.get_str("title").and_then(one_line));
    let server_version = doc.get_str("version").map(str::to_owned);
    let packages = match doc.get("packages") {
        None => &[][..],
        Some(Json::Arr(items)) => items.as_slice(),
        Some(other) => return Err(wrong("packages", other, "a list")),
    };
    for (index, package) in packages.iter().enumerate() {
        let (Some(identifier), Some(registry)) = (
            package.get_str("identifier"),
            package.get_str("registryType"),
        ) else {
            notes.push((
                Problem::PackageMalformed { index },
                "package not imported".to_owned(),
            ));
            continue;
        };
        let (identifier, registry) = (identifier.to_owned(), registry.to_owned());
        let skipped = match registry.as_str() {
            "npm" | "pypi" | "oci" => match package.get("transport").map(|t| t.get_str("type")) {
                None | Some(Some("stdio")) => None,
                Some(transport) => Some(Problem::PackageNotStdio {
                    identifier,
                    transport: transport.unwrap_or("an unnamed transport").to_owned(),
                }),
            },
            "nuget" | "mcpb" => Some(Problem::PackageUnrunnable {
                identifier,
                registry,
            }),
            _ => Some(Problem::PackageUnknownRegistry {
                identifier,
                registry,
            }),
        };
        if let Some(problem) = skipped {
            notes.push((problem, "package not imported".to_owned()));
            continue;
        }
        let (entry, tag, package_version) = package_entry(package, notes)?;
        let extra = Extra {
            description,
            registry: Some(tag),
            version: server_version.or(package_version),
        };
        return Ok((entry, extra));
    }
    let remotes = match doc.get("remotes") {
        None => &[][..],
        Some(Json::Arr(items)) => items.as_slice(),
        Some(other) => return Err(wrong("remotes", other, "a list")),
    };
    for (index, remote) in remotes.iter().enumerate() {
        let kind = match remote.get_str("type") {
            Some("streamable-http") => "http",
            Some("sse") => "sse",
            _ => "",
        };
        let url = remote.get_str("url").filter(|u| !u.trim().is_empty());
        let (false, Some(url)) = (kind.is_empty(), url) else {
            notes.push((
                Problem::RemoteUnusable { index },
                "remote not imported".to_owned(),
            ));
            continue;
        };
        let mut entry = JsonMap::new();
        entry.insert("type".to_owned(), Json::str(kind));
        entry.insert("url".to_owned(), Json::str(url));
        let headers = remote_headers(name, remote.get("headers"), notes)?;
        if !headers.is_empty() {
            entry.insert("headers".to_owned(), Json::Obj(headers));
        }
        let extra = Extra {
            description,
            registry: None,
            version: server_version,
        };
        return Ok((entry, extra));
    }
    Err(Problem::NothingToRun)
}

fn flag(value: &Json, key: &str) -> bool {
    value.get(key).and_then(Json::as_bool).unwrap_or(false)
}

/// A package as a stdio entry: the runner as `command`, the package and its arguments as `args`,
/// and its environment variables as `env` (spec/mcp-import.md §3).
fn package_entry(
    package: &Json,
    notes: &mut Notes,
) -> Result<(JsonMap, &'static str, Option<String>), Problem> {
    let identifier = package.get_str("identifier").unwrap_or_default();
    let registry = package.get_str("registryType").unwrap_or_default();
    let version = package.get_str("version").filter(|v| !v.is_empty());
    let (default_runner, tag) = match registry {
        "npm" => ("npx", "npm"),
        "pypi" => ("uvx", "pypi"),
        _ => ("docker", "docker"),
    };
    let runner = match package.get_str("runtimeHint") {
        None => default_runner,
        Some(hint) => match RUNNERS.iter().find(|r| **r == hint) {
            Some(runner) => runner,
            None => {
                notes.push((
                    Problem::RuntimeHint {
                        hint: hint.to_owned(),
                    },
                    format!("used \"{default_runner}\""),
                ));
                default_runner
            }
        },
    };
    let env = package_env(package.get("environmentVariables"), notes)?;
    let spec = match (runner, version) {
        ("npx", Some(v)) => format!("{identifier}@{v}"),
        ("uvx", Some(v)) => format!("{identifier}=={v}"),
        (_, Some(v)) => format!("{identifier}:{v}"),
        (_, None) => identifier.to_owned(),
    };
    let mut args: Vec<String> = match runner {
        "npx" => vec!["-y".to_owned()],
        "uvx" => Vec::new(),
        _ => ["run", "-i", "--rm"].map(str::to_owned).to_vec(),
    };
    if runner == "docker" {
        for var in env.keys() {
            args.extend(["-e".to_owned(), var.clone()]);
        }
    }
    args.extend(arguments(package.get("runtimeArguments"), notes)?);
    args.push(spec);
    args.extend(arguments(package.get("packageArguments"), notes)?);
    let mut entry = JsonMap::new();
    entry.insert("command".to_owned(), Json::str(runner));
    entry.insert(
        "args".to_owned(),
        Json::Arr(args.into_iter().map(Json::Str).collect()),
    );
    if !env.is_empty() {
        entry.insert("env".to_owned(), Json::Obj(env));
    }
    Ok((entry, tag, version.map(str::to_owned)))
}

/// `environmentVariables`: a secret, or a required one without a default, as `${NAME}`; one with
/// a value or default as that literal; an optional one without a default omitted.
fn package_env(list: Option<&Json>, notes: &mut Notes) -> Result<JsonMap, Problem> {
    let items = match list {
        None => &[][..],
        Some(Json::Arr(items)) => items.as_slice(),
        Some(other) => return Err(wrong("environmentVariables", other, "a list")),
    };
    let mut env = JsonMap::new();
    let mut omitted = Vec::new();
    for (index, var) in items.iter().enumerate() {
        let Some(name) = var.get_str("name").filter(|n| !n.is_empty()) else {
            notes.push((Problem::EnvNoName { index }, "variable omitted".to_owned()));
            continue;
        };
        let literal = var.get_str("value").or_else(|| var.get_str("default"));
        let value = match literal {
            _ if flag(var, "isSecret") => format!("${{{name}}}"),
            Some(literal) => literal.to_owned(),
            None if flag(var, "isRequired") => format!("${{{name}}}"),
            None => {
                omitted.push(name.to_owned());
                continue;
            }
        };
        env.insert(name.to_owned(), Json::Str(value));
    }
    if !omitted.is_empty() {
        let (noun, verb) = if omitted.len() == 1 {
            ("variable", "has")
        } else {
            ("variables", "have")
        };
        notes.push((
            Problem::OptionalEnv {
                noun,
                names: omitted.join(", "),
                verb,
            },
            "omitted".to_owned(),
        ));
    }
    Ok(env)
}

/// `runtimeArguments`/`packageArguments` as command-line words: positional → its value, named →
/// its name and value; a secret value as `${<NAME>}`.
fn arguments(list: Option<&Json>, notes: &mut Notes) -> Result<Vec<String>, Problem> {
    let items = match list {
        None => &[][..],
        Some(Json::Arr(items)) => items.as_slice(),
        Some(other) => return Err(wrong("packageArguments", other, "a list")),
    };
    let mut words = Vec::new();
    for (index, arg) in items.iter().enumerate() {
        let kind = arg.get_str("type");
        let flag_name = arg.get_str("name").filter(|n| !n.is_empty());
        let arg_name = flag_name
            .or_else(|| arg.get_str("valueHint"))
            .map_or_else(|| format!("argument {index}"), str::to_owned);
        let value = arg.get_str("value").or_else(|| arg.get_str("default"));
        let value = match value {
            Some(_) if flag(arg, "isSecret") => {
                let reference = format!("${{{}}}", upper_snake(&arg_name));
                notes.push((
                    Problem::ArgSecret {
                        arg: arg_name.clone(),
                    },
                    format!("replaced by \"{reference}\""),
                ));
                Some(reference)
            }
            other => other.map(str::to_owned),
        };
        let prefix = match (kind, flag_name) {
            (Some("positional"), _) => None,
            (Some("named"), Some(flag_name)) => Some(flag_name.to_owned()),
            _ => return Err(Problem::ArgMalformed { index }),
        };
        match value {
            Some(value) => words.extend(prefix.into_iter().chain([value])),
            None if flag(arg, "isRequired") => {
                return Err(Problem::ArgRequired { arg: arg_name });
            }
            None => notes.push((Problem::ArgOptional { arg: arg_name }, "omitted".to_owned())),
        }
    }
    Ok(words)
}

/// A remote's `headers`: a secret or valueless one as a reference (`Authorization` as
/// `Bearer ${<SERVER>_TOKEN}`, any other as `${<HEADER_IN_UPPER_SNAKE>}`), else its value.
fn remote_headers(
    server: &str,
    list: Option<&Json>,
    notes: &mut Notes,
) -> Result<JsonMap, Problem> {
    let items = match list {
        None => &[][..],
        Some(Json::Arr(items)) => items.as_slice(),
        Some(other) => return Err(wrong("headers", other, "a list")),
    };
    let mut headers = JsonMap::new();
    for (index, header) in items.iter().enumerate() {
        let Some(name) = header.get_str("name").filter(|n| !n.is_empty()) else {
            notes.push((Problem::HeaderNoName { index }, "header omitted".to_owned()));
            continue;
        };
        let literal = header
            .get_str("value")
            .or_else(|| header.get_str("default"));
        let value = match literal {
            Some(value) if !flag(header, "isSecret") => value.to_owned(),
            _ if name.eq_ignore_ascii_case("authorization") => {
                format!("Bearer ${{{}_TOKEN}}", upper_snake(server))
            }
            _ => format!("${{{}}}", upper_snake(name)),
        };
        headers.insert(name.to_owned(), Json::Str(value));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::catalog::flags::derive_mcp_server;

    fn body(entry: &ImportedEntry) -> &str {
        std::str::from_utf8(&entry.body).unwrap()
    }

    fn find<'e>(entries: &'e [ImportedEntry], name: &str) -> &'e ImportedEntry {
        entries.iter().find(|e| e.name == name).unwrap()
    }

    /// (severity, entry, problem, action) of every finding, for exact comparison.
    fn rows(findings: &[Finding]) -> Vec<(FindingSeverity, Option<&str>, &str, &str)> {
        findings
            .iter()
            .map(|f| {
                (
                    f.severity,
                    f.entry.as_deref(),
                    f.problem.as_str(),
                    f.action.as_str(),
                )
            })
            .collect()
    }

    /// No secret text anywhere: bodies, labels, tags, findings.
    fn assert_absent(secret: &str, entries: &[ImportedEntry], findings: &[Finding]) {
        for e in entries {
            assert!(!body(e).contains(secret), "{}", body(e));
            assert!(!e.label.contains(secret));
            assert!(e.tags.iter().all(|t| !t.contains(secret)));
        }
        for f in findings {
            assert!(!f.problem.contains(secret), "{}", f.problem);
            assert!(!f.action.contains(secret), "{}", f.action);
        }
    }

    /// Flags of each body by the loader's rule: expansion always, credentials as given.
    fn assert_flags(entries: &[ImportedEntry], credentials: &[(&str, bool)]) {
        assert_eq!(entries.len(), credentials.len());
        for (name, expected) in credentials {
            let flags = derive_mcp_server(body(find(entries, name))).flags();
            assert_eq!(flags, (true, *expected), "{name}");
        }
    }

    const MCP_JSON: &str = r#"{"mcpServers": {
        "filesystem": {"command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "${CLAUDE_PROJECT_DIR}"]},
        "linear": {"type": "http", "url": "https://mcp.linear.app/mcp",
            "headers": {"Authorization": "Bearer sk-live-123", "X-Team": "core"}},
        "chat": {"type": "ws", "url": "wss://chat.example.com/mcp"},
        "db": {"type": "sse", "url": "https://admin:hunter2@db.example.com/sse"},
        "My_Server": {"command": "uvx", "args": ["my-server"],
            "env": {"MY_API_KEY": "${MY_API_KEY}", "LOG_LEVEL": "info"}, "alwaysLoad": true}
    }}"#;

    #[test]
    fn mcp_json_servers_become_entries_with_secrets_replaced() {
        let (entries, findings) = import_mcp_json(".mcp.json", MCP_JSON);
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["my-server", "db", "filesystem", "linear"]);
        assert_eq!(
            body(find(&entries, "filesystem")),
            r#"{"mcpServers":{"filesystem":{"args":["-y","@modelcontextprotocol/server-filesystem","${CLAUDE_PROJECT_DIR}"],"command":"npx"}}}"#
        );
        assert_eq!(
            body(find(&entries, "linear")),
            r#"{"mcpServers":{"linear":{"headers":{"Authorization":"Bearer ${LINEAR_TOKEN}","X-Team":"core"},"type":"http","url":"https://mcp.linear.app/mcp"}}}"#
        );
        assert_eq!(
            body(find(&entries, "db")),
            r#"{"mcpServers":{"db":{"type":"sse","url":"https://admin:${DB_PASSWORD}@db.example.com/sse"}}}"#
        );
        assert_eq!(
            body(find(&entries, "my-server")),
            r#"{"mcpServers":{"my-server":{"args":["my-server"],"command":"uvx","env":{"LOG_LEVEL":"info","MY_API_KEY":"${MY_API_KEY}"}}}}"#
        );
        use FindingSeverity::{Refused, Warning};
        assert_eq!(
            rows(&findings),
            [
                (
                    Warning,
                    Some("mcp-server:my-server"),
                    "the server name \"My_Server\" is not a catalog name",
                    "normalized to \"my-server\""
                ),
                (
                    Warning,
                    Some("mcp-server:my-server"),
                    "the key \"alwaysLoad\" is not one ctx installs for a stdio server",
                    "dropped"
                ),
                (
                    Refused,
                    Some("mcp-server:chat"),
                    "the server has type \"ws\", which Codex cannot run",
                    "server refused"
                ),
                (
                    Warning,
                    Some("mcp-server:db"),
                    "the url holds a password",
                    "the password replaced by \"${DB_PASSWORD}\""
                ),
                (
                    Warning,
                    Some("mcp-server:linear"),
                    "the header Authorization holds a literal secret",
                    "replaced by \"Bearer ${LINEAR_TOKEN}\""
                ),
            ]
        );
        assert!(findings.iter().all(|f| f.path == ".mcp.json"));
        assert_absent("sk-live-123", &entries, &findings);
        assert_absent("hunter2", &entries, &findings);
        assert_flags(
            &entries,
            &[
                ("filesystem", false),
                ("linear", true),
                ("db", true),
                ("my-server", true),
            ],
        );
    }

    #[test]
    fn mcp_json_labels_tags_and_provenance() {
        let (entries, _) = import_mcp_json("proj/.mcp.json", MCP_JSON);
        let fs = find(&entries, "filesystem");
        assert_eq!(fs.kind, CapabilityKind::McpServer);
        assert_eq!(fs.label, "MCP server filesystem (npx)");
        assert_eq!(fs.tags, ["filesystem", "mcp"]);
        assert_eq!(
            fs.provenance,
            Provenance {
                path: "proj/.mcp.json".to_owned(),
                plugin: None,
                marketplace: None,
                version: None,
            }
        );
        assert_eq!(
            find(&entries, "linear").label,
            "MCP server linear (mcp.linear.app)"
        );
        assert_eq!(find(&entries, "db").label, "MCP server db (db.example.com)");
        assert_eq!(find(&entries, "my-server").tags, ["mcp", "my", "server"]);
    }

    #[test]
    fn mcp_json_bad_servers_are_refused_alone() {
        let text = r#"{"mcpServers": {
            "!!!": {"command": "x"},
            "a_b": {"command": "x"},
            "a-b": {"command": "y"},
            "nocmd": {"args": []},
            "remote": {"url": "https://r.example.com"},
            "wrong": {"command": "x", "args": "--flag"},
            "ok": {"command": "ok-server", "env": {"GITHUB_TOKEN": "ghp_abcdef"}}
        }}"#;
        let (entries, findings) = import_mcp_json("m.json", text);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            body(find(&entries, "ok")),
            r#"{"mcpServers":{"ok":{"command":"ok-server","env":{"GITHUB_TOKEN":"${GITHUB_TOKEN}"}}}}"#
        );
        let problems: Vec<&str> = findings.iter().map(|f| f.problem.as_str()).collect();
        assert_eq!(
            problems,
            [
                "the server name \"!!!\" keeps no character a catalog name allows",
                "the server name \"a_b\" normalizes to \"a-b\", which an earlier server of this file has",
                "the stdio server has no \"command\"",
                "the environment variable GITHUB_TOKEN holds a literal secret",
                "the server has a \"url\" but no \"type\" (http or sse)",
                "the key \"args\" is a string, where a list of strings is expected",
            ]
        );
        assert_absent("ghp_abcdef", &entries, &findings);
    }

    #[test]
    fn mcp_json_without_servers_or_unparseable_is_one_refusal() {
        let (entries, findings) = import_mcp_json("m.json", r#"{"mcpServers": {"x": }"#);
        assert!(entries.is_empty());
        assert_eq!(
            rows(&findings),
            [(
                FindingSeverity::Refused,
                None,
                "the JSON is not valid at byte 21: an unexpected character '}' where a value was expected",
                "file refused"
            )]
        );
        let (_, findings) = import_mcp_json("m.json", r#"{"servers": {}}"#);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].problem, "the file has no \"mcpServers\" object");
    }

    const CODEX_TOML: &str = r#"
model = "o3"

[mcp_servers.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env_vars = ["GITHUB_PERSONAL_ACCESS_TOKEN"]
cwd = "/tmp"

[mcp_servers.figma]
url = "https://mcp.figma.com/mcp"
bearer_token_env_var = "FIGMA_OAUTH_TOKEN"
http_headers = { "X-Figma-Region" = "us-east-1" }
tool_timeout_sec = 30

[mcp_servers.old]
command = "old-server"
enabled = false

[mcp_servers.notion]
url = "https://mcp.notion.com/mcp"
bearer_token = "ntn-secret-999"

[mcp_servers.broken]
args = ["x"]
"#;

    #[test]
    fn codex_servers_become_entries() {
        let (entries, findings) = import_config_toml("config.toml", CODEX_TOML);
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["github", "figma", "notion"]);
        assert_eq!(
            body(find(&entries, "github")),
            r#"{"mcpServers":{"github":{"args":["-y","@modelcontextprotocol/server-github"],"command":"npx","env":{"GITHUB_PERSONAL_ACCESS_TOKEN":"${GITHUB_PERSONAL_ACCESS_TOKEN}"}}}}"#
        );
        assert_eq!(
            body(find(&entries, "figma")),
            r#"{"mcpServers":{"figma":{"headers":{"Authorization":"Bearer ${FIGMA_OAUTH_TOKEN}","X-Figma-Region":"us-east-1"},"type":"http","url":"https://mcp.figma.com/mcp"}}}"#
        );
        assert_eq!(
            body(find(&entries, "notion")),
            r#"{"mcpServers":{"notion":{"headers":{"Authorization":"Bearer ${NOTION_TOKEN}"},"type":"http","url":"https://mcp.notion.com/mcp"}}}"#
        );
        use FindingSeverity::{Refused, Warning};
        assert_eq!(
            rows(&findings),
            [
                (
                    Warning,
                    Some("mcp-server:github"),
                    "the setting \"cwd\" is not carried over because Claude Code and Codex treat it differently",
                    "dropped"
                ),
                (
                    Warning,
                    Some("mcp-server:figma"),
                    "the setting \"tool_timeout_sec\" is not carried over because Claude Code and Codex treat it differently",
                    "dropped"
                ),
                (
                    Refused,
                    Some("mcp-server:old"),
                    "the server is disabled in the source (enabled = false)",
                    "server refused"
                ),
                (
                    Warning,
                    Some("mcp-server:notion"),
                    "the setting \"bearer_token\" holds a literal token, which Codex refuses",
                    "replaced by the header Authorization: \"Bearer ${NOTION_TOKEN}\""
                ),
                (
                    Refused,
                    Some("mcp-server:broken"),
                    "the server has neither \"command\" nor \"url\" (invalid transport)",
                    "server refused"
                ),
            ]
        );
        assert_absent("ntn-secret-999", &entries, &findings);
        assert_eq!(
            find(&entries, "figma").label,
            "MCP server figma (mcp.figma.com)"
        );
        assert_flags(
            &entries,
            &[("github", true), ("figma", true), ("notion", true)],
        );
    }

    #[test]
    fn codex_literal_header_and_env_secrets_are_replaced() {
        let text = r#"
[mcp_servers.api]
url = "https://api.example.com/mcp"
http_headers = { "X-Api-Key" = "live-abc-42" }
env_http_headers = { "X-Org" = "API_ORG" }

[mcp_servers.local]
command = "local-mcp"
env = { DB_PASSWORD = "pa55word", MODE = "fast" }
"#;
        let (entries, findings) = import_config_toml("c.toml", text);
        assert_eq!(
            body(find(&entries, "api")),
            r#"{"mcpServers":{"api":{"headers":{"X-Api-Key":"${X_API_KEY}","X-Org":"${API_ORG}"},"type":"http","url":"https://api.example.com/mcp"}}}"#
        );
        assert_eq!(
            body(find(&entries, "local")),
            r#"{"mcpServers":{"local":{"command":"local-mcp","env":{"DB_PASSWORD":"${DB_PASSWORD}","MODE":"fast"}}}}"#
        );
        let actions: Vec<&str> = findings.iter().map(|f| f.action.as_str()).collect();
        assert_eq!(
            actions,
            [
                "replaced by \"${X_API_KEY}\"",
                "replaced by \"${DB_PASSWORD}\""
            ]
        );
        assert_absent("live-abc-42", &entries, &findings);
        assert_absent("pa55word", &entries, &findings);
        assert_flags(&entries, &[("api", true), ("local", true)]);
    }

    #[test]
    fn codex_unparseable_or_serverless_files() {
        let (entries, findings) =
            import_config_toml("c.toml", "[mcp_servers.x\ncommand = \"secret-cmd\"\n");
        assert!(entries.is_empty());
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].severity, FindingSeverity::Refused);
        assert_eq!(findings[0].action, "file refused");
        assert_eq!(
            findings[0].problem,
            "the TOML is not valid at line 1, column 15: unclosed table, expected `]`"
        );
        let (_, findings) = import_config_toml("c.toml", "model = \"o3\"\n");
        assert_eq!(
            rows(&findings),
            [(
                FindingSeverity::Warning,
                None,
                "the file has no [mcp_servers] table",
                "nothing imported"
            )]
        );
        let (_, findings) = import_config_toml("c.toml", "mcp_servers = 3\n");
        assert_eq!(
            findings[0].problem,
            "the file's \"mcp_servers\" is a number, not a table"
        );
    }

    #[test]
    fn registry_npm_package_with_secret_env() {
        let text = r#"{"name": "io.github.acme/weather", "description": "Weather forecasts for any city.",
            "version": "1.2.0",
            "packages": [{"registryType": "npm", "identifier": "@acme/weather-mcp", "version": "1.2.0",
                "transport": {"type": "stdio"},
                "environmentVariables": [
                    {"name": "API_KEY", "isSecret": true, "isRequired": true},
                    {"name": "WEATHER_UNITS", "default": "metric"},
                    {"name": "WEATHER_DEBUG"}]}]}"#;
        let (entries, findings) = import_server_json("weather/server.json", text);
        assert_eq!(entries.len(), 1);
        let e = &entries[0];
        assert_eq!(e.name, "weather");
        assert_eq!(e.label, "Weather forecasts for any city.");
        assert_eq!(e.tags, ["mcp", "npm", "weather"]);
        assert_eq!(e.provenance.version.as_deref(), Some("1.2.0"));
        assert_eq!(
            body(e),
            r#"{"mcpServers":{"weather":{"args":["-y","@acme/weather-mcp@1.2.0"],"command":"npx","env":{"API_KEY":"${API_KEY}","WEATHER_UNITS":"metric"}}}}"#
        );
        assert_eq!(
            rows(&findings),
            [(
                FindingSeverity::Warning,
                Some("mcp-server:weather"),
                "the optional environment variable WEATHER_DEBUG has no default",
                "omitted"
            )]
        );
        assert_flags(&entries, &[("weather", true)]);
    }

    #[test]
    fn registry_pypi_package_with_named_argument() {
        let text = r#"{"name": "io.github.acme/sql-tools", "title": "SQL tools", "version": "0.3.1",
            "packages": [{"registryType": "pypi", "identifier": "acme-sql-mcp", "version": "0.3.1",
                "runtimeHint": "pipx",
                "packageArguments": [
                    {"type": "named", "name": "--db", "value": "sqlite:///data.db"},
                    {"type": "positional", "valueHint": "schema"}]}]}"#;
        let (entries, findings) = import_server_json("server.json", text);
        let e = &entries[0];
        assert_eq!(
            body(e),
            r#"{"mcpServers":{"sql-tools":{"args":["acme-sql-mcp==0.3.1","--db","sqlite:///data.db"],"command":"uvx"}}}"#
        );
        assert_eq!(e.label, "SQL tools");
        assert_eq!(e.tags, ["mcp", "pypi", "sql", "tools"]);
        let problems: Vec<(&str, &str)> = findings
            .iter()
            .map(|f| (f.problem.as_str(), f.action.as_str()))
            .collect();
        assert_eq!(
            problems,
            [
                (
                    "the runtimeHint \"pipx\" is not one of npx, uvx or docker",
                    "used \"uvx\""
                ),
                ("the optional argument \"schema\" has no value", "omitted"),
            ]
        );
        assert_flags(&entries, &[("sql-tools", false)]);
    }

    #[test]
    fn registry_oci_package_runs_in_docker() {
        let text = r#"{"name": "io.github.acme/files", "description": "Files", "version": "2.0.0",
            "packages": [{"registryType": "oci", "identifier": "ghcr.io/acme/files-mcp",
                "version": "2.0.0", "runtimeHint": "docker",
                "environmentVariables": [{"name": "FILES_ROOT", "default": "/data"}]}]}"#;
        let (entries, findings) = import_server_json("server.json", text);
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(
            body(&entries[0]),
            r#"{"mcpServers":{"files":{"args":["run","-i","--rm","-e","FILES_ROOT","ghcr.io/acme/files-mcp:2.0.0"],"command":"docker","env":{"FILES_ROOT":"/data"}}}}"#
        );
        assert_eq!(entries[0].tags, ["docker", "files", "mcp"]);
        assert_flags(&entries, &[("files", false)]);
    }

    #[test]
    fn registry_remote_with_secret_header() {
        let text = r#"{"name": "com.example/search", "description": "Search the web.", "version": "1.0.0",
            "packages": [{"registryType": "nuget", "identifier": "Example.Search", "version": "1.0.0"}],
            "remotes": [{"type": "streamable-http", "url": "https://search.example.com/mcp",
                "headers": [{"name": "X-API-Key", "isSecret": true, "isRequired": true},
                            {"name": "X-Client", "value": "ctx"},
                            {"name": "Authorization", "value": "Bearer tok-77", "isSecret": false}]}]}"#;
        let (entries, findings) = import_server_json("server.json", text);
        assert_eq!(
            body(&entries[0]),
            r#"{"mcpServers":{"search":{"headers":{"Authorization":"Bearer ${SEARCH_TOKEN}","X-API-Key":"${X_API_KEY}","X-Client":"ctx"},"type":"http","url":"https://search.example.com/mcp"}}}"#
        );
        assert_eq!(entries[0].tags, ["mcp", "search"]);
        assert_eq!(
            rows(&findings),
            [
                (
                    FindingSeverity::Warning,
                    Some("mcp-server:search"),
                    "the package \"Example.Search\" is a nuget package, which no host runs without a download ctx does not make",
                    "package not imported"
                ),
                (
                    FindingSeverity::Warning,
                    Some("mcp-server:search"),
                    "the header Authorization holds a literal secret",
                    "replaced by \"Bearer ${SEARCH_TOKEN}\""
                ),
            ]
        );
        assert_absent("tok-77", &entries, &findings);
        assert_flags(&entries, &[("search", true)]);
    }

    #[test]
    fn registry_nuget_only_server_is_not_imported() {
        let text = r#"{"name": "io.github.acme/dotnet-tools", "description": "Tools", "version": "1.0.0",
            "packages": [{"registryType": "nuget", "identifier": "Acme.Tools", "version": "1.0.0"}]}"#;
        let (entries, findings) = import_server_json("server.json", text);
        assert!(entries.is_empty());
        assert_eq!(
            rows(&findings),
            [
                (
                    FindingSeverity::Warning,
                    Some("mcp-server:dotnet-tools"),
                    "the package \"Acme.Tools\" is a nuget package, which no host runs without a download ctx does not make",
                    "package not imported"
                ),
                (
                    FindingSeverity::Refused,
                    Some("mcp-server:dotnet-tools"),
                    "the server has no npm, pypi or oci package and no remote ctx can install",
                    "server refused"
                ),
            ]
        );
    }

    #[test]
    fn registry_unparseable_and_nameless() {
        let (entries, findings) = import_server_json("server.json", "{\"name\": \"x\",}");
        assert!(entries.is_empty());
        assert_eq!(
            rows(&findings),
            [(
                FindingSeverity::Refused,
                None,
                "the JSON is not valid at byte 13: an unexpected character '}' where a key in double quotes was expected",
                "file refused"
            )]
        );
        let (_, findings) = import_server_json("server.json", "[]");
        assert_eq!(
            findings[0].problem,
            "the file is a list, not a server.json object"
        );
        let (_, findings) = import_server_json("server.json", "{}");
        assert_eq!(findings[0].problem, "the file has no \"name\" string");
    }

    #[test]
    fn oversized_sources_are_refused_naming_size_and_limit() {
        let text = " ".repeat(MCP_SOURCE_MAX_BYTES + 1);
        for import in [import_mcp_json, import_config_toml, import_server_json] {
            let (entries, findings) = import("big", &text);
            assert!(entries.is_empty());
            assert_eq!(
                rows(&findings),
                [(
                    FindingSeverity::Refused,
                    None,
                    "the file is 1048577 bytes, more than the limit of 1048576 bytes",
                    "file refused"
                )]
            );
        }
        // At the limit the file is read (and here is simply not JSON).
        let text = " ".repeat(MCP_SOURCE_MAX_BYTES);
        let (_, findings) = import_mcp_json("big", &text);
        assert_eq!(
            findings[0].problem,
            "the JSON is not valid at byte 1048576: empty input"
        );
    }

    #[test]
    fn names_normalize_and_labels_stay_within_limits() {
        assert_eq!(normalized_name("My Server_2!"), "my-server-2");
        assert_eq!(normalized_name("@scope/Thing"), "scopething");
        assert_eq!(normalized_name("--x"), "x");
        assert_eq!(normalized_name("é"), "");
        assert_eq!(
            normalized_name(&"a".repeat(300)).len(),
            SERVER_NAME_MAX_CHARS
        );
        let long = format!("{}é tail", "x".repeat(199));
        assert_eq!(one_line(&long).unwrap(), "x".repeat(199));
        assert_eq!(one_line("two\nlines\t here").unwrap(), "two lines here");
        assert_eq!(one_line(" \n "), None);
        assert_eq!(upper_snake("my-server.v2"), "MY_SERVER_V2");
        let name = (0..60)
            .map(|i| format!("t{i}"))
            .collect::<Vec<_>>()
            .join("-");
        assert_eq!(tags(&name, Some("npm")).len(), TAGS_MAX_PER_ENTRY);
        assert!(tags(&name, Some("npm")).contains(&"mcp".to_owned()));
    }

    #[test]
    fn literal_secrets_in_arguments_are_replaced_and_never_echoed() {
        let text = r#"{"mcpServers":{"search":{"command":"npx","args":["-y","search-mcp","--api-key","sk-live-abc123","--token=ghp_secretsecret","--region","eu","xoxb-111-222","--verbose"]}}}"#;
        let (entries, findings) = import_mcp_json(".mcp.json", text);
        for secret in ["sk-live-abc123", "ghp_secretsecret", "xoxb-111-222"] {
            assert_absent(secret, &entries, &findings);
        }
        assert_eq!(
            body(find(&entries, "search")),
            r#"{"mcpServers":{"search":{"args":["-y","search-mcp","--api-key","${SEARCH_API_KEY}","--token=${SEARCH_TOKEN}","--region","eu","${SEARCH_TOKEN}","--verbose"],"command":"npx"}}}"#
        );
        let rows: Vec<(&str, &str)> = findings
            .iter()
            .map(|f| (f.problem.as_str(), f.action.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "argument 4 (after --api-key) holds a literal secret",
                    "replaced by \"${SEARCH_API_KEY}\""
                ),
                (
                    "argument 5 (--token=…) holds a literal secret",
                    "replaced by \"${SEARCH_TOKEN}\""
                ),
                (
                    "argument 8 holds a literal secret",
                    "replaced by \"${SEARCH_TOKEN}\""
                ),
            ]
        );
        // The body now needs credentials, which the derived flags say.
        assert_flags(&entries, &[("search", true)]);
    }
}
