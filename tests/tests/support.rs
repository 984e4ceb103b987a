//! Helpers shared by the acceptance tests: the fail-point lock, child processes, deterministic
//! randomness and payloads.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use ctx_journal::{Journal, OpenOptions, StreamId};

/// Fail points are process-global: while a fail-point test has one configured, every append in
/// this process (whatever its journal) would hit it. Tests that append hold the read side; tests
/// that configure fail points hold the write side.
static FAILPOINT_LOCK: RwLock<()> = RwLock::new(());

/// Held by every test that appends (any number at once).
pub fn shared() -> RwLockReadGuard<'static, ()> {
    FAILPOINT_LOCK
        .read()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Held by a test that configures fail points: no other appending test runs meanwhile.
pub struct FailPoints {
    scenario: Option<fail::FailScenario<'static>>,
    _guard: RwLockWriteGuard<'static, ()>,
}

impl FailPoints {
    pub fn setup() -> FailPoints {
        let guard = FAILPOINT_LOCK
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        FailPoints {
            scenario: Some(fail::FailScenario::setup()),
            _guard: guard,
        }
    }
}

impl Drop for FailPoints {
    fn drop(&mut self) {
        // Teardown clears every configured fail point, also when the test panicked.
        if let Some(scenario) = self.scenario.take() {
            scenario.teardown();
        }
    }
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Options for tests that reopen journals. The lock wait is not about other processes: while any
/// test of this binary is starting a child process, that child shares this process's open files
/// (among them a just-closed journal's lock file) until its exec, and a reopen with no wait fails
/// as "held by another process" (see
/// `journal::open::reopening_while_this_process_spawns_children_is_not_refused`).
pub fn options() -> OpenOptions {
    OpenOptions::new().lock_wait(Duration::from_secs(10))
}

pub fn open(dir: &Path) -> Journal {
    Journal::open(dir, &options()).unwrap()
}

pub fn stream(name: &str) -> StreamId {
    StreamId::derive("ctx-tests", name.as_bytes()).unwrap()
}

/// SplitMix64: a tiny deterministic generator, so child processes and the parent agree on bytes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn from_time() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng(nanos ^ u64::from(std::process::id()).rotate_left(32))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// FNV-1a, to seed payloads from event ids.
pub fn fnv(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The payload the crash child writes for an event id: its size and bytes follow from the id
/// alone, so the parent can check every byte without being told them.
pub fn payload_for(event_id: &str) -> Vec<u8> {
    let mut rng = Rng::new(fnv(event_id.as_bytes()));
    let len = match rng.below(10) {
        0 => 0,
        1..=6 => rng.below(300),
        7 | 8 => 300 + rng.below(4 * 1024),
        _ => 4 * 1024 + rng.below(20 * 1024),
    } as usize;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The same record value with its payload stored as is: a version-2 value whose payload is
/// compressed (codec 1, or codec 2 with the records dictionary) becomes codec 0 with the decompressed payload after the header, which is
/// the same record under the same D and MAC (spec/journal.md §4, R7). Other values are returned
/// unchanged. Tests that edit payload bytes in place, as an attacker with the file would after
/// decompressing, call it first.
pub fn record_value_stored_as_is(value: &[u8]) -> Vec<u8> {
    if !matches!(value.get(4..8), Some([2, 0, 1 | 2, 0])) {
        return value.to_vec();
    }
    let record = ctx_journal::decode_record_value(value).expect("an intact record value");
    let header = u32::from_le_bytes(value[8..12].try_into().expect("a prefix")) as usize;
    let mut out = value[..12 + header].to_vec();
    out[6] = 0;
    out.extend_from_slice(&record.payload);
    out
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// When this process was started as the child `role`, the value of its environment variable.
pub fn child_role(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// Starts this test binary again, running only the test `test_name` (its full path), with `envs`
/// set. Its standard output is piped; its standard input too, when `stdin` is true.
pub fn spawn_child(test_name: &str, envs: &[(&str, &str)], stdin: bool) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut command = Command::new(exe);
    // A child of a seed test on PostgreSQL uses this process's server and database.
    if let Some(url) = seed_server_url() {
        command.env("CTX_PG_URL", url);
    }
    command
        .args([
            test_name,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .stdout(Stdio::piped())
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() });
    for (k, v) in envs {
        command.env(k, v);
    }
    command.spawn().unwrap()
}

/// Reads complete lines that start with `prefix` from a child's standard output; a final line
/// cut off by the child's death (no newline) is not returned.
#[derive(Debug)]
pub struct Lines {
    reader: BufReader<ChildStdout>,
    prefix: &'static str,
}

impl Lines {
    pub fn new(stdout: ChildStdout, prefix: &'static str) -> Lines {
        Lines {
            reader: BufReader::new(stdout),
            prefix,
        }
    }

    /// The next complete line with the prefix (prefix removed), or `None` at end of output.
    pub fn next_line(&mut self) -> Option<String> {
        loop {
            let mut line = String::new();
            let n = self.reader.read_line(&mut line).unwrap();
            if n == 0 || !line.ends_with('\n') {
                return None;
            }
            if let Some(rest) = line.strip_prefix(self.prefix) {
                return Some(rest.trim_end_matches('\n').to_owned());
            }
        }
    }
}

/// The `ctx` binary, built once per test process: black-box tests run it as a host would.
/// `cargo test --workspace` builds the binary's test harness, not the binary, so the first call
/// builds it with the cargo that runs the tests (same profile and target directory).
pub fn ctx_binary() -> &'static Path {
    static BINARY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "ctx-cli", "--bin", "ctx"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo to build the ctx binary");
        assert!(status.success(), "building the ctx binary failed: {status}");
        // The test binary is target/<profile>/deps/acceptance-<hash>; the binary sits in
        // target/<profile>.
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lives in target/<profile>/deps");
        let binary = profile_dir.join("ctx");
        assert!(binary.is_file(), "no ctx binary at {}", binary.display());
        binary
    })
}

/// What one run of the `ctx` binary did.
#[derive(Debug)]
pub struct CtxRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `ctx args…` on `data_dir` (passed as `--data-dir`) with `stdin`, and waits for it.
pub fn run_ctx(data_dir: &Path, args: &[&str], stdin: &str) -> CtxRun {
    run_ctx_env(data_dir, args, stdin, &[])
}

/// The payloads of every record of `kind` in the data directory, read through `ctx export` as an
/// auditor would, oldest first.
pub fn exported_payloads(data_dir: &Path, kind: &str) -> Vec<ctx_model::Json> {
    use ctx_model::Json;
    let export = run_ctx(data_dir, &["export"], "");
    assert_eq!(export.code, 0, "{export:?}");
    export
        .stdout
        .lines()
        .filter_map(|line| Json::parse(line).ok())
        .filter(|line| line.get_str("kind") == Some(kind))
        .map(|line| {
            let hex = line.get_str("payload").expect("a payload");
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            Json::parse(std::str::from_utf8(&bytes).expect("UTF-8")).expect("a JSON payload")
        })
        .collect()
}

/// [`run_ctx`] with extra environment variables.
pub fn run_ctx_env(data_dir: &Path, args: &[&str], stdin: &str, envs: &[(&str, &Path)]) -> CtxRun {
    use std::io::Write as _;
    // Never the real home: hooks activate capabilities under $HOME, and the person's commands
    // keep their key there. A test that needs its own home passes HOME in `envs`.
    let home = data_dir.with_extension("home");
    // setsid(1): ctx runs without a controlling terminal, as a host's hook or an agent's tool
    // call does, also when the tests themselves run in a terminal (spec/decisions.md §12.3).
    let mut child = Command::new("setsid")
        .arg("--wait")
        .arg(ctx_binary())
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("CTX_DATA_DIR")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env("HOME", &home)
        .env("CODEX_HOME", home.join(".codex"))
        .envs(envs.iter().map(|(k, v)| (*k, *v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ctx");
    let mut input = child.stdin.take().expect("ctx's stdin");
    // A command that answers without reading its input (an unknown hook command line, say) may
    // exit before the input is written; the closed pipe is then not the test's failure.
    match input.write_all(stdin.as_bytes()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.expect("write ctx's stdin"),
    }
    drop(input);
    let output = child.wait_with_output().expect("wait for ctx");
    CtxRun {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// One exchange at a terminal: wait until the output shows `expect`, then type `typed` + Enter.
pub struct Typed<'a> {
    pub expect: &'a str,
    pub typed: &'a str,
}

/// Runs `ctx args…` on `data_dir` in a pseudo-terminal this test makes itself (the process's
/// controlling terminal), answering each prompt of `script` in order. Returns the exit status and
/// everything the terminal showed (stdout and stderr together); panics when a prompt does not
/// appear within a minute.
pub fn run_ctx_tty(
    data_dir: &Path,
    args: &[&str],
    script: &[Typed<'_>],
    envs: &[(&str, &Path)],
) -> CtxRun {
    let mut tty = CtxTty::spawn(data_dir, args, envs);
    let mut seen = 0;
    for step in script {
        seen = tty.answer(seen, step);
    }
    tty.finish(600)
}

/// The bytes of a file of the sample catalog, read from the repository (not through ctx).
pub fn catalog_file(rel: &str) -> Vec<u8> {
    let path = ctx_service::sample_catalog_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The sample catalog's `SKILL.md` of the skill `name`.
pub fn catalog_skill(name: &str) -> Vec<u8> {
    catalog_file(&format!("skills/{name}/SKILL.md"))
}

/// The environment variable that runs the seed ports on PostgreSQL (`postgres`) instead of redb.
pub const SEED_JOURNAL_ENV: &str = "CTX_SEED_JOURNAL";

/// True when the seed ports run on PostgreSQL (`CTX_SEED_JOURNAL=postgres`).
pub fn seed_on_postgres() -> bool {
    std::env::var(SEED_JOURNAL_ENV).as_deref() == Ok("postgres")
}

/// The server of the seed ports on PostgreSQL, started once per process (or `$CTX_PG_URL`).
fn seed_server_url() -> Option<String> {
    if !seed_on_postgres() {
        return None;
    }
    match ctx_journal_pg::shared() {
        Ok(server) => Some(server.url()),
        Err(e) => panic!("{SEED_JOURNAL_ENV}=postgres needs a PostgreSQL server: {e}"),
    }
}

/// The database the seed ports share on PostgreSQL: created once, never dropped by a child.
fn seed_database_url() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let server = seed_server_url().unwrap();
        let mut client = postgres::Client::connect(&server, postgres::NoTls).unwrap();
        // Concurrent test processes race to create it; the loser's "already exists" is fine.
        if let Err(e) = client.batch_execute("CREATE DATABASE ctx_seed") {
            let exists = e.code() == Some(&postgres::error::SqlState::DUPLICATE_DATABASE)
                || e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION);
            assert!(exists, "creating the seed database failed: {e}");
        }
        format!("{server} dbname=ctx_seed")
    })
    .clone()
}

/// Routes the journal directory `dir` to PostgreSQL when the seed ports run there: a schema of
/// its own in the seed database, named after the directory, so a child process re-running the
/// same setup reaches the same journal.
pub fn route_seed_journal(dir: &Path) {
    if let Some((url, schema)) = seed_postgres_target(dir) {
        ctx_service::route_journal(
            dir,
            ctx_service::JournalSource::Postgres {
                url,
                schema: Some(schema),
            },
        );
    }
}

/// The database URL and schema of the journal directory `dir` when the seed ports run on
/// PostgreSQL.
pub fn seed_postgres_target(dir: &Path) -> Option<(String, String)> {
    if !seed_on_postgres() {
        return None;
    }
    use std::os::unix::ffi::OsStrExt as _;
    let schema = format!("seed_{:016x}", fnv(dir.as_os_str().as_bytes()));
    Some((seed_database_url(), schema))
}

/// Opens the journal of `dir` on the backend it is routed to.
pub fn open_routed(dir: &Path) -> Journal {
    ctx_service::open_journal(dir, &options()).unwrap()
}

/// `ctx args…` running in a pseudo-terminal the test made (the person's terminal), read while it
/// runs: for a command that prints something the test must act on before it exits (the URL of a
/// passkey page).
pub struct CtxTty {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    master: Box<dyn portable_pty::MasterPty + Send>,
    writer: Box<dyn std::io::Write + Send>,
    shown: std::sync::Arc<std::sync::Mutex<String>>,
    collector: std::thread::JoinHandle<()>,
}

impl CtxTty {
    /// Starts `ctx --data-dir DATA args…` as [`run_ctx_tty`] does.
    pub fn spawn(data_dir: &Path, args: &[&str], envs: &[(&str, &Path)]) -> CtxTty {
        use portable_pty::{CommandBuilder, PtySize, native_pty_system};
        use std::io::Read as _;
        let home = data_dir.with_extension("home");
        let pty = native_pty_system()
            .openpty(PtySize {
                rows: 50,
                cols: 200,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut command = CommandBuilder::new(ctx_binary());
        command.arg("--data-dir");
        command.arg(data_dir);
        command.args(args);
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command.env("HOME", &home);
        command.env("CODEX_HOME", home.join(".codex"));
        for (key, value) in envs {
            command.env(key, value);
        }
        command.cwd(data_dir.parent().unwrap_or(data_dir));
        let child = pty
            .slave
            .spawn_command(command)
            .expect("start ctx in the pty");
        drop(pty.slave);
        let mut reader = pty.master.try_clone_reader().expect("the pty's reader");
        let writer = pty.master.take_writer().expect("the pty's writer");
        let shown = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let collector = {
            let shown = shown.clone();
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                while let Ok(n) = reader.read(&mut buffer) {
                    if n == 0 {
                        break;
                    }
                    let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
                    shown.lock().expect("the output buffer").push_str(&text);
                }
            })
        };
        CtxTty {
            child,
            master: pty.master,
            writer,
            shown,
            collector,
        }
    }

    /// Waits up to a minute for the terminal to show `step.expect` after byte `seen` of its
    /// output, then types `step.typed` and Enter; returns where the match ended.
    pub fn answer(&mut self, seen: usize, step: &Typed<'_>) -> usize {
        use std::io::Write as _;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let seen = loop {
            let text = self.shown();
            if let Some(at) = text[seen..].find(step.expect) {
                break seen + at + step.expect.len();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the terminal never showed {:?}; it showed {text:?}",
                step.expect
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        self.writer
            .write_all(format!("{}\r", step.typed).as_bytes())
            .expect("type at the pty");
        self.writer.flush().expect("flush the pty");
        seen
    }

    /// Everything the terminal showed so far.
    pub fn shown(&self) -> String {
        self.shown.lock().expect("the output buffer").clone()
    }

    /// Waits up to a minute for the terminal to show `expect`; returns what it showed after it,
    /// up to the end of that line.
    pub fn wait_for(&self, expect: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let text = self.shown();
            if let Some(at) = text.find(expect) {
                let rest = &text[at + expect.len()..];
                if let Some(end) = rest.find('\n') {
                    return rest[..end].trim_end_matches('\r').to_owned();
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the terminal never showed {expect:?}; it showed {text:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Waits for ctx to exit (up to `seconds`, then kills it and panics).
    pub fn finish(mut self, seconds: u64) -> CtxRun {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("poll ctx") {
                break status;
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!(
                    "ctx did not exit within {seconds} s; it showed {:?}",
                    self.shown()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        drop(self.writer);
        drop(self.master);
        let _ = self.collector.join();
        let stdout = self.shown.lock().expect("the output buffer").clone();
        CtxRun {
            code: i32::try_from(status.exit_code()).unwrap_or(-1),
            stdout,
            stderr: String::new(),
        }
    }
}
