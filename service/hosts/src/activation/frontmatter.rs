//! A deliberately small reader of the YAML frontmatter of `SKILL.md` and agent Markdown files.
//!
//! ctx needs a handful of top-level scalars (`name`, `description`, `model`, `effort`) and one
//! list (`tools`); everything else only has to be recognised as a key. A full YAML parser would
//! accept far more than the hosts' files use (anchors, tags, multi-document streams) and is a
//! large dependency for that; this reader accepts the common subset and refuses the rest with a
//! sentence, so ctx never acts on a value it may have read differently from the host.
//!
//! Accepted: `key: value` lines at column 0 whose value is a plain scalar (a trailing ` #`
//! comment is dropped), a single-quoted or a double-quoted scalar on one line, a flow sequence
//! `[a, b]`, or nothing (then the indented lines that follow are the key's block: a nested map,
//! a block sequence or a block scalar). Blank lines and `#` comment lines anywhere.

/// Why a frontmatter is refused; the sentence names the line, key or value at fault and becomes
/// the reason of an invalid-material error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrontmatterError {
    #[error("frontmatter {key} is not a one-line text value")]
    NotOneLine { key: String },
    #[error("frontmatter {key} is not a list")]
    NotList { key: String },
    #[error("the file does not start with a --- frontmatter line")]
    NoOpening,
    #[error("line {number} continues {key}, and multi-line values are not supported")]
    Continues { number: usize, key: String },
    #[error("line {number} is indented but follows no key")]
    Indented { number: usize },
    #[error("line {number} is not a `key: value` line")]
    NotKeyValue { number: usize },
    #[error("line {number} has the unsupported key {key:?}")]
    Key { number: usize, key: String },
    #[error("line {number} has no space after the colon")]
    NoSpace { number: usize },
    #[error("the key {key} appears twice")]
    Twice { key: String },
    /// A value on line `number` is refused.
    #[error("line {number}: {fault}")]
    AtLine {
        number: usize,
        fault: Box<FrontmatterError>,
    },
    #[error("the frontmatter has no closing --- line")]
    NoClosing,
    #[error("a flow sequence must close on its line")]
    FlowNotClosed,
    #[error("the value {value:?} uses YAML ctx does not read")]
    UnsupportedYaml { value: String },
    #[error("a single-quoted value is not closed on its line")]
    SingleNotClosed,
    #[error("a double-quoted value uses an unsupported escape")]
    Escape,
    #[error("a double-quoted value is not closed on its line")]
    DoubleNotClosed,
    #[error("the value {value:?} holds \": \", which YAML reads as a nested map; quote it")]
    NestedMap { value: String },
    #[error("text follows a quoted value")]
    TextAfterQuote,
}

/// One top-level value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// A one-line scalar, unquoted.
    Scalar(String),
    /// A flow sequence `[...]`, its items unquoted.
    Flow(Vec<String>),
    /// Indented lines under the key (or a block scalar indicator), kept raw.
    Block(Vec<String>),
}

/// The frontmatter's keys in order, and the Markdown body after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frontmatter<'a> {
    fields: Vec<(String, Value)>,
    pub(crate) body: &'a str,
}

impl Frontmatter<'_> {
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The one-line scalar `key`, `None` when absent; an error when it is not one line.
    pub(crate) fn scalar(&self, key: &str) -> Result<Option<&str>, FrontmatterError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Scalar(s)) => Ok(Some(s)),
            Some(_) => Err(FrontmatterError::NotOneLine {
                key: key.to_owned(),
            }),
        }
    }

    /// The list `key`: a comma-separated scalar (commas inside parentheses do not split), a flow
    /// sequence, or a block sequence of plain items.
    pub(crate) fn list(&self, key: &str) -> Result<Option<Vec<String>>, FrontmatterError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Scalar(s)) => Ok(Some(split_top_level(s))),
            Some(Value::Flow(items)) => Ok(Some(items.clone())),
            Some(Value::Block(lines)) => {
                let mut items = Vec::new();
                for line in lines {
                    let item = line.trim().strip_prefix("- ").ok_or_else(|| {
                        FrontmatterError::NotList {
                            key: key.to_owned(),
                        }
                    })?;
                    items.push(unquote(item.trim())?);
                }
                Ok(Some(items))
            }
        }
    }
}

/// Splits `text` at commas outside parentheses and trims the items; empty items are dropped.
fn split_top_level(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Splits `text` into frontmatter and body. The text must start with a `---` line; the
/// frontmatter ends at the next `---` line.
pub(crate) fn parse(text: &str) -> Result<Frontmatter<'_>, FrontmatterError> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or(FrontmatterError::NoOpening)?;
    let mut fields: Vec<(String, Value)> = Vec::new();
    let mut offset = text.len() - rest.len();
    let mut closed = None;
    for (number, raw) in (2usize..).zip(rest.split_inclusive('\n')) {
        let line = raw.trim_end_matches('\n').trim_end_matches('\r');
        offset += raw.len();
        if line == "---" {
            closed = Some(offset);
            break;
        }
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            match fields.last_mut() {
                Some((_, Value::Block(lines))) => lines.push(line.to_owned()),
                Some((key, _)) => {
                    return Err(FrontmatterError::Continues {
                        number,
                        key: key.clone(),
                    });
                }
                None => return Err(FrontmatterError::Indented { number }),
            }
            continue;
        }
        let (key, value) = line
            .split_once(':')
            .ok_or(FrontmatterError::NotKeyValue { number })?;
        let key_ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !key_ok {
            return Err(FrontmatterError::Key {
                number,
                key: key.to_owned(),
            });
        }
        if !value.is_empty() && !value.starts_with([' ', '\t']) {
            return Err(FrontmatterError::NoSpace { number });
        }
        if fields.iter().any(|(k, _)| k == key) {
            return Err(FrontmatterError::Twice {
                key: key.to_owned(),
            });
        }
        let value = parse_value(value.trim()).map_err(|e| FrontmatterError::AtLine {
            number,
            fault: Box::new(e),
        })?;
        fields.push((key.to_owned(), value));
    }
    let end = closed.ok_or(FrontmatterError::NoClosing)?;
    Ok(Frontmatter {
        fields,
        body: text.get(end..).unwrap_or_default(),
    })
}

fn parse_value(v: &str) -> Result<Value, FrontmatterError> {
    if v.is_empty() || v.starts_with(['|', '>']) {
        return Ok(Value::Block(Vec::new()));
    }
    if let Some(inner) = v.strip_prefix('[') {
        let inner = strip_comment(inner);
        let inner = inner
            .strip_suffix(']')
            .ok_or(FrontmatterError::FlowNotClosed)?;
        let items = split_top_level(inner)
            .iter()
            .map(|item| unquote(item))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Value::Flow(items));
    }
    if v.starts_with(['{', '&', '*', '!', '%', '@', '`']) {
        return Err(FrontmatterError::UnsupportedYaml {
            value: v.to_owned(),
        });
    }
    Ok(Value::Scalar(unquote(v)?))
}

/// A plain scalar has its ` #` comment dropped; a quoted one is unquoted (and may only be
/// followed by a comment).
fn unquote(v: &str) -> Result<String, FrontmatterError> {
    if let Some(rest) = v.strip_prefix('\'') {
        let mut out = String::new();
        let mut chars = rest.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c == '\'' {
                if chars.peek().map(|(_, n)| *n) == Some('\'') {
                    chars.next();
                    out.push('\'');
                    continue;
                }
                return after_quote(&rest[i + 1..]).map(|()| out);
            }
            out.push(c);
        }
        return Err(FrontmatterError::SingleNotClosed);
    }
    if let Some(rest) = v.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => return after_quote(&rest[i + 1..]).map(|()| out),
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('/') => out.push('/'),
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    _ => return Err(FrontmatterError::Escape),
                },
                c => out.push(c),
            }
        }
        return Err(FrontmatterError::DoubleNotClosed);
    }
    let plain = strip_comment(v).trim_end();
    if plain.contains(": ") || plain.ends_with(':') {
        return Err(FrontmatterError::NestedMap {
            value: plain.to_owned(),
        });
    }
    Ok(plain.to_owned())
}

fn after_quote(rest: &str) -> Result<(), FrontmatterError> {
    let rest = rest.trim();
    if rest.is_empty() || rest.starts_with('#') {
        Ok(())
    } else {
        Err(FrontmatterError::TextAfterQuote)
    }
}

/// `v` without a trailing ` #` comment.
fn strip_comment(v: &str) -> &str {
    match v.find(" #") {
        Some(i) => &v[..i],
        None => v,
    }
}

/// The frontmatter of the UTF-8 material of `name`, which must declare `name: <name>` (a skill's
/// directory and an agent's identity are its name). Errors are the material's, naming it.
pub(crate) fn parse_named<'a>(
    name: &str,
    body: &'a [u8],
) -> Result<Frontmatter<'a>, super::ActivationError> {
    let invalid = |reason: String| super::ActivationError::InvalidMaterial {
        name: name.to_owned(),
        reason,
    };
    let text = std::str::from_utf8(body).map_err(|_| invalid("it is not UTF-8".to_owned()))?;
    let fm = parse(text).map_err(|e| invalid(e.to_string()))?;
    let declared = fm.scalar("name").map_err(|e| invalid(e.to_string()))?;
    if declared != Some(name) {
        return Err(invalid(format!(
            "its frontmatter name is {declared:?}, not {name:?}"
        )));
    }
    Ok(fm)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn reads_the_catalog_shapes() {
        let text = "---\nname: db-reader\ndescription: Answers questions: read-only\n";
        assert!(parse(text).is_err(), "unclosed frontmatter");
        let text = "---\nname: db-reader\ndescription: \"Answers: read-only\" # c\ntools: Read, \
                    Bash(git diff *), Grep\nmodel: inherit\nhooks:\n  PreToolUse:\n    - \
                    matcher: \"Bash\"\n---\n\nBody line\n";
        let fm = parse(text).unwrap();
        assert_eq!(fm.scalar("name").unwrap(), Some("db-reader"));
        assert_eq!(
            fm.scalar("description").unwrap(),
            Some("Answers: read-only")
        );
        assert_eq!(
            fm.list("tools").unwrap().unwrap(),
            ["Read", "Bash(git diff *)", "Grep"]
        );
        assert!(fm.scalar("hooks").is_err());
        assert!(fm.get("hooks").is_some());
        assert_eq!(fm.body, "\nBody line\n");
        let fm = parse("---\ntools:\n  - Read\n  - 'Bash(x)'\nname: 'it''s'\n---\n").unwrap();
        assert_eq!(fm.list("tools").unwrap().unwrap(), ["Read", "Bash(x)"]);
        assert_eq!(fm.scalar("name").unwrap(), Some("it's"));
        assert_eq!(parse("---\r\na: [x, \"y\"]\r\n---\r\nB").unwrap().body, "B");
    }

    #[test]
    fn refuses_what_it_might_read_differently() {
        for bad in [
            "name: x\n---\n",
            "---\nname: a: b\n---\n",
            "---\nname: x\nname: y\n---\n",
            "---\nname: x\n  more\n---\n",
            "---\nname: &a x\n---\n",
            "---\nname:x\n---\n",
            "---\nname: \"x\\q\"\n---\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
