//! Host files: locked, atomic, format-preserving edits (being built).
