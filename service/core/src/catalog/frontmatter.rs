//! The frontmatter of a `SKILL.md` or agent file: the YAML mapping between a first line `---`
//! and the next line `---`, read into our own [`FmValue`] tree (spec/capability-formats.md §2–§5).
//!
//! The YAML is read from the parser's event stream rather than through a loaded document, so the
//! nesting and key limits refuse hostile input before any tree is built, and no code here
//! recurses over the input's depth (spec/capability-formats.md §5).

use std::collections::BTreeMap;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Tag};

/// Most bytes of YAML between the two `---` lines (spec/capability-formats.md §5).
pub const FRONTMATTER_MAX_BYTES: usize = 64 * 1024;
/// Most nested lists and mappings, the top-level mapping being the first level
/// (spec/capability-formats.md §5).
pub const FRONTMATTER_MAX_NESTING_LEVELS: usize = 16;
/// Most mapping keys in the whole frontmatter, nested mappings included
/// (spec/capability-formats.md §5).
pub const FRONTMATTER_MAX_KEYS: usize = 256;
/// Most characters of a key or value quoted inside a message, so one sentence stays readable.
pub(crate) const QUOTED_IN_MESSAGE_MAX_CHARS: usize = 80;

/// The parser's own message when flow collections nest past its fixed limit of 255. Its scanner
/// reads ahead of the events it hands out, so `[[[[…` meets that limit before our event-level
/// check sees level 17; the message is mapped to [`FrontmatterError::TooDeep`] because only
/// nesting deeper than ours reaches it (spec/capability-formats.md §5). Should a parser release
/// word it differently, such input is still refused, as a YAML error, and the nesting test fails.
const PARSER_DEPTH_MESSAGE: &str = "recursion limit exceeded";

/// The characters that start a YAML scalar other than a plain one; a value starting with one of
/// them is left alone by the retry (spec/capability-formats.md §4).
const NON_PLAIN_STARTS: [char; 12] = ['"', '\'', '[', '{', '|', '>', '&', '*', '!', '%', '@', '`'];

/// A YAML value as the catalog keeps it, with no type of the YAML crate in it
/// (spec/capability-formats.md §3).
#[derive(Debug, Clone, PartialEq)]
pub enum FmValue {
    /// `null`, `~` or nothing.
    Null,
    /// `true` or `false` in any of the core schema's three spellings; `yes`, `no`, `on` and `off`
    /// are text.
    Bool(bool),
    /// A decimal, `0o` octal or `0x` hexadecimal integer that fits in 64 bits.
    Int(i64),
    /// A core-schema float, `.inf` and `.nan` included.
    Float(f64),
    /// Text: every quoted or block scalar, and every plain scalar that is nothing else.
    Str(String),
    /// A sequence.
    List(Vec<FmValue>),
    /// A mapping; keys are the scalar keys' text as written.
    Map(BTreeMap<String, FmValue>),
}

impl FmValue {
    /// The text of a [`FmValue::Str`], `None` for every other value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FmValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// What kind of value this is, as a phrase for a sentence ("a list").
    pub fn kind(&self) -> &'static str {
        match self {
            FmValue::Null => "null",
            FmValue::Bool(_) => "a boolean",
            FmValue::Int(_) | FmValue::Float(_) => "a number",
            FmValue::Str(_) => "text",
            FmValue::List(_) => "a list",
            FmValue::Map(_) => "a mapping",
        }
    }
}

/// A parsed frontmatter.
#[derive(Debug, Clone, PartialEq)]
pub struct Frontmatter {
    /// The top-level keys and their values.
    pub fields: BTreeMap<String, FmValue>,
    /// The byte offset in the parsed text where the Markdown body starts: just after the closing
    /// `---` line and its line break.
    pub body_offset: usize,
    /// What was repaired to read the YAML at all (spec/capability-formats.md §4).
    pub warnings: Vec<FrontmatterWarning>,
}

impl Frontmatter {
    /// The value of a top-level key.
    pub fn get(&self, key: &str) -> Option<&FmValue> {
        self.fields.get(key)
    }

    /// The value of a top-level key when it is text.
    pub fn str_field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(FmValue::as_str)
    }

    /// The top-level keys, in sorted order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }
}

/// A repair made so the frontmatter could be read (spec/capability-formats.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrontmatterWarning {
    /// The value of `key`, whose line is `line` of the file, contained an unquoted `: ` and was
    /// read as one double-quoted string.
    QuotedValue {
        /// The top-level key whose value was quoted.
        key: String,
        /// The key's line in the file, the opening `---` being line 1.
        line: usize,
    },
}

impl fmt::Display for FrontmatterWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrontmatterWarning::QuotedValue { key, line } => write!(
                f,
                "the value of {key:?} at line {line} has an unquoted `: `, which is not valid YAML; \
                 it was read as one quoted string"
            ),
        }
    }
}

/// Why a frontmatter could not be read. Lines count from 1 at the file's first line, the
/// opening `---`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrontmatterError {
    /// The text does not start with a `---` line.
    #[error("the file does not start with a `---` line, so it has no frontmatter")]
    Missing,
    /// No closing `---` line follows the opening one.
    #[error("the frontmatter opened by `---` on line 1 has no closing `---` line")]
    Unterminated,
    /// No closing `---` line within [`FRONTMATTER_MAX_BYTES`] of YAML.
    #[error(
        "the frontmatter runs past {FRONTMATTER_MAX_BYTES} bytes without its closing `---` line; \
         at most {FRONTMATTER_MAX_BYTES} bytes are read"
    )]
    TooLarge,
    /// The YAML does not parse, even after the retry of spec/capability-formats.md §4; the
    /// message is the first attempt's.
    #[error("the frontmatter is not valid YAML at line {line}: {message}")]
    Yaml {
        /// The file line the parser stopped at.
        line: usize,
        /// The parser's description of the fault.
        message: String,
    },
    /// Lists and mappings nest deeper than [`FRONTMATTER_MAX_NESTING_LEVELS`].
    #[error(
        "the frontmatter nests lists and mappings more than {FRONTMATTER_MAX_NESTING_LEVELS} \
         levels deep at line {line}"
    )]
    TooDeep {
        /// The file line where the level past the limit opens.
        line: usize,
    },
    /// More than [`FRONTMATTER_MAX_KEYS`] keys.
    #[error(
        "the frontmatter has more than {FRONTMATTER_MAX_KEYS} keys; the one past the limit is at \
         line {line}"
    )]
    TooManyKeys {
        /// The file line of the first key past the limit.
        line: usize,
    },
    /// The YAML is empty, a list or a single value instead of a mapping.
    #[error("the frontmatter is {found}, not a mapping of keys to values")]
    NotAMapping {
        /// "empty", "a list" or "a single value".
        found: &'static str,
    },
    /// A key is a list or a mapping.
    #[error("the frontmatter has a list or mapping as a key at line {line}; keys must be text")]
    ComplexKey {
        /// The file line of the key.
        line: usize,
    },
    /// A mapping gives the same key twice.
    #[error("the frontmatter gives the key {key:?} twice; the second is at line {line}")]
    DuplicateKey {
        /// The key, cut to a readable length.
        key: String,
        /// The file line of the second occurrence.
        line: usize,
    },
    /// The YAML uses an alias (`*name`).
    #[error(
        "the frontmatter uses a YAML alias at line {line}; aliases are not accepted in frontmatter"
    )]
    Alias {
        /// The file line of the alias.
        line: usize,
    },
}

/// Reads the frontmatter at the start of `text` (spec/capability-formats.md §2–§4).
///
/// # Errors
/// [`FrontmatterError`] when there is no complete frontmatter, it is over a limit, or its YAML
/// cannot be read even after quoting values that contain `: `.
pub fn parse_frontmatter(text: &str) -> Result<Frontmatter, FrontmatterError> {
    let block = locate(text)?;
    let yaml = &text[block.yaml_start..block.yaml_end];
    match build(yaml) {
        Ok(fields) => Ok(Frontmatter {
            fields,
            body_offset: block.body_offset,
            warnings: Vec::new(),
        }),
        Err(first @ FrontmatterError::Yaml { .. }) => {
            // One retry, and only for a syntax error: the commonest fault in real files is an
            // unquoted `: ` in a long description (spec/capability-formats.md §4).
            let Some((quoted, warnings)) = quote_colon_values(yaml) else {
                return Err(first);
            };
            match build(&quoted) {
                Ok(fields) => Ok(Frontmatter {
                    fields,
                    body_offset: block.body_offset,
                    warnings,
                }),
                Err(_) => Err(first),
            }
        }
        Err(other) => Err(other),
    }
}

/// Cuts `text` to at most `max_chars` characters, marking a cut with `…`.
pub(crate) fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Where the YAML and the body lie in the text, as byte offsets.
struct Block {
    yaml_start: usize,
    yaml_end: usize,
    body_offset: usize,
}

/// Finds the two delimiter lines (spec/capability-formats.md §2).
fn locate(text: &str) -> Result<Block, FrontmatterError> {
    let start = if text.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    };
    let (first, after_first) = line_at(text, start);
    if !is_delimiter(first) {
        return Err(FrontmatterError::Missing);
    }
    let Some(yaml_start) = after_first else {
        return Err(FrontmatterError::Unterminated);
    };
    let mut pos = yaml_start;
    loop {
        if pos >= text.len() {
            return Err(FrontmatterError::Unterminated);
        }
        let (line, next) = line_at(text, pos);
        if is_delimiter(line) {
            return Ok(Block {
                yaml_start,
                yaml_end: pos,
                body_offset: next.unwrap_or(text.len()),
            });
        }
        // Every YAML line is measured before the next is looked at, so the scan stops at the
        // limit whatever follows, and a closing line found leaves at most the limit before it.
        let end = next.unwrap_or(text.len());
        if end - yaml_start > FRONTMATTER_MAX_BYTES {
            return Err(FrontmatterError::TooLarge);
        }
        match next {
            Some(next) => pos = next,
            None => return Err(FrontmatterError::Unterminated),
        }
    }
}

/// The line starting at byte `pos` without its `\n` or `\r\n`, and the offset of the next line
/// when a line break ends this one.
fn line_at(text: &str, pos: usize) -> (&str, Option<usize>) {
    let rest = text.get(pos..).unwrap_or("");
    match rest.find('\n') {
        Some(nl) => {
            let line = &rest[..nl];
            (line.strip_suffix('\r').unwrap_or(line), Some(pos + nl + 1))
        }
        None => (rest.strip_suffix('\r').unwrap_or(rest), None),
    }
}

/// A delimiter line is `---` followed by nothing but spaces or tabs.
fn is_delimiter(line: &str) -> bool {
    line.trim_end_matches([' ', '\t']) == "---"
}

/// One open list or mapping while events are read.
enum Frame {
    List(Vec<FmValue>),
    Map {
        entries: BTreeMap<String, FmValue>,
        /// The key read and waiting for its value.
        key: Option<String>,
    },
}

/// Builds the top-level mapping from the parser's events, applying the limits as events arrive
/// (spec/capability-formats.md §3, §5). The tree is built with an explicit stack, so neither
/// building nor dropping it recurses deeper than [`FRONTMATTER_MAX_NESTING_LEVELS`].
fn build(yaml: &str) -> Result<BTreeMap<String, FmValue>, FrontmatterError> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<FmValue> = None;
    let mut documents = 0usize;
    let mut keys = 0usize;
    for event in Parser::new_from_str(yaml) {
        let (event, span) = event.map_err(scan_error)?;
        let line = file_line(span.start.line());
        match event {
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(FrontmatterError::Yaml {
                        line,
                        message: "a second YAML document starts here, and a frontmatter holds one"
                            .to_owned(),
                    });
                }
            }
            Event::Alias(_) => return Err(FrontmatterError::Alias { line }),
            Event::Scalar(text, style, _anchor, tag) => {
                if let Some(Frame::Map { entries, key }) = stack.last_mut()
                    && key.is_none()
                {
                    keys += 1;
                    if keys > FRONTMATTER_MAX_KEYS {
                        return Err(FrontmatterError::TooManyKeys { line });
                    }
                    if entries.contains_key(text.as_ref()) {
                        return Err(FrontmatterError::DuplicateKey {
                            key: shorten(&text, QUOTED_IN_MESSAGE_MAX_CHARS),
                            line,
                        });
                    }
                    *key = Some(text.into_owned());
                } else {
                    let value = resolve_scalar(&text, style, tag.as_deref());
                    attach(&mut stack, &mut root, value);
                }
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if let Some(Frame::Map { key: None, .. }) = stack.last() {
                    return Err(FrontmatterError::ComplexKey { line });
                }
                if stack.len() >= FRONTMATTER_MAX_NESTING_LEVELS {
                    return Err(FrontmatterError::TooDeep { line });
                }
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Frame::List(Vec::new())
                } else {
                    Frame::Map {
                        entries: BTreeMap::new(),
                        key: None,
                    }
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                // The parser balances starts and ends; an unmatched end is ignored.
                if let Some(frame) = stack.pop() {
                    let value = match frame {
                        Frame::List(items) => FmValue::List(items),
                        Frame::Map { entries, .. } => FmValue::Map(entries),
                    };
                    attach(&mut stack, &mut root, value);
                }
            }
        }
    }
    match root {
        Some(FmValue::Map(fields)) => Ok(fields),
        None => Err(FrontmatterError::NotAMapping { found: "empty" }),
        Some(FmValue::List(_)) => Err(FrontmatterError::NotAMapping { found: "a list" }),
        Some(_) => Err(FrontmatterError::NotAMapping {
            found: "a single value",
        }),
    }
}

/// Puts a finished value into the open collection, or makes it the root.
fn attach(stack: &mut [Frame], root: &mut Option<FmValue>, value: FmValue) {
    match stack.last_mut() {
        None => *root = Some(value),
        Some(Frame::List(items)) => items.push(value),
        Some(Frame::Map { entries, key }) => {
            if let Some(key) = key.take() {
                entries.insert(key, value);
            }
        }
    }
}

/// The file line of a YAML line: the YAML starts on line 2, after the opening `---`.
fn file_line(yaml_line: usize) -> usize {
    yaml_line.saturating_add(1)
}

fn scan_error(error: ScanError) -> FrontmatterError {
    let line = file_line(error.marker().line());
    if error.info() == PARSER_DEPTH_MESSAGE {
        FrontmatterError::TooDeep { line }
    } else {
        FrontmatterError::Yaml {
            line,
            message: error.info().to_owned(),
        }
    }
}

/// Resolves a scalar by the YAML 1.2 core schema (spec/capability-formats.md §3): quoted and
/// block scalars and `!!str` are text; a plain scalar is null, a boolean, an integer or a float
/// when it is spelled as one, and text otherwise. Other tags are not honoured.
fn resolve_scalar(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> FmValue {
    let tagged_str = tag.is_some_and(|t| t.is_yaml_core_schema() && t.suffix == "str");
    if style != ScalarStyle::Plain || tagged_str {
        return FmValue::Str(text.to_owned());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => FmValue::Null,
        "true" | "True" | "TRUE" => FmValue::Bool(true),
        "false" | "False" | "FALSE" => FmValue::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => FmValue::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => FmValue::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => FmValue::Float(f64::NAN),
        _ => resolve_number(text).unwrap_or_else(|| FmValue::Str(text.to_owned())),
    }
}

/// A core-schema integer or float; an integer too large for 64 bits stays text, so no digit is
/// lost.
fn resolve_number(text: &str) -> Option<FmValue> {
    if let Some(hex) = text.strip_prefix("0x") {
        return (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| i64::from_str_radix(hex, 16).ok().map(FmValue::Int))
            .flatten();
    }
    if let Some(octal) = text.strip_prefix("0o") {
        return (!octal.is_empty() && octal.bytes().all(|b| (b'0'..=b'7').contains(&b)))
            .then(|| i64::from_str_radix(octal, 8).ok().map(FmValue::Int))
            .flatten();
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<i64>().ok().map(FmValue::Int);
    }
    if is_core_float(unsigned) {
        return text.parse::<f64>().ok().map(FmValue::Float);
    }
    None
}

/// `( \.[0-9]+ | [0-9]+ ( \.[0-9]* )? ) ( [eE] [-+]? [0-9]+ )?`, the core schema's float without
/// its sign.
fn is_core_float(unsigned: &str) -> bool {
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", fraction)) => digits(fraction),
        Some((whole, fraction)) => digits(whole) && (fraction.is_empty() || digits(fraction)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// The retry of spec/capability-formats.md §4: every top-level `key: value` line whose plain
/// value (with its indented continuation lines) contains `: ` becomes `key: "value"`. The
/// continuation lines become empty lines, so every later line keeps its number. `None` when no
/// line qualifies, since the retry would then only repeat the failure.
fn quote_colon_values(yaml: &str) -> Option<(String, Vec<FrontmatterWarning>)> {
    let lines: Vec<&str> = yaml
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut warnings = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some((key, first)) = top_level_plain_entry(line) {
            let mut value = first.trim_end().to_owned();
            let mut next = i + 1;
            while let Some(more) = lines.get(next).copied().filter(|l| is_continuation(l)) {
                value.push(' ');
                value.push_str(more.trim());
                next += 1;
            }
            if value.contains(": ") {
                let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
                out.push(format!("{key}: \"{escaped}\""));
                out.extend((i + 1..next).map(|_| String::new()));
                warnings.push(FrontmatterWarning::QuotedValue {
                    key: key.to_owned(),
                    line: file_line(i + 1),
                });
                i = next;
                continue;
            }
        }
        out.push(line.to_owned());
        i += 1;
    }
    (!warnings.is_empty()).then(|| (out.join("\n"), warnings))
}

/// A line `key: value` at column 0 whose key is letters, digits, `-`, `_` or `.` and whose value
/// starts like a plain scalar.
fn top_level_plain_entry(line: &str) -> Option<(&str, &str)> {
    let (key, rest) = line.split_once(": ")?;
    let key_ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let value = rest.trim_start_matches([' ', '\t']);
    let plain = value
        .chars()
        .next()
        .is_some_and(|c| !NON_PLAIN_STARTS.contains(&c) && c != '#');
    (key_ok && plain).then_some((key, value))
}

/// An indented, non-blank line that is not a comment continues a plain scalar.
fn is_continuation(line: &str) -> bool {
    let trimmed = line.trim();
    line.starts_with([' ', '\t']) && !trimmed.is_empty() && !trimmed.starts_with('#')
}

// The tests of `names.rs` live here too: the catalog's frontmatter suite runs as
// `cargo test -p ctx-service --lib catalog::frontmatter`, and a filter matches module paths.
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const CLEAN_SKILL: &str = "---\nname: pdf-tools\ndescription: Fill and merge PDF forms.\n\
                               license: MIT\n---\n# PDF tools\n\nUse `pdftk`.\n";

    fn parse(text: &str) -> Frontmatter {
        parse_frontmatter(text).expect("frontmatter parses")
    }

    fn err(text: &str) -> FrontmatterError {
        parse_frontmatter(text).expect_err("frontmatter is refused")
    }

    fn s(text: &str) -> FmValue {
        FmValue::Str(text.to_owned())
    }

    #[test]
    fn clean_skill_gives_fields_body_offset_and_no_warning() {
        let fm = parse(CLEAN_SKILL);
        assert_eq!(fm.str_field("name"), Some("pdf-tools"));
        assert_eq!(
            fm.str_field("description"),
            Some("Fill and merge PDF forms.")
        );
        assert_eq!(
            fm.keys().collect::<Vec<_>>(),
            ["description", "license", "name"]
        );
        assert_eq!(
            &CLEAN_SKILL[fm.body_offset..],
            "# PDF tools\n\nUse `pdftk`.\n"
        );
        assert!(fm.warnings.is_empty());
        assert_eq!(fm.str_field("missing"), None);
    }

    #[test]
    fn a_dash_line_in_the_body_is_not_the_end_of_the_frontmatter() {
        let text = "---\nname: a\ndescription: b\n---   \nintro\n---\nc: d\n---\n";
        let fm = parse(text);
        assert_eq!(fm.keys().collect::<Vec<_>>(), ["description", "name"]);
        assert_eq!(&text[fm.body_offset..], "intro\n---\nc: d\n---\n");
        // A closing line at the very end, with no line break, leaves an empty body.
        let fm = parse("---\nname: a\n---");
        assert_eq!(fm.body_offset, "---\nname: a\n---".len());
    }

    #[test]
    fn bom_and_crlf_are_accepted() {
        let text = "\u{feff}---\r\nname: pdf\r\ndescription: one\r\n  two\r\n---\r\nBody\r\n";
        let fm = parse(text);
        assert_eq!(fm.str_field("name"), Some("pdf"));
        assert_eq!(fm.str_field("description"), Some("one two"));
        assert_eq!(&text[fm.body_offset..], "Body\r\n");
    }

    #[test]
    fn text_without_frontmatter_is_missing_or_unterminated() {
        assert_eq!(
            err("# Title\n---\nname: a\n---\n"),
            FrontmatterError::Missing
        );
        assert_eq!(err(""), FrontmatterError::Missing);
        assert_eq!(err(" ---\nname: a\n---\n"), FrontmatterError::Missing);
        assert_eq!(
            err("# Title\n").to_string(),
            "the file does not start with a `---` line, so it has no frontmatter"
        );
        assert_eq!(err("---"), FrontmatterError::Unterminated);
        let unterminated = err("---\nname: a\ndescription: b\n");
        assert_eq!(unterminated, FrontmatterError::Unterminated);
        assert_eq!(
            unterminated.to_string(),
            "the frontmatter opened by `---` on line 1 has no closing `---` line"
        );
    }

    #[test]
    fn unquoted_colon_in_a_value_is_quoted_on_retry_with_a_warning() {
        let text = "---\nname: reviewer\ndescription: Use this agent when: the user asks \"why\" \
                    C:\\dir\nmodel: sonnet\n---\nbody\n";
        let fm = parse(text);
        assert_eq!(
            fm.str_field("description"),
            Some("Use this agent when: the user asks \"why\" C:\\dir")
        );
        assert_eq!(fm.str_field("model"), Some("sonnet"));
        assert_eq!(
            fm.warnings,
            [FrontmatterWarning::QuotedValue {
                key: "description".to_owned(),
                line: 3
            }]
        );
        assert_eq!(
            fm.warnings[0].to_string(),
            "the value of \"description\" at line 3 has an unquoted `: `, which is not valid \
             YAML; it was read as one quoted string"
        );
        assert_eq!(&text[fm.body_offset..], "body\n");
    }

    #[test]
    fn retry_folds_continuation_lines_and_quotes_every_qualifying_value() {
        // The second line of `description` holds the `: `, and `when_to_use` has its own.
        let fm = parse(
            "---\nname: x\ndescription: Use it\n  Examples: one\n  and two\ntools: Read\n\
             when_to_use: Context: a\n---\n",
        );
        assert_eq!(
            fm.str_field("description"),
            Some("Use it Examples: one and two")
        );
        assert_eq!(fm.str_field("tools"), Some("Read"));
        assert_eq!(fm.str_field("when_to_use"), Some("Context: a"));
        assert_eq!(
            fm.warnings,
            [
                FrontmatterWarning::QuotedValue {
                    key: "description".to_owned(),
                    line: 3
                },
                FrontmatterWarning::QuotedValue {
                    key: "when_to_use".to_owned(),
                    line: 7
                }
            ]
        );
        // The quoted retry would parse but for a duplicate key; the caller sees the first
        // attempt's error, not the retry's.
        let e = err("---\ndescription: a: b\n  c\nname: x\nname: y\n---\n");
        assert_eq!(
            e,
            FrontmatterError::Yaml {
                line: 2,
                message: "mapping values are not allowed in this context".to_owned()
            }
        );
    }

    #[test]
    fn yaml_beyond_repair_reports_the_first_error_with_its_file_line() {
        let e = err("---\nname: x\ndescription: Use when: y\ntools: [Read, Grep\n---\n");
        assert_eq!(
            e.to_string(),
            "the frontmatter is not valid YAML at line 3: mapping values are not allowed in this \
             context"
        );
        // No value with `: `, so no retry: the parser's error stands.
        let e = err("---\nname: x\ndescription: [unclosed\nother: 1\n---\n");
        assert_eq!(
            e.to_string(),
            "the frontmatter is not valid YAML at line 4: illegal placement of ':' indicator"
        );
    }

    #[test]
    fn ten_thousand_levels_of_nesting_are_refused_without_deep_recursion() {
        // A small stack shows that nothing recurses per level of the input.
        let handle = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let flow = format!("---\nk: {}\n---\n", "[".repeat(10_000));
                let maps = format!("---\nk: {}\n---\n", "{a: ".repeat(10_000));
                let block = format!("---\nk:\n  {}x\n---\n", "- ".repeat(10_000));
                (err(&flow), err(&maps), err(&block))
            })
            .unwrap();
        let (flow, maps, block) = handle.join().unwrap();
        assert!(
            matches!(flow, FrontmatterError::TooDeep { line: 2 }),
            "{flow:?}"
        );
        assert!(
            matches!(maps, FrontmatterError::TooDeep { line: 2 }),
            "{maps:?}"
        );
        assert_eq!(block, FrontmatterError::TooDeep { line: 3 });
        assert_eq!(
            block.to_string(),
            "the frontmatter nests lists and mappings more than 16 levels deep at line 3"
        );
    }

    #[test]
    fn sixteen_levels_are_accepted_and_seventeen_refused() {
        // The top-level mapping is level 1, so `k` may hold 15 more.
        let ok = format!(
            "---\nk: {}{}\n---\n",
            "[".repeat(FRONTMATTER_MAX_NESTING_LEVELS - 1),
            "]".repeat(FRONTMATTER_MAX_NESTING_LEVELS - 1)
        );
        let mut value = parse(&ok).get("k").cloned().unwrap();
        let mut depth = 1;
        while let FmValue::List(mut items) = value {
            depth += 1;
            value = items.pop().unwrap_or(FmValue::Null);
        }
        assert_eq!(depth, FRONTMATTER_MAX_NESTING_LEVELS);
        let deep = format!(
            "---\nk: {}{}\n---\n",
            "[".repeat(FRONTMATTER_MAX_NESTING_LEVELS),
            "]".repeat(FRONTMATTER_MAX_NESTING_LEVELS)
        );
        assert_eq!(err(&deep), FrontmatterError::TooDeep { line: 2 });
    }

    #[test]
    fn key_limit_counts_every_mapping_and_large_input_is_refused_by_size() {
        let keys = |n: usize| (0..n).map(|i| format!("k{i}: 1\n")).collect::<String>();
        let at_limit = parse(&format!("---\n{}---\n", keys(FRONTMATTER_MAX_KEYS)));
        assert_eq!(at_limit.fields.len(), FRONTMATTER_MAX_KEYS);
        // 255 top-level keys, `metadata` and its `a` make 257; `a` is on line 258.
        let nested = format!(
            "---\n{}metadata:\n  a: 1\n  b: 2\n---\n",
            keys(FRONTMATTER_MAX_KEYS - 1)
        );
        let e = err(&nested);
        assert_eq!(e, FrontmatterError::TooManyKeys { line: 258 });
        assert_eq!(
            e.to_string(),
            "the frontmatter has more than 256 keys; the one past the limit is at line 258"
        );
        let hundred_thousand = format!("---\n{}---\n", keys(100_000));
        let e = err(&hundred_thousand);
        assert_eq!(e, FrontmatterError::TooLarge);
        assert_eq!(
            e.to_string(),
            "the frontmatter runs past 65536 bytes without its closing `---` line; at most 65536 \
             bytes are read"
        );
    }

    #[test]
    fn size_limit_is_exact_and_applies_to_one_long_line() {
        let filler = |n: usize| format!("k: {}\n", "x".repeat(n - "k: \n".len()));
        let exact = format!("---\n{}---\nbody", filler(FRONTMATTER_MAX_BYTES));
        assert_eq!(parse(&exact).str_field("k").map(str::len), Some(65_532));
        let over = format!("---\n{}---\nbody", filler(FRONTMATTER_MAX_BYTES + 1));
        assert_eq!(err(&over), FrontmatterError::TooLarge);
        // One line longer than the limit, with no line break and no closing line.
        let one_line = format!("---\n{}", "x".repeat(FRONTMATTER_MAX_BYTES + 1));
        assert_eq!(err(&one_line), FrontmatterError::TooLarge);
    }

    #[test]
    fn scalars_follow_the_yaml_1_2_core_schema() {
        let fm = parse(
            "---\nyes_: yes\nno_: no\non_: on\noff_: off\nt: true\nf: FALSE\nn: ~\nempty:\n\
             i: -42\nhex: 0x1F\noct: 0o17\nbig: 99999999999999999999\nfl: 1.5\nexp: 1e3\n\
             inf: -.inf\nq: \"true\"\ntagged: !!str 12\ncustom: !thing 7\nunderscored: 1_000\n\
             version: 1.10\nlist: [a, 2]\nmap: {x: null}\n---\n",
        );
        let get = |k: &str| fm.get(k).cloned().unwrap();
        assert_eq!(get("yes_"), s("yes"));
        assert_eq!(get("no_"), s("no"));
        assert_eq!(get("on_"), s("on"));
        assert_eq!(get("off_"), s("off"));
        assert_eq!(get("t"), FmValue::Bool(true));
        assert_eq!(get("f"), FmValue::Bool(false));
        assert_eq!(get("n"), FmValue::Null);
        assert_eq!(get("empty"), FmValue::Null);
        assert_eq!(get("i"), FmValue::Int(-42));
        assert_eq!(get("hex"), FmValue::Int(31));
        assert_eq!(get("oct"), FmValue::Int(15));
        assert_eq!(get("big"), s("99999999999999999999"));
        assert_eq!(get("fl"), FmValue::Float(1.5));
        assert_eq!(get("exp"), FmValue::Float(1000.0));
        assert_eq!(get("inf"), FmValue::Float(f64::NEG_INFINITY));
        assert_eq!(get("q"), s("true"));
        assert_eq!(get("tagged"), s("12"));
        assert_eq!(get("custom"), FmValue::Int(7));
        assert_eq!(get("underscored"), s("1_000"));
        // A version written as a plain number is a float, and its trailing zero is gone.
        assert_eq!(get("version"), FmValue::Float(1.1));
        assert_eq!(get("list"), FmValue::List(vec![s("a"), FmValue::Int(2)]));
        assert_eq!(
            get("map"),
            FmValue::Map(BTreeMap::from([("x".to_owned(), FmValue::Null)]))
        );
        assert!(matches!(
            parse("---\nx: .nan\n---\n").get("x"),
            Some(FmValue::Float(f)) if f.is_nan()
        ));
    }

    #[test]
    fn frontmatter_must_be_one_mapping_of_text_keys_without_aliases() {
        let found = |text: &str| match err(text) {
            FrontmatterError::NotAMapping { found } => found,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(found("---\n---\n"), "empty");
        assert_eq!(found("---\n# only a comment\n---\n"), "empty");
        assert_eq!(found("---\n- a\n- b\n---\n"), "a list");
        assert_eq!(found("---\njust text\n---\n"), "a single value");
        assert_eq!(
            err("---\n- a\n---\n").to_string(),
            "the frontmatter is a list, not a mapping of keys to values"
        );
        let dup = err("---\nname: a\ndescription: b\nname: c\n---\n");
        assert_eq!(
            dup.to_string(),
            "the frontmatter gives the key \"name\" twice; the second is at line 4"
        );
        let alias = err("---\nname: &n a\ndescription: *n\n---\n");
        assert_eq!(
            alias.to_string(),
            "the frontmatter uses a YAML alias at line 3; aliases are not accepted in frontmatter"
        );
        let complex = err("---\n? [a, b]\n: c\n---\n");
        assert_eq!(
            complex.to_string(),
            "the frontmatter has a list or mapping as a key at line 2; keys must be text"
        );
        let two_docs = err("---\na: 1\n--- b\n---\n");
        assert_eq!(
            two_docs.to_string(),
            "the frontmatter is not valid YAML at line 3: a second YAML document starts here, \
             and a frontmatter holds one"
        );
        // A key written as a number or boolean is kept as the text written.
        let fm = parse("---\n200: ok\ntrue: yes\n---\n");
        assert_eq!(fm.keys().collect::<Vec<_>>(), ["200", "true"]);
    }

    #[test]
    fn shorten_cuts_at_a_character_boundary() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "abc…");
        assert_eq!(shorten("ééé", 2), "éé…");
    }
}

#[cfg(test)]
mod names_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::names::{
        AgentCheck, DESCRIPTION_MAX_CHARS, NameFinding, Severity, SkillCheck, check_agent,
        check_skill,
    };
    use super::*;

    fn skill(dir: &str, yaml: &str) -> SkillCheck {
        let fm = parse_frontmatter(&format!("---\n{yaml}---\nbody\n")).unwrap();
        check_skill(&fm, dir)
    }

    fn agent(stem: &str, yaml: &str) -> AgentCheck {
        let fm = parse_frontmatter(&format!("---\n{yaml}---\nbody\n")).unwrap();
        check_agent(&fm, stem)
    }

    fn rows(findings: &[NameFinding]) -> Vec<String> {
        findings.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn clean_skill_is_accepted_without_findings() {
        let c = skill(
            "pdf-tools",
            "name: pdf-tools\ndescription: Fill PDF forms.\nlicense: MIT\n",
        );
        assert_eq!(c.name.as_deref(), Some("pdf-tools"));
        assert_eq!(c.description.as_deref(), Some("Fill PDF forms."));
        assert!(c.findings.is_empty(), "{:?}", c.findings);
        assert!(!c.is_refused());
        assert_eq!(c.allowed_tools, None);
        assert!(!c.hooks_present && !c.mcp_servers_present);
        assert_eq!(c.shell, None);
    }

    #[test]
    fn keys_outside_the_open_spec_are_listed_in_one_warning() {
        let c = skill("pdf", "name: pdf\ndescription: d\nversion: 1.0.0\n");
        assert_eq!(
            c.findings,
            [NameFinding {
                severity: Severity::Warning,
                field: "keys",
                value: "version".to_owned(),
                rule: "is outside the six keys of the open spec".to_owned(),
                what_was_done: "kept; would be refused by strict validators and claude.ai upload"
                    .to_owned(),
            }]
        );
        assert!(!c.is_refused());
        let c = skill(
            "pdf",
            "name: pdf\ndescription: d\nwhen_to_use: x\nargument-hint: y\nversion: 2\n",
        );
        assert_eq!(
            rows(&c.findings),
            [
                "keys \"argument-hint, version, when_to_use\" are outside the six keys of the open \
              spec; kept; would be refused by strict validators and claude.ai upload"
            ]
        );
        // A long list is not cut: every key is named.
        let many: String = (0..20).map(|i| format!("extra-key-{i:02}: x\n")).collect();
        let c = skill("pdf", &format!("name: pdf\ndescription: d\n{many}"));
        let expected: Vec<String> = (0..20).map(|i| format!("extra-key-{i:02}")).collect();
        assert_eq!(c.findings[0].value, expected.join(", "));
    }

    #[test]
    fn name_differing_from_the_directory_loses_to_the_directory() {
        let c = skill("pdf-tools", "name: pdf-helper\ndescription: d\n");
        assert_eq!(c.name.as_deref(), Some("pdf-tools"));
        assert_eq!(
            rows(&c.findings),
            [
                "name \"pdf-helper\" differs from its directory name \"pdf-tools\"; the directory \
              name \"pdf-tools\" is used: Claude Code takes the command from the directory, and \
              the open spec requires the two to be equal"
            ]
        );
        assert_eq!(c.findings[0].severity, Severity::Warning);
    }

    #[test]
    fn uppercase_and_underscore_are_normalized() {
        let c = skill(
            "stripe-integration",
            "name: Stripe_Integration\ndescription: d\n",
        );
        assert_eq!(c.name.as_deref(), Some("stripe-integration"));
        assert_eq!(
            rows(&c.findings),
            [
                "name \"Stripe_Integration\" has uppercase letters and `_`; normalized to \
              \"stripe-integration\""
            ]
        );
        // The directory name is normalized the same way, and then the two agree.
        let c = skill(
            "Stripe_Integration",
            "name: \" stripe--integration- \"\ndescription: d\n",
        );
        assert_eq!(c.name.as_deref(), Some("stripe-integration"));
        assert_eq!(
            rows(&c.findings),
            [
                "directory \"Stripe_Integration\" has uppercase letters and `_`; normalized to \
                 \"stripe-integration\"",
                "name \" stripe--integration- \" has surrounding spaces, `--` and a leading or \
                 trailing `-`; normalized to \"stripe-integration\"",
            ]
        );
        assert!(!c.is_refused());
    }

    #[test]
    fn names_that_cannot_be_made_valid() {
        let long = "a".repeat(70);
        let c = skill(&long, "name: x\ndescription: d\n");
        assert_eq!(c.name, None);
        assert!(c.is_refused());
        assert_eq!(
            c.findings[0].to_string(),
            format!(
                "directory \"{long}\" cannot be made a valid name: it is 70 characters once \
                 normalized, more than 64; skill refused"
            )
        );
        let c = skill("pdf.tools", "name: pdf.tools\ndescription: d\n");
        assert_eq!(
            c.findings[0].to_string(),
            "directory \"pdf.tools\" cannot be made a valid name: it keeps characters other than \
             a-z, 0-9 and `-` once normalized; skill refused"
        );
        // The Kelvin sign lowercases to `k` in Unicode; ASCII-only lowercasing keeps it out.
        let c = skill("\u{212a}it", "name: kit\ndescription: d\n");
        assert!(c.is_refused());
        assert_eq!(c.name, None);
        let c = skill("_-_", "description: d\n");
        assert_eq!(
            c.findings[0].to_string(),
            "directory \"_-_\" cannot be made a valid name: it is empty once normalized; skill \
             refused"
        );
        // A frontmatter name over 64 characters only warns: the directory name is used.
        let c = skill(
            "pdf",
            &format!("name: {}\ndescription: d\n", "b".repeat(65)),
        );
        assert_eq!(c.name.as_deref(), Some("pdf"));
        assert!(!c.is_refused());
        assert_eq!(
            c.findings[0].rule,
            "cannot be made a valid name: it is 65 characters once normalized, more than 64"
        );
        assert_eq!(
            c.findings[0].what_was_done,
            "ignored; the directory name \"pdf\" is used"
        );
        // A missing or non-text name warns too.
        let c = skill("pdf", "description: d\n");
        assert_eq!(
            rows(&c.findings),
            [
                "name \"\" is missing, and the open spec requires it; the directory name \"pdf\" is \
              used"
            ]
        );
        let c = skill("pdf", "name: 12\ndescription: d\n");
        assert_eq!(
            rows(&c.findings),
            ["name \"\" is a number, not text; ignored; the directory name \"pdf\" is used"]
        );
    }

    #[test]
    fn missing_or_empty_description_refuses_the_skill() {
        let c = skill("pdf", "name: pdf\n");
        assert!(c.is_refused());
        assert_eq!(c.description, None);
        assert_eq!(
            c.findings,
            [NameFinding {
                severity: Severity::Refusal,
                field: "description",
                value: String::new(),
                rule: "is missing".to_owned(),
                what_was_done: "skill refused: hosts skip a skill without a description".to_owned(),
            }]
        );
        let c = skill("pdf", "name: pdf\ndescription: \"  \"\n");
        assert_eq!(
            rows(&c.findings),
            [
                "description \"  \" is empty; skill refused: hosts skip a skill without a \
              description"
            ]
        );
        let c = skill("pdf", "name: pdf\ndescription: [a]\n");
        assert_eq!(
            rows(&c.findings),
            [
                "description \"\" is a list, not text; skill refused: hosts skip a skill without a \
              description"
            ]
        );
    }

    #[test]
    fn description_over_1024_characters_is_truncated_for_the_label() {
        // 1,068 characters, the longest seen in a real skill; `é` checks the char boundary.
        let long = format!("{}{}", "é".repeat(1_000), "x".repeat(68));
        let c = skill("pdf", &format!("name: pdf\ndescription: {long}\n"));
        assert!(!c.is_refused());
        let label = c.description.unwrap();
        assert_eq!(label.chars().count(), DESCRIPTION_MAX_CHARS);
        assert_eq!(label, format!("{}{}", "é".repeat(1_000), "x".repeat(24)));
        assert_eq!(c.findings.len(), 1);
        assert_eq!(c.findings[0].value, format!("{}…", "é".repeat(80)));
        assert_eq!(
            c.findings[0].rule,
            "is 1068 characters, more than the 1024 the open spec allows"
        );
        assert_eq!(
            c.findings[0].what_was_done,
            "truncated to 1024 characters for the catalog label"
        );
    }

    #[test]
    fn multi_line_description_is_joined_to_one_line() {
        let c = skill(
            "pdf",
            "name: pdf\ndescription: |\n  Fill forms.\n\n  Merge   files.\n",
        );
        assert_eq!(c.description.as_deref(), Some("Fill forms. Merge files."));
        assert_eq!(
            rows(&c.findings),
            [
                "description \"Fill forms.\\n\\nMerge   files.\\n\" spans 2 lines; joined to one \
              line, as Codex does"
            ]
        );
    }

    #[test]
    fn reserved_and_bundled_names_are_refused_and_discouraged_words_warned() {
        let c = skill("synced", "name: synced\ndescription: d\n");
        assert!(c.is_refused());
        assert_eq!(
            rows(&c.findings),
            [
                "directory \"synced\" is a folder name Claude Code reserves for itself; skill \
              refused"
            ]
        );
        let c = skill("Claude_API", "name: claude-api\ndescription: d\n");
        assert!(c.is_refused());
        assert_eq!(
            rows(&c.findings),
            [
                "directory \"Claude_API\" has uppercase letters and `_`; normalized to \
                 \"claude-api\"",
                "directory \"Claude_API\" is the name of a skill bundled with Claude Code, which \
                 a local skill of that name would override; skill refused",
            ]
        );
        let c = skill("claude-helper", "name: claude-helper\ndescription: d\n");
        assert!(!c.is_refused());
        assert_eq!(
            rows(&c.findings),
            [
                "name \"claude-helper\" contains the word \"claude\", which a platform rule is \
              reported to forbid in skill names; kept; an upload that applies the rule would \
              refuse it"
            ]
        );
    }

    #[test]
    fn skill_flag_keys_are_surfaced() {
        let c = skill(
            "deploy",
            "name: deploy\ndescription: d\nallowed-tools: Read Bash(npm run test:*),Grep\n\
             hooks:\n  PreToolUse: []\ndependencies: x\nshell: bash\n",
        );
        assert_eq!(
            c.allowed_tools.unwrap(),
            ["Read", "Bash(npm run test:*)", "Grep"]
        );
        assert!(c.hooks_present);
        assert!(c.mcp_servers_present);
        assert_eq!(c.shell.as_deref(), Some("bash"));
        let c = skill(
            "deploy",
            "name: deploy\ndescription: d\nallowed-tools:\n  - Read\n  - \" Bash(git:*) \"\n  \
             - 3\nmcpServers: {}\n",
        );
        assert_eq!(c.allowed_tools.unwrap(), ["Read", "Bash(git:*)"]);
        assert!(c.mcp_servers_present && !c.hooks_present);
    }

    #[test]
    fn agent_tools_as_comma_string_and_as_list() {
        let a = agent(
            "code-reviewer",
            "name: code-reviewer\ndescription: Reviews diffs.\ntools: Read, Grep, Glob\n\
             permissionMode: plan\n",
        );
        assert_eq!(a.name.as_deref(), Some("code-reviewer"));
        assert_eq!(a.description.as_deref(), Some("Reviews diffs."));
        assert!(a.findings.is_empty());
        assert_eq!(a.tools.unwrap(), ["Read", "Grep", "Glob"]);
        assert_eq!(a.permission_mode.as_deref(), Some("plan"));
        assert!(!a.mcp_servers_present && !a.hooks_present);
        let a = agent(
            "x",
            "name: code-reviewer\ndescription: d\ntools:\n  - Read\n  - Bash\nmcpServers: \
             [github]\nhooks: {}\n",
        );
        assert_eq!(a.tools.unwrap(), ["Read", "Bash"]);
        assert!(a.mcp_servers_present && a.hooks_present);
        // The file name plays no part: the agent is named by `name` alone.
        assert_eq!(a.name.as_deref(), Some("code-reviewer"));
        assert!(a.findings.is_empty());
    }

    #[test]
    fn agent_names_with_colon_or_leading_dash_are_normalized_or_refused() {
        let a = agent("reviewer", "name: plugin:Reviewer\ndescription: d\n");
        assert_eq!(a.name.as_deref(), Some("plugin-reviewer"));
        assert!(!a.is_refused());
        assert_eq!(
            rows(&a.findings),
            [
                "name \"plugin:Reviewer\" has uppercase letters and `:`; normalized to \
              \"plugin-reviewer\", since Claude Code skips an agent whose name has `:` or starts \
              with `-`"
            ]
        );
        let a = agent("reviewer", "name: -reviewer\ndescription: d\n");
        assert_eq!(a.name.as_deref(), Some("reviewer"));
        assert_eq!(a.findings[0].rule, "has a leading or trailing `-`");
        let a = agent("reviewer", "name: \"::\"\ndescription: d\n");
        assert_eq!(a.name, None);
        assert!(a.is_refused());
        assert_eq!(
            rows(&a.findings),
            [
                "name \"::\" cannot be made a valid name: it is empty once normalized; agent \
              refused"
            ]
        );
        let a = agent("reviewer", "description: d\n");
        assert!(a.is_refused());
        assert_eq!(
            rows(&a.findings),
            [
                "name \"\" is missing, and Claude Code identifies an agent only by it, not by the \
              file name \"reviewer\"; agent refused"
            ]
        );
        let a = agent("reviewer", "name: reviewer\n");
        assert_eq!(
            rows(&a.findings),
            [
                "description \"\" is missing; agent refused: hosts skip an agent without \
              a description"
            ]
        );
    }

    #[test]
    fn real_agent_shape_with_unquoted_colon_is_read_and_checked() {
        let text = "---\nname: test-runner\ndescription: Use this agent after code changes. \
                    Examples: Context: the user edited a test\nmodel: inherit\ncolor: green\n\
                    ---\nYou run tests.\n";
        let fm = parse_frontmatter(text).unwrap();
        assert_eq!(fm.warnings.len(), 1);
        let a = check_agent(&fm, "test-runner");
        assert_eq!(a.name.as_deref(), Some("test-runner"));
        assert_eq!(
            a.description.as_deref(),
            Some("Use this agent after code changes. Examples: Context: the user edited a test")
        );
        assert!(a.findings.is_empty());
    }
}
