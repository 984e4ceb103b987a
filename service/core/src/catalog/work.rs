//! The one work tokenizer, language table and truncation (spec/catalog.md §5), shared by the
//! public-work normalizer (`observation.rs`, §5.1) and the runtime's work observation
//! (`Runtime::observe_work`, §5.4).
//!
//! The two callers cut text differently, and each keeps its rule: the rule is the explicit
//! [`TokenRule`] parameter and whether a language's other spellings count is the explicit
//! [`Spellings`] parameter (spec/catalog.md §5.4). Only the table is shared outright.

/// Every language ctx recognises: its canonical token, then the other spellings a host may use
/// for it (spec/catalog.md §5.4). Sorted by canonical token.
const LANGUAGES: [(&str, &[&str]); 14] = [
    ("c", &[]),
    ("cpp", &["c++", "cplusplus"]),
    ("csharp", &["c#", "dotnet"]),
    ("go", &["golang"]),
    ("java", &[]),
    ("javascript", &["js", "node", "nodejs"]),
    ("kotlin", &[]),
    ("php", &[]),
    ("python", &["py"]),
    ("ruby", &[]),
    ("rust", &["rs"]),
    ("sql", &[]),
    ("swift", &[]),
    ("typescript", &["ts"]),
];

/// Which spellings of a language [`language`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spellings {
    /// Only the canonical token: a prompt's words, where `rs`, `ts`, `node` or `py` are too
    /// often something else to be read as a language (spec/catalog.md §5.4).
    Canonical,
    /// The canonical token and every other spelling: a host's language field (§5.1).
    Any,
}

/// The canonical language `name` spells (exactly, already folded), or `None`.
pub(crate) fn language(name: &str, spellings: Spellings) -> Option<&'static str> {
    LANGUAGES
        .iter()
        .find(|(canonical, others)| {
            *canonical == name || (spellings == Spellings::Any && others.contains(&name))
        })
        .map(|(canonical, _)| *canonical)
}

/// The canonical language of a host's language field (trimmed, case-folded, any spelling), or
/// `None` if it names none we know.
pub fn canonical_language(field: &str) -> Option<&'static str> {
    language(&field.trim().to_lowercase(), Spellings::Any)
}

/// How [`tokenize`] cuts a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenRule {
    /// The runtime's prompt words (§5.4): ASCII-lowercased runs of ASCII letters, digits and `-`
    /// (so `mcp-server` stays one word and meets a tag of that spelling), neither split at case
    /// changes nor truncated.
    Words,
    /// The normalizer's text (§5.1): split at camel-case changes, then ASCII-lowercased
    /// `[a-z0-9]+` runs, each truncated to `TOKEN_MAX_CHARS`.
    Text,
    /// As [`TokenRule::Text`], and an all-ASCII-alphanumeric identifier with an acronym run
    /// (`HTTPServer`) first yields its compact form (`httpserver`) too.
    Identifier,
}

/// The tokens of `text` under `rule`, in text order (duplicates kept).
pub(crate) fn tokenize(text: &str, rule: TokenRule) -> Vec<String> {
    if rule == TokenRule::Words {
        return text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
    }
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    if rule == TokenRule::Identifier
        && !chars.is_empty()
        && chars.iter().all(char::is_ascii_alphanumeric)
        && has_acronym_run(&chars)
    {
        out.push(token(&text.to_ascii_lowercase()));
    }
    let mut split = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if i > 0 {
            let prev = chars[i - 1];
            let next = chars.get(i + 1).copied();
            let lower_to_upper =
                (prev.is_ascii_lowercase() || prev.is_ascii_digit()) && c.is_ascii_uppercase();
            let acronym_end = prev.is_ascii_uppercase()
                && c.is_ascii_uppercase()
                && next.is_some_and(|n| n.is_ascii_lowercase());
            if lower_to_upper || acronym_end {
                split.push(' ');
            }
        }
        split.push(c.to_ascii_lowercase());
    }
    for run in split.split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit())) {
        if !run.is_empty() {
            out.push(token(run));
        }
    }
    out
}

/// A normalizer token: at most `TOKEN_MAX_CHARS` characters. Its text is ASCII, so bytes are
/// characters and [`truncate`] cuts it exactly where a character count would.
fn token(ascii: &str) -> String {
    truncate(ascii, ctx_model::TOKEN_MAX_CHARS).to_owned()
}

fn has_acronym_run(chars: &[char]) -> bool {
    let mut caps = 0;
    for &c in chars {
        if c.is_ascii_uppercase() {
            caps += 1;
        } else {
            if caps >= 3 && c.is_ascii_lowercase() {
                return true;
            }
            caps = 0;
        }
    }
    false
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character boundary.
pub(crate) fn truncate(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
