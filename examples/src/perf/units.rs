//! Byte counts on the command line: `65536`, or with a binary suffix as perftest users
//! write them, `64k`/`64K` (KiB, 2^10), `1m`/`1M` (MiB, 2^20), `1g`/`1G` (GiB, 2^30);
//! an optional `B`/`iB` after the suffix (`64KiB`, `1MB`) means the same. Decimal
//! powers are not offered: `1M` is 1048576, as in perftest's `-s 1M`.

/// Why a byte count did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Nothing given.
    #[error("empty; give bytes, e.g. 65536 or 64k")]
    Empty,
    /// Not digits and an optional suffix.
    #[error(
        "'{0}' is not a byte count: digits with an optional k/K (KiB), m/M (MiB) or g/G (GiB) \
         suffix, e.g. 65536, 64k, 1M"
    )]
    Invalid(String),
    /// More than 2^64 - 1 bytes.
    #[error("'{0}' is more than 2^64 - 1 bytes")]
    TooLarge(String),
}

/// Parses a byte count of the module's form.
///
/// # Errors
/// [`SizeError`]: empty, not digits and a suffix, or over `u64::MAX`.
pub fn parse_bytes(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(SizeError::Empty);
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, suffix) = t.split_at(digits);
    if num.is_empty() {
        return Err(SizeError::Invalid(s.to_string()));
    }
    let shift = match suffix {
        "" | "b" | "B" => 0,
        "k" | "K" | "kB" | "KB" | "KiB" | "kiB" => 10,
        "m" | "M" | "MB" | "MiB" => 20,
        "g" | "G" | "GB" | "GiB" => 30,
        _ => return Err(SizeError::Invalid(s.to_string())),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| SizeError::TooLarge(s.to_string()))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::TooLarge(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_powers_of_1024() {
        for (s, n) in [
            ("65536", 65536),
            ("64k", 65536),
            ("64K", 65536),
            ("64KiB", 65536),
            ("1m", 1 << 20),
            ("1M", 1 << 20),
            ("8MB", 8 << 20),
            ("1g", 1 << 30),
            ("1G", 1 << 30),
            ("0", 0),
            (" 4k ", 4096),
            ("100000000", 100_000_000),
        ] {
            assert_eq!(parse_bytes(s), Ok(n), "{s}");
        }
    }

    #[test]
    fn bad_counts_say_what_is_accepted() {
        assert_eq!(parse_bytes(""), Err(SizeError::Empty));
        assert_eq!(parse_bytes("1.5M"), Err(SizeError::Invalid("1.5M".into())));
        assert_eq!(parse_bytes("k"), Err(SizeError::Invalid("k".into())));
        assert_eq!(parse_bytes("4T"), Err(SizeError::Invalid("4T".into())));
        assert_eq!(parse_bytes("-4k"), Err(SizeError::Invalid("-4k".into())));
        assert_eq!(
            parse_bytes("17179869184G"),
            Err(SizeError::TooLarge("17179869184G".into()))
        );
        assert_eq!(
            parse_bytes("99999999999999999999"),
            Err(SizeError::TooLarge("99999999999999999999".into()))
        );
        assert_eq!(
            SizeError::Invalid("1.5M".into()).to_string(),
            "'1.5M' is not a byte count: digits with an optional k/K (KiB), m/M (MiB) or g/G \
             (GiB) suffix, e.g. 65536, 64k, 1M"
        );
    }
}
