//! HTTPS health checks against a real TLS server on loopback, with a CA and a server
//! certificate made here (rcgen): verification on against an unknown CA fails with a clear
//! reason; the same CA in `ca_file` passes; `verify = false` passes; a server name the
//! certificate does not carry fails; a status outside the range fails; SNI and `Host` are what
//! the configuration says. Then the same through the configuration and the check runner: a
//! pool with `method = "https"` parsed from TOML goes up, and one whose certificate cannot be
//! verified goes down with the handshake's reason. No root needed.

use std::net::{Ipv4Addr, SocketAddr};

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use stator_config::{HttpProbe, HttpsProbe, Probe, StatusRange, TlsSpec};
use stator_health::Tls as _;
use stator_health::probe;
use stator_health::{Runner, Transition};
use stator_tls::Rustls;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

const NAME: &str = "backend.stator.test";

/// A CA, and a server certificate it signed for [`NAME`] and 127.0.0.1.
struct Pki {
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Stator test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let mut server = CertificateParams::new(vec![NAME.to_owned(), "127.0.0.1".to_owned()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "backend");
    let server_cert = server.signed_by(&server_key, &issuer).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        chain: vec![server_cert.der().clone()],
        key: PrivatePkcs8KeyDer::from(server_key.serialize_der()),
    }
}

/// What the server saw of one request: SNI and the request head.
#[derive(Debug, Clone)]
struct Seen {
    sni: Option<String>,
    head: String,
}

/// A TLS server answering every request with `status`; records what it saw.
struct TlsServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tls_server(pki: &Pki, status: u16) -> TlsServer {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(pki.chain.clone(), PrivateKeyDer::Pkcs8(pki.key.clone_key()))
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake: nothing to serve.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let sni = tls.get_ref().1.server_name().map(str::to_owned);
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                log.lock().unwrap().push(Seen {
                    sni,
                    head: String::from_utf8_lossy(&head).into_owned(),
                });
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    TlsServer { addr, seen, task }
}

fn https(host: Option<&str>, tls: TlsSpec) -> Probe {
    Probe::Https(HttpsProbe {
        http: HttpProbe {
            path: "/healthz".into(),
            expect_status: StatusRange {
                first: 200,
                last: 399,
            },
            host: host.map(str::to_owned),
        },
        tls,
    })
}

fn spec(server_name: Option<&str>, verify: bool, ca_file: Option<&Path>) -> TlsSpec {
    TlsSpec {
        server_name: server_name.map(str::to_owned),
        verify,
        ca_file: ca_file.map(Path::to_owned),
    }
}

async fn probe_once(server: &TlsServer, probe: &Probe) -> Result<(), String> {
    let Probe::Https(h) = probe else {
        unreachable!("an HTTPS probe")
    };
    let client = Rustls.client(&h.tls);
    probe::run(
        server.addr.ip(),
        server.addr.port(),
        probe,
        Some(&*client),
        Duration::from_secs(5),
    )
    .await
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = stator_testkit::scratch::unique_path(&format!("stator-{name}"), "");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn verification_sni_and_status() {
    let pki = pki();
    let dir = temp_dir("https-probe");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    runtime().block_on(async {
        let ok = tls_server(&pki, 200).await;
        let failing = tls_server(&pki, 503).await;

        // Verification on, the test CA unknown to the system: down, and the reason says why.
        let e = probe_once(&ok, &https(None, spec(Some(NAME), true, None)))
            .await
            .unwrap_err();
        println!("unknown CA: {e}");
        assert!(e.contains("TLS handshake failed"), "{e}");
        assert!(e.contains("UnknownIssuer"), "{e}");
        assert!(
            ok.seen.lock().unwrap().is_empty(),
            "no request after a refused handshake"
        );

        // The CA in ca_file: up; SNI is the configured name, Host defaults to the address.
        probe_once(&ok, &https(None, spec(Some(NAME), true, Some(&ca_file))))
            .await
            .unwrap();
        let seen = ok.seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!(seen.sni.as_deref(), Some(NAME));
        assert!(
            seen.head.starts_with("GET /healthz HTTP/1.1\r\n"),
            "{}",
            seen.head
        );
        let host_line = format!("Host: 127.0.0.1:{}\r\n", ok.addr.port());
        assert!(seen.head.contains(&host_line), "{}", seen.head);

        // No server name: no SNI, the certificate must name the address (it does).
        probe_once(&ok, &https(None, spec(None, true, Some(&ca_file))))
            .await
            .unwrap();
        assert_eq!(ok.seen.lock().unwrap().last().unwrap().sni, None);

        // verify = false: up, even without the CA.
        probe_once(
            &ok,
            &https(None, spec(Some("anything.example"), false, None)),
        )
        .await
        .unwrap();
        assert_eq!(
            ok.seen.lock().unwrap().last().unwrap().sni.as_deref(),
            Some("anything.example")
        );

        // A name the certificate does not carry: down.
        let e = probe_once(
            &ok,
            &https(None, spec(Some("other.stator.test"), true, Some(&ca_file))),
        )
        .await
        .unwrap_err();
        println!("wrong name: {e}");
        assert!(e.contains("TLS handshake failed"), "{e}");
        assert!(e.contains("not valid for name"), "{e}");

        // A status outside the range: down, after a verified handshake.
        let e = probe_once(
            &failing,
            &https(
                Some("www.example.com"),
                spec(Some(NAME), true, Some(&ca_file)),
            ),
        )
        .await
        .unwrap_err();
        assert_eq!(e, "status 503, expected 200-399");
        let seen = failing.seen.lock().unwrap().last().cloned().unwrap();
        assert!(
            seen.head.contains("Host: www.example.com\r\n"),
            "{}",
            seen.head
        );

        // A ca_file that is not there: the client cannot be built; every probe says why.
        let missing = dir.join("missing.pem");
        let e = probe_once(&ok, &https(None, spec(Some(NAME), true, Some(&missing))))
            .await
            .unwrap_err();
        assert!(
            e.contains("cannot read") && e.contains("missing.pem"),
            "{e}"
        );
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pool of one HTTPS-checked backend at `10.0.0.<host>:port`, as configuration text
/// (the configuration refuses loopback backends; the test points the planned checks at the
/// loopback servers afterwards).
fn pool_toml(name: &str, host: u8, port: u16, health: &str) -> String {
    format!(
        "[[pool]]\nname = \"{name}\"\n[pool.health]\nmethod = \"https\"\ninterval = \"100ms\"\n\
         timeout = \"80ms\"\nrise = 1\nfall = 1\n{health}\n[[pool.backend]]\naddress = \"10.0.0.{host}\"\n\
         port = {port}\n",
    )
}

#[test]
fn configured_https_checks_go_up_and_down_with_reasons() {
    let pki = pki();
    let dir = temp_dir("https-config");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    runtime().block_on(async {
        let good = tls_server(&pki, 204).await;
        let unverified = tls_server(&pki, 204).await;
        let text = format!(
            "[node]\nname = \"t\"\naddress_v4 = \"10.0.0.1\"\n[dataplane]\ninterfaces = [\"lo\"]\n\n{}\n{}",
            pool_toml(
                "verified",
                2,
                good.addr.port(),
                &format!("host = \"{NAME}:8443\"\nca_file = \"{}\"", ca_file.display())
            ),
            pool_toml("unknown-ca", 3, unverified.addr.port(), &format!("sni = \"{NAME}\"")),
        );
        let config = stator_config::from_toml_str("t.toml", &text).unwrap();
        Rustls.check_ca_files(&config).unwrap();
        let mut plan = config.health_plan();
        assert_eq!(plan.checks.len(), 2);
        for check in &mut plan.checks {
            let Probe::Https(h) = &check.probe else {
                panic!("{:?}", check.probe)
            };
            assert_eq!(h.tls.server_name.as_deref(), Some(NAME), "from sni or Host");
            check.address = good.addr.ip();
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<Transition>();
        let mut runner = Runner::new(tx).with_tls(Arc::new(Rustls));
        runner.apply(&plan, vec![]);
        let mut states = Vec::new();
        while states.len() < 2 {
            let t = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .expect("both checks report within 5 s")
                .unwrap();
            println!("{} -> up={} ({})", t.key.url(), t.up, t.reason);
            states.push((t.key.port, t.up, t.reason));
        }
        let of = |port| states.iter().find(|s| s.0 == port).unwrap().clone();
        assert!(of(good.addr.port()).1, "{states:?}");
        let (_, up, reason) = of(unverified.addr.port());
        assert!(!up, "{states:?}");
        assert!(reason.contains("UnknownIssuer"), "{reason}");
        // SNI came from the Host header's name (its port left out).
        let seen = good.seen.lock().unwrap().clone();
        assert!(seen.iter().all(|s| s.sni.as_deref() == Some(NAME)), "{seen:?}");
        let statuses = runner.board().statuses();
        let down = statuses
            .iter()
            .find(|(k, _)| k.port == unverified.addr.port())
            .unwrap();
        assert_eq!(down.1.state, "down");
        assert_eq!(
            down.0.url(),
            format!("https://127.0.0.1:{}/", unverified.addr.port())
        );
        assert!(
            down.1.last_error.as_deref().is_some_and(|e| e.contains("UnknownIssuer")),
            "{:?}",
            down.1.last_error
        );
        runner.stop();
    });

    // A ca_file that cannot be read is refused with its field path, before anything runs.
    let text = format!(
        "[node]\nname = \"t\"\naddress_v4 = \"10.0.0.1\"\n[dataplane]\ninterfaces = [\"lo\"]\n\n{}",
        pool_toml(
            "web",
            2,
            443,
            &format!("ca_file = \"{}\"", dir.join("nope.pem").display())
        ),
    );
    let config = stator_config::from_toml_str("t.toml", &text).unwrap();
    let (field, reason) = Rustls.check_ca_files(&config).unwrap_err();
    assert_eq!(field, "pool[0].health.ca_file");
    assert!(reason.contains("nope.pem"), "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}
