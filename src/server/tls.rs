//! TLS of `capsule serve`: the identity, the client CAs and revocation lists, rebuilt when
//! one of their files changes (a renewed certificate is taken without a restart).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Context, Result};

/// Modification time and length of each file, to tell when one changed.
pub(super) type Stamps = Vec<Option<(SystemTime, u64)>>;

/// The TLS identity and client policy, rebuilt when one of its files changes.
#[derive(Debug)]
pub(super) struct TlsFiles {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
    pub(super) client_ca: Option<PathBuf>,
    pub(super) crls: Vec<PathBuf>,
}

impl TlsFiles {
    pub(super) fn stamps(&self) -> Stamps {
        std::iter::once(&self.cert)
            .chain(std::iter::once(&self.key))
            .chain(self.client_ca.iter())
            .chain(self.crls.iter())
            .map(|p| {
                let m = std::fs::metadata(p).ok()?;
                Some((m.modified().ok()?, m.len()))
            })
            .collect()
    }

    pub(super) fn build(&self) -> Result<tokio_rustls::rustls::ServerConfig> {
        tls_config(&self.cert, &self.key, self.client_ca.as_deref(), &self.crls)
    }
}

/// The TLS config in force, and the files' stamps it was built from.
#[derive(Debug)]
pub(super) struct Tls {
    pub(super) files: TlsFiles,
    pub(super) current: Mutex<(Stamps, Arc<tokio_rustls::rustls::ServerConfig>)>,
}

impl Tls {
    /// The config for a new connection: rebuilt first if a file changed; a file that
    /// became invalid keeps the last good config (said on stderr).
    pub(super) fn config(&self) -> Arc<tokio_rustls::rustls::ServerConfig> {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.files.stamps();
        if now != cur.0 {
            match self.files.build() {
                Ok(c) => *cur = (now, Arc::new(c)),
                Err(e) => {
                    eprintln!(
                        "capsule serve: warning: keeping the TLS settings read before: {e:#}"
                    );
                    cur.0 = now;
                }
            }
        }
        cur.1.clone()
    }
}

pub(super) fn pem_certs(path: &Path) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>> {
    use rustls_pki_types::pem::PemObject;
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
        .with_context(|| format!("cannot read the certificates {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: expected PEM certificates", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!(
            "{}: expected at least one PEM certificate, found none",
            path.display()
        );
    }
    Ok(certs)
}

pub(super) fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    crls: &[PathBuf],
) -> Result<tokio_rustls::rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read the certificate {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: expected PEM certificates", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!(
            "{}: expected at least one PEM certificate, found none",
            cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("{}: expected a PEM private key", key.display()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("the TLS protocol versions")?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = tokio_rustls::rustls::RootCertStore::empty();
            for c in pem_certs(ca)? {
                roots
                    .add(c)
                    .with_context(|| format!("{}: a CA certificate is not valid", ca.display()))?;
            }
            let mut lists = Vec::new();
            for p in crls {
                let l = rustls_pki_types::CertificateRevocationListDer::pem_file_iter(p)
                    .with_context(|| format!("cannot read the CRL {}", p.display()))?
                    .collect::<Result<Vec<_>, _>>()
                    .with_context(|| format!("{}: expected PEM CRLs", p.display()))?;
                if l.is_empty() {
                    anyhow::bail!("{}: expected a PEM CRL, found none", p.display());
                }
                lists.extend(l);
            }
            let v = tokio_rustls::rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .with_crls(lists)
            .build()
            .context("the client CA and CRLs do not make a verifier")?;
            builder.with_client_cert_verifier(v)
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .context("the certificate and the key do not make a TLS identity")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}
