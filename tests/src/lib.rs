//! End-to-end tests across the mrc crates live in `tests/tests/`.
