//! The `Range` header of an artifact download (RFC 9110 §14): one byte
//! range is served as `206`; anything else this server does not serve
//! partially (several ranges, another unit, a malformed value) is ignored
//! and the whole artifact is sent, as the RFC allows. Pure.

use std::ops::Range;

/// What a `Range` header asks of an object of a given size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByteRange {
    /// The whole object (`200`).
    Whole,
    /// These bytes (`206`, `Content-Range: bytes a-b/size`).
    Part(Range<u64>),
    /// None of the object (`416`, `Content-Range: bytes */size`).
    Unsatisfiable,
}

/// Reads a `Range` header against an object of `size` bytes.
pub fn parse_range(header: Option<&str>, size: u64) -> ByteRange {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return ByteRange::Whole;
    };
    if spec.contains(',') {
        return ByteRange::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return ByteRange::Whole;
    };
    let num = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (first.trim(), last.trim()) {
        ("", suffix) => match num(suffix) {
            None => ByteRange::Whole,
            Some(0) => ByteRange::Unsatisfiable,
            Some(_) if size == 0 => ByteRange::Unsatisfiable,
            Some(n) => ByteRange::Part(size.saturating_sub(n)..size),
        },
        (a, "") => match num(a) {
            None => ByteRange::Whole,
            Some(a) if a >= size => ByteRange::Unsatisfiable,
            Some(a) => ByteRange::Part(a..size),
        },
        (a, b) => match (num(a), num(b)) {
            (Some(a), Some(b)) if a <= b => {
                if a >= size {
                    ByteRange::Unsatisfiable
                } else {
                    ByteRange::Part(a..b.saturating_add(1).min(size))
                }
            }
            _ => ByteRange::Whole,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_range_of_each_form() {
        let p = |h: &str| parse_range(Some(h), 100);
        assert_eq!(p("bytes=0-9"), ByteRange::Part(0..10));
        assert_eq!(p("bytes=90-"), ByteRange::Part(90..100));
        assert_eq!(p("bytes=-10"), ByteRange::Part(90..100));
        assert_eq!(p("bytes=-1000"), ByteRange::Part(0..100));
        assert_eq!(p("bytes=50-1000"), ByteRange::Part(50..100));
        assert_eq!(p("bytes=99-99"), ByteRange::Part(99..100));
        assert_eq!(p(" bytes= 3 - 4 "), ByteRange::Part(3..5));
    }

    #[test]
    fn ranges_past_the_end_are_unsatisfiable() {
        assert_eq!(
            parse_range(Some("bytes=100-"), 100),
            ByteRange::Unsatisfiable
        );
        assert_eq!(
            parse_range(Some("bytes=100-200"), 100),
            ByteRange::Unsatisfiable
        );
        assert_eq!(parse_range(Some("bytes=-0"), 100), ByteRange::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=0-"), 0), ByteRange::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=-5"), 0), ByteRange::Unsatisfiable);
    }

    #[test]
    fn what_is_not_one_byte_range_gets_the_whole_object() {
        for h in [
            "",
            "bytes",
            "bytes=",
            "bytes=-",
            "items=0-1",
            "bytes=0-1,3-4",
            "bytes=5-1",
            "bytes=a-b",
            "bytes=+1-2",
            "bytes=0x1-2",
            "bytes=1",
            "bytes=99999999999999999999999-",
        ] {
            assert_eq!(parse_range(Some(h), 100), ByteRange::Whole, "{h:?}");
        }
        assert_eq!(parse_range(None, 100), ByteRange::Whole);
    }
}
