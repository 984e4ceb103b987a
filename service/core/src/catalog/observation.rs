//! The work observation retrieval runs on, and the public-work normalizer that derives one from a
//! host's description of the current work (spec/catalog.md §5.1).
//!
//! The normalizer keeps only specific tokens: generic words ("add", "test", "code") and language
//! names would match most of a catalog and drown the signal, so languages travel in their own
//! canonical field and generic words are dropped.

use std::collections::BTreeSet;

use ctx_model::{TOKEN_MAX_CHARS, is_safe_token};

use super::error::ObservationError;
use super::work::{Spellings, TokenRule, canonical_language, language, tokenize};

/// Most signals of an observation, in tokens.
pub const SIGNALS_MAX_TOKENS: usize = 32;
/// Most languages of an observation, in tokens.
pub const LANGUAGES_MAX_TOKENS: usize = 10;
/// Most baseline capability ids, in ids.
pub const BASELINE_MAX_IDS: usize = 100;
/// Most active capability ids, in ids.
pub const ACTIVE_MAX_IDS: usize = 5;
/// Most rejected capability ids, in ids.
pub const REJECTED_MAX_IDS: usize = 100;
/// Largest `requested_limit`, in capabilities (the planner's selection bound).
pub const REQUESTED_LIMIT_MAX: i64 = 5;
/// Signal count at which a normalizer priority group stops, in tokens (see [`normalize_public_work`]).
pub const PUBLIC_WORK_SIGNALS_TARGET: usize = 8;
/// Most repository facts, in strings.
pub const REPO_FACTS_MAX_STRINGS: usize = 32;
/// Longest public-work text field, in bytes (8192 characters of up to four bytes each).
pub const PUBLIC_TEXT_MAX_BYTES: usize = 32_768;
/// Longest backtick span treated as an identifier, in characters.
const BACKTICK_SPAN_MAX_CHARS: usize = 256;

/// What the planner knows about the current work: specific signals, canonical languages, the
/// capabilities already present, active or rejected, and how many selections are wanted.
/// Every list is sorted and duplicate-free.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkObservation {
    signals: Vec<String>,
    languages: Vec<String>,
    baseline_capability_ids: Vec<String>,
    active_capability_ids: Vec<String>,
    rejected_capability_ids: Vec<String>,
    requested_limit: u8,
}

impl WorkObservation {
    /// An observation of `signals` and `languages` with no baseline, active or rejected ids and
    /// `requested_limit` 5. Items may come in any order; duplicates are refused.
    pub fn new<S: AsRef<str>>(signals: &[S], languages: &[S]) -> Result<Self, ObservationError> {
        Ok(WorkObservation {
            signals: token_list("signals", signals, SIGNALS_MAX_TOKENS)?,
            languages: token_list("languages", languages, LANGUAGES_MAX_TOKENS)?,
            baseline_capability_ids: Vec::new(),
            active_capability_ids: Vec::new(),
            rejected_capability_ids: Vec::new(),
            requested_limit: 5,
        })
    }

    pub fn with_baseline<S: AsRef<str>>(mut self, ids: &[S]) -> Result<Self, ObservationError> {
        self.baseline_capability_ids =
            token_list("baseline_capability_ids", ids, BASELINE_MAX_IDS)?;
        Ok(self)
    }

    pub fn with_active<S: AsRef<str>>(mut self, ids: &[S]) -> Result<Self, ObservationError> {
        self.active_capability_ids = token_list("active_capability_ids", ids, ACTIVE_MAX_IDS)?;
        Ok(self)
    }

    pub fn with_rejected<S: AsRef<str>>(mut self, ids: &[S]) -> Result<Self, ObservationError> {
        self.rejected_capability_ids =
            token_list("rejected_capability_ids", ids, REJECTED_MAX_IDS)?;
        Ok(self)
    }

    pub fn with_requested_limit(mut self, limit: i64) -> Result<Self, ObservationError> {
        match u8::try_from(limit) {
            Ok(l) if i64::from(l) <= REQUESTED_LIMIT_MAX => {
                self.requested_limit = l;
                Ok(self)
            }
            _ => Err(ObservationError::RequestedLimit {
                value: limit,
                max: REQUESTED_LIMIT_MAX,
            }),
        }
    }

    pub fn signals(&self) -> &[String] {
        &self.signals
    }

    pub fn languages(&self) -> &[String] {
        &self.languages
    }

    pub fn baseline_capability_ids(&self) -> &[String] {
        &self.baseline_capability_ids
    }

    pub fn active_capability_ids(&self) -> &[String] {
        &self.active_capability_ids
    }

    pub fn rejected_capability_ids(&self) -> &[String] {
        &self.rejected_capability_ids
    }

    pub fn requested_limit(&self) -> u8 {
        self.requested_limit
    }

    /// Sorted union of signals and languages: what retrieval matches against.
    pub fn work_tokens(&self) -> Vec<String> {
        let set: BTreeSet<&String> = self.signals.iter().chain(&self.languages).collect();
        set.into_iter().cloned().collect()
    }
}

fn token_list<S: AsRef<str>>(
    field: &'static str,
    items: &[S],
    limit: usize,
) -> Result<Vec<String>, ObservationError> {
    if items.len() > limit {
        return Err(ObservationError::TooMany {
            field,
            count: items.len(),
            limit,
        });
    }
    let mut out = BTreeSet::new();
    for item in items {
        let s = item.as_ref();
        if !is_safe_token(s) {
            return Err(ObservationError::BadToken {
                field,
                value: s.chars().take(TOKEN_MAX_CHARS + 1).collect(),
            });
        }
        if !out.insert(s.to_owned()) {
            return Err(ObservationError::Duplicate {
                field,
                value: s.to_owned(),
            });
        }
    }
    Ok(out.into_iter().collect())
}

/// A host's public description of the current work. Only public text: no file contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublicWork<'a> {
    pub query: &'a str,
    pub task: &'a str,
    pub language: &'a str,
    pub repo_slug: &'a str,
    pub repo_facts: &'a [&'a str],
}

/// Derives a [`WorkObservation`] from public work text (spec/catalog.md §5.1).
///
/// Signals are collected in priority order — repository name, identifiers in backtick spans
/// (query, then task), query text, task text, repository facts — first occurrence winning. Each
/// group stops once the list holds [`PUBLIC_WORK_SIGNALS_TARGET`] tokens; as in the reference the
/// check runs after appending, so every later group still adds one token and the list can reach
/// 12. `requested_limit` is 5 when there is a signal, else 0.
///
/// Deviation: the reference NFKC-normalizes first; this crate has no Unicode normalization
/// tables, so non-ASCII characters simply separate tokens.
pub fn normalize_public_work(work: &PublicWork<'_>) -> Result<WorkObservation, ObservationError> {
    for (field, text) in [
        ("query", work.query),
        ("task", work.task),
        ("language", work.language),
        ("repo_slug", work.repo_slug),
    ] {
        if text.len() > PUBLIC_TEXT_MAX_BYTES {
            return Err(ObservationError::TextTooLong {
                field,
                size: text.len(),
                limit: PUBLIC_TEXT_MAX_BYTES,
            });
        }
    }
    if work.repo_facts.len() > REPO_FACTS_MAX_STRINGS {
        return Err(ObservationError::TooMany {
            field: "repo_facts",
            count: work.repo_facts.len(),
            limit: REPO_FACTS_MAX_STRINGS,
        });
    }
    if let Some(fact) = work
        .repo_facts
        .iter()
        .find(|f| f.len() > PUBLIC_TEXT_MAX_BYTES)
    {
        return Err(ObservationError::TextTooLong {
            field: "repo_facts",
            size: fact.len(),
            limit: PUBLIC_TEXT_MAX_BYTES,
        });
    }

    let mut groups: Vec<Vec<String>> = Vec::with_capacity(5);
    groups.push(tokenize(repo_name(work.repo_slug), TokenRule::Identifier));
    let (query_spans, query_rest) = backtick_spans(work.query);
    let (task_spans, task_rest) = backtick_spans(work.task);
    groups.push(
        query_spans
            .iter()
            .chain(&task_spans)
            .flat_map(|s| tokenize(s, TokenRule::Identifier))
            .collect(),
    );
    groups.push(tokenize(&query_rest, TokenRule::Text));
    groups.push(tokenize(&task_rest, TokenRule::Text));
    groups.push(
        work.repo_facts
            .iter()
            .flat_map(|f| tokenize(f, TokenRule::Identifier))
            .collect(),
    );

    let mut signals: Vec<String> = Vec::new();
    let mut seen = BTreeSet::new();
    for group in groups {
        for token in group {
            let Some(token) = specific(token) else {
                continue;
            };
            if !seen.insert(token.clone()) {
                continue;
            }
            signals.push(token);
            if signals.len() >= PUBLIC_WORK_SIGNALS_TARGET {
                break;
            }
        }
    }
    let languages: Vec<String> = canonical_language(work.language)
        .map(str::to_owned)
        .into_iter()
        .collect();
    let limit = if signals.is_empty() {
        0
    } else {
        REQUESTED_LIMIT_MAX
    };
    WorkObservation::new(&signals, &languages)?.with_requested_limit(limit)
}

/// The last path segment of a repository slug, without a trailing `/` or a `.git` suffix.
fn repo_name(slug: &str) -> &str {
    let slug = slug.trim().trim_end_matches('/');
    let last = slug.rsplit(['/', '\\']).next().unwrap_or(slug);
    if last.len() >= 4 && last[last.len() - 4..].eq_ignore_ascii_case(".git") {
        &last[..last.len() - 4]
    } else {
        last
    }
}

/// Backtick spans of 1..=256 characters without backtick or line break, and the text with each
/// span replaced by a space.
fn backtick_spans(text: &str) -> (Vec<String>, String) {
    let mut spans = Vec::new();
    let mut rest = String::with_capacity(text.len());
    let mut remaining = text;
    while let Some(open) = remaining.find('`') {
        let after = &remaining[open + 1..];
        let end = after.find(['`', '\r', '\n']);
        match end {
            Some(close)
                if after[close..].starts_with('`')
                    && (1..=BACKTICK_SPAN_MAX_CHARS).contains(&after[..close].chars().count()) =>
            {
                rest.push_str(&remaining[..open]);
                rest.push(' ');
                spans.push(after[..close].to_owned());
                remaining = &after[close + 1..];
            }
            _ => {
                rest.push_str(&remaining[..=open]);
                remaining = after;
            }
        }
    }
    rest.push_str(remaining);
    (spans, rest)
}

/// Maps inflections to one form and drops generic words and language names.
fn specific(token: String) -> Option<String> {
    let token = match token.as_str() {
        "decode" | "decoded" | "decoder" | "decoders" | "decodes" => "decoding".to_owned(),
        "serialize" | "serialized" | "serializes" | "serializing" => "serialization".to_owned(),
        "exceptions" => "exception".to_owned(),
        _ => token,
    };
    if token.is_empty()
        || token.len() > TOKEN_MAX_CHARS
        || GENERIC_WORDS.contains(&token.as_str())
        // Language names never become signals: they are carried canonically in `languages`.
        || language(&token, Spellings::Any).is_some()
    {
        return None;
    }
    Some(token)
}

/// English and coding words too generic to select a capability (our list; the reference's exact
/// list is not reproduced).
const GENERIC_WORDS: [&str; 118] = [
    "a",
    "about",
    "add",
    "added",
    "adding",
    "after",
    "all",
    "also",
    "an",
    "and",
    "any",
    "app",
    "are",
    "as",
    "at",
    "be",
    "before",
    "being",
    "both",
    "bug",
    "but",
    "by",
    "can",
    "change",
    "changes",
    "check",
    "code",
    "could",
    "current",
    "data",
    "do",
    "does",
    "doing",
    "done",
    "each",
    "error",
    "errors",
    "file",
    "files",
    "fix",
    "fixed",
    "fixes",
    "fixing",
    "for",
    "from",
    "function",
    "get",
    "has",
    "have",
    "help",
    "how",
    "i",
    "if",
    "implement",
    "in",
    "into",
    "is",
    "issue",
    "it",
    "its",
    "just",
    "like",
    "make",
    "me",
    "method",
    "more",
    "my",
    "need",
    "new",
    "no",
    "not",
    "now",
    "of",
    "on",
    "one",
    "or",
    "our",
    "out",
    "please",
    "project",
    "repo",
    "run",
    "set",
    "should",
    "so",
    "some",
    "that",
    "the",
    "their",
    "then",
    "there",
    "these",
    "this",
    "to",
    "test",
    "tests",
    "thing",
    "up",
    "update",
    "updated",
    "use",
    "used",
    "using",
    "value",
    "values",
    "want",
    "was",
    "we",
    "what",
    "when",
    "where",
    "which",
    "why",
    "will",
    "with",
    "work",
    "would",
    "you",
];
