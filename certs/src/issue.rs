//! Generating CAs and leaf certificates with rcgen.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::Result;

/// A certificate authority: its certificate and private key, PEM encoded.
#[derive(Clone)]
pub struct Ca {
    /// CA certificate (the bundle clients trust).
    pub cert_pem: String,
    /// CA private key.
    pub key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Default)]
pub struct LeafSpec {
    /// Subject common name; runtimed authorizes dataplane peers by it.
    pub common_name: String,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
    /// Allow TLS server authentication.
    pub server: bool,
    /// Allow TLS client authentication.
    pub client: bool,
    /// Validity in days.
    pub valid_days: i64,
}

impl LeafSpec {
    /// A server's leaf: `name` as its common name and its one DNS name.
    pub fn server(name: &str, valid_days: i64) -> Self {
        Self {
            common_name: name.into(),
            dns_names: vec![name.into()],
            server: true,
            valid_days,
            ..Self::default()
        }
    }

    /// A client's leaf with common name `common_name` (what runtimed
    /// authorizes its peers by).
    pub fn client(common_name: &str, valid_days: i64) -> Self {
        Self {
            common_name: common_name.into(),
            client: true,
            valid_days,
            ..Self::default()
        }
    }
}

/// A leaf certificate and its key, PEM encoded.
#[derive(Clone)]
pub struct Leaf {
    /// Certificate.
    pub cert_pem: String,
    /// Private key.
    pub key_pem: String,
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf").finish_non_exhaustive()
    }
}

fn validity(params: &mut CertificateParams, days: i64) {
    // Backdate a little so freshly generated material is valid on machines
    // whose clocks disagree by a few minutes.
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::minutes(5);
    params.not_after = now + Duration::days(days.max(1));
}

impl Ca {
    /// Generates a self-signed ECDSA P-256 CA valid for `valid_days`.
    pub fn generate(common_name: &str, valid_days: i64) -> Result<Self> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        dn.push(DnType::OrganizationName, "kruntimes");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, valid_days);
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Issues a leaf certificate signed by this CA.
    pub fn issue(&self, spec: &LeafSpec) -> Result<Leaf> {
        let ca_key = KeyPair::from_pem(&self.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, spec.common_name.as_str());
        dn.push(DnType::OrganizationName, "kruntimes");
        params.distinguished_name = dn;
        let mut sans = Vec::new();
        for d in &spec.dns_names {
            sans.push(SanType::DnsName(d.as_str().try_into()?));
        }
        sans.extend(spec.ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.subject_alt_names = sans;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if spec.server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if spec.client {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, spec.valid_days.max(1));
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}
