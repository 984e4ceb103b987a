//! A throwaway PostgreSQL server for tests, benches and CI.
//!
//! [`Cluster::start`] runs `initdb` into a temporary directory and `pg_ctl start` on a free
//! loopback port; dropping the [`Cluster`] stops the server and removes the directory. The server
//! runs with `fsync=on` and `synchronous_commit=on`, because what runs on it measures durability.
//!
//! PostgreSQL refuses to run as root. When this process's effective uid is 0, every PostgreSQL
//! program runs as the `postgres` user (through `setpriv`, else `runuser`), and the temporary
//! directory is handed to that user.
//!
//! A guardian `sh` per cluster waits for this process to exit (it reads a pipe only this process
//! holds), then stops the server and removes the directory. It cleans up after a panic, a
//! `kill -9` of the test binary and the never-dropped [`shared`] cluster. Linux only (`/proc`).

use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write as _};
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use postgres::NoTls;

/// The programs a cluster needs, all from one directory.
const BINARIES: [&str; 4] = ["initdb", "pg_ctl", "postgres", "pg_basebackup"];
/// Where Debian and Ubuntu install each major version (`<version>/bin`).
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// The standby's `application_name`, named by the primary's `synchronous_standby_names`.
const STANDBY_NAME: &str = "s1";
/// Tries of `pg_ctl start`, each on a newly picked port.
const START_ATTEMPTS: u32 = 5;
/// The bound of every wait: server start and stop, replication state, promotion.
const WAIT: Duration = Duration::from_secs(30);
/// Last lines of the server log quoted by a start failure.
const LOG_TAIL_LINES: usize = 20;

/// Waits for the end of this process (EOF on stdin), then runs "$@" (pg_ctl stop) and removes
/// "$1". Signals from the terminal do not cut it short.
const GUARDIAN: &str = "trap '' HUP INT TERM
cat >/dev/null
dir=$1
shift
\"$@\" >/dev/null 2>&1
rm -rf -- \"$dir\"";

/// A failure to find, start, drive or stop a throwaway PostgreSQL server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    #[error("PostgreSQL binaries not found (searched {})", .searched.join("; "))]
    BinariesNotFound { searched: Vec<String> },
    #[error("CTX_PG_BIN is {dir} but that directory lacks {}", .missing.join(", "))]
    IncompleteBinDir {
        dir: PathBuf,
        missing: Vec<&'static str>,
    },
    #[error(
        "running as root, which PostgreSQL refuses, and /etc/passwd has no `postgres` user to \
         run it as"
    )]
    NoPostgresUser,
    #[error(
        "running as root, which PostgreSQL refuses, and neither setpriv nor runuser was found \
         to run it as the `postgres` user"
    )]
    NoUserSwitch,
    #[error(
        "the temporary directory {path} has characters pg_ctl would pass through its shell \
         (only letters, digits and /._+- are safe); set TMPDIR to a plain path"
    )]
    UnsafePath { path: PathBuf },
    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("could not run `{command}`: {source}")]
    Spawn { command: String, source: io::Error },
    #[error("`{command}` failed ({status}): {output}")]
    CommandFailed {
        command: String,
        status: ExitStatus,
        output: String,
    },
    #[error("could not bind 127.0.0.1:0 to pick a free port: {source}")]
    FreePort { source: io::Error },
    #[error(
        "PostgreSQL in {data_dir} did not start after {attempts} tries (the last on port \
         {port}): {reason}; the server log {log} ends with:\n{log_tail}"
    )]
    StartFailed {
        data_dir: PathBuf,
        attempts: u32,
        port: u16,
        reason: String,
        log: PathBuf,
        log_tail: String,
    },
    #[error("could not connect to the PostgreSQL server at {target}: {source}")]
    Connect {
        target: String,
        source: postgres::Error,
    },
    #[error("`{sql}` failed on the PostgreSQL server at {target}: {source}")]
    Sql {
        sql: String,
        target: String,
        source: postgres::Error,
    },
    #[error("CTX_PG_URL is not a PostgreSQL connection string: {source}")]
    BadUrl { source: postgres::Error },
    #[error(
        "{name:?} is not a database name this harness creates: use 1 to 63 ASCII letters, \
         digits and underscores, not starting with a digit"
    )]
    InvalidDatabaseName { name: String },
    #[error("{path} does not start with a postmaster pid: {reason}")]
    PidFile { path: PathBuf, reason: String },
    #[error(
        "could not send SIGKILL to the postmaster (pid {pid}) of the cluster on port {port}: \
         {source}"
    )]
    Kill {
        pid: u32,
        port: u16,
        source: io::Error,
    },
    #[error(
        "the cluster on port {port} was started without replication; start it with \
         ClusterOptions::new().with_replication(true) to add a standby"
    )]
    ReplicationDisabled { port: u16 },
    #[error("timed out after {} s waiting for {what}", .waited.as_secs())]
    Timeout { what: String, waited: Duration },
}

/// How [`Cluster::start`] configures the server.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ClusterOptions {
    /// Streaming replication: `wal_level=replica`, `max_wal_senders=10`, a `pg_hba.conf` line
    /// trusting replication from 127.0.0.1. Without it `max_wal_senders=0` (the WAL written is
    /// the same `replica` level either way, so timings compare).
    pub replication: bool,
}

impl ClusterOptions {
    /// No replication.
    pub fn new() -> ClusterOptions {
        ClusterOptions::default()
    }

    /// Turns streaming replication on or off (needed by [`Cluster::start_sync_standby`]).
    pub fn with_replication(mut self, replication: bool) -> ClusterOptions {
        self.replication = replication;
        self
    }
}

/// A throwaway PostgreSQL server: its own temporary directory, data directory, log and loopback
/// port, user `postgres` with trust authentication. Dropping it stops the server (`-m
/// immediate`) and removes the directory.
#[derive(Debug)]
pub struct Cluster {
    tools: Tools,
    options: ClusterOptions,
    root: PathBuf,
    data_dir: PathBuf,
    log: PathBuf,
    port: u16,
    /// Removed by Drop (explicitly, before the guardian goes).
    dir: Option<tempfile::TempDir>,
    guardian: Option<Child>,
}

/// The server the tests of one process share: a local [`Cluster`], or the server at
/// `$CTX_PG_URL`.
#[derive(Debug)]
#[non_exhaustive]
pub enum TestServer {
    Local(Cluster),
    External { url: String },
}

/// Ok when a server can be had: `$CTX_PG_URL` is set, or [`Cluster::binaries`] finds the
/// PostgreSQL programs.
pub fn available() -> Result<(), ClusterError> {
    if env::var_os("CTX_PG_URL").is_some_and(|url| !url.is_empty()) {
        return Ok(());
    }
    Cluster::binaries().map(drop)
}

/// The skip rule of the PostgreSQL tests, given what they need (`available()`, or
/// `Cluster::binaries().map(drop)` for a test that starts its own clusters).
///
/// `Ok(true)`: run. `Ok(false)`: the binaries are missing and `$CTX_REQUIRE_PG` is unset (or
/// `0`); a `skipped:` line naming `test` went to stderr, past the test harness's capture, and the
/// test should return. `Err`: the binaries are missing and `$CTX_REQUIRE_PG` is set, or the set-up
/// is wrong in another way (say `$CTX_PG_BIN` names an incomplete directory); the test fails.
pub fn gate(test: &str, availability: Result<(), ClusterError>) -> Result<bool, ClusterError> {
    let required = env::var("CTX_REQUIRE_PG").is_ok_and(|v| !v.is_empty() && v != "0");
    match availability {
        Ok(()) => Ok(true),
        Err(e @ ClusterError::BinariesNotFound { .. }) if !required => {
            let _ = writeln!(
                io::stderr().lock(),
                "{test}: skipped: {e}; set CTX_PG_BIN or install postgresql \
                 (CTX_REQUIRE_PG=1 makes this a failure)"
            );
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The one server of this process, started on first use: the server at `$CTX_PG_URL` if set
/// (nothing is started), else a [`Cluster`] without replication. A failure to start is returned
/// to every caller. The cluster is never dropped; its guardian stops it when the process exits.
pub fn shared() -> Result<&'static TestServer, &'static ClusterError> {
    static SHARED: OnceLock<Result<TestServer, ClusterError>> = OnceLock::new();
    SHARED
        .get_or_init(|| match env::var("CTX_PG_URL") {
            Ok(url) if !url.is_empty() => Ok(TestServer::External { url }),
            _ => Cluster::start(ClusterOptions::new()).map(TestServer::Local),
        })
        .as_ref()
}

impl TestServer {
    /// A connection string for its `postgres` database (`$CTX_PG_URL` as given).
    pub fn url(&self) -> String {
        match self {
            TestServer::Local(cluster) => cluster.url(),
            TestServer::External { url } => url.clone(),
        }
    }

    /// Creates database `name` (an existing one of that name is dropped first) and returns a
    /// connection string for it. See [`Cluster::create_database`].
    pub fn create_database(&self, name: &str) -> Result<String, ClusterError> {
        match self {
            TestServer::Local(cluster) => cluster.create_database(name),
            TestServer::External { url } => {
                check_database_name(name)?;
                let config: postgres::Config = url
                    .parse()
                    .map_err(|source| ClusterError::BadUrl { source })?;
                recreate_database(&config, "CTX_PG_URL", name)?;
                Ok(with_dbname(url, name))
            }
        }
    }

    /// The local cluster, `None` for `$CTX_PG_URL`.
    pub fn cluster(&self) -> Option<&Cluster> {
        match self {
            TestServer::Local(cluster) => Some(cluster),
            TestServer::External { .. } => None,
        }
    }
}

impl Cluster {
    /// The directory holding `initdb`, `pg_ctl`, `postgres` and `pg_basebackup`: `$CTX_PG_BIN`
    /// (which must hold all four), else the highest `/usr/lib/postgresql/<version>/bin` holding
    /// them, else a directory on `PATH` holding them or the directory `initdb` on `PATH` links to.
    pub fn binaries() -> Result<PathBuf, ClusterError> {
        if let Some(dir) = env::var_os("CTX_PG_BIN").filter(|d| !d.is_empty()) {
            let dir = PathBuf::from(dir);
            let missing = missing_binaries(&dir);
            return if missing.is_empty() {
                Ok(dir)
            } else {
                Err(ClusterError::IncompleteBinDir { dir, missing })
            };
        }
        let mut searched = vec!["CTX_PG_BIN (unset)".to_owned()];

        let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(DEBIAN_ROOT)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let version = parse_version(&entry.file_name().to_string_lossy())?;
                Some((version, entry.path().join("bin")))
            })
            .collect();
        versions.sort_by(|a, b| b.0.cmp(&a.0));
        if let Some((_, dir)) = versions
            .iter()
            .find(|(_, d)| missing_binaries(d).is_empty())
        {
            return Ok(dir.clone());
        }
        searched.push(format!("{DEBIAN_ROOT}/*/bin"));

        let path = env::var_os("PATH").unwrap_or_default();
        for dir in env::split_paths(&path) {
            if missing_binaries(&dir).is_empty() {
                return Ok(dir);
            }
            // Distributions link `initdb` onto PATH but not always `pg_basebackup`.
            let linked = fs::canonicalize(dir.join("initdb"));
            if let Some(real) = linked.ok().as_deref().and_then(Path::parent)
                && missing_binaries(real).is_empty()
            {
                return Ok(real.to_path_buf());
            }
        }
        searched.push(format!("PATH={}", path.to_string_lossy()));
        Err(ClusterError::BinariesNotFound { searched })
    }

    /// Starts a new server: `initdb` (with `--no-sync`: the throwaway cluster's creation need
    /// not be durable) into `<tmp>/data`, then `pg_ctl start -w` on a free loopback port with
    /// `fsync=on synchronous_commit=on max_connections=100`, its socket in `<tmp>`. A start that
    /// fails (another process took the port) is retried on a new port, up to 5 times.
    pub fn start(options: ClusterOptions) -> Result<Cluster, ClusterError> {
        let mut cluster = Cluster::prepare(Tools::find()?, options)?;
        let mut initdb = cluster.tools.command("initdb");
        initdb
            .arg("-D")
            .arg(&cluster.data_dir)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
            .arg("--no-sync");
        cluster.tools.run(initdb, &cluster.root)?;
        if cluster.options.replication {
            append(
                &cluster.data_dir.join("pg_hba.conf"),
                "host replication postgres 127.0.0.1/32 trust\n",
            )?;
        }
        cluster.launch()?;
        Ok(cluster)
    }

    /// `host=127.0.0.1 port=<port> user=postgres dbname=postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The loopback TCP port it listens on (it changes only by [`Cluster::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its data directory (`<tmp>/data`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server log (`<tmp>/postgres.log`).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Creates database `name` and returns a connection string for it, so that tests sharing a
    /// cluster each work in their own database. An existing database of that name is dropped
    /// first (`WITH (FORCE)`), so a rerun against `$CTX_PG_URL` starts clean; names must
    /// therefore be unique per test. Names are 1 to 63 ASCII letters, digits and underscores.
    pub fn create_database(&self, name: &str) -> Result<String, ClusterError> {
        check_database_name(name)?;
        recreate_database(&self.config("postgres"), &self.target(), name)?;
        Ok(self.url_for(name))
    }

    /// The postmaster's pid, from the first line of `postmaster.pid`.
    pub fn pid(&self) -> Result<u32, ClusterError> {
        let path = self.data_dir.join("postmaster.pid");
        let text = fs::read_to_string(&path).map_err(|e| ClusterError::PidFile {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let first = text.lines().next().unwrap_or_default().trim();
        first.parse().map_err(|_| ClusterError::PidFile {
            reason: format!("its first line is {first:?}"),
            path,
        })
    }

    /// Sends SIGKILL to the postmaster and waits until it is dead (its backends notice and exit
    /// on their own): a crash, as far as PostgreSQL can tell.
    pub fn kill9(&self) -> Result<(), ClusterError> {
        let pid = self.pid()?;
        let kill_error = |source| ClusterError::Kill {
            pid,
            port: self.port,
            source,
        };
        let raw = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| kill_error(io::Error::from(io::ErrorKind::InvalidInput)))?;
        rustix::process::kill_process(raw, rustix::process::Signal::KILL)
            .map_err(|errno| kill_error(errno.into()))?;
        wait_until(
            || {
                format!(
                    "the killed postmaster (pid {pid}, port {}) to die",
                    self.port
                )
            },
            || Ok(!process_running(pid)),
        )
    }

    /// `pg_ctl stop -m fast`: a clean shutdown. The directory stays until the drop.
    pub fn stop(&self) -> Result<(), ClusterError> {
        self.pg_ctl_stop("fast")
    }

    /// Starts the server again after [`Cluster::stop`] or [`Cluster::kill9`] (stopping it first
    /// if it runs), on its old port if that is still free, else on a new one: PostgreSQL's crash
    /// recovery, for durability tests.
    pub fn restart(&mut self) -> Result<(), ClusterError> {
        if self.postmaster_running() {
            self.stop()?;
        }
        // A killed postmaster's pid must be gone (not a zombie) before PostgreSQL takes its lock
        // file as stale; an init that reaps slowly takes seconds.
        if let Ok(pid) = self.pid() {
            wait_until(
                || {
                    format!(
                        "the old postmaster (pid {pid}) of {} to be reaped",
                        self.target()
                    )
                },
                || Ok(!Path::new(&format!("/proc/{pid}")).exists()),
            )?;
        }
        let old = self.port;
        self.launch_from(Some(old))
    }

    /// Starts a synchronous standby of this cluster (which needs
    /// [`ClusterOptions::with_replication`]): `pg_basebackup -R -X stream --no-sync` (a copy as
    /// throwaway as `initdb`'s output; the standby itself runs with `fsync=on`) into a new temporary
    /// directory, started on its own port with `application_name=s1` in `primary_conninfo`; then
    /// sets `synchronous_standby_names = 's1'` on this primary (ALTER SYSTEM and
    /// `pg_reload_conf()`) and waits until `pg_stat_replication` shows it `sync`. From then on a
    /// commit here returns once the standby has flushed it, and blocks while the standby is
    /// down.
    pub fn start_sync_standby(&self) -> Result<Cluster, ClusterError> {
        if !self.options.replication {
            return Err(ClusterError::ReplicationDisabled { port: self.port });
        }
        let mut standby = Cluster::prepare(self.tools.clone(), self.options.clone())?;
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}",
            self.port
        );
        let mut backup = self.tools.command("pg_basebackup");
        backup.arg("-D").arg(&standby.data_dir).args([
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
            "-d",
            &conninfo,
        ]);
        self.tools.run(backup, &standby.root)?;
        // Later lines win: our application_name whatever -R wrote, and never a copied
        // synchronous_standby_names, which would block the standby's commits once promoted.
        append(
            &standby.data_dir.join("postgresql.auto.conf"),
            &format!("primary_conninfo = '{conninfo}'\nsynchronous_standby_names = ''\n"),
        )?;
        standby.launch()?;

        let mut client = self.client()?;
        for sql in [
            format!("alter system set synchronous_standby_names = '{STANDBY_NAME}'"),
            "select pg_reload_conf()".to_owned(),
        ] {
            client
                .batch_execute(&sql)
                .map_err(|source| self.sql_error(&sql, source))?;
        }
        let query = "select sync_state from pg_stat_replication where application_name = $1";
        wait_until(
            || {
                format!(
                    "pg_stat_replication of {} to show standby s1 as sync",
                    self.target()
                )
            },
            || {
                let row = client
                    .query_opt(query, &[&STANDBY_NAME])
                    .map_err(|source| self.sql_error(query, source))?;
                let state: Option<String> = row.and_then(|row| row.get(0));
                Ok(state.as_deref() == Some("sync"))
            },
        )?;
        Ok(standby)
    }

    /// Promotes this standby (`pg_ctl promote -w`) and waits until `pg_is_in_recovery()` is
    /// false.
    pub fn promote(&self) -> Result<(), ClusterError> {
        let mut promote = self.tools.command("pg_ctl");
        promote.arg("-D").arg(&self.data_dir).args([
            "promote",
            "-w",
            "-t",
            &WAIT.as_secs().to_string(),
        ]);
        self.tools.run(promote, &self.root)?;
        let mut client = self.client()?;
        let query = "select pg_is_in_recovery()";
        wait_until(
            || format!("{} to leave recovery", self.target()),
            || {
                let row = client
                    .query_one(query, &[])
                    .map_err(|source| self.sql_error(query, source))?;
                Ok(!row.get::<_, bool>(0))
            },
        )
    }

    /// A temporary directory handed to the server's user, and its guardian.
    fn prepare(tools: Tools, options: ClusterOptions) -> Result<Cluster, ClusterError> {
        let dir = tempfile::Builder::new()
            .prefix("ctx-pg-")
            .tempdir()
            .map_err(|source| ClusterError::Io {
                action: "create a temporary directory in",
                path: env::temp_dir(),
                source,
            })?;
        let root = dir.path().to_path_buf();
        let plain = |b: &u8| b.is_ascii_alphanumeric() || b"/._+-".contains(b);
        if !root.as_os_str().as_bytes().iter().all(plain) {
            return Err(ClusterError::UnsafePath { path: root });
        }
        if let Some(user) = &tools.run_as {
            std::os::unix::fs::chown(&root, Some(user.uid), Some(user.gid)).map_err(|source| {
                ClusterError::Io {
                    action: "hand to the postgres user (chown)",
                    path: root.clone(),
                    source,
                }
            })?;
        }
        let data_dir = root.join("data");
        let mut guardian = Command::new("/bin/sh");
        guardian
            .arg("-c")
            .arg(GUARDIAN)
            .arg("ctx-pg-guardian")
            .arg(&root)
            .args(tools.argv("pg_ctl"))
            .arg("-D")
            .arg(&data_dir)
            .args(["stop", "-m", "immediate", "-w", "-t", "10"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .current_dir("/");
        scrub_env(&mut guardian);
        let guardian = guardian.spawn().map_err(|source| ClusterError::Spawn {
            command: "/bin/sh -c <guardian>".to_owned(),
            source,
        })?;
        Ok(Cluster {
            tools,
            options,
            log: root.join("postgres.log"),
            data_dir,
            root,
            port: 0,
            dir: Some(dir),
            guardian: Some(guardian),
        })
    }

    fn launch(&mut self) -> Result<(), ClusterError> {
        self.launch_from(None)
    }

    /// `pg_ctl start -w`, first on `port` if given, then on free ports, with a growing pause
    /// (a killed server's backends may still hold its shared memory for a moment).
    fn launch_from(&mut self, mut port: Option<u16>) -> Result<(), ClusterError> {
        let mut reason = String::new();
        let mut tried = 0;
        for attempt in 1..=START_ATTEMPTS {
            let candidate = match port.take() {
                Some(port) => port,
                None => free_port()?,
            };
            tried = candidate;
            match self.pg_ctl_start(candidate) {
                Ok(()) => {
                    self.port = candidate;
                    return Ok(());
                }
                Err(e) => reason = e.to_string(),
            }
            if attempt < START_ATTEMPTS {
                thread::sleep(Duration::from_millis(100 << attempt));
            }
        }
        Err(ClusterError::StartFailed {
            data_dir: self.data_dir.clone(),
            attempts: START_ATTEMPTS,
            port: tried,
            reason,
            log: self.log.clone(),
            log_tail: log_tail(&self.log),
        })
    }

    fn pg_ctl_start(&self, port: u16) -> Result<(), ClusterError> {
        // pg_ctl hands -o to a shell: prepare() checked that `root` needs no quoting.
        let mut settings = format!(
            "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={} \
             -c max_connections=100 -c fsync=on -c synchronous_commit=on",
            self.root.display()
        );
        if self.options.replication {
            settings.push_str(" -c wal_level=replica -c max_wal_senders=10");
        } else {
            settings.push_str(" -c max_wal_senders=0");
        }
        let mut start = self.tools.command("pg_ctl");
        start
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(&self.log)
            .args([
                "-w",
                "-t",
                &WAIT.as_secs().to_string(),
                "-o",
                &settings,
                "start",
            ]);
        self.tools.run(start, &self.root)
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<(), ClusterError> {
        let mut stop = self.tools.command("pg_ctl");
        stop.arg("-D").arg(&self.data_dir).args([
            "stop",
            "-m",
            mode,
            "-w",
            "-t",
            &WAIT.as_secs().to_string(),
        ]);
        self.tools.run(stop, &self.root)
    }

    fn postmaster_running(&self) -> bool {
        self.pid().is_ok_and(process_running)
    }

    fn url_for(&self, dbname: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={dbname}",
            self.port
        )
    }

    /// How errors name this server.
    fn target(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn config(&self, dbname: &str) -> postgres::Config {
        let mut config = postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname(dbname)
            .connect_timeout(Duration::from_secs(10));
        config
    }

    fn client(&self) -> Result<postgres::Client, ClusterError> {
        self.config("postgres")
            .connect(NoTls)
            .map_err(|source| ClusterError::Connect {
                target: self.target(),
                source,
            })
    }

    fn sql_error(&self, sql: &str, source: postgres::Error) -> ClusterError {
        ClusterError::Sql {
            sql: sql.to_owned(),
            target: self.target(),
            source,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.postmaster_running() {
            let _ = self.pg_ctl_stop("immediate");
        }
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
        // Only now: the guardian must not remove a directory that is ours no more.
        if let Some(mut guardian) = self.guardian.take() {
            let _ = guardian.kill();
            let _ = guardian.wait();
        }
    }
}

/// The PostgreSQL programs and, when this process is root, the user to run them as.
#[derive(Debug, Clone)]
struct Tools {
    bin: PathBuf,
    run_as: Option<RunAs>,
}

#[derive(Debug, Clone)]
struct RunAs {
    uid: u32,
    gid: u32,
    /// `setpriv --reuid=U --regid=G --clear-groups --` or `runuser -u postgres --`.
    prefix: Vec<OsString>,
}

impl Tools {
    fn find() -> Result<Tools, ClusterError> {
        let bin = Cluster::binaries()?;
        let run_as = if rustix::process::geteuid().is_root() {
            Some(RunAs::postgres()?)
        } else {
            None
        };
        Ok(Tools { bin, run_as })
    }

    /// The argv running `program` (as the postgres user if root).
    fn argv(&self, program: &str) -> Vec<OsString> {
        let mut argv = self
            .run_as
            .as_ref()
            .map(|r| r.prefix.clone())
            .unwrap_or_default();
        argv.push(self.bin.join(program).into_os_string());
        argv
    }

    fn command(&self, program: &str) -> Command {
        let argv = self.argv(program);
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]).stdin(Stdio::null());
        scrub_env(&mut command);
        command
    }

    /// Runs to completion in `cwd` (readable by the postgres user, unlike the caller's
    /// directory perhaps), failing with its output when it fails.
    fn run(&self, mut command: Command, cwd: &Path) -> Result<(), ClusterError> {
        let shown = render(&command);
        let output = command
            .current_dir(cwd)
            .output()
            .map_err(|source| ClusterError::Spawn {
                command: shown.clone(),
                source,
            })?;
        if output.status.success() {
            return Ok(());
        }
        let mut text = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !stdout.trim().is_empty() {
            let _ = write!(text, "\n{}", stdout.trim());
        }
        Err(ClusterError::CommandFailed {
            command: shown,
            status: output.status,
            output: text,
        })
    }
}

impl RunAs {
    fn postgres() -> Result<RunAs, ClusterError> {
        let passwd = fs::read_to_string("/etc/passwd").map_err(|source| ClusterError::Io {
            action: "read",
            path: PathBuf::from("/etc/passwd"),
            source,
        })?;
        let (uid, gid) = passwd_ids(&passwd, "postgres").ok_or(ClusterError::NoPostgresUser)?;
        let find = |name: &str| {
            ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
                .iter()
                .map(|dir| Path::new(dir).join(name))
                .find(|path| executable(path))
        };
        let prefix: Vec<OsString> = if let Some(setpriv) = find("setpriv") {
            vec![
                setpriv.into(),
                format!("--reuid={uid}").into(),
                format!("--regid={gid}").into(),
                "--clear-groups".into(),
                "--".into(),
            ]
        } else if let Some(runuser) = find("runuser") {
            vec![runuser.into(), "-u".into(), "postgres".into(), "--".into()]
        } else {
            return Err(ClusterError::NoUserSwitch);
        };
        Ok(RunAs { uid, gid, prefix })
    }
}

/// Keeps the caller's PG* variables (PGHOST, PGDATA, PGOPTIONS…) away from the programs.
fn scrub_env(command: &mut Command) {
    for (key, _) in env::vars_os() {
        if key.as_bytes().starts_with(b"PG") {
            command.env_remove(key);
        }
    }
}

fn render(command: &Command) -> String {
    let mut shown = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        shown.push(' ');
        shown.push_str(&arg.to_string_lossy());
    }
    shown
}

fn missing_binaries(dir: &Path) -> Vec<&'static str> {
    BINARIES
        .into_iter()
        .filter(|name| !executable(&dir.join(name)))
        .collect()
}

fn executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `15` → [15], `9.6` → [9, 6]; anything else is not a version directory.
fn parse_version(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

/// The uid and gid of `user` in an /etc/passwd text.
fn passwd_ids(passwd: &str, user: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != user {
            return None;
        }
        let _password = fields.next()?;
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

fn check_database_name(name: &str) -> Result<(), ClusterError> {
    let valid = (1..=63).contains(&name.len())
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(ClusterError::InvalidDatabaseName {
            name: name.to_owned(),
        })
    }
}

/// `drop database if exists` (forcing other sessions out) and `create database`, as the
/// connection `config` (to another database) allows.
fn recreate_database(
    config: &postgres::Config,
    target: &str,
    name: &str,
) -> Result<(), ClusterError> {
    let mut client = config
        .connect(NoTls)
        .map_err(|source| ClusterError::Connect {
            target: target.to_owned(),
            source,
        })?;
    for sql in [
        format!("drop database if exists \"{name}\" with (force)"),
        format!("create database \"{name}\""),
    ] {
        client
            .batch_execute(&sql)
            .map_err(|source| ClusterError::Sql {
                sql: sql.clone(),
                target: target.to_owned(),
                source,
            })?;
    }
    Ok(())
}

/// `url` naming database `dbname`: a URI's path replaced, a key=value string's `dbname`
/// overridden by a later one.
fn with_dbname(url: &str, dbname: &str) -> String {
    for scheme in ["postgresql://", "postgres://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let (before_query, query) = match rest.split_once('?') {
                Some((before, query)) => (before, Some(query)),
                None => (rest, None),
            };
            let authority = before_query.split('/').next().unwrap_or_default();
            let mut out = format!("{scheme}{authority}/{dbname}");
            if let Some(query) = query {
                out.push('?');
                out.push_str(query);
            }
            return out;
        }
    }
    format!("{url} dbname={dbname}")
}

fn append(path: &Path, text: &str) -> Result<(), ClusterError> {
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|source| ClusterError::Io {
            action: "append to",
            path: path.to_path_buf(),
            source,
        })
}

fn free_port() -> Result<u16, ClusterError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| ClusterError::FreePort { source })
}

/// Alive and not a zombie, per `/proc/<pid>/stat`.
fn process_running(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold anything.
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X' | 'x'))
}

fn log_tail(log: &Path) -> String {
    match fs::read(log) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(e) => format!("(could not read it: {e})"),
    }
}

/// Polls `check` every 20 ms for up to [`WAIT`].
fn wait_until(
    what: impl FnOnce() -> String,
    mut check: impl FnMut() -> Result<bool, ClusterError>,
) -> Result<(), ClusterError> {
    let started = Instant::now();
    loop {
        if check()? {
            return Ok(());
        }
        if started.elapsed() >= WAIT {
            return Err(ClusterError::Timeout {
                what: what(),
                waited: started.elapsed(),
            });
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn versions_sort_numerically() {
        let mut versions: Vec<Vec<u32>> = ["9.6", "15", "10", "beta"]
            .iter()
            .filter_map(|v| parse_version(v))
            .collect();
        versions.sort_by(|a, b| b.cmp(a));
        assert_eq!(versions, vec![vec![15], vec![10], vec![9, 6]]);
    }

    #[test]
    fn passwd_lookup() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      postgres:x:101:104:PostgreSQL administrator:/var/lib/postgresql:/bin/bash\n";
        assert_eq!(passwd_ids(passwd, "postgres"), Some((101, 104)));
        assert_eq!(passwd_ids(passwd, "nobody"), None);
    }

    #[test]
    fn database_names() {
        assert!(check_database_name("ctx_test_1").is_ok());
        for bad in ["", "1st", "a-b", "a\"b", &"x".repeat(64)] {
            assert!(check_database_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn urls_name_the_database() {
        assert_eq!(
            with_dbname("host=db port=5432 user=u dbname=postgres", "t1"),
            "host=db port=5432 user=u dbname=postgres dbname=t1"
        );
        assert_eq!(
            with_dbname("postgres://u:p@db:5432/postgres?sslmode=disable", "t1"),
            "postgres://u:p@db:5432/t1?sslmode=disable"
        );
        assert_eq!(with_dbname("postgresql://db", "t1"), "postgresql://db/t1");
        // Later keys win in rust-postgres, as in libpq.
        let config: postgres::Config = with_dbname("host=db dbname=postgres", "t1")
            .parse()
            .unwrap();
        assert_eq!(config.get_dbname(), Some("t1"));
    }

    #[test]
    fn zombies_and_the_dead_are_not_running() {
        assert!(process_running(std::process::id()));
        assert!(!process_running(u32::MAX));
    }

    #[test]
    fn gate_runs_when_available_and_fails_on_a_wrong_set_up() {
        // (A skip would print its line into this test's output: the integration tests show it.)
        assert!(gate("t", Ok(())).unwrap());
        assert!(gate("t", Err(ClusterError::NoUserSwitch)).is_err());
    }
}
