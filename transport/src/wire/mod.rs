//! Wire format: checked views over byte buffers and parsed `Repr`s (see docs/WIRE.md).
