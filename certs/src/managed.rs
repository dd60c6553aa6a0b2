//! Certificates an installation manages itself (the chart's `tls.mode:
//! chart`): whether a held CA or leaf is kept or issued again, decided
//! purely from its PEM, the CA it should chain to, the names it should
//! carry and the time.
//!
//! - A CA is issued when missing or unreadable, and **rolled over in two
//!   steps** ([`decide_ca`]): in the last third of its lifetime a successor
//!   is *staged* — published in every bundle while the current CA still
//!   signs — and in the last sixth the successor is *promoted* and signs
//!   from then on, the old CA staying in the bundles until it expires
//!   ([`bundle`]). Between the two steps (1.7 years with a 10-year CA) every
//!   peer and caller that reloads its bundle comes to trust both.
//! - A leaf is issued when missing, unreadable, issued by another CA than
//!   the current one, carrying other names than wanted, or within the last
//!   third of its lifetime.

use time::OffsetDateTime;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::{FromDer as _, X509Certificate};

use crate::LeafSpec;

/// Lifetimes of managed material.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// CA validity, days.
    pub ca_days: i64,
    /// Leaf validity, days.
    pub leaf_days: i64,
}

impl Default for Lifetimes {
    /// CAs for 10 years, leaves for 90 days (renewed after 60).
    fn default() -> Self {
        Self {
            ca_days: 3650,
            leaf_days: 90,
        }
    }
}

/// Why material is issued (again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// Nothing is held.
    Missing,
    /// What is held does not parse (or its key is missing).
    Unreadable(String),
    /// Less than a third of its lifetime is left (or it expired).
    NearExpiry,
    /// The leaf was not issued by the current CA.
    OtherIssuer,
    /// The leaf's names differ from the wanted ones.
    NamesChanged,
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Missing => f.write_str("missing"),
            Why::Unreadable(e) => write!(f, "unreadable: {e}"),
            Why::NearExpiry => f.write_str("near expiry"),
            Why::OtherIssuer => f.write_str("issued by another CA"),
            Why::NamesChanged => f.write_str("names changed"),
        }
    }
}

/// Keep what is held, or issue it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Held material is good.
    Keep,
    /// Issue new material.
    Issue(Why),
}

/// What is held for one certificate.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// Certificate, PEM.
    pub cert_pem: &'a str,
    /// Key, PEM (only checked for presence).
    pub key_pem: &'a str,
}

/// The facts of a certificate this module decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Start of validity.
    pub not_before: OffsetDateTime,
    /// End of validity.
    pub not_after: OffsetDateTime,
    /// DER of the issuer name.
    pub issuer: Vec<u8>,
    /// DER of the subject name.
    pub subject: Vec<u8>,
    /// DNS names and IP addresses (as text) of the SAN extension, sorted.
    pub names: Vec<String>,
    /// Its subject key identifier.
    pub subject_key_id: Option<Vec<u8>>,
    /// The key identifier of the CA that signed it.
    pub authority_key_id: Option<Vec<u8>>,
}

/// Parses the first certificate of `pem`.
pub fn facts(pem: &str) -> Result<Facts, String> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
    let (_, cert) = X509Certificate::from_der(&p.contents).map_err(|e| e.to_string())?;
    let validity = cert.validity();
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => names.push((*d).to_owned()),
                GeneralName::IPAddress(ip) => names.push(ip_text(ip)),
                _ => {}
            }
        }
    }
    names.sort();
    names.dedup();
    let (mut subject_key_id, mut authority_key_id) = (None, None);
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => subject_key_id = Some(k.0.to_vec()),
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                authority_key_id = a.key_identifier.as_ref().map(|k| k.0.to_vec());
            }
            _ => {}
        }
    }
    Ok(Facts {
        not_before: validity.not_before.to_datetime(),
        not_after: validity.not_after.to_datetime(),
        issuer: cert.issuer().as_raw().to_vec(),
        subject: cert.subject().as_raw().to_vec(),
        names,
        subject_key_id,
        authority_key_id,
    })
}

fn ip_text(raw: &[u8]) -> String {
    match raw.len() {
        4 => std::net::Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]).to_string(),
        16 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(raw);
            std::net::Ipv6Addr::from(b).to_string()
        }
        _ => String::new(),
    }
}

/// Whether less than a third of `f`'s lifetime is left at `now`.
fn near_expiry(f: &Facts, now: OffsetDateTime) -> bool {
    let lifetime = f.not_after - f.not_before;
    f.not_after - now < lifetime / 3
}

fn readable(held: Option<Held<'_>>) -> Result<Facts, Decision> {
    let Some(h) = held else {
        return Err(Decision::Issue(Why::Missing));
    };
    let f = facts(h.cert_pem).map_err(|e| Decision::Issue(Why::Unreadable(e)))?;
    pair_matches(h.cert_pem, h.key_pem).map_err(|e| Decision::Issue(Why::Unreadable(e)))?;
    Ok(f)
}

/// Whether `key_pem` is the private key of `cert_pem`'s certificate.
fn pair_matches(cert_pem: &str, key_pem: &str) -> Result<(), String> {
    let certs = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "no private key".to_owned())?;
    rustls::sign::CertifiedKey::from_der(certs, key, &rustls::crypto::aws_lc_rs::default_provider())
        .map(|_| ())
        .map_err(|e| format!("the key is not the certificate's: {e}"))
}

/// What happens to a CA and its staged successor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaStep {
    /// The current CA keeps signing (a staged successor is kept).
    Keep,
    /// There is no usable CA (or it expired with no successor): issue one,
    /// signing at once.
    Issue(Why),
    /// The CA is in its last third: generate its successor and publish it
    /// in every bundle; the current CA still signs.
    Stage,
    /// The CA is in its last sixth (or expired) and its successor has been
    /// published since it was staged: the successor signs from now on.
    Promote,
}

/// The step for the `current` CA and its staged successor `next` at `now`.
pub fn decide_ca(current: Option<Held<'_>>, next: Option<Held<'_>>, now: OffsetDateTime) -> CaStep {
    let f = match readable(current) {
        Ok(f) => f,
        Err(Decision::Issue(why)) => return CaStep::Issue(why),
        Err(Decision::Keep) => return CaStep::Keep,
    };
    let staged = next.is_some() && readable(next).is_ok();
    let life = f.not_after - f.not_before;
    let left = f.not_after - now;
    if left <= time::Duration::ZERO {
        return if staged {
            CaStep::Promote
        } else {
            CaStep::Issue(Why::NearExpiry)
        };
    }
    if left < life / 6 {
        // Late (the operator did not run through the last third): stage
        // now, promote on a later pass.
        return if staged {
            CaStep::Promote
        } else {
            CaStep::Stage
        };
    }
    if left < life / 3 && !staged {
        return CaStep::Stage;
    }
    CaStep::Keep
}

/// Whether a held leaf is kept at `now`, given the current CA's
/// certificate and the leaf's wanted `spec`.
pub fn decide_leaf(
    held: Option<Held<'_>>,
    ca_cert_pem: &str,
    spec: &LeafSpec,
    now: OffsetDateTime,
) -> Decision {
    let f = match readable(held) {
        Err(d) => return d,
        Ok(f) => f,
    };
    // Issued by this CA: its name, and its key (the leaf's authority key
    // identifier is the CA's subject key identifier) — a renewed CA of the
    // same name has another key.
    match facts(ca_cert_pem) {
        Ok(ca)
            if ca.subject == f.issuer
                && ca.subject_key_id.is_some()
                && ca.subject_key_id == f.authority_key_id => {}
        _ => return Decision::Issue(Why::OtherIssuer),
    }
    if f.names != wanted_names(spec) {
        return Decision::Issue(Why::NamesChanged);
    }
    if near_expiry(&f, now) {
        return Decision::Issue(Why::NearExpiry);
    }
    Decision::Keep
}

/// The SAN names of `spec`, as [`Facts::names`] lists them.
pub fn wanted_names(spec: &LeafSpec) -> Vec<String> {
    let mut names: Vec<String> = spec
        .dns_names
        .iter()
        .cloned()
        .chain(spec.ips.iter().map(|ip| ip.to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The bundle to publish: the current CA, then each of `also` (a staged
/// successor, the CA it replaced) that is still valid at `now`, each once.
pub fn bundle(current_pem: &str, also: &[&str], now: OffsetDateTime) -> String {
    let mut out = current_pem.trim_end().to_owned();
    out.push('\n');
    let mut seen = vec![current_pem.trim()];
    for other in also {
        if let Ok(f) = facts(other)
            && f.not_after > now
            && !seen.contains(&other.trim())
        {
            seen.push(other.trim());
            out.push_str(other.trim_end());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ca;
    use time::Duration;

    fn spec() -> LeafSpec {
        LeafSpec {
            common_name: "kruntimes-gateway".into(),
            dns_names: vec!["gw.kruntimes-system.svc".into(), "gw".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
            server: true,
            valid_days: 90,
            ..Default::default()
        }
    }

    fn held<'a>(cert: &'a str, key: &'a str) -> Option<Held<'a>> {
        Some(Held {
            cert_pem: cert,
            key_pem: key,
        })
    }

    #[test]
    fn a_ca_is_kept_then_its_successor_staged_then_promoted() {
        let ca = Ca::generate("test CA", 30).unwrap();
        let next = Ca::generate("test CA", 30).unwrap();
        let now = OffsetDateTime::now_utc();
        let cur = held(&ca.cert_pem, &ca.key_pem);
        let staged = held(&next.cert_pem, &next.key_pem);
        let at = |days| now + Duration::days(days);
        assert_eq!(decide_ca(cur, None, now), CaStep::Keep);
        assert_eq!(decide_ca(cur, None, at(19)), CaStep::Keep);
        // The last third: a successor is staged (once).
        assert_eq!(decide_ca(cur, None, at(21)), CaStep::Stage);
        assert_eq!(decide_ca(cur, staged, at(21)), CaStep::Keep);
        // The last sixth: the staged successor is promoted.
        assert_eq!(decide_ca(cur, staged, at(26)), CaStep::Promote);
        assert_eq!(
            decide_ca(cur, None, at(26)),
            CaStep::Stage,
            "late: stage first"
        );
        // Expired: promote what is staged, or start afresh.
        assert_eq!(decide_ca(cur, staged, at(40)), CaStep::Promote);
        assert_eq!(decide_ca(cur, None, at(40)), CaStep::Issue(Why::NearExpiry));
        // An unreadable staged successor is staged again.
        assert_eq!(
            decide_ca(cur, held("garbage", &next.key_pem), at(21)),
            CaStep::Stage
        );
    }

    #[test]
    fn missing_or_unreadable_material_is_issued() {
        let now = OffsetDateTime::now_utc();
        assert_eq!(decide_ca(None, None, now), CaStep::Issue(Why::Missing));
        let ca = Ca::generate("test CA", 30).unwrap();
        assert!(matches!(
            decide_ca(held("not a certificate", &ca.key_pem), None, now),
            CaStep::Issue(Why::Unreadable(_))
        ));
        assert!(matches!(
            decide_ca(held(&ca.cert_pem, ""), None, now),
            CaStep::Issue(Why::Unreadable(_))
        ));
        assert_eq!(
            decide_leaf(None, &ca.cert_pem, &spec(), now),
            Decision::Issue(Why::Missing)
        );
    }

    #[test]
    fn a_leaf_is_kept_only_for_its_ca_its_names_and_its_first_two_thirds() {
        let now = OffsetDateTime::now_utc();
        let ca = Ca::generate("test CA", 3650).unwrap();
        let leaf = ca.issue(&spec()).unwrap();
        let h = held(&leaf.cert_pem, &leaf.key_pem);
        assert_eq!(decide_leaf(h, &ca.cert_pem, &spec(), now), Decision::Keep);
        assert_eq!(
            decide_leaf(h, &ca.cert_pem, &spec(), now + Duration::days(59)),
            Decision::Keep
        );
        assert_eq!(
            decide_leaf(h, &ca.cert_pem, &spec(), now + Duration::days(61)),
            Decision::Issue(Why::NearExpiry)
        );
        let mut renamed = spec();
        renamed.dns_names.push("gateway.example.com".into());
        assert_eq!(
            decide_leaf(h, &ca.cert_pem, &renamed, now),
            Decision::Issue(Why::NamesChanged)
        );
        let mut reordered = spec();
        reordered.dns_names.reverse();
        assert_eq!(
            decide_leaf(h, &ca.cert_pem, &reordered, now),
            Decision::Keep,
            "order does not matter"
        );
        let other = Ca::generate("another CA", 3650).unwrap();
        assert_eq!(
            decide_leaf(h, &other.cert_pem, &spec(), now),
            Decision::Issue(Why::OtherIssuer)
        );
        // A renewed CA with the same name: leaves issued before it are
        // reissued from it.
        let renewed = Ca::generate("test CA", 3650).unwrap();
        assert_eq!(
            decide_leaf(h, &renewed.cert_pem, &spec(), now),
            Decision::Issue(Why::OtherIssuer)
        );
    }

    #[test]
    fn the_bundle_holds_the_successor_and_the_previous_ca_while_valid() {
        let now = OffsetDateTime::now_utc();
        let old = Ca::generate("old CA", 30).unwrap();
        let new = Ca::generate("new CA", 3650).unwrap();
        let next = Ca::generate("next CA", 3650).unwrap();
        let both = bundle(&new.cert_pem, &[&old.cert_pem], now);
        assert_eq!(both.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(both.starts_with(new.cert_pem.trim_end()));
        let three = bundle(&new.cert_pem, &[&next.cert_pem, &old.cert_pem], now);
        assert_eq!(three.matches("BEGIN CERTIFICATE").count(), 3);
        let later = bundle(&new.cert_pem, &[&old.cert_pem], now + Duration::days(31));
        assert_eq!(
            later.matches("BEGIN CERTIFICATE").count(),
            1,
            "the old one expired"
        );
        assert_eq!(
            bundle(&new.cert_pem, &[], now),
            format!("{}\n", new.cert_pem.trim_end())
        );
        assert_eq!(
            bundle(&new.cert_pem, &[&new.cert_pem, "garbage"], now)
                .matches("BEGIN CERTIFICATE")
                .count(),
            1
        );
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_unreadable() {
        let now = OffsetDateTime::now_utc();
        let ca = Ca::generate("test CA", 30).unwrap();
        let other = Ca::generate("other CA", 30).unwrap();
        assert!(matches!(
            decide_ca(held(&ca.cert_pem, &other.key_pem), None, now),
            CaStep::Issue(Why::Unreadable(_))
        ));
        let leaf = ca.issue(&spec()).unwrap();
        let stray = ca.issue(&spec()).unwrap();
        assert!(matches!(
            decide_leaf(
                held(&leaf.cert_pem, &stray.key_pem),
                &ca.cert_pem,
                &spec(),
                now
            ),
            Decision::Issue(Why::Unreadable(_))
        ));
    }

    #[test]
    fn repeated_names_are_one_name() {
        let ca = Ca::generate("test CA", 30).unwrap();
        let mut twice = spec();
        twice.dns_names.push("gw".into());
        let leaf = ca.issue(&twice).unwrap();
        let h = held(&leaf.cert_pem, &leaf.key_pem);
        assert_eq!(
            decide_leaf(h, &ca.cert_pem, &twice, OffsetDateTime::now_utc()),
            Decision::Keep,
            "never reissued for a duplicate"
        );
    }

    #[test]
    fn facts_list_the_names_sorted() {
        let ca = Ca::generate("test CA", 30).unwrap();
        let leaf = ca.issue(&spec()).unwrap();
        let f = facts(&leaf.cert_pem).unwrap();
        assert_eq!(f.names, vec!["127.0.0.1", "gw", "gw.kruntimes-system.svc"]);
        assert_eq!(f.names, wanted_names(&spec()));
    }
}
