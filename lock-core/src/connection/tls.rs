//! TLS for `rediss://` connections (feature `tls-rustls`): which certificate authority to
//! trust, the client certificate for mutual TLS, and the name to verify the server's
//! certificate against.
//!
//! redis-rs does the TLS of the lock commands, Cluster and Sentinel connections from the
//! PEM files given here. Two things it cannot do by itself are done here:
//!
//! - **Another server name than the URL's host** (connect to `10.0.0.5`, verify
//!   `redis.internal`): redis-rs verifies the URL's host, so the URL is rewritten to carry the
//!   server name and a DNS resolver of ours sends that name to the URL's real host.
//! - The **pub/sub connection** that tells waiters their turn is opened without that resolver
//!   by redis-rs, so with a server name it is opened here (rustls, ring) and handed to
//!   redis-rs's `PubSub`, verified against the same CA with the same client certificate.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use redis::{ConnectionAddr, IntoConnectionInfo as _};

use crate::LockError;

/// TLS settings for a locker's `rediss://` connections: a private certificate authority, a
/// client certificate, and the server name. Requires the `tls-rustls` feature.
///
/// Without a `TlsConfig`, a `rediss://` URL is verified against the system's roots; that is
/// enough for managed services with public certificates. Give one to
/// [`LockerBuilder::tls`](crate::LockerBuilder::tls) for a private CA or mutual TLS. It
/// applies to every connection of the locker: the lock commands, the waiters' pub/sub
/// connection, every Redlock node, the Cluster's nodes, and Sentinel's masters (and the
/// Sentinels themselves when their URLs are `rediss://`).
///
/// ```no_run
/// use lock_core::{Locker, TlsConfig};
///
/// let tls = TlsConfig::new()
///     .ca_file("/etc/redis/ca.crt")?                               // trust only this CA
///     .client_cert_files("/etc/app/redis.crt", "/etc/app/redis.key")? // mutual TLS
///     .server_name("redis.internal");                              // the certificate's name
/// let locker = Locker::builder()
///     .url("rediss://10.0.0.5:6380/")
///     .tls(tls)
///     .build()?;
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Clone, Default)]
pub struct TlsConfig {
    root_ca: Option<Vec<u8>>,
    client_cert: Option<(Vec<u8>, Vec<u8>)>,
    server_name: Option<String>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key; the rest is not secret but long.
        f.debug_struct("TlsConfig")
            .field("root_ca", &self.root_ca.as_ref().map(|_| ".."))
            .field("client_cert", &self.client_cert.as_ref().map(|_| ".."))
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsConfig {
    /// Verify servers against the system's roots, with the URL's host as the server name,
    /// and present no client certificate (what a bare `rediss://` URL does).
    pub fn new() -> TlsConfig {
        TlsConfig::default()
    }

    /// Trust the certificate authorities in `pem` (one or more PEM certificates) instead of
    /// the system's roots.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> TlsConfig {
        self.root_ca = Some(pem.into());
        self
    }

    /// [`TlsConfig::ca_pem`] from a file; [`LockError::Config`] if it cannot be read.
    pub fn ca_file(self, path: impl AsRef<Path>) -> Result<TlsConfig, LockError> {
        Ok(self.ca_pem(read(path.as_ref())?))
    }

    /// Present this client certificate (PEM, the chain from the leaf) and its private key
    /// (PEM: PKCS#8, PKCS#1 or SEC1) to servers that ask for one (`tls-auth-clients`).
    pub fn client_cert_pem(
        mut self,
        cert_chain: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> TlsConfig {
        self.client_cert = Some((cert_chain.into(), key.into()));
        self
    }

    /// [`TlsConfig::client_cert_pem`] from files; [`LockError::Config`] if one cannot be read.
    pub fn client_cert_files(
        self,
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsConfig, LockError> {
        let chain = read(cert_chain.as_ref())?;
        let key = read(key.as_ref())?;
        Ok(self.client_cert_pem(chain, key))
    }

    /// Verify the server's certificate against `name` (and send it as SNI) instead of the
    /// URL's host: for a server reached by an address its certificate does not name (an IP,
    /// a tunnel, a private endpoint). For one Redis and Redlock nodes; a Cluster or Sentinel
    /// names its nodes itself, so with them this is a [`LockError::Config`] at `build`.
    pub fn server_name(mut self, name: impl Into<String>) -> TlsConfig {
        self.server_name = Some(name.into());
        self
    }

    /// True when a server name replaces the URL's host.
    #[cfg(any(feature = "cluster", feature = "sentinel"))]
    pub(crate) fn has_server_name(&self) -> bool {
        self.server_name.is_some()
    }

    /// The certificates in redis-rs's form, checked: a CA file without a certificate in it
    /// would otherwise make an empty trust store, and every connection fail later.
    pub(crate) fn certificates(&self) -> Result<redis::TlsCertificates, LockError> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let certificates = |what: &str, pem: &[u8]| {
            let parsed = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| LockError::Config(format!("TLS {what}: {err}")))?;
            if parsed.is_empty() {
                return Err(LockError::Config(format!(
                    "TLS {what}: no PEM certificate found"
                )));
            }
            Ok(())
        };
        if let Some(ca) = &self.root_ca {
            certificates("CA certificate", ca)?;
        }
        if let Some((chain, key)) = &self.client_cert {
            certificates("client certificate", chain)?;
            PrivateKeyDer::from_pem_slice(key)
                .map_err(|err| LockError::Config(format!("TLS client key: {err}")))?;
        }
        Ok(redis::TlsCertificates {
            client_tls: self
                .client_cert
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root_ca.clone(),
        })
    }

    /// A client for `url` (which must be `rediss://`) with the certificates applied, the
    /// server name in place of the host, and the resolver that sends that name to the host.
    /// The certificates are parsed here, so a bad PEM is an error at `build`.
    pub(crate) fn client(&self, url: &str) -> Result<Tls, LockError> {
        let info = url
            .into_connection_info()
            .map_err(|err| bad_url(url, &err))?;
        let ConnectionAddr::TcpTls { host, port, .. } = info.addr().clone() else {
            return Err(LockError::Config(format!(
                "TLS settings are given but {:?} is not a rediss:// URL",
                crate::redact::redact_url(url)
            )));
        };
        let client = redis::Client::build_with_tls(info, self.certificates()?)
            .map_err(|err| bad_url(url, &err))?;
        let Some(server_name) = self.server_name.clone() else {
            return Ok(Tls {
                client,
                pinned: None,
            });
        };
        rustls::pki_types::ServerName::try_from(server_name.as_str()).map_err(|err| {
            LockError::Config(format!("bad TLS server name {server_name:?}: {err}"))
        })?;
        let info = client.get_connection_info().clone();
        let ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } = info.addr().clone()
        else {
            return Err(LockError::Config("TLS lost its parameters".into()));
        };
        let renamed = info.set_addr(ConnectionAddr::TcpTls {
            host: server_name.clone(),
            port,
            insecure,
            tls_params,
        });
        let client = redis::Client::open(renamed).map_err(|err| bad_url(url, &err))?;
        let pinned = Pinned {
            server_name,
            host,
            config: Arc::new(self.rustls_config()?),
        };
        Ok(Tls {
            client,
            pinned: Some(pinned),
        })
    }

    /// The rustls settings of the pub/sub connection opened here (with a server name).
    fn rustls_config(&self) -> Result<rustls::ClientConfig, LockError> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let config_error =
            |what: &str, err: &dyn fmt::Display| LockError::Config(format!("TLS {what}: {err}"));
        let mut roots = rustls::RootCertStore::empty();
        match &self.root_ca {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|err| config_error("CA certificate", &err))?;
                    roots
                        .add(cert)
                        .map_err(|err| config_error("CA certificate", &err))?;
                }
            }
            None => {
                // Unreadable system certificates are skipped, as redis-rs's own connections
                // would fail on them anyway if they mattered.
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| config_error("protocol versions", &err))?
            .with_root_certificates(roots);
        match &self.client_cert {
            Some((chain, key)) => {
                let chain = CertificateDer::pem_slice_iter(chain)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|err| config_error("client certificate", &err))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|err| config_error("client key", &err))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|err| config_error("client certificate", &err))
            }
            None => Ok(builder.with_no_client_auth()),
        }
    }
}

/// A `rediss://` client with its TLS settings applied.
pub(crate) struct Tls {
    /// The client; with a server name, its host is that name.
    pub client: redis::Client,
    /// Set when a server name replaces the URL's host.
    pub pinned: Option<Pinned>,
}

/// The URL's real host behind a server name, and how to open TLS to it.
#[derive(Clone)]
pub(crate) struct Pinned {
    server_name: String,
    host: String,
    config: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for Pinned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pinned")
            .field("server_name", &self.server_name)
            .field("host", &self.host)
            .finish()
    }
}

impl Pinned {
    /// The connection settings that resolve the server name to the real host.
    pub fn connection_config(
        &self,
        config: redis::AsyncConnectionConfig,
    ) -> redis::AsyncConnectionConfig {
        config.set_dns_resolver(self.clone())
    }

    /// A pub/sub connection to `client`'s server over TLS verified against the server name.
    pub async fn pubsub(&self, client: &redis::Client) -> redis::RedisResult<redis::aio::PubSub> {
        let info = client.get_connection_info();
        let port = match info.addr() {
            ConnectionAddr::TcpTls { port, .. } => *port,
            _ => return Err(std::io::Error::other("not a TLS address").into()),
        };
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from(self.server_name.clone())
            .map_err(std::io::Error::other)?;
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(&self.config))
            .connect(name, tcp)
            .await?;
        redis::aio::PubSub::new(info.redis_settings(), stream).await
    }
}

impl redis::io::AsyncDNSResolver for Pinned {
    fn resolve<'a, 'b: 'a>(
        &'a self,
        host: &'b str,
        port: u16,
    ) -> redis::RedisFuture<'a, Box<dyn Iterator<Item = SocketAddr> + Send + 'a>> {
        let target = if host == self.server_name {
            self.host.as_str()
        } else {
            host
        };
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((target, port)).await?;
            Ok(Box::new(addrs) as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, LockError> {
    std::fs::read(path)
        .map_err(|err| LockError::Config(format!("cannot read {}: {err}", path.display())))
}

fn bad_url(url: &str, err: &redis::RedisError) -> LockError {
    LockError::Config(format!(
        "cannot use Redis URL {:?}: {err}",
        crate::redact::redact_url(url)
    ))
}
