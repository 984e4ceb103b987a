//! [`Conn`]: one PostgreSQL connection, driven synchronously, whose statements can also be
//! pipelined — sent together and answered in order, one round trip for several statements
//! (spec/scale-out.md §3.6).
//!
//! The synchronous `postgres` client waits for each statement's answer before it sends the next,
//! so a write transaction cost one round trip per statement. This wrapper drives the same
//! asynchronous client (`tokio-postgres`) on a current-thread runtime of its own, as the
//! synchronous client does internally, and lets the backend poll several statements at once.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use postgres::types::ToSql;
use postgres::{NoTls, Row, Statement};
use tokio::runtime::Runtime;
use tokio_postgres::{Client, Config};

use crate::schema::{Q, Sql};

/// A connection, the statements prepared on it, and the backend's round-trip counter.
pub(crate) struct Conn {
    /// Drives the connection's socket whenever a statement is waited for.
    runtime: Runtime,
    client: Client,
    statements: Vec<Option<Statement>>,
    round_trips: Arc<AtomicU64>,
}

/// Why a connection could not be made.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// The runtime that drives the socket could not be built.
    Runtime(std::io::Error),
    /// The server refused or could not be reached.
    Postgres(postgres::Error),
}

impl Conn {
    /// Connects with `config`; every round trip of the connection is counted in `round_trips`.
    pub(crate) fn connect(
        config: &Config,
        round_trips: Arc<AtomicU64>,
    ) -> Result<Conn, ConnectError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ConnectError::Runtime)?;
        let (client, connection) = runtime
            .block_on(config.connect(NoTls))
            .map_err(ConnectError::Postgres)?;
        // The task runs whenever the runtime is driven (inside `block_on`), which is exactly when
        // this connection waits for an answer. It ends when the socket closes or the client is
        // dropped; its error, if any, is seen by the client as a closed connection.
        drop(runtime.spawn(connection));
        round_trips.fetch_add(1, Ordering::Relaxed);
        Ok(Conn {
            runtime,
            client,
            statements: vec![None; Q::COUNT],
            round_trips,
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The asynchronous client, to build the statements of a [`Conn::pipeline`].
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Waits for `future`, which may poll several of this connection's statements at once: the
    /// statements are queued in the order they are first polled, written to the socket together
    /// and answered in that order, in one round trip.
    pub(crate) fn pipeline<F: Future>(&self, future: F) -> F::Output {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.runtime.block_on(future)
    }

    /// Lets the connection read what the server sent while it was idle, without a round trip: a
    /// session the server ended announces itself with a FATAL message and a closed socket, and
    /// [`Conn::is_closed`] is current afterwards. A few scheduler turns: the runtime polls the
    /// socket between them.
    pub(crate) fn settle(&self) {
        self.runtime.block_on(async {
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        });
    }

    /// The statement `q`, prepared on this connection at its first use (one round trip then).
    pub(crate) fn prepared(&mut self, sql: &Sql, q: Q) -> Result<Statement, postgres::Error> {
        if let Some(Some(statement)) = self.statements.get(q.index()) {
            return Ok(statement.clone());
        }
        let statement = self.pipeline(self.client.prepare(sql.text(q)))?;
        if let Some(slot) = self.statements.get_mut(q.index()) {
            *slot = Some(statement.clone());
        }
        Ok(statement)
    }

    pub(crate) fn batch_execute(&self, sql: &str) -> Result<(), postgres::Error> {
        self.pipeline(self.client.batch_execute(sql))
    }

    pub(crate) fn query<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error>
    where
        T: ?Sized + tokio_postgres::ToStatement,
    {
        self.pipeline(self.client.query(statement, params))
    }

    pub(crate) fn execute<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error>
    where
        T: ?Sized + tokio_postgres::ToStatement,
    {
        self.pipeline(self.client.execute(statement, params))
    }
}
