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
    /// changes nor truncated; each hyphenated word also yields its parts; stop words and words
    /// the registry's credential screen refuses are dropped ([`is_screened_word`]).
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
        return prompt_words(text);
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

/// The runtime's prompt words (spec/catalog.md §5.4), in text order (duplicates kept).
///
/// A hyphenated word (`test-runner`) also yields its parts. Stop words are no evidence (§5.2)
/// and would only crowd the bounded signal list; a word the registry's credential screen refuses
/// (spec/registry.md §3) is dropped here, so that one plain word such as "secret" costs the
/// prompt that word rather than its whole plan. The screen itself is unchanged and still judges
/// every stored token. Inflections need no spelling here: the runtime keeps the words the
/// catalog's retrieval index knows, and the index folds plurals on both sides (§5.2).
fn prompt_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| !w.is_empty())
    {
        let word = word.to_ascii_lowercase();
        let parts: Vec<String> = if word.contains('-') {
            word.split('-')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        } else {
            Vec::new()
        };
        for form in std::iter::once(word).chain(parts) {
            if !is_stop_word(&form) && !is_screened_word(&form) {
                out.push(form);
            }
        }
    }
    out
}

/// English function words: they say nothing about which capability a piece of work needs, so
/// they are never retrieval evidence (spec/catalog.md §5.2). Sorted, for binary search.
const STOP_WORDS: [&str; 126] = [
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Whether `word` (lowercase) is a stop word (spec/catalog.md §5.2).
pub(crate) fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// Shortest word, in characters, that [`stem`] changes: shorter words (`aws`, `k8s`, `ios`)
/// are names more often than plurals.
const STEM_MIN_CHARS: usize = 4;

/// The light stem of a lowercase term (spec/catalog.md §5.2): Harman's S-stemmer, which only
/// folds English plurals — `ies` → `y` (not after `a` or `e`), `es` → `e` (not after `a`, `e` or
/// `o`), else a final `s` goes (not after `u` or `s`) — with one change: after `x`, `z`, `sh`
/// or `ss`, `es` goes whole (`fixes` → `fix`, `classes` → `class`), so that a word and its plural
/// are one term. `spreadsheets` meets `spreadsheet` and `libraries` meets `library`, while
/// `status`, `class` and `aws` stay as they are. Only the end of a hyphenated term changes
/// (`unit-tests` → `unit-test`).
pub(crate) fn stem(term: &str) -> String {
    let last = term.rsplit('-').next().unwrap_or(term);
    if last.chars().count() < STEM_MIN_CHARS || !term.is_ascii() {
        return term.to_owned();
    }
    let n = term.len();
    if term.ends_with("ies") && !term.ends_with("eies") && !term.ends_with("aies") {
        return format!("{}y", &term[..n - 3]);
    }
    if ["xes", "zes", "shes", "sses"]
        .iter()
        .any(|e| term.ends_with(e))
    {
        return term[..n - 2].to_owned();
    }
    let drops_s = if term.ends_with("es") {
        !(term.ends_with("aes") || term.ends_with("ees") || term.ends_with("oes"))
    } else {
        term.ends_with('s') && !term.ends_with("us") && !term.ends_with("ss")
    };
    if drops_s {
        term[..n - 1].to_owned()
    } else {
        term.to_owned()
    }
}

/// Prefixes of well-known secret formats the registry's screen refuses (spec/registry.md §3).
const CREDENTIAL_PREFIXES: [&str; 5] = ["ghp-", "github-pat-", "sk-", "xoxb-", "xoxp-"];
/// Words, or adjacent word pairs joined by `-`, that make the registry's screen refuse a token
/// (spec/registry.md §3).
const CREDENTIAL_WORDS: [&str; 10] = [
    "api-key",
    "apikey",
    "auth-token",
    "bearer",
    "credential",
    "credentials",
    "passwd",
    "password",
    "private-key",
    "secret",
];
/// A `signals` or `languages` token this long, in characters, is more likely a key than a word.
const FREE_TOKEN_MAX_CHARS: usize = 31;

/// The registry's credential screen (spec/registry.md §3): whether `token` is credential-like —
/// a secret format's prefix, a credential word or pair of words, or, for a free-text token
/// (`free`: a signal or a language), more than [`FREE_TOKEN_MAX_CHARS`] characters.
pub(crate) fn is_credential_like(token: &str, free: bool) -> bool {
    let lower = token.to_ascii_lowercase();
    if CREDENTIAL_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        return true;
    }
    if free && token.chars().count() > FREE_TOKEN_MAX_CHARS {
        return true;
    }
    let normalized = lower.replace(['_', '.', ':'], "-");
    let parts: Vec<&str> = normalized.split('-').collect();
    parts.iter().any(|p| CREDENTIAL_WORDS.contains(p))
        || parts
            .windows(2)
            .any(|w| CREDENTIAL_WORDS.contains(&format!("{}-{}", w[0], w[1]).as_str()))
}

/// Whether the registry's credential screen would refuse `word` as a signal. A prompt word it
/// refuses is dropped from the signals, never stored: the screen keeps secrets out of the
/// journal, and dropping the word keeps them out just the same.
pub(crate) fn is_screened_word(word: &str) -> bool {
    is_credential_like(word, true)
}
