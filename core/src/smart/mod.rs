//! SMART: adaptive radix tree on disaggregated memory (issue 5).
