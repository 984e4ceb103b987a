//! MCP servers: the catalog's `.mcp.json`-shaped material, the secret check, the member of a
//! project's `.mcp.json` (Claude Code) and the `[mcp_servers.<name>]` table of
//! `$CODEX_HOME/config.toml` (Codex), both edited through [`crate::host_files::update_locked`] so
//! every byte ctx does not own stays as it was (spec/activation.md §2, §7, §6; spec/catalog.md §7;
//! spec/cli.md §7.2).

use std::path::PathBuf;

use ctx_model::Json;
use toml_edit::{Array, DocumentMut, InlineTable, Item, Table};

use crate::host_files::{
    JsonNode, json_text, parse_json, read_host_file, remove_member, set_member, update_locked,
};
use crate::hosts::AgentHost;
use crate::profile::McpLayout;

use super::entry::state_digest;
use super::error::{ActivationError, ConflictReason};

/// Words that mark an environment variable or header as holding a credential (compared on the
/// upper-cased name with `-` read as `_`).
const SECRET_NAME_WORDS: [&str; 14] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "DSN",
    "DATABASE_URL",
];

/// Prefixes of well-known credential formats, matched at the start of a word.
const SECRET_PREFIXES: [&str; 20] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "AKIA",
    "ASIA",
    "AIza",
    "ya29.",
    "npm_",
    "hf_",
];

/// Authorization schemes: a header value that is a scheme followed only by references holds no
/// literal secret.
const AUTH_SCHEMES: [&str; 3] = ["bearer", "basic", "token"];

/// Keys of a Claude Code server entry, by transport.
const STDIO_KEYS: [&str; 4] = ["type", "command", "args", "env"];
const HTTP_KEYS: [&str; 3] = ["type", "url", "headers"];

/// Reads the catalog material of the server `name`: `{"mcpServers": {"<name>": {...}}}` with
/// exactly that one server, whose entry is checked (transport fields, types, no literal
/// secrets). Returns the server object.
pub(crate) fn parse(name: &str, body: &[u8]) -> Result<JsonNode, ActivationError> {
    let invalid = |reason: String| ActivationError::InvalidMaterial {
        name: name.to_owned(),
        reason,
    };
    let text = json_text(body).map_err(|e| invalid(e.to_string()))?;
    let root = parse_json(text).map_err(|e| invalid(e.to_string()))?;
    let servers = match &root {
        JsonNode::Object(members) if members.len() == 1 && members[0].0 == "mcpServers" => {
            &members[0].1
        }
        _ => {
            return Err(invalid(
                "it is not {\"mcpServers\": {...}} alone".to_owned(),
            ));
        }
    };
    let server = match servers {
        JsonNode::Object(members) if members.len() == 1 && members[0].0 == name => &members[0].1,
        _ => {
            return Err(invalid(format!(
                "mcpServers does not hold exactly the one server {name:?}"
            )));
        }
    };
    let JsonNode::Object(members) = server else {
        return Err(invalid("the server entry is not an object".to_owned()));
    };
    for (i, (key, _)) in members.iter().enumerate() {
        if members[..i].iter().any(|(k, _)| k == key) {
            return Err(invalid(format!("the server entry repeats the key {key}")));
        }
    }
    check_entry(name, server).map_err(|e| invalid(e.to_string()))?;
    check_secrets(name, server)?;
    Ok(server.clone())
}

/// Why an MCP server entry (or the Codex `mcp_servers` table it goes into) is refused; the
/// sentence names the member at fault and becomes the reason of an activation error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum McpEntryError {
    #[error("{what} holds a value that is not text")]
    ItemNotText { what: String },
    #[error("{what} is not an array")]
    NotArray { what: String },
    #[error("{what}.{key} is not text")]
    ValueNotText { what: String, key: String },
    #[error("{what} is not an object")]
    NotObject { what: String },
    #[error("an entry with url needs a type (Claude Code rejects it otherwise)")]
    UrlWithoutType,
    #[error("type is not stdio, http, streamable-http, sse or ws")]
    Type,
    #[error("a stdio server needs a command")]
    NoCommand,
    #[error("a remote server needs a url")]
    NoUrl,
    #[error("mcp_servers is not a table")]
    ServersNotTable,
}

fn strings<'a>(node: Option<&'a JsonNode>, what: &str) -> Result<Vec<&'a str>, McpEntryError> {
    match node {
        None => Ok(Vec::new()),
        Some(JsonNode::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str().ok_or_else(|| McpEntryError::ItemNotText {
                    what: what.to_owned(),
                })
            })
            .collect(),
        Some(_) => Err(McpEntryError::NotArray {
            what: what.to_owned(),
        }),
    }
}

fn string_map<'a>(
    node: Option<&'a JsonNode>,
    what: &str,
) -> Result<Vec<(&'a str, &'a str)>, McpEntryError> {
    match node {
        None => Ok(Vec::new()),
        Some(JsonNode::Object(members)) => members
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|v| (k.as_str(), v))
                    .ok_or_else(|| McpEntryError::ValueNotText {
                        what: what.to_owned(),
                        key: k.clone(),
                    })
            })
            .collect(),
        Some(_) => Err(McpEntryError::NotObject {
            what: what.to_owned(),
        }),
    }
}

/// The transport: `stdio` (also when `type` is absent) or a remote one.
fn transport(server: &JsonNode) -> Result<&str, McpEntryError> {
    match server.get("type") {
        None if server.get("url").is_some() => Err(McpEntryError::UrlWithoutType),
        None => Ok("stdio"),
        Some(JsonNode::String(t))
            if ["stdio", "http", "streamable-http", "sse", "ws"].contains(&t.as_str()) =>
        {
            Ok(t)
        }
        Some(_) => Err(McpEntryError::Type),
    }
}

fn check_entry(_name: &str, server: &JsonNode) -> Result<(), McpEntryError> {
    if transport(server)? == "stdio" {
        let command = server.get("command").and_then(JsonNode::as_str);
        if command.is_none_or(str::is_empty) {
            return Err(McpEntryError::NoCommand);
        }
        strings(server.get("args"), "args")?;
        string_map(server.get("env"), "env")?;
    } else {
        let url = server.get("url").and_then(JsonNode::as_str);
        if url.is_none_or(str::is_empty) {
            return Err(McpEntryError::NoUrl);
        }
        string_map(server.get("headers"), "headers")?;
    }
    Ok(())
}

/// `value` without its `${...}` references.
fn literal_part(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        match rest[start..].find('}') {
            Some(end) => rest = &rest[start + end + 1..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

fn secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase().replace('-', "_");
    upper == "AUTHORIZATION" || SECRET_NAME_WORDS.iter().any(|w| upper.contains(w))
}

/// Whether `value` (of the variable, header or flag `field`, if any) looks like it holds a
/// literal credential (spec/activation.md §7): a well-known token prefix, a password in a URL,
/// or a credential-named field whose text has no reference and is more than an authorization
/// scheme word.
fn looks_secret(field: Option<&str>, value: &str) -> bool {
    let literal = literal_part(value);
    let bytes = literal.as_bytes();
    let prefixed = SECRET_PREFIXES.iter().any(|p| {
        literal
            .match_indices(p)
            .any(|(i, _)| i == 0 || !bytes.get(i - 1).is_some_and(|b| b.is_ascii_alphanumeric()))
    });
    let url_password = literal.find("://").is_some_and(|i| {
        let authority = literal[i + 3..].split(['/', '?', '#']).next().unwrap_or("");
        authority
            .rsplit_once('@')
            .and_then(|(userinfo, _)| userinfo.split_once(':'))
            .is_some_and(|(_, password)| !password.is_empty())
    });
    // A credential-named field may carry text around a reference (`Bearer ${TOKEN}`,
    // `postgres://app:${PASSWORD}@db`); without any reference its text is the credential.
    let named = field.is_some_and(secret_name) && !value.contains("${") && {
        let mut words = literal.split_whitespace();
        let first = words.next();
        match first {
            None => false,
            Some(w) if AUTH_SCHEMES.contains(&w.to_ascii_lowercase().as_str()) => {
                words.next().is_some()
            }
            Some(_) => true,
        }
    };
    prefixed || url_password || named
}

/// Refuses a server whose command, arguments, URL, environment or headers hold what looks like
/// a literal secret: ctx writes credentials only as `${VAR}` references.
pub(crate) fn check_secrets(name: &str, server: &JsonNode) -> Result<(), ActivationError> {
    let refuse = |field: String| ActivationError::LiteralSecret {
        name: name.to_owned(),
        field,
    };
    if let Some(command) = server.get("command").and_then(JsonNode::as_str)
        && looks_secret(None, command)
    {
        return Err(refuse("command".to_owned()));
    }
    let args = strings(server.get("args"), "args").unwrap_or_default();
    let mut flag: Option<&str> = None;
    for (i, arg) in args.iter().enumerate() {
        // `--api-key VALUE` and `--api-key=VALUE` name their value's meaning.
        let (field, value) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (Some(f), v),
            _ => (flag, *arg),
        };
        if looks_secret(field.filter(|f| f.starts_with('-')), value) {
            return Err(refuse(format!("args[{i}]")));
        }
        flag = arg.starts_with('-').then_some(*arg);
    }
    if let Some(url) = server.get("url").and_then(JsonNode::as_str)
        && looks_secret(None, url)
    {
        return Err(refuse("url".to_owned()));
    }
    for (what, map) in [
        ("env", server.get("env")),
        ("headers", server.get("headers")),
    ] {
        for (key, value) in string_map(map, what).unwrap_or_default() {
            if looks_secret(Some(key), value) {
                return Err(refuse(format!("{what}.{key}")));
            }
        }
    }
    Ok(())
}

/// `VAR` when `value` is exactly one reference `${VAR}` (no default).
fn whole_reference(value: &str) -> Option<&str> {
    let var = value.strip_prefix("${")?.strip_suffix('}')?;
    let mut bytes = var.bytes();
    let first = bytes.next()?;
    ((first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    .then_some(var)
}

/// The Codex table for a checked server entry (spec/activation.md §7): stdio → `command`,
/// `args`, `env_vars` (for `KEY = "${KEY}"`), `env` (other literals); streamable HTTP → `url`,
/// `bearer_token_env_var` (for `Authorization: Bearer ${VAR}`), `env_http_headers` (for
/// `Header: ${VAR}`), `http_headers` (literals). Anything Codex would read differently is
/// refused: it does not expand `${VAR}` inside values, cannot rename a forwarded variable and
/// speaks neither SSE nor WebSocket.
pub(crate) fn codex_table(name: &str, server: &JsonNode) -> Result<Table, ActivationError> {
    let unsupported = |reason: String| ActivationError::UnsupportedForHost {
        host: AgentHost::Codex,
        name: name.to_owned(),
        reason,
    };
    let invalid = |reason: String| ActivationError::InvalidMaterial {
        name: name.to_owned(),
        reason,
    };
    let no_reference = |what: &str, value: &str| {
        if value.contains("${") {
            Err(unsupported(format!(
                "{what} holds a ${{VAR}} reference, which Codex does not expand"
            )))
        } else {
            Ok(())
        }
    };
    let kind = transport(server).map_err(|e| invalid(e.to_string()))?;
    let allowed: &[&str] = match kind {
        "stdio" => &STDIO_KEYS,
        "http" | "streamable-http" => &HTTP_KEYS,
        other => {
            return Err(unsupported(format!(
                "Codex speaks only stdio and streamable HTTP to MCP servers, not {other}"
            )));
        }
    };
    if let JsonNode::Object(members) = server
        && let Some((key, _)) = members.iter().find(|(k, _)| !allowed.contains(&k.as_str()))
    {
        return Err(unsupported(format!(
            "the key {key} has no Codex equivalent ctx writes"
        )));
    }
    let mut table = Table::new();
    if kind == "stdio" {
        let command = server
            .get("command")
            .and_then(JsonNode::as_str)
            .unwrap_or_default();
        no_reference("command", command)?;
        table.insert("command", toml_edit::value(command));
        let args = strings(server.get("args"), "args").map_err(|e| invalid(e.to_string()))?;
        if server.get("args").is_some() {
            let mut array = Array::new();
            for (i, arg) in args.iter().enumerate() {
                no_reference(&format!("args[{i}]"), arg)?;
                array.push(*arg);
            }
            table.insert("args", toml_edit::value(array));
        }
        let mut forwarded = Array::new();
        let mut literal = InlineTable::new();
        for (key, value) in
            string_map(server.get("env"), "env").map_err(|e| invalid(e.to_string()))?
        {
            match whole_reference(value) {
                Some(var) if var == key => forwarded.push(var),
                Some(var) => {
                    return Err(unsupported(format!(
                        "env.{key} is ${{{var}}}, and Codex forwards a variable only under its own \
                         name"
                    )));
                }
                None => {
                    no_reference(&format!("env.{key}"), value)?;
                    literal.insert(key, value.into());
                }
            }
        }
        if !forwarded.is_empty() {
            table.insert("env_vars", toml_edit::value(forwarded));
        }
        if !literal.is_empty() {
            table.insert("env", toml_edit::value(literal));
        }
    } else {
        let url = server
            .get("url")
            .and_then(JsonNode::as_str)
            .unwrap_or_default();
        no_reference("url", url)?;
        table.insert("url", toml_edit::value(url));
        let mut bearer = None;
        let mut from_env = InlineTable::new();
        let mut literal = InlineTable::new();
        for (header, value) in
            string_map(server.get("headers"), "headers").map_err(|e| invalid(e.to_string()))?
        {
            let bearer_var = value
                .strip_prefix("Bearer ")
                .and_then(whole_reference)
                .filter(|_| header.eq_ignore_ascii_case("authorization"));
            if let Some(var) = bearer_var {
                bearer = Some(var);
            } else if let Some(var) = whole_reference(value) {
                from_env.insert(header, var.into());
            } else {
                no_reference(&format!("headers.{header}"), value)?;
                literal.insert(header, value.into());
            }
        }
        if let Some(var) = bearer {
            table.insert("bearer_token_env_var", toml_edit::value(var));
        }
        if !from_env.is_empty() {
            table.insert("env_http_headers", toml_edit::value(from_env));
        }
        if !literal.is_empty() {
            table.insert("http_headers", toml_edit::value(literal));
        }
    }
    Ok(table)
}

/// Canonical text of a JSON entry as the host reads it: object keys sorted (the last of
/// duplicate keys counts, as in `JSON.parse`), numbers by their literal text.
fn canonical_json(node: &JsonNode, out: &mut String) {
    match node {
        JsonNode::Null => out.push_str("null"),
        JsonNode::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        JsonNode::Number(n) => out.push_str(n),
        JsonNode::String(s) => out.push_str(&Json::str(s.as_str()).to_cj()),
        JsonNode::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        JsonNode::Object(members) => {
            let mut keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
            keys.sort_unstable();
            keys.dedup();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Json::str(*key).to_cj());
                out.push(':');
                if let Some(value) = node.get(key) {
                    canonical_json(value, out);
                }
            }
            out.push('}');
        }
    }
}

/// The state of a Claude Code server entry: `H(domain ‖ "claude-mcp-server" ‖ canonical JSON)`.
pub(crate) fn json_state(node: &JsonNode) -> String {
    let mut text = String::new();
    canonical_json(node, &mut text);
    state_digest(&[b"claude-mcp-server", text.as_bytes()])
}

fn toml_value_json(value: &toml_edit::Value) -> Json {
    use toml_edit::Value as V;
    match value {
        V::String(s) => Json::str(s.value().as_str()),
        V::Integer(i) => Json::Int(*i.value()),
        V::Float(f) => Json::float(*f.value()).unwrap_or_else(|| Json::str(f.to_string())),
        V::Boolean(b) => Json::Bool(*b.value()),
        V::Datetime(d) => Json::object([("datetime", Json::str(d.value().to_string()))]),
        V::Array(a) => Json::Arr(a.iter().map(toml_value_json).collect()),
        V::InlineTable(t) => Json::object(t.iter().map(|(k, v)| (k, toml_value_json(v)))),
    }
}

fn toml_item_json(item: &Item) -> Json {
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

/// The state of a Codex server table, however it is written (table, inline table, dotted
/// keys): `H(domain ‖ "codex-mcp-server" ‖ canonical JSON of its values)`.
pub(crate) fn toml_state(item: &Item) -> String {
    state_digest(&[b"codex-mcp-server", toml_item_json(item).to_cj().as_bytes()])
}

/// What ctx writes at a config member.
#[derive(Debug, Clone)]
pub(crate) enum MemberValue {
    /// A Claude Code server object (written in the file's own layout).
    Claude(JsonNode),
    /// A Codex server table.
    Codex(Table),
}

impl MemberValue {
    pub(crate) fn state(&self) -> String {
        match self {
            MemberValue::Claude(node) => json_state(node),
            MemberValue::Codex(table) => toml_state(&Item::Table(table.clone())),
        }
    }
}

/// A server entry inside a host config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberPlace {
    pub(crate) file: PathBuf,
    pub(crate) host: AgentHost,
    pub(crate) name: String,
}

/// The top-level key holding the servers.
fn servers_key(host: AgentHost) -> &'static str {
    host.profile().mcp_servers_key
}

/// The entry name of a host's server `name` (`mcpServers.<name>`, `mcp_servers.<name>`).
pub(crate) fn entry_name(host: AgentHost, name: &str) -> String {
    format!("{}.{name}", servers_key(host))
}

impl MemberPlace {
    pub(crate) fn entry(&self) -> String {
        entry_name(self.host, &self.name)
    }

    fn config(&self, reason: impl Into<String>) -> ActivationError {
        ActivationError::Config {
            path: self.file.clone(),
            reason: reason.into(),
        }
    }

    fn changed(&self) -> ActivationError {
        ActivationError::Conflict {
            path: self.file.clone(),
            entry: Some(self.entry()),
            reason: ConflictReason::ChangedDuringApply,
        }
    }

    fn text<'a>(&self, bytes: &'a [u8]) -> Result<&'a str, ActivationError> {
        json_text(bytes).map_err(|e| self.config(e.to_string()))
    }

    fn document(&self, bytes: Option<&[u8]>) -> Result<DocumentMut, ActivationError> {
        let text = self.text(bytes.unwrap_or_default())?;
        text.parse()
            .map_err(|e: toml_edit::TomlError| self.config(e.to_string()))
    }

    /// The entry's current state (`None`: absent, also when the file is missing).
    pub(crate) fn observe(&self) -> Result<Option<String>, ActivationError> {
        let bytes = read_host_file(&self.file)?;
        self.state_in(bytes.as_deref())
    }

    fn state_in(&self, bytes: Option<&[u8]>) -> Result<Option<String>, ActivationError> {
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        match self.host.profile().mcp_layout {
            McpLayout::ProjectJson { .. } => {
                let root = parse_json(self.text(bytes)?).map_err(|e| self.config(e.to_string()))?;
                match root.get(servers_key(self.host)) {
                    None => Ok(None),
                    Some(servers @ JsonNode::Object(_)) => {
                        Ok(servers.get(&self.name).map(json_state))
                    }
                    Some(other) => Err(self.config(format!("mcpServers is {}", other.kind()))),
                }
            }
            McpLayout::HomeToml { .. } => {
                let doc = self.document(Some(bytes))?;
                match doc.get(servers_key(self.host)) {
                    None => Ok(None),
                    Some(item) => match item.as_table_like() {
                        Some(servers) => Ok(servers.get(&self.name).map(toml_state)),
                        None => Err(self.config("mcp_servers is not a table")),
                    },
                }
            }
        }
    }

    /// The atomic step of an activation: under the file's lock, checks that the entry still
    /// holds `prior` and writes `value`, keeping every other byte.
    pub(crate) fn install(
        &self,
        value: &MemberValue,
        prior: Option<&str>,
    ) -> Result<(), ActivationError> {
        update_locked(&self.file, |current| -> Result<_, ActivationError> {
            if self.state_in(current)?.as_deref() != prior {
                return Err(self.changed());
            }
            match value {
                MemberValue::Claude(node) => {
                    // A new file starts as an empty multi-line object, so the entry is laid out
                    // one member per line, as Claude Code writes the file.
                    let text = match current {
                        Some(bytes) => self.text(bytes)?,
                        None => "{}\n",
                    };
                    let new =
                        set_member(text, &[servers_key(self.host), &self.name], &node.to_text())
                            .map_err(|e| self.config(e.to_string()))?;
                    Ok(Some(new.into_bytes()))
                }
                MemberValue::Codex(table) => {
                    let mut doc = self.document(current)?;
                    codex_insert(&mut doc, &self.name, table)
                        .map_err(|e| self.config(e.to_string()))?;
                    Ok(Some(doc.to_string().into_bytes()))
                }
            }
        })
        .map(drop)
    }

    /// The atomic step of a deactivation: under the file's lock, removes the entry if it still
    /// holds `prior`, keeping every other byte.
    pub(crate) fn remove(&self, prior: &str) -> Result<(), ActivationError> {
        update_locked(&self.file, |current| -> Result<_, ActivationError> {
            match self.state_in(current)? {
                None => return Ok(None),
                Some(state) if state != prior => return Err(self.changed()),
                Some(_) => {}
            }
            let bytes = current.unwrap_or_default();
            match self.host.profile().mcp_layout {
                McpLayout::ProjectJson { .. } => {
                    let new =
                        remove_member(self.text(bytes)?, &[servers_key(self.host), &self.name])
                            .map_err(|e| self.config(e.to_string()))?;
                    Ok(Some(new.into_bytes()))
                }
                McpLayout::HomeToml { .. } => {
                    let mut doc = self.document(current)?;
                    let key = servers_key(self.host);
                    let now_empty = match doc.get_mut(key).and_then(Item::as_table_like_mut) {
                        Some(servers) => {
                            servers.remove(&self.name);
                            servers.is_empty()
                        }
                        None => false,
                    };
                    // An implicit `mcp_servers` table has no text of its own; dropping it when it
                    // is empty changes no byte and leaves no trace of ctx's table.
                    let implicit = doc
                        .get(key)
                        .and_then(Item::as_table)
                        .is_some_and(Table::is_implicit);
                    if now_empty && implicit {
                        doc.remove(key);
                    }
                    Ok(Some(doc.to_string().into_bytes()))
                }
            }
        })
        .map(drop)
    }
}

/// Puts `table` at `mcp_servers.<name>`, creating `mcp_servers` as an implicit table (no header
/// line of its own) when missing. A replaced table keeps its place in the file.
fn codex_insert(doc: &mut DocumentMut, name: &str, table: &Table) -> Result<(), McpEntryError> {
    let key = "mcp_servers";
    if !doc.contains_key(key) {
        let mut servers = Table::new();
        servers.set_implicit(true);
        doc.insert(key, Item::Table(servers));
    }
    match doc.get_mut(key) {
        Some(Item::Table(servers)) => {
            let mut table = table.clone();
            if let Some(Item::Table(old)) = servers.get(name) {
                table.set_position(old.position());
            }
            servers.insert(name, Item::Table(table));
            Ok(())
        }
        Some(Item::Value(toml_edit::Value::InlineTable(servers))) => {
            servers.insert(
                name,
                toml_edit::Value::InlineTable(table.clone().into_inline_table()),
            );
            Ok(())
        }
        _ => Err(McpEntryError::ServersNotTable),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn server(json: &str) -> JsonNode {
        parse_json(json).unwrap()
    }

    #[test]
    fn literal_secrets_are_refused_and_references_pass() {
        for ok in [
            r#"{"command":"npx","args":["-y","@sentry/mcp-server@latest"],"env":{"SENTRY_AUTH_TOKEN":"${SENTRY_AUTH_TOKEN}"}}"#,
            r#"{"type":"http","url":"https://api.githubcopilot.com/mcp/","headers":{"Authorization":"Bearer ${GITHUB_PERSONAL_ACCESS_TOKEN}"}}"#,
            r#"{"command":"npx","args":["--dsn","postgres://app:${PW}@db/app","--disk-size","10"],"env":{"LOG_LEVEL":"info"}}"#,
        ] {
            check_secrets("s", &server(ok)).unwrap();
        }
        for (bad, field) in [
            (
                r#"{"command":"x","env":{"GITHUB_TOKEN":"abc123"}}"#,
                "env.GITHUB_TOKEN",
            ),
            (
                r#"{"type":"http","url":"https://x","headers":{"Authorization":"Bearer abc"}}"#,
                "headers.Authorization",
            ),
            (r#"{"command":"x","args":["--api-key","k-123"]}"#, "args[1]"),
            (r#"{"command":"x","args":["--token=abc"]}"#, "args[0]"),
            (
                r#"{"command":"x","args":["postgres://u:hunter2@db/x"]}"#,
                "args[0]",
            ),
            (r#"{"command":"x","env":{"X":"ghp_0123456789"}}"#, "env.X"),
            (r#"{"type":"http","url":"https://x/?k=sk-abc"}"#, "url"),
        ] {
            match check_secrets("s", &server(bad)) {
                Err(ActivationError::LiteralSecret { field: f, .. }) => {
                    assert_eq!(f, field, "{bad}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn codex_tables_carry_references_not_values() {
        let t = codex_table(
            "sentry",
            &server(r#"{"type":"stdio","command":"npx","args":["-y","@sentry/mcp-server@latest"],"env":{"SENTRY_AUTH_TOKEN":"${SENTRY_AUTH_TOKEN}","LOG":"info"}}"#),
        )
        .unwrap();
        let mut doc = DocumentMut::new();
        doc.insert("s", Item::Table(t));
        assert_eq!(
            doc.to_string(),
            "[s]\ncommand = \"npx\"\nargs = [\"-y\", \"@sentry/mcp-server@latest\"]\nenv_vars = \
             [\"SENTRY_AUTH_TOKEN\"]\nenv = { LOG = \"info\" }\n"
        );
        let t = codex_table(
            "github",
            &server(r#"{"type":"http","url":"https://api.githubcopilot.com/mcp/","headers":{"Authorization":"Bearer ${GH}","X-Team":"${TEAM}","X-Mode":"ro"}}"#),
        )
        .unwrap();
        let mut doc = DocumentMut::new();
        doc.insert("g", Item::Table(t));
        assert_eq!(
            doc.to_string(),
            "[g]\nurl = \"https://api.githubcopilot.com/mcp/\"\nbearer_token_env_var = \"GH\"\n\
             env_http_headers = { X-Team = \"TEAM\" }\nhttp_headers = { X-Mode = \"ro\" }\n"
        );
        for bad in [
            r#"{"command":"uvx","args":["mcp-server-git","--repository","${CLAUDE_PROJECT_DIR}"]}"#,
            r#"{"command":"x","env":{"A":"${B}"}}"#,
            r#"{"type":"sse","url":"https://x"}"#,
            r#"{"command":"x","timeout":5}"#,
        ] {
            assert!(
                matches!(
                    codex_table("x", &server(bad)),
                    Err(ActivationError::UnsupportedForHost { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn entry_states_ignore_layout_but_not_values() {
        let a = server(r#"{"command":"npx","args":["a"]}"#);
        let b = server("{\n  \"args\": [ \"a\" ],\n  \"command\": \"npx\"\n}");
        let c = server(r#"{"command":"npx","args":["b"]}"#);
        assert_eq!(json_state(&a), json_state(&b));
        assert_ne!(json_state(&a), json_state(&c));
        let doc: DocumentMut =
            "[x]\ncommand = \"npx\"\nargs = [\"a\"]\n[y]\nargs=['a']\ncommand='npx'\n"
                .parse()
                .unwrap();
        assert_eq!(toml_state(&doc["x"]), toml_state(&doc["y"]));
    }
}
