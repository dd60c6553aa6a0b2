//! Kubernetes resource quantities (`250m`, `1.5`, `512Mi`, `2e3`) as the
//! scheduler counts them: whole thousandths of the unit
//! ([`kruntimes_core::Resources`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kruntimes_core::Resources;

/// Most named resources a Runtime's capacity or a Run's requests may list.
pub const MAX_RESOURCES: usize = 16;

/// `q` in thousandths of its unit, or why it is not a quantity (negative,
/// malformed, or beyond 2^64 thousandths).
pub fn milli(q: &str) -> Result<u64, String> {
    let bad = || format!("{q:?} is not a resource quantity (for example 250m, 2, 512Mi, 1G)");
    let s = q.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number = number.strip_prefix('+').unwrap_or(number);
    if number.is_empty() || number.starts_with('.') && number.len() == 1 {
        return Err(bad());
    }
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    // value = digits / 10^frac_len, scaled by 10^dec * 2^bin, then * 1000.
    let (dec, bin): (i32, u32) = match suffix {
        "" => (0, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        e if e.starts_with(['e', 'E']) => (e[1..].parse::<i32>().map_err(|_| bad())?, 0),
        _ => return Err(bad()),
    };
    let digits = format!("{whole}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(bad());
    }
    let mut value: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| bad())?
    };
    let exp = dec + 3 - frac.len() as i32;
    if !(-40..=40).contains(&exp) {
        return Err(bad());
    }
    value = value.checked_mul(1u128 << bin).ok_or_else(bad)?;
    let value = if exp >= 0 {
        value.checked_mul(10u128.pow(exp as u32)).ok_or_else(bad)?
    } else {
        // Kubernetes rounds a fraction of the smallest unit up.
        value.div_ceil(10u128.pow((-exp) as u32))
    };
    u64::try_from(value).map_err(|_| bad())
}

/// `milli` thousandths of resource `name` as a quantity people read:
/// memory and storage in the largest binary unit that divides them
/// (`6Gi`), anything else whole (`2`) or in thousandths (`2500m`).
pub fn display(name: &str, milli: u64) -> String {
    if !milli.is_multiple_of(1000) {
        return format!("{milli}m");
    }
    let whole = milli / 1000;
    if matches!(name, "memory" | "ephemeral-storage") && whole > 0 {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            if whole.is_multiple_of(1u64 << shift) {
                return format!("{}{suffix}", whole >> shift);
            }
        }
    }
    whole.to_string()
}

/// A map of quantities as [`Resources`], or the first that is invalid,
/// named by `at`.
pub fn resources(map: &BTreeMap<String, Quantity>, at: &str) -> Result<Resources, String> {
    resources_of(map.iter().map(|(n, q)| (n.as_str(), q.0.as_str())), at)
}

/// `(name, quantity)` pairs as [`Resources`] (a command line's
/// `cpu=2,memory=4Gi`), checked as [`resources`] checks a map.
pub fn resources_of<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    at: &str,
) -> Result<Resources, String> {
    let mut out = BTreeMap::new();
    for (name, q) in pairs {
        if name.is_empty() || name.len() > 253 {
            return Err(format!("{at}: resource name {name:?} is empty or too long"));
        }
        let v = milli(q).map_err(|e| format!("{at}.{name}: {e}"))?;
        out.insert(name.to_owned(), v);
        if out.len() > MAX_RESOURCES {
            return Err(format!("{at} lists more than {MAX_RESOURCES} resources"));
        }
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_counted_in_thousandths() {
        for (q, want) in [
            ("250m", 250),
            ("1", 1000),
            ("2.5", 2500),
            ("0.1", 100),
            ("1k", 1_000_000),
            ("1Ki", 1_024_000),
            ("512Mi", 512 * 1024 * 1024 * 1000),
            ("1G", 1_000_000_000_000),
            ("2e3", 2_000_000),
            ("1E-3", 1),
            ("0.5m", 1),
            ("+3", 3000),
            ("0", 0),
        ] {
            assert_eq!(milli(q), Ok(want), "{q}");
        }
    }

    #[test]
    fn malformed_negative_and_huge_quantities_are_refused() {
        for q in [
            "",
            "-1",
            "1.2.3",
            "abc",
            "1Zi",
            "1 Gi",
            ".",
            "e3",
            "16Ei",
            "1e40",
            "9".repeat(40).as_str(),
        ] {
            let err = milli(q).unwrap_err();
            assert!(err.contains("is not a resource quantity"), "{q}: {err}");
        }
    }

    #[test]
    fn amounts_display_as_people_write_them() {
        assert_eq!(display("cpu", 2500), "2500m");
        assert_eq!(display("cpu", 2000), "2");
        assert_eq!(display("memory", 6 * (1 << 30) * 1000), "6Gi");
        assert_eq!(display("memory", 1536 * (1 << 20) * 1000), "1536Mi");
        assert_eq!(display("memory", 1000), "1");
        assert_eq!(display("memory", 0), "0");
        assert_eq!(display("example.com/gpu", 3000), "3");
        for q in ["6Gi", "1536Mi", "2500m", "2"] {
            assert_eq!(
                milli(&display("memory", milli(q).unwrap())).unwrap(),
                milli(q).unwrap()
            );
        }
    }

    #[test]
    fn maps_name_the_quantity_that_fails() {
        let map: BTreeMap<String, Quantity> = [
            ("cpu".to_owned(), Quantity("500m".into())),
            ("memory".to_owned(), Quantity("lots".into())),
        ]
        .into();
        let err = resources(&map, "spec.resources.requests").unwrap_err();
        assert!(err.starts_with("spec.resources.requests.memory:"), "{err}");
        let ok: BTreeMap<String, Quantity> = [("cpu".to_owned(), Quantity("2".into()))].into();
        assert_eq!(resources(&ok, "x").unwrap().get("cpu"), 2000);
    }
}
