//! Shared helpers for the mrc example binaries.
