//! Erda formats (in progress).
