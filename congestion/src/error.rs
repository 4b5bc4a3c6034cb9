//! Typed errors of this crate: invalid controller configurations and unknown `--cc` names.

use thiserror::Error;

/// A controller configuration that cannot be built.
///
/// Returned by `DcqcnConfig::build`, `SwiftConfig::build`, `NsccConfig::build` and
/// `AnyController::new`; `field` names the offending configuration field.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// A field that must be strictly positive is zero.
    #[error("{field} must be greater than zero")]
    Zero {
        /// The configuration field.
        field: &'static str,
    },
    /// A fraction (gain, factor) lies outside its allowed interval or is not finite.
    #[error("{field} must lie in {range}")]
    OutOfRange {
        /// The configuration field.
        field: &'static str,
        /// The allowed interval, written out (for example `"(0, 1]"`).
        range: &'static str,
    },
    /// A lower bound exceeds the matching upper bound (or an initial value lies outside
    /// them).
    #[error("{low} must not exceed {high}")]
    Inverted {
        /// The field that must be the smaller one.
        low: &'static str,
        /// The field that must be the larger one.
        high: &'static str,
    },
}

/// A `--cc` value that names no controller (accepted: `dcqcn`, `swift`, `nscc`, `none`).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown congestion controller {name:?}: expected one of dcqcn, swift, nscc, none")]
pub struct ParseCcKindError {
    /// The rejected input, as given.
    pub name: String,
}

/// Checks that `value` is finite and lies in `(0, 1]`.
pub(crate) fn check_unit_open_closed(field: &'static str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            range: "(0, 1]",
        })
    }
}

/// Checks that `value` is finite and lies in `[0, 1]`.
pub(crate) fn check_unit_closed(field: &'static str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            range: "[0, 1]",
        })
    }
}

/// Checks that an integer field is non-zero.
pub(crate) fn check_nonzero(field: &'static str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        Err(ConfigError::Zero { field })
    } else {
        Ok(())
    }
}

/// Checks `low <= high`.
pub(crate) fn check_order(
    low: &'static str,
    low_value: u64,
    high: &'static str,
    high_value: u64,
) -> Result<(), ConfigError> {
    if low_value <= high_value {
        Ok(())
    } else {
        Err(ConfigError::Inverted { low, high })
    }
}
