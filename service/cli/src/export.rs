//! `ctx export` and `ctx import`: the journal as JSON lines with digests, and back
//! (spec/cli.md §5). An export is a header line and one line per record in position order, written
//! while scanning (never the whole journal in memory); an import checks every line's digest and
//! chain as it appends it into an empty journal, in one transaction that is committed only after
//! the last line, so a refused import writes no record.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::ops::ControlFlow;
use std::path::Path;

use ctx_journal::{
    Digest, ImportRecord, NewRecord, PAYLOAD_MAX_BYTES, RecordView, StreamId, Timestamp,
};
use ctx_model::{Json, JsonError, JsonMap};
use ctx_projections::{Projections, domain_projections};

use crate::audit::{existing_journal, hex, open_journal};
use crate::error::{CliError, EXIT_OK, FILE_READ};
use ctx_service::Layout;

/// The `format` of an export's header line.
pub(crate) const EXPORT_FORMAT: &str = "ctx.journal-export";
/// The `version` of an export's header line; a change to any line's fields bumps it.
pub(crate) const EXPORT_VERSION: i64 = 1;
/// The longest line `ctx import` reads, in bytes (newline excluded): a record with the largest
/// payload, whose hex doubles it, plus its other fields.
pub const IMPORT_LINE_MAX_BYTES: usize = 2 * PAYLOAD_MAX_BYTES + 4096;

const HEADER_FIELDS: [&str; 5] = ["format", "head_position", "records", "streams", "version"];
const RECORD_FIELDS: [&str; 9] = [
    "digest",
    "event_id",
    "kind",
    "occurred_at",
    "payload",
    "position",
    "previous_digest",
    "revision",
    "stream",
];

/// The counts an export's header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    records: u64,
    streams: u64,
    head_position: u64,
}

fn header_line(h: &Header) -> String {
    Json::object([
        ("format", Json::str(EXPORT_FORMAT)),
        ("version", Json::Int(EXPORT_VERSION)),
        ("records", Json::from(h.records)),
        ("streams", Json::from(h.streams)),
        ("head_position", Json::from(h.head_position)),
    ])
    .to_cja()
}

/// The fields of one record line, borrowed from a scanned record.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    stream: StreamId,
    revision: u64,
    position: u64,
    event_id: &'a str,
    kind: &'a str,
    occurred_at: Timestamp,
    payload: &'a [u8],
    previous_digest: Digest,
    digest: Digest,
}

impl<'a> From<&RecordView<'a>> for Line<'a> {
    fn from(v: &RecordView<'a>) -> Line<'a> {
        Line {
            stream: v.stream,
            revision: v.revision,
            position: v.position,
            event_id: v.event_id,
            kind: v.kind,
            occurred_at: v.occurred_at,
            payload: v.payload,
            previous_digest: v.previous_digest,
            digest: v.digest,
        }
    }
}

fn record_line(v: &Line<'_>) -> String {
    Json::object([
        ("stream", Json::str(v.stream.to_hex())),
        ("revision", Json::from(v.revision)),
        ("position", Json::from(v.position)),
        ("event_id", Json::str(v.event_id)),
        ("kind", Json::str(v.kind)),
        ("occurred_at", Json::Int(v.occurred_at.0)),
        ("payload", Json::str(hex(v.payload))),
        ("previous_digest", Json::str(v.previous_digest.to_hex())),
        ("digest", Json::str(v.digest.to_hex())),
    ])
    .to_cja()
}

/// Why an import line is not a well-formed export line; the sentence (which follows "import line
/// N: ") names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LineError {
    #[error("is not JSON ({0})")]
    NotJson(JsonError),
    #[error("is not a JSON object")]
    NotObject,
    #[error("has the unknown field {field:?}")]
    UnknownField { field: String },
    #[error("lacks the field {field:?}")]
    MissingField { field: &'static str },
    #[error("field {key:?} is not an integer")]
    NotInteger { key: &'static str },
    #[error("field {key:?} is {n}; it must be at least {min}")]
    TooSmall { key: &'static str, n: i64, min: u64 },
    #[error("field {key:?} is not a string")]
    NotString { key: &'static str },
    /// `value` is shortened to 80 characters.
    #[error("field {key:?} is {value:?}; it must be 64 lowercase hex characters")]
    NotDigest { key: &'static str, value: String },
    #[error("is not an export header: its format is {format:?}, not {EXPORT_FORMAT:?}")]
    Format { format: String },
    #[error("is an export of version {version}; this ctx reads version {EXPORT_VERSION}")]
    Version { version: i64 },
    #[error("field \"payload\" is not an even number of lowercase hex characters")]
    PayloadHex,
}

/// The object of one line, with exactly the `expected` fields.
fn object<'a>(
    line: &str,
    json: &'a mut Option<Json>,
    expected: &[&'static str],
) -> Result<&'a JsonMap, LineError> {
    let parsed = Json::parse(line).map_err(LineError::NotJson)?;
    let map = json.insert(parsed).as_obj().ok_or(LineError::NotObject)?;
    if let Some(unknown) = map.keys().find(|k| !expected.contains(&k.as_str())) {
        return Err(LineError::UnknownField {
            field: unknown.clone(),
        });
    }
    if let Some(missing) = expected.iter().find(|k| !map.contains_key(**k)) {
        return Err(LineError::MissingField { field: missing });
    }
    Ok(map)
}

fn field<'a>(map: &'a JsonMap, key: &str) -> &'a Json {
    // `object` checked that every expected field is present.
    map.get(key).unwrap_or(&Json::Null)
}

fn int(map: &JsonMap, key: &'static str) -> Result<i64, LineError> {
    field(map, key)
        .as_i64()
        .ok_or(LineError::NotInteger { key })
}

/// A count or place: a non-negative integer, at least `min`.
fn uint(map: &JsonMap, key: &'static str, min: u64) -> Result<u64, LineError> {
    let n = int(map, key)?;
    u64::try_from(n)
        .ok()
        .filter(|n| *n >= min)
        .ok_or(LineError::TooSmall { key, n, min })
}

fn text<'a>(map: &'a JsonMap, key: &'static str) -> Result<&'a str, LineError> {
    field(map, key).as_str().ok_or(LineError::NotString { key })
}

/// Lowercase hex to bytes; anything else is refused rather than guessed at.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    s.as_bytes()
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

fn bytes32(map: &JsonMap, key: &'static str) -> Result<[u8; 32], LineError> {
    let s = text(map, key)?;
    unhex(s)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| LineError::NotDigest {
            key,
            value: shorten(s),
        })
}

/// At most 80 characters of a value, for messages.
fn shorten(s: &str) -> String {
    if s.chars().count() <= 80 {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(80).collect::<String>())
    }
}

fn parse_header(line: &str) -> Result<Header, LineError> {
    let mut json = None;
    let map = object(line, &mut json, &HEADER_FIELDS)?;
    let format = text(map, "format")?;
    if format != EXPORT_FORMAT {
        return Err(LineError::Format {
            format: shorten(format),
        });
    }
    let version = int(map, "version")?;
    if version != EXPORT_VERSION {
        return Err(LineError::Version { version });
    }
    Ok(Header {
        records: uint(map, "records", 0)?,
        streams: uint(map, "streams", 0)?,
        head_position: uint(map, "head_position", 0)?,
    })
}

fn parse_record(line: &str) -> Result<ImportRecord, LineError> {
    let mut json = None;
    let map = object(line, &mut json, &RECORD_FIELDS)?;
    let payload_hex = text(map, "payload")?;
    let payload = unhex(payload_hex).ok_or(LineError::PayloadHex)?;
    Ok(ImportRecord {
        stream: StreamId::from_bytes(bytes32(map, "stream")?),
        revision: uint(map, "revision", 1)?,
        position: uint(map, "position", 1)?,
        record: NewRecord::new(
            text(map, "event_id")?,
            text(map, "kind")?,
            Timestamp(int(map, "occurred_at")?),
            payload,
        ),
        previous_digest: Digest::from_bytes(bytes32(map, "previous_digest")?),
        digest: Digest::from_bytes(bytes32(map, "digest")?),
    })
}

/// Reads lines of at most [`IMPORT_LINE_MAX_BYTES`], numbered from 1, without ever buffering
/// more than one line.
struct Lines<R> {
    reader: R,
    source: String,
    line: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    fn next(&mut self) -> Result<Option<String>, CliError> {
        self.buf.clear();
        let limit = IMPORT_LINE_MAX_BYTES as u64 + 1;
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| CliError::File {
                action: FILE_READ,
                path: self.source.clone().into(),
                source,
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        let line = self.line;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        }
        if self.buf.len() > IMPORT_LINE_MAX_BYTES {
            return Err(CliError::ImportLine {
                line,
                detail: format!("is longer than {IMPORT_LINE_MAX_BYTES} bytes"),
            });
        }
        String::from_utf8(std::mem::take(&mut self.buf))
            .map(Some)
            .map_err(|_| CliError::ImportLine {
                line,
                detail: "is not UTF-8".to_owned(),
            })
    }
}

/// Counts what passes through, for the export's summary.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes the export of `journal` to `w`; returns the header and the bytes written.
fn write_export(
    journal: &ctx_journal::Journal,
    w: &mut dyn Write,
) -> Result<(Header, u64), CliError> {
    // This process holds the journal's process lock, so nothing appends between the counts and
    // the scan, and the header's counts are the scan's.
    let head_position = journal.head_position()?;
    let streams = journal.visit_streams(|_| ControlFlow::Continue(()))?;
    let header = Header {
        records: head_position,
        streams,
        head_position,
    };
    let mut w = Counting {
        inner: BufWriter::with_capacity(1 << 16, w),
        bytes: 0,
    };
    writeln!(w, "{}", header_line(&header))?;
    let mut failure = None;
    let scanned = journal.scan(1, |view| {
        match writeln!(w, "{}", record_line(&Line::from(view))) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    if scanned != header.records {
        return Err(CliError::Unexpected(format!(
            "the export scanned {scanned} records but the journal's head is position {head_position}"
        )));
    }
    w.flush()?;
    Ok((header, w.bytes))
}

/// `ctx export [--output FILE]`: to standard output, or to a new file (mode 0600: it holds every
/// record) that is removed again when the export fails.
pub(crate) fn export(
    layout: &Layout,
    output: Option<&Path>,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let dir = existing_journal(layout, "export")?;
    let journal = open_journal(&dir)?;
    let Some(path) = output else {
        write_export(&journal, out)?;
        return Ok(EXIT_OK);
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => CliError::OutputExists {
            path: path.to_path_buf(),
        },
        _ => CliError::File {
            action: "create",
            path: path.to_path_buf(),
            source,
        },
    })?;
    let written = write_export(&journal, &mut file).and_then(|done| {
        file.sync_all().map_err(|source| CliError::File {
            action: "sync",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(done)
    });
    let (header, bytes) = match written {
        Ok(done) => done,
        Err(e) => {
            drop(file);
            // A partial export must not pass for a whole one; the header's counts would catch it
            // on import, but it is better not to leave it lying around.
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    };
    writeln!(
        out,
        "exported {} records in {} streams (head position {}) to {}: {bytes} bytes",
        header.records,
        header.streams,
        header.head_position,
        path.display()
    )?;
    Ok(EXIT_OK)
}

/// `ctx import [--input FILE]`: reads an export from FILE or standard input into the data
/// directory's journal, which must be empty (it is created when missing).
pub(crate) fn import(
    layout: &Layout,
    file: Option<&Path>,
    input: &mut dyn Read,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let (reader, source): (Box<dyn BufRead + '_>, String) = match file {
        Some(path) => {
            let f = File::open(path).map_err(|source| CliError::File {
                action: FILE_READ,
                path: path.to_path_buf(),
                source,
            })?;
            (
                Box::new(BufReader::with_capacity(1 << 16, f)),
                path.display().to_string(),
            )
        }
        None => (
            Box::new(BufReader::with_capacity(1 << 16, input)),
            "standard input".to_owned(),
        ),
    };
    let mut lines = Lines {
        reader,
        source,
        line: 0,
        buf: Vec::new(),
    };
    let first = lines.next()?.ok_or_else(|| CliError::ImportLine {
        line: 1,
        detail: "is missing: the input is empty, and an export starts with its header line"
            .to_owned(),
    })?;
    let header = parse_header(&first).map_err(|e| CliError::ImportLine {
        line: 1,
        detail: e.to_string(),
    })?;
    let dir = layout.journal();
    let journal = open_journal(&dir)?;
    // Checked before attaching: attaching to someone's journal would fold it.
    let present = journal.head_position()?;
    if present > 0 {
        return Err(ctx_journal::ImportError::NotEmpty { records: present }.into());
    }
    // The projections are attached to the empty journal first, so their hooks fold every record
    // inside the import's transaction (as appends do): a record a projection refuses refuses the
    // import, and the imported journal's projections are current when it commits.
    let journal = std::sync::Arc::new(journal);
    let _projections = Projections::attach(&journal, domain_projections())
        .map_err(|e| CliError::Unexpected(format!("the projections could not be attached: {e}")))?;
    let (records, streams) = journal.import(|importer| -> Result<(u64, u64), CliError> {
        while let Some(text) = lines.next()? {
            let line = lines.line;
            let record = parse_record(&text).map_err(|e| CliError::ImportLine {
                line,
                detail: e.to_string(),
            })?;
            importer
                .push(&record)
                .map_err(|source| CliError::ImportRecord {
                    line,
                    source: Box::new(source),
                })?;
        }
        let found = (importer.records(), importer.streams());
        if found != (header.records, header.streams) || header.head_position != header.records {
            return Err(CliError::ImportIncomplete {
                found: found.0,
                found_streams: found.1,
                announced: header.records,
                announced_streams: header.streams,
            });
        }
        Ok(found)
    })?;
    writeln!(
        out,
        "imported {records} records in {streams} streams into {}; every digest and chain link \
         reproduced",
        dir.display()
    )?;
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::error::{EXIT_INTEGRITY, EXIT_USAGE};

    fn sample() -> (StreamId, NewRecord, Digest) {
        let stream = StreamId::derive("unit", b"s").unwrap();
        let record = NewRecord::new("ev\"1\\", "k.v1", Timestamp(-5), vec![0x00, 0xab, 0xff]);
        let digest = record.digest_at(&stream, 1, &Digest::ZERO);
        (stream, record, digest)
    }

    fn line_of(stream: StreamId, record: &NewRecord, digest: Digest) -> String {
        record_line(&Line {
            stream,
            revision: 1,
            position: 1,
            event_id: &record.event_id,
            kind: &record.kind,
            occurred_at: record.occurred_at,
            payload: &record.payload,
            previous_digest: Digest::ZERO,
            digest,
        })
    }

    #[test]
    fn a_record_line_is_canonical_json_and_parses_back() {
        let (stream, record, digest) = sample();
        let line = line_of(stream, &record, digest);
        assert_eq!(
            line,
            format!(
                "{{\"digest\":\"{digest}\",\"event_id\":\"ev\\\"1\\\\\",\"kind\":\"k.v1\",\
                 \"occurred_at\":-5,\"payload\":\"00abff\",\"position\":1,\"previous_digest\":\
                 \"{}\",\"revision\":1,\"stream\":\"{stream}\"}}",
                "0".repeat(64)
            )
        );
        let parsed = parse_record(&line).unwrap();
        assert_eq!(
            parsed,
            ImportRecord {
                stream,
                revision: 1,
                position: 1,
                record,
                previous_digest: Digest::ZERO,
                digest
            }
        );
        let header = Header {
            records: 3,
            streams: 2,
            head_position: 3,
        };
        assert_eq!(
            header_line(&header),
            "{\"format\":\"ctx.journal-export\",\"head_position\":3,\"records\":3,\"streams\":2,\
             \"version\":1}"
        );
        assert_eq!(parse_header(&header_line(&header)), Ok(header));
    }

    #[test]
    fn malformed_lines_are_refused_naming_the_field() {
        let (stream, record, digest) = sample();
        let good = line_of(stream, &record, digest);
        let cases = [
            (good.replace("\"00abff\"", "\"00ABFF\""), "payload"),
            (good.replace("\"00abff\"", "\"0ab\""), "payload"),
            (good.replace("\"revision\":1", "\"revision\":0"), "revision"),
            (
                good.replace("\"position\":1", "\"position\":\"1\""),
                "position",
            ),
            (
                good.replace("\"kind\":\"k.v1\",", ""),
                "lacks the field \"kind\"",
            ),
            (
                good.replace("{", "{\"extra\":1,"),
                "unknown field \"extra\"",
            ),
            (good.replace(&digest.to_hex(), "abc"), "digest"),
            ("[1]".to_owned(), "not a JSON object"),
            ("{".to_owned(), "not JSON"),
        ];
        for (line, expected) in cases {
            let err = parse_record(&line).unwrap_err().to_string();
            assert!(err.contains(expected), "{line}: {err}");
        }
        let err = parse_header(
            "{\"format\":\"other\",\"head_position\":0,\"records\":0,\"streams\":0,\"version\":1}",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("not an export header"), "{err}");
        let err = parse_header("{\"format\":\"ctx.journal-export\",\"head_position\":0,\"records\":0,\"streams\":0,\"version\":2}").unwrap_err().to_string();
        assert!(err.contains("version 2"), "{err}");
    }

    #[test]
    fn lines_are_bounded_and_numbered() {
        let long = "x".repeat(IMPORT_LINE_MAX_BYTES + 1);
        let input = format!("a\n{}\nb", "y".repeat(IMPORT_LINE_MAX_BYTES));
        let mut lines = Lines {
            reader: input.as_bytes(),
            source: "test".into(),
            line: 0,
            buf: Vec::new(),
        };
        assert_eq!(lines.next().unwrap().as_deref(), Some("a"));
        assert_eq!(
            lines.next().unwrap().map(|l| l.len()),
            Some(IMPORT_LINE_MAX_BYTES)
        );
        // A last line without a newline is still a line.
        assert_eq!(lines.next().unwrap().as_deref(), Some("b"));
        assert_eq!(lines.line, 3);
        assert!(lines.next().unwrap().is_none());
        let mut lines = Lines {
            reader: long.as_bytes(),
            source: "test".into(),
            line: 0,
            buf: Vec::new(),
        };
        let err = lines.next().unwrap_err();
        assert!(matches!(err, CliError::ImportLine { line: 1, .. }), "{err}");
        assert_eq!(err.exit_code(), EXIT_USAGE);
        let mut bad = Lines {
            reader: &b"\xff\n"[..],
            source: "test".into(),
            line: 0,
            buf: Vec::new(),
        };
        assert!(bad.next().unwrap_err().to_string().contains("not UTF-8"));
    }

    #[test]
    fn import_refusals_map_to_the_documented_exit_statuses() {
        let (stream, _, digest) = sample();
        let integrity = CliError::ImportRecord {
            line: 4,
            source: Box::new(ctx_journal::ImportError::Digest {
                stream,
                revision: 2,
                position: 3,
                computed: digest,
                found: Digest::ZERO,
            }),
        };
        assert_eq!(integrity.exit_code(), EXIT_INTEGRITY);
        assert!(integrity.to_string().starts_with("import line 4: stream "));
        let not_empty = CliError::from(ctx_journal::ImportError::NotEmpty { records: 2 });
        assert_eq!(not_empty.exit_code(), EXIT_USAGE);
        let incomplete = CliError::ImportIncomplete {
            found: 1,
            found_streams: 1,
            announced: 2,
            announced_streams: 1,
        };
        assert_eq!(incomplete.exit_code(), EXIT_INTEGRITY);
    }
}
