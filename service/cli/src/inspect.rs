//! `ctx inspect`: what a data directory's journal holds (spec/cli.md §5): its streams and their
//! heads, grouped by the kind of their first record, and every projection's meta entry, entry
//! counts and digest. Reads only: nothing is attached, folded or written.

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::ControlFlow;

use ctx_journal::StreamInfo;
use ctx_model::Json;
use ctx_projections::{Projections, domain_projections};

use crate::audit::{existing_journal, hex, open_journal};
use crate::error::{CliError, EXIT_OK};
use ctx_service::Layout;

/// The `schema` of `ctx inspect --json`.
pub(crate) const INSPECT_SCHEMA: &str = "ctx.inspect.v1";

/// The kind shown for a stream whose first record cannot be read.
const UNKNOWN_KIND: &str = "?";

fn stream_json(info: &StreamInfo) -> Json {
    let head = info.head;
    Json::object([
        ("stream", Json::str(info.stream.to_hex())),
        ("kind", Json::opt_str(info.first_kind.as_deref())),
        (
            "revision",
            head.map_or(Json::Null, |h| Json::from(h.revision)),
        ),
        (
            "position",
            head.map_or(Json::Null, |h| Json::from(h.position)),
        ),
        (
            "digest",
            head.map_or(Json::Null, |h| Json::str(h.digest.to_hex())),
        ),
    ])
}

/// `ctx inspect [--json]`.
pub(crate) fn inspect(layout: &Layout, json: bool, out: &mut dyn Write) -> Result<u8, CliError> {
    let dir = existing_journal(layout, "inspect")?;
    let journal = open_journal(&dir)?;
    let head_position = journal.head_position()?;
    let mut streams = Vec::new();
    journal.visit_streams(|info| {
        streams.push(info.clone());
        ControlFlow::Continue(())
    })?;
    // Streams and their records by the kind of their first record: engine sessions, queries,
    // consent challenges, effect claims, benefit results, …
    let mut kinds: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for info in &streams {
        let entry = kinds
            .entry(info.first_kind.as_deref().unwrap_or(UNKNOWN_KIND))
            .or_default();
        entry.0 += 1;
        entry.1 += info.head.map_or(0, |h| h.revision);
    }
    let projections = Projections::inspect_detached(&journal, &domain_projections())
        .map_err(|e| CliError::Unexpected(format!("the projections could not be read: {e}")))?;
    if json {
        let kinds = kinds
            .iter()
            .map(|(kind, (n, records))| {
                Json::object([
                    ("kind", Json::str(*kind)),
                    ("streams", Json::from(*n)),
                    ("records", Json::from(*records)),
                ])
            })
            .collect();
        let projections = projections
            .iter()
            .map(|p| {
                let (meta, meta_error) = match &p.meta {
                    None => (Json::Null, Json::Null),
                    Some(Ok(m)) => (
                        Json::object([
                            ("version", Json::from(u64::from(m.version))),
                            ("checkpoint", Json::from(m.checkpoint)),
                        ]),
                        Json::Null,
                    ),
                    Some(Err(e)) => (Json::Null, Json::str(e.to_string())),
                };
                let tables = p
                    .tables
                    .iter()
                    .map(|(t, n)| {
                        Json::object([("table", Json::str(*t)), ("entries", Json::from(*n))])
                    })
                    .collect();
                Json::object([
                    ("name", Json::str(p.name)),
                    ("version", Json::from(u64::from(p.version))),
                    ("meta", meta),
                    ("meta_error", meta_error),
                    ("tables", Json::Arr(tables)),
                    ("digest", Json::str(hex(&p.digest))),
                ])
            })
            .collect();
        let report = Json::object([
            ("schema", Json::str(INSPECT_SCHEMA)),
            ("journal", Json::str(dir.display().to_string())),
            ("records", Json::from(head_position)),
            ("head_position", Json::from(head_position)),
            ("streams", Json::from(streams.len() as u64)),
            ("kinds", Json::Arr(kinds)),
            (
                "stream_heads",
                Json::Arr(streams.iter().map(stream_json).collect()),
            ),
            ("projections", Json::Arr(projections)),
        ]);
        writeln!(out, "{}", report.to_cja())?;
        return Ok(EXIT_OK);
    }
    writeln!(out, "journal {}", dir.display())?;
    writeln!(
        out,
        "  {head_position} records in {} streams (head position {head_position})",
        streams.len()
    )?;
    writeln!(out, "streams by the kind of their first record:")?;
    for (kind, (n, records)) in &kinds {
        writeln!(out, "  {kind:<32} {n:>6} streams {records:>9} records")?;
    }
    writeln!(
        out,
        "stream heads (stream, revision, position, head digest, kind):"
    )?;
    for info in &streams {
        match info.head {
            Some(h) => writeln!(
                out,
                "  {} {:>6} {:>9} {} {}",
                info.stream,
                h.revision,
                h.position,
                h.digest,
                info.first_kind.as_deref().unwrap_or(UNKNOWN_KIND)
            )?,
            None => writeln!(out, "  {} (the stored head does not decode)", info.stream)?,
        }
    }
    writeln!(out, "projections:")?;
    for p in &projections {
        let meta = match &p.meta {
            None => "never attached".to_owned(),
            Some(Ok(m)) => format!("built by v{} up to position {}", m.version, m.checkpoint),
            Some(Err(e)) => format!("meta entry invalid: {e}"),
        };
        writeln!(out, "  {} v{}: {meta}", p.name, p.version)?;
        for (table, n) in &p.tables {
            writeln!(out, "    {table:<40} {n:>9} entries")?;
        }
        writeln!(out, "    digest {}", hex(&p.digest))?;
    }
    Ok(EXIT_OK)
}
