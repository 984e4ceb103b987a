//! The `ctx` command line: argument parsing by hand and dispatch. `main` only gathers the
//! process's arguments, environment, clock and standard streams and calls [`run`]. The commands,
//! their JSON and their exit statuses are specified in `spec/cli.md`.

mod audit;
mod audit_stores;
mod browser;
mod build;
mod catalog_cmd;
mod commands;
mod data_dir;
mod demo;
mod doctor;
mod error;
mod export;
mod hook;
mod init;
mod inspect;
mod person;
mod standing;
mod tty;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;

use ctx_journal::Timestamp;

use ctx_hosts::{AgentHost, HostHome};
use ctx_service::Layout;

pub use commands::{HOST_INPUT_MAX_BYTES, HostCommand};
pub use data_dir::{DATA_DIR_ENV, DataDir, DataDirSource, choose_data_dir};
pub use demo::{DemoSummary, run_demo};
pub use error::{CliError, EXIT_INTEGRITY, EXIT_INTERNAL, EXIT_OK, EXIT_OUTCOME, EXIT_USAGE};

/// The `--help` text.
pub const USAGE: &str = "\
ctx: plans, consents to and installs the capabilities of agent coding sessions

Usage: ctx [--data-dir DIR] [--journal SOURCE] <command> [options]

Commands:
  demo                      the whole flow on the sample catalog, step by step
  audit [--json]            verify every record, replay every stream, rebuild every projection,
                            re-verify the verifier registry and every consent decision
  inspect [--json]          streams, heads, projection counts and digests
  export [--output FILE]    the journal as JSON lines with digests (stdout by default)
  import [--input FILE]     an export into an empty data directory (stdin by default)
  compact                   give the journal file's free pages back to the file system
                            (embedded journal; waits for other ctx processes)
  catalog add SOURCE... [--namespace NS]
                            add skill directories, subagent files, plugins, marketplaces and
                            MCP files to this data directory's catalog (remembered; every add
                            rebuilds from all sources, with a table of every problem)
  catalog list [--json]     every catalog entry: how it reaches a host, flags, digest, source
  catalog show ID [--json]  one entry, and every file of a skill tree
  catalog build SOURCE... --out DIR [--namespace NS]
                            a ctx.catalog-v2 directory from the same sources, for publishers
                            (namespace `local` by default)

Host commands (JSON on stdin and stdout, see spec/cli.md):
  catalog ingest [--catalog-dir DIR]    the sample catalog when no directory is given
  query prepare | query reopen
  desired set
  consent challenge | consent resolve | consent recover
  policy show | policy set [--key FILE]
                                        a policy that installs without asking needs the
                                        person's approval at their terminal
  key generate --out FILE               a plain device key (0600); registers nothing
  key sign --key FILE                   sign a consent challenge with a device key

The person's commands (in their own terminal; answers and passphrases only from it):
  key init [--key FILE] [--approver FILE]
                                        create the device key sealed under a passphrase
                                        (default $XDG_CONFIG_HOME/ctx/device.key or
                                        ~/.config/ctx/device.key) and register it; after the
                                        first, --approver names a registered key that approves
  key init --file-key --key FILE        a plain key for CI and the demo (file assurance)
  consent approve DIGEST [--key FILE] [--yes] [--scope S]
  consent deny DIGEST [--key FILE] [--yes] [--scope S]
                                        show what the challenge installs, ask, sign, resolve;
                                        --yes skips the question, never the passphrase;
                                        --scope session|workspace|always remembers the decision
                                        for this exact install (default once: this challenge)
  key init --passkey [--approver FILE]  register a passkey or security key through a page
                                        served once on localhost (spec/webauthn.md)
  consent approve|deny DIGEST --browser sign with your passkey on a page served once on localhost
  consent pending                       every consent that waits for you, with what it installs
  consent list                          your standing decisions, in force and revoked
  consent revoke ID [--key FILE]        take back a standing decision (sd-…) or the grant given
                                        at a challenge (its digest); signed like a decision

Agent hosts (Claude Code, Codex):
  init --host claude|codex              register ctx's hooks with the host, once
  doctor [--json]                       what is installed, untrusted, drifted or conflicting
  hook claude|codex EVENT               a host hook: the host's JSON on stdin, one JSON object
                                        on stdout, exit 0 unless it deliberately blocks

  ctx --help | ctx --version

The data directory is --data-dir DIR, else $CTX_DATA_DIR, else $XDG_DATA_HOME/ctx, else
$HOME/.local/share/ctx (always an absolute path). Concurrent ctx processes on one data
directory wait for each other for up to 30 s.

The journal is the data directory's redb file unless --journal SOURCE (else $CTX_JOURNAL_URL)
names a PostgreSQL database (postgres://… or host=… dbname=…); the installation key stays
in the data directory. `redb` names the default.

Exit status: 0 success, 1 a domain outcome the host must act on (consent required, busy,
conflict, denied: the JSON says which), 2 bad input, 3 an internal or integrity failure.
";

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    Help,
    Version,
    Demo,
    Audit {
        json: bool,
    },
    Inspect {
        json: bool,
    },
    Export {
        output: Option<PathBuf>,
    },
    Import {
        input: Option<PathBuf>,
    },
    /// `ctx compact`: offline compaction of the embedded journal's file.
    Compact,
    /// `ctx catalog build SOURCE... --out DIR [--namespace NS]` (spec/catalog-build.md).
    CatalogBuild {
        sources: Vec<PathBuf>,
        out: PathBuf,
        namespace: String,
    },
    /// `ctx catalog add SOURCE... [--namespace NS]` (spec/cli.md §5.8).
    CatalogAdd {
        sources: Vec<PathBuf>,
        namespace: Option<String>,
    },
    /// `ctx catalog list [--json]`.
    CatalogList {
        json: bool,
    },
    /// `ctx catalog show ID [--json]`.
    CatalogShow {
        id: String,
        json: bool,
    },
    Host(HostCommand),
    /// `ctx key init [--key FILE]`: the person's device key.
    KeyInit {
        key: Option<PathBuf>,
        approver: Option<PathBuf>,
        file_key: bool,
        /// `--passkey`: register a passkey instead (spec/webauthn.md §7).
        passkey: bool,
    },
    /// `ctx consent approve|deny DIGEST [--key FILE] [--yes]`: the person's decision.
    ConsentDecide {
        challenge_digest: String,
        grant: bool,
        key: Option<PathBuf>,
        yes: bool,
        /// `--browser`: sign with the registered passkey (spec/webauthn.md §4).
        browser: bool,
        /// `--scope`: `once` (default), `session`, `workspace` or `always` (spec/cli.md §6).
        scope: DecisionScope,
    },
    /// `ctx consent pending`: every challenge that awaits the person (spec/cli.md §6).
    ConsentPending,
    /// `ctx consent list`: the person's standing decisions (spec/cli.md §6).
    ConsentList,
    /// `ctx consent revoke ID [--key FILE]`: takes back a standing decision or a grant.
    ConsentRevoke {
        target: ctx_service::RevokeTarget,
        key: Option<PathBuf>,
    },
    /// `ctx hook claude|codex EVENT`: one hook call of an agent host.
    Hook {
        host: AgentHost,
        event: &'static ctx_hosts::HookEvent,
    },
    /// `ctx init --host claude|codex`: register ctx's hooks with a host.
    Init {
        host: AgentHost,
    },
    /// `ctx doctor [--json]`: what is installed, untrusted, drifted or conflicting.
    Doctor {
        json: bool,
    },
}

/// A parsed command line: the command and the data directory option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub data_dir: Option<PathBuf>,
    /// `--journal SOURCE`: `redb` or a PostgreSQL connection string (spec/scale-out.md §5).
    pub journal: Option<String>,
    pub command: Command,
}

/// The process's standard streams, and whether standard error is a terminal (progress bars go
/// there only when it is).
pub struct Streams<'a> {
    pub input: &'a mut dyn Read,
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    pub err_is_terminal: bool,
}

impl std::fmt::Debug for Streams<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams")
            .field("err_is_terminal", &self.err_is_terminal)
            .finish_non_exhaustive()
    }
}

/// How far a decision reaches (spec/cli.md §6, spec/decisions.md §16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionScope {
    /// This challenge only.
    Once,
    /// Every challenge for the same exact install in the challenge's host session.
    Session,
    /// … in the challenge's workspace.
    Workspace,
    /// … anywhere.
    Always,
}

impl DecisionScope {
    fn parse(text: &str) -> Result<DecisionScope, CliError> {
        match text {
            "once" => Ok(DecisionScope::Once),
            "session" => Ok(DecisionScope::Session),
            "workspace" => Ok(DecisionScope::Workspace),
            "always" => Ok(DecisionScope::Always),
            other => Err(CliError::Usage(format!(
                "--scope {other:?} is not one of once, session, workspace, always"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DecisionScope::Once => "once",
            DecisionScope::Session => "session",
            DecisionScope::Workspace => "workspace",
            DecisionScope::Always => "always",
        }
    }
}

/// Options that take a value.
const VALUE_OPTIONS: [&str; 11] = [
    "--namespace",
    "--approver",
    "--scope",
    "--data-dir",
    "--journal",
    "--output",
    "--input",
    "--catalog-dir",
    "--out",
    "--key",
    "--host",
];

/// Parses the arguments after the program name.
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, CliError> {
    let mut words = Vec::new();
    for arg in args {
        match arg.into_string() {
            Ok(word) => words.push(word),
            Err(arg) => {
                return Err(CliError::Usage(format!(
                    "argument {arg:?} is not valid UTF-8"
                )));
            }
        }
    }
    let mut positional: Vec<&str> = Vec::new();
    let mut values: Vec<(&str, &str)> = Vec::new();
    let mut json = false;
    let mut help = false;
    let mut version = false;
    let mut yes = false;
    let mut file_key = false;
    let (mut passkey, mut browser) = (false, false);
    let mut iter = words.iter().map(String::as_str);
    while let Some(word) = iter.next() {
        match word {
            "-h" | "--help" => help = true,
            "-V" | "--version" => version = true,
            "-y" | "--yes" => yes = true,
            "--json" => json = true,
            "--file-key" => file_key = true,
            "--passkey" => passkey = true,
            "--browser" => browser = true,
            _ if word.starts_with("--") => {
                let (name, inline) = match word.split_once('=') {
                    Some((name, value)) => (name, Some(value)),
                    None => (word, None),
                };
                if !VALUE_OPTIONS.contains(&name) {
                    return Err(CliError::Usage(format!(
                        "unknown option {name:?}; try `ctx --help`"
                    )));
                }
                let value = match inline {
                    Some(value) => value,
                    None => iter
                        .next()
                        .ok_or_else(|| CliError::Usage(format!("option {name} needs a value")))?,
                };
                if value.is_empty() {
                    return Err(CliError::Usage(format!("option {name} has an empty value")));
                }
                if values.iter().any(|(n, _)| *n == name) {
                    return Err(CliError::Usage(format!("option {name} is given twice")));
                }
                values.push((name, value));
            }
            _ => positional.push(word),
        }
    }
    let mut take = |name: &str| -> Option<PathBuf> {
        let index = values.iter().position(|(n, _)| *n == name)?;
        Some(PathBuf::from(values.remove(index).1))
    };
    let data_dir = take("--data-dir");
    let journal = take("--journal").map(|p| p.to_string_lossy().into_owned());
    if help || positional.first() == Some(&"help") {
        return Ok(Invocation {
            data_dir,
            journal,
            command: Command::Help,
        });
    }
    let command = match positional.as_slice() {
        [] if version => Command::Version,
        [] => {
            return Err(CliError::Usage(
                "no command given; try `ctx --help`".to_owned(),
            ));
        }
        ["demo"] => Command::Demo,
        ["audit"] => Command::Audit { json },
        ["inspect"] => Command::Inspect { json },
        ["export"] => Command::Export {
            output: take("--output"),
        },
        ["import"] => Command::Import {
            input: take("--input"),
        },
        ["compact"] => Command::Compact,
        ["catalog", "build", sources @ ..] => {
            if sources.is_empty() {
                return Err(CliError::Usage(
                    "`ctx catalog build` needs at least one SOURCE path".to_owned(),
                ));
            }
            let out = take("--out")
                .ok_or_else(|| CliError::Usage("`ctx catalog build` needs --out DIR".into()))?;
            let namespace = take("--namespace").map_or_else(
                || build::DEFAULT_NAMESPACE.to_owned(),
                |n| n.to_string_lossy().into_owned(),
            );
            if !ctx_model::is_safe_token(&namespace) {
                return Err(CliError::Usage(format!(
                    "--namespace {namespace:?} is not a safe token: 1 to 128 characters of a-z, \
                     0-9 and ._:@-, starting with a letter or digit"
                )));
            }
            Command::CatalogBuild {
                sources: sources.iter().map(PathBuf::from).collect(),
                out,
                namespace,
            }
        }
        ["catalog", "add", sources @ ..] => {
            if sources.is_empty() {
                return Err(CliError::Usage(
                    "`ctx catalog add` needs at least one SOURCE path".to_owned(),
                ));
            }
            let namespace = take("--namespace").map(|n| n.to_string_lossy().into_owned());
            if let Some(namespace) = &namespace
                && !ctx_model::is_safe_token(namespace)
            {
                return Err(CliError::Usage(format!(
                    "--namespace {namespace:?} is not a safe token: 1 to 128 characters of a-z, \
                     0-9 and ._:@-, starting with a letter or digit"
                )));
            }
            Command::CatalogAdd {
                sources: sources.iter().map(PathBuf::from).collect(),
                namespace,
            }
        }
        ["catalog", "list"] => Command::CatalogList { json },
        ["catalog", "show", id] => Command::CatalogShow {
            id: (*id).to_owned(),
            json,
        },
        ["catalog", "ingest"] => Command::Host(HostCommand::CatalogIngest {
            catalog_dir: take("--catalog-dir"),
        }),
        ["query", "prepare"] => Command::Host(HostCommand::QueryPrepare),
        ["query", "reopen"] => Command::Host(HostCommand::QueryReopen),
        ["desired", "set"] => Command::Host(HostCommand::DesiredSet),
        ["consent", "challenge"] => Command::Host(HostCommand::ConsentChallenge),
        ["consent", "resolve"] => Command::Host(HostCommand::ConsentResolve),
        ["consent", "recover"] => Command::Host(HostCommand::ConsentRecover),
        ["policy", "show"] => Command::Host(HostCommand::PolicyShow),
        ["policy", "set"] => Command::Host(HostCommand::PolicySet { key: take("--key") }),
        ["key", "generate"] => Command::Host(HostCommand::KeyGenerate {
            out: take("--out")
                .ok_or_else(|| CliError::Usage("`ctx key generate` needs --out FILE".into()))?,
        }),
        ["key", "init"] => Command::KeyInit {
            key: take("--key"),
            approver: take("--approver"),
            file_key,
            passkey,
        },
        ["consent", verb @ ("approve" | "deny"), digest] => {
            person::check_digest(digest)?;
            let scope = match take("--scope") {
                Some(scope) => DecisionScope::parse(&scope.to_string_lossy())?,
                None => DecisionScope::Once,
            };
            if browser && scope != DecisionScope::Once {
                return Err(CliError::Usage(
                    "a passkey cannot sign a standing decision yet: decide with --browser once, \
                     or use the sealed device key with --scope"
                        .to_owned(),
                ));
            }
            Command::ConsentDecide {
                challenge_digest: (*digest).to_owned(),
                grant: *verb == "approve",
                key: take("--key"),
                yes,
                browser,
                scope,
            }
        }
        ["consent", "pending"] => Command::ConsentPending,
        ["consent", "list"] => Command::ConsentList,
        ["consent", "revoke", id] => Command::ConsentRevoke {
            target: ctx_service::RevokeTarget::parse(id)
                .map_err(|e| CliError::Usage(e.to_string()))?,
            key: take("--key"),
        },
        ["consent", "revoke"] => {
            return Err(CliError::Usage(
                "`ctx consent revoke` needs a standing decision id (sd-…) or a challenge digest"
                    .to_owned(),
            ));
        }
        ["consent", "approve" | "deny"] => {
            return Err(CliError::Usage(
                "`ctx consent approve|deny` needs the challenge digest".to_owned(),
            ));
        }
        ["hook", host, event] => {
            let host = AgentHost::parse(host).ok_or_else(|| {
                CliError::Usage(format!("unknown host {host:?}; ctx knows claude and codex"))
            })?;
            let event = host.hook_event_named(event).ok_or_else(|| {
                CliError::Usage(format!(
                    "unknown {host} hook event {event:?}; ctx registers {}",
                    host.hook_events()
                        .iter()
                        .map(|e| e.ctx_name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            Command::Hook { host, event }
        }
        ["hook", ..] => {
            return Err(CliError::Usage(
                "`ctx hook` needs a host (claude or codex) and an event".to_owned(),
            ));
        }
        ["init"] => {
            let host = take("--host")
                .ok_or_else(|| CliError::Usage("`ctx init` needs --host claude|codex".into()))?;
            let name = host.to_string_lossy();
            let host = AgentHost::parse(&name).ok_or_else(|| {
                CliError::Usage(format!("unknown host {name:?}; ctx knows claude and codex"))
            })?;
            Command::Init { host }
        }
        ["doctor"] => Command::Doctor { json },
        ["key", "sign"] => Command::Host(HostCommand::KeySign {
            key: take("--key")
                .ok_or_else(|| CliError::Usage("`ctx key sign` needs --key FILE".into()))?,
        }),
        [group, rest @ ..] if KNOWN_GROUPS.contains(group) => {
            // `ctx catalog ingest DIR`: the command is known and the extra word is the fault.
            if let [command, extra, ..] = rest {
                let without: Vec<OsString> = words
                    .iter()
                    .filter(|w| w.as_str() != *extra)
                    .map(OsString::from)
                    .collect();
                if parse_args(without).is_ok() {
                    return Err(CliError::Usage(format!(
                        "`ctx {group} {command}` takes no argument {extra:?}; its inputs are \
                         options (try `ctx --help`)"
                    )));
                }
            }
            return Err(CliError::Usage(match rest.first() {
                Some(word) => format!("unknown `ctx {group}` command {word:?}; try `ctx --help`"),
                None => format!("`ctx {group}` needs a command; try `ctx --help`"),
            }));
        }
        [_, extra, ..] if SINGLE_WORD.contains(&positional[0]) => {
            return Err(CliError::Usage(format!(
                "`ctx {}` takes no argument {extra:?}",
                positional[0]
            )));
        }
        [first, ..] => {
            return Err(CliError::Usage(format!(
                "unknown command {first:?}; try `ctx --help`"
            )));
        }
    };
    if let Some((name, _)) = values.first() {
        return Err(CliError::Usage(format!(
            "option {name} does not apply to this command; try `ctx --help`"
        )));
    }
    if file_key && !matches!(command, Command::KeyInit { .. }) {
        return Err(CliError::Usage(
            "option --file-key applies to `ctx key init` only".to_owned(),
        ));
    }
    if passkey
        && !matches!(
            command,
            Command::KeyInit {
                file_key: false,
                key: None,
                ..
            }
        )
    {
        return Err(CliError::Usage(
            "option --passkey applies to `ctx key init` only, without --key or --file-key"
                .to_owned(),
        ));
    }
    if browser
        && !matches!(
            command,
            Command::ConsentDecide {
                key: None,
                yes: false,
                ..
            }
        )
    {
        return Err(CliError::Usage(
            "option --browser applies to `ctx consent approve|deny` only, without --key or --yes"
                .to_owned(),
        ));
    }
    if yes && !matches!(command, Command::ConsentDecide { .. }) {
        return Err(CliError::Usage(
            "option --yes applies to `ctx consent approve|deny` only".to_owned(),
        ));
    }
    if json
        && !matches!(
            command,
            Command::Audit { .. }
                | Command::Inspect { .. }
                | Command::Doctor { .. }
                | Command::CatalogList { .. }
                | Command::CatalogShow { .. }
        )
    {
        return Err(CliError::Usage(
            "option --json applies to `ctx audit`, `ctx inspect`, `ctx doctor`, `ctx catalog \
             list` and `ctx catalog show` only (host commands always speak JSON)"
                .to_owned(),
        ));
    }
    Ok(Invocation {
        data_dir,
        journal,
        command,
    })
}

/// Commands of two words: a group and a verb.
const KNOWN_GROUPS: [&str; 6] = ["catalog", "query", "desired", "consent", "policy", "key"];
/// Commands of one word.
const SINGLE_WORD: [&str; 8] = [
    "demo", "audit", "inspect", "export", "import", "compact", "init", "doctor",
];

/// Runs one `ctx` command and returns its exit status. `env` looks up environment variables and
/// `now` is the wall-clock time of this process (the trusted clock of every command).
pub fn run(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
    now: Timestamp,
    streams: Streams<'_>,
) -> u8 {
    let Streams {
        input,
        out,
        err,
        err_is_terminal,
    } = streams;
    let args: Vec<OsString> = args.into_iter().collect();
    let is_hook = is_hook_call(&args);
    match execute(args, env, now, input, out, err, err_is_terminal) {
        Ok(code) => code,
        // A hook call must not fail the host even when its command line is wrong (exit 2 would
        // erase the person's prompt): the sentence becomes a message to the person.
        Err(e) if is_hook => {
            let _ = writeln!(err, "ctx: error: {e}");
            let message = ctx_model::Json::str(format!("ctx: {e}"));
            let _ = writeln!(
                out,
                "{}",
                ctx_model::Json::object([("systemMessage", message)])
            );
            EXIT_OK
        }
        Err(e) => {
            // If stderr is gone too there is nobody left to tell; the exit status still says it.
            let _ = writeln!(err, "ctx: error: {e}");
            if matches!(e, CliError::Usage(_)) {
                let _ = writeln!(err, "\n{USAGE}");
            }
            e.exit_code()
        }
    }
}

fn execute(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
    now: Timestamp,
    input: &mut dyn Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
    err_is_terminal: bool,
) -> Result<u8, CliError> {
    let invocation = parse_args(args)?;
    let source = match invocation
        .journal
        .clone()
        .or_else(|| env(ctx_service::JOURNAL_URL_ENV).map(|v| v.to_string_lossy().into_owned()))
    {
        Some(value) => Some(
            ctx_service::JournalSource::parse(&value)
                .map_err(|e| CliError::Usage(e.to_string()))?,
        ),
        None => None,
    };
    let layout = || -> Result<Layout, CliError> {
        let dir = choose_data_dir(invocation.data_dir.as_deref(), &env)?;
        let layout = Layout::new(&dir.path);
        if let Some(source) = &source {
            ctx_service::route_journal(&layout.journal(), source.clone());
        }
        Ok(layout)
    };
    let code = match &invocation.command {
        Command::Help => {
            out.write_all(USAGE.as_bytes())?;
            EXIT_OK
        }
        Command::Version => {
            writeln!(out, "ctx {}", env!("CARGO_PKG_VERSION"))?;
            EXIT_OK
        }
        Command::Demo => {
            let dir = choose_data_dir(invocation.data_dir.as_deref(), &env)?;
            // The demo's journal directory is routed like every command's.
            layout()?;
            run_demo(&dir, now, out)?;
            EXIT_OK
        }
        Command::Audit { json } => audit::audit(&layout()?, *json, out, err, err_is_terminal)?,
        Command::Inspect { json } => inspect::inspect(&layout()?, *json, out)?,
        Command::Export { output } => export::export(&layout()?, output.as_deref(), out)?,
        Command::Import { input: file } => export::import(&layout()?, file.as_deref(), input, out)?,
        Command::Compact => audit::compact(&layout()?, out)?,
        Command::CatalogBuild {
            sources,
            out: dir,
            namespace,
        } => build::catalog_build(sources, dir, namespace, out)?,
        Command::CatalogAdd { sources, namespace } => {
            catalog_cmd::catalog_add(&layout()?, sources, namespace.as_deref(), out)?
        }
        Command::CatalogList { json } => catalog_cmd::catalog_list(&layout()?, *json, out)?,
        Command::CatalogShow { id, json } => catalog_cmd::catalog_show(&layout()?, id, *json, out)?,
        Command::Host(HostCommand::PolicySet { key: None }) => {
            // The person's default device key approves a policy that grants installs by itself.
            let key = person::default_device_key(&env).ok();
            commands::execute(
                &HostCommand::PolicySet { key },
                &layout()?,
                now,
                input,
                out,
                err,
            )?
        }
        Command::Host(command) => commands::execute(command, &layout()?, now, input, out, err)?,
        Command::KeyInit {
            approver,
            passkey: true,
            ..
        } => person::key_init_passkey(&layout()?, now, approver.as_deref(), out)?,
        Command::KeyInit {
            key,
            approver,
            file_key,
            passkey: false,
        } => {
            let key = match key {
                Some(key) => key.clone(),
                None => person::default_device_key(&env)?,
            };
            person::key_init(&layout()?, now, &key, *file_key, approver.as_deref(), out)?
        }
        Command::ConsentDecide {
            challenge_digest,
            grant,
            browser: true,
            ..
        } => person::decide_browser(&layout()?, now, challenge_digest, *grant, out)?,
        Command::ConsentDecide {
            challenge_digest,
            grant,
            key,
            yes,
            browser: false,
            scope,
        } => {
            let key = match key {
                Some(key) => key.clone(),
                None => person::default_device_key(&env)?,
            };
            let decision = person::Decision {
                grant: *grant,
                scope: *scope,
                yes: *yes,
            };
            person::decide(&layout()?, now, challenge_digest, decision, &key, out)?
        }
        Command::ConsentPending => person::pending(&layout()?, now, out)?,
        Command::ConsentList => standing::list(&layout()?, out)?,
        Command::ConsentRevoke { target, key } => {
            let key = match key {
                Some(key) => key.clone(),
                None => person::default_device_key(&env)?,
            };
            standing::revoke(&layout()?, now, target, &key, out)?
        }
        // A hook never fails the host: every failure becomes a message in its JSON (exit 0).
        Command::Hook { host, event } => {
            let layout = layout();
            let home = HostHome::from_env(&env);
            hook::hook(*host, event, layout, home, now, input, out, err)
        }
        Command::Init { host } => {
            let home = HostHome::from_env(&env).map_err(|e| CliError::Usage(e.to_string()))?;
            let key = person::default_device_key(&env).ok();
            init::init(
                *host,
                &layout()?,
                invocation.data_dir.as_deref(),
                &home,
                &current_exe()?,
                key.as_deref(),
                out,
            )?
        }
        Command::Doctor { json } => {
            let home = HostHome::from_env(&env).map_err(|e| CliError::Usage(e.to_string()))?;
            doctor::doctor(
                &layout()?,
                invocation.data_dir.as_deref(),
                &home,
                &current_exe()?,
                *json,
                out,
            )?
        }
    };
    out.flush()?;
    Ok(code)
}

/// Whether a command line is a hook call: its first word that is not an option or an option's
/// value is `hook`.
fn is_hook_call(args: &[OsString]) -> bool {
    let mut words = args.iter().map(|a| a.to_str().unwrap_or_default());
    while let Some(word) = words.next() {
        if VALUE_OPTIONS.contains(&word) {
            words.next();
        } else if !word.starts_with('-') {
            return word == "hook";
        }
    }
    false
}

/// The absolute path of this `ctx` binary: what the hosts' hook entries run.
fn current_exe() -> Result<PathBuf, CliError> {
    std::env::current_exe()
        .map_err(|e| CliError::Unexpected(format!("the path of this ctx binary is unknown: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EXIT_USAGE;

    fn parse(words: &[&str]) -> Result<Invocation, CliError> {
        parse_args(words.iter().map(OsString::from))
    }

    fn command(words: &[&str]) -> Command {
        match parse(words) {
            Ok(invocation) => invocation.command,
            Err(e) => panic!("{words:?}: {e}"),
        }
    }

    fn usage_error(words: &[&str]) -> String {
        match parse(words) {
            Err(CliError::Usage(message)) => message,
            other => panic!("{words:?}: {other:?}"),
        }
    }

    #[test]
    fn an_extra_word_after_a_known_command_is_named_as_the_fault() {
        assert_eq!(
            usage_error(&["catalog", "ingest", "/some/dir"]),
            "`ctx catalog ingest` takes no argument \"/some/dir\"; its inputs are options (try \
             `ctx --help`)"
        );
        assert!(
            usage_error(&["catalog", "frobnicate", "x"])
                .contains("unknown `ctx catalog` command \"frobnicate\"")
        );
    }

    #[test]
    fn parses_commands_and_options() {
        assert_eq!(command(&["demo"]), Command::Demo);
        assert_eq!(command(&["--help"]), Command::Help);
        assert_eq!(command(&["demo", "--help"]), Command::Help);
        assert_eq!(command(&["--version"]), Command::Version);
        assert_eq!(command(&["audit", "--json"]), Command::Audit { json: true });
        assert_eq!(
            command(&["export", "--output=/tmp/x"]),
            Command::Export {
                output: Some("/tmp/x".into())
            }
        );
        assert_eq!(
            command(&["key", "sign", "--key", "/k"]),
            Command::Host(HostCommand::KeySign { key: "/k".into() })
        );
        let invocation = parse(&["--data-dir", "/d", "query", "prepare"]).ok();
        assert_eq!(
            invocation,
            Some(Invocation {
                data_dir: Some("/d".into()),
                journal: None,
                command: Command::Host(HostCommand::QueryPrepare),
            })
        );
        // The option may come after the command too.
        let invocation = parse(&["consent", "resolve", "--data-dir=/d"]).ok();
        assert_eq!(invocation.and_then(|i| i.data_dir), Some("/d".into()));
    }

    #[test]
    fn refuses_bad_command_lines_naming_the_value() {
        assert!(usage_error(&[]).contains("no command"));
        assert!(usage_error(&["frobnicate"]).contains("\"frobnicate\""));
        assert!(usage_error(&["query"]).contains("`ctx query` needs a command"));
        assert!(usage_error(&["query", "nope"]).contains("\"nope\""));
        assert!(usage_error(&["demo", "x"]).contains("\"x\""));
        assert!(usage_error(&["audit", "--colour"]).contains("\"--colour\""));
        assert!(usage_error(&["export", "--output"]).contains("needs a value"));
        assert!(usage_error(&["export", "--output="]).contains("empty value"));
        assert!(usage_error(&["demo", "--output", "/x"]).contains("does not apply"));
        assert!(usage_error(&["demo", "--json"]).contains("--json"));
        assert!(usage_error(&["--data-dir", "/a", "--data-dir", "/b", "demo"]).contains("twice"));
        assert!(usage_error(&["key", "generate"]).contains("--out"));
        assert!(usage_error(&["demo", "--passkey"]).contains("--passkey"));
        assert!(usage_error(&["key", "init", "--passkey", "--file-key"]).contains("--passkey"));
        let digest = "a".repeat(64);
        assert!(
            usage_error(&["consent", "approve", &digest, "--browser", "--yes"])
                .contains("--browser")
        );
        assert!(usage_error(&["audit", "--browser"]).contains("--browser"));
        assert!(matches!(
            command(&["consent", "deny", &digest, "--browser"]),
            Command::ConsentDecide {
                grant: false,
                browser: true,
                ..
            }
        ));
        assert!(matches!(
            command(&["key", "init", "--passkey"]),
            Command::KeyInit { passkey: true, .. }
        ));
    }

    #[test]
    fn bad_input_exits_2_with_usage_and_a_relative_data_dir_is_refused() {
        let run_words = |words: &[&str], env: &dyn Fn(&str) -> Option<OsString>| {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = run(
                words.iter().map(OsString::from),
                env,
                Timestamp(0),
                Streams {
                    input: &mut std::io::empty(),
                    out: &mut out,
                    err: &mut err,
                    err_is_terminal: false,
                },
            );
            (code, String::from_utf8_lossy(&err).into_owned())
        };
        let (code, err) = run_words(&["nope"], &|_| None);
        assert_eq!(code, EXIT_USAGE);
        assert!(err.contains("unknown command \"nope\""), "{err}");
        assert!(err.contains("Usage:"), "{err}");
        let (code, err) = run_words(&["--data-dir", "rel", "inspect"], &|_| None);
        assert_eq!(code, EXIT_USAGE);
        assert!(
            err.contains("--data-dir rel is not an absolute path"),
            "{err}"
        );
        let env = |name: &str| (name == "CTX_DATA_DIR").then(|| OsString::from("rel/dir"));
        let (code, err) = run_words(&["demo"], &env);
        assert_eq!(code, EXIT_USAGE);
        assert!(err.contains("rel/dir"), "{err}");
    }
}
