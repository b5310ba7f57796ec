//! TLS for test servers (feature `tls`): a certificate authority, a server certificate and a
//! client certificate generated per test, and redis-servers, Sentinels and Clusters that
//! speak TLS on a port of their own (their plain port stays open for the test's own set-up
//! commands).

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use crate::{free_port, RedisServer};

/// A CA and two certificates it signed, as PEM text and as files (removed on drop).
#[derive(Debug)]
pub struct TlsFiles {
    dir: tempfile::TempDir,
    /// The CA's certificate.
    pub ca_pem: String,
    /// A client certificate signed by the CA, for mutual TLS.
    pub client_cert_pem: String,
    /// Its private key (PKCS#8).
    pub client_key_pem: String,
}

impl TlsFiles {
    /// A fresh CA, a server certificate naming `server_names` (DNS names or IP addresses)
    /// and a client certificate.
    pub fn generate(server_names: &[&str]) -> TlsFiles {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "lock-tests CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key"))
            .expect("ca");
        let names: Vec<String> = server_names.iter().map(|s| (*s).to_owned()).collect();
        let server_key = KeyPair::generate().expect("server key");
        let server_cert = CertificateParams::new(names)
            .expect("server params")
            .signed_by(&server_key, &ca)
            .expect("server cert");
        let mut client_params = CertificateParams::new(Vec::<String>::new()).expect("client");
        client_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "lock-tests client");
        let client_key = KeyPair::generate().expect("client key");
        let client_cert = client_params
            .signed_by(&client_key, &ca)
            .expect("client cert");
        let dir = tempfile::Builder::new()
            .prefix("lock-tests-tls-")
            .tempdir()
            .expect("tempdir");
        let files = TlsFiles {
            dir,
            ca_pem: ca.pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        };
        files.write("ca.crt", &files.ca_pem);
        files.write("server.crt", &server_cert.pem());
        files.write("server.key", &server_key.serialize_pem());
        files
    }

    fn write(&self, file: &str, text: &str) {
        std::fs::write(self.dir.path().join(file), text).expect("write pem");
    }

    fn path(&self, file: &str) -> String {
        self.dir.path().join(file).display().to_string()
    }

    /// Config lines for a server (or Sentinel) speaking TLS on `tls_port` with the server
    /// certificate, and to its peers (replication, cluster bus) over TLS too. With
    /// `client_certs`, clients must present a certificate signed by the CA.
    pub fn server_config(&self, tls_port: u16, client_certs: bool) -> Vec<String> {
        let auth = if client_certs { "yes" } else { "no" };
        vec![
            format!("tls-port {tls_port}"),
            format!("tls-cert-file {}", self.path("server.crt")),
            format!("tls-key-file {}", self.path("server.key")),
            format!("tls-ca-cert-file {}", self.path("ca.crt")),
            format!("tls-auth-clients {auth}"),
            "tls-replication yes".to_owned(),
        ]
    }
}

/// A redis-server with a TLS port.
#[derive(Debug)]
pub struct TlsServer {
    /// The server (its plain port answers the test's set-up commands).
    pub server: RedisServer,
    /// The port that speaks only TLS.
    pub tls_port: u16,
}

impl TlsServer {
    /// Starts a server with TLS on a port of its own, using `files`' server certificate.
    pub fn start(files: &TlsFiles, client_certs: bool) -> TlsServer {
        TlsServer::start_with(files, client_certs, &[])
    }

    /// [`TlsServer::start`] with extra config lines.
    pub fn start_with(files: &TlsFiles, client_certs: bool, extra: &[&str]) -> TlsServer {
        let (server, tls_port) = RedisServer::launch_with_port(false, free_port, |tls_port| {
            let mut config = files.server_config(tls_port, client_certs);
            config.extend(extra.iter().map(|line| (*line).to_owned()));
            config
        });
        TlsServer { server, tls_port }
    }

    /// `rediss://127.0.0.1:<tls port>/`
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }

    /// Starts a Sentinel with a TLS port, watching the master `master` on `master_port` (a
    /// TLS port: the Sentinel talks to it over TLS). Returns the Sentinel and its TLS port.
    pub fn start_sentinel(files: &TlsFiles, master: &str, master_port: u16) -> TlsServer {
        let (server, tls_port) = RedisServer::launch_with_port(true, free_port, |tls_port| {
            let mut config = files.server_config(tls_port, false);
            config.extend(crate::sentinel_config(master, master_port));
            config
        });
        TlsServer { server, tls_port }
    }
}
