//! The Redis store over TLS against a real redis-server started with
//! `--tls-port` and certificates made here with the openssl CLI: leases with the
//! right CA (and a client certificate the server requires), a prompt store error
//! with the wrong CA.

use std::num::{NonZeroU32, NonZeroU64};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshlimit_core::{DescriptorKey, Limit, Take};
use meshlimit_store::redis::client::{Connect, TlsFiles};
use meshlimit_store::redis::{BatchConfig, RedisConfig, RedisStore};
use meshlimit_store::{Acquire, Backend, Buckets};
use meshlimit_tests::{free_port, RedisServer};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A CA (`NAME-ca.pem`) and a certificate it signs, `NAME.pem` / `NAME.key`,
/// valid for 127.0.0.1 and localhost.
fn issue(dir: &Path, name: &str) {
    let ca = format!("{name}-ca");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let (ca_key, ca_pem, ca_subj) = (
        format!("{ca}.key"),
        format!("{ca}.pem"),
        format!("/CN={ca}"),
    );
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend(["-keyout", &ca_key, "-out", &ca_pem]);
    args.extend(["-days", "2", "-subj", &ca_subj]);
    openssl(dir, &args);
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=localhost"]);
    openssl(dir, &args);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
}

struct TlsRedis {
    redis: RedisServer,
    tls_port: u16,
    dir: tempfile::TempDir,
}

/// redis-server with its plain port (for the harness) and a TLS port that
/// requires a client certificate signed by the `client` CA.
fn tls_redis() -> TlsRedis {
    let dir = tempfile::tempdir().unwrap();
    for name in ["server", "client", "other"] {
        issue(dir.path(), name);
    }
    let p = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let tls_port = free_port();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &p("server.pem"),
        "--tls-key-file",
        &p("server.key"),
        "--tls-ca-cert-file",
        &p("client-ca.pem"),
        "--tls-auth-clients",
        "yes",
    ]);
    TlsRedis {
        redis,
        tls_port,
        dir,
    }
}

fn store(t: &TlsRedis, ca: &str, client_cert: bool) -> RedisStore {
    let p = |f: &str| t.dir.path().join(f);
    let (cert, key) = (p("client.pem"), p("client.key"));
    let files = TlsFiles::load(
        Some(&p(ca)),
        client_cert.then_some(cert.as_path()),
        client_cert.then_some(key.as_path()),
    )
    .unwrap();
    let cfg = RedisConfig {
        key_ids: meshlimit_core::secret::KeyIds::placeholder(),
        control: meshlimit_core::secret::Secret::new(b"meshlimit-agent-tests-secret-0123456789")
            .unwrap()
            .control_mac(),
        nodes: vec![format!("127.0.0.1:{}", t.tls_port)],
        cluster: false,
        connect: Connect {
            tls: true,
            tls_files: files,
            ..Connect::default()
        },
        batch: BatchConfig {
            max_batch: 16,
            deadline: Duration::from_secs(2),
        },
    };
    RedisStore::new(cfg, Arc::new(|_, _, _| {}))
}

fn item(key: &str) -> Acquire {
    Acquire {
        key: DescriptorKey::new("r", [key]),
        limit: Limit::new(
            NonZeroU32::new(10).unwrap(),
            NonZeroU64::new(3_600_000_000_000).unwrap(),
            NonZeroU32::new(10).unwrap(),
        ),
        min: 1,
        max: 3,
        share: 1.0,
    }
}

#[tokio::test]
async fn the_store_leases_over_tls_with_a_client_certificate() {
    let t = tls_redis();
    let store = store(&t, "server-ca.pem", true);
    store.ping().await.unwrap();
    for remaining in [7, 4] {
        let answer = store.acquire(&[item("k")]).await.pop().unwrap();
        assert!(
            matches!(answer, Ok(Take::Granted { tokens: 3, remaining: r, .. }) if r == remaining),
            "{answer:?}"
        );
    }
    // The bucket is on the server (read over its plain port).
    assert_eq!(t.redis.cmd(&["DBSIZE"]), meshlimit_tests::Resp::Int(1));
}

#[tokio::test]
async fn a_server_the_ca_does_not_vouch_for_is_refused_promptly() {
    let t = tls_redis();
    // Wrong CA: the server's certificate is not trusted.
    let store = store(&t, "other-ca.pem", true);
    let started = Instant::now();
    let answer = store.acquire(&[item("k")]).await.pop().unwrap();
    assert!(answer.is_err(), "{answer:?}");
    assert!(store.ping().await.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Right CA, but no client certificate: the server refuses us.
    let store = self::store(&t, "server-ca.pem", false);
    let answer = store.acquire(&[item("k")]).await.pop().unwrap();
    assert!(answer.is_err(), "{answer:?}");
    assert_eq!(t.redis.cmd(&["DBSIZE"]), meshlimit_tests::Resp::Int(0));
}
