//! Who can do what with a running node's admin API, tried as each user would (docs/operations.md,
//! "Who can do what"): `stator run` as root (a proxy-only node: no namespace needed), then
//! commands run as `nobody`, as a member of the socket's group and with each token, through
//! `setpriv`. Also the attack the trust issue measured: a configuration put through the API
//! that names a file for the node to write is refused with its field path, and the file is
//! not written; and a configuration file every user can read may not hold a token.
//!
//! tier: root (runs `stator run` as root and commands as other users; scripts/test-tier.sh)

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use stator_api::client::ApiClient;
use stator_testkit::scratch::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_stator");
/// The socket's group: a group id no user here has but the one the test makes up.
const GROUP: u32 = 64_123;
const ADMIN_TOKEN: &str = "admin-0f3c9a2e7d41b8c6";
const READ_TOKEN: &str = "read-5b7e1d9c3a2f8e60";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `cmd args` as user `uid` (group `gid`, supplementary `groups`).
fn as_user(uid: u32, gid: u32, groups: &[u32], cmd: &str, args: &[&str]) -> Output {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"));
    if groups.is_empty() {
        c.arg("--clear-groups");
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        c.arg(format!("--groups={}", list.join(",")));
    }
    c.arg(cmd)
        .args(args)
        .env_remove("STATOR_API")
        .env_remove("STATOR_TOKEN")
        .env_remove("STATOR_SOCKET")
        .output()
        .expect("setpriv")
}

fn nobody(cmd: &str, args: &[&str]) -> Output {
    as_user(65_534, 65_534, &[], cmd, args)
}

fn write_mode(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn config(dir: &Path, port: u16, backend_port: u16) -> String {
    format!(
        r#"
[node]
name = "access"
[dataplane]
mode = "none"
[api]
socket = "{dir}/run/api.sock"
socket_group = "{GROUP}"
listen = "127.0.0.1:{port}"
token_file = "{dir}/api-token"
read_token_file = "{dir}/read-token"
[[pool]]
name = "web"
[pool.health]
method = "none"
[[pool.backend]]
id = "b1"
address = "127.0.0.1"
port = {backend_port}
"#,
        dir = dir.display()
    )
}

/// `stator run` as root; killed when dropped.
struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &Path, log: &Path) -> Run {
    let log = std::fs::File::create(log).unwrap();
    Run(Command::new(BIN)
        .args(["run", "-c"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn only_root_the_group_and_tokens_reach_the_admin_api() {
    assert!(
        stator_xdp::is_root(),
        "this test runs stator run as root and commands as other users: run it as root"
    );
    let dir = TempDir::new("stator-api-access");
    // Other users may enter the directory (as they may enter /etc and /run), not more.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let port = free_port();
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    write_mode(&dir.join("api-token"), ADMIN_TOKEN, 0o600);
    write_mode(&dir.join("read-token"), READ_TOKEN, 0o600);
    let conf = dir.join("stator.toml");
    write_mode(
        &conf,
        &config(dir.path(), port, backend.local_addr().unwrap().port()),
        0o640,
    );
    let socket = dir.join("run/api.sock");
    let mut run = start(&conf, &dir.join("stator.log"));
    let root = ApiClient::unix(&socket).with_timeout(Duration::from_secs(5));
    let started = Instant::now();
    loop {
        if root
            .get_json("/v1/status")
            .is_ok_and(|s| s["phase"] == "running")
        {
            break;
        }
        assert!(
            run.0.try_wait().unwrap().is_none(),
            "stator run exited: {}",
            std::fs::read_to_string(dir.join("stator.log")).unwrap()
        );
        assert!(started.elapsed() < Duration::from_secs(20), "not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("stator run ready in {:?}", started.elapsed());
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let m = std::fs::metadata(&socket).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o660, "socket mode");
        assert_eq!((m.uid(), m.gid()), (0, GROUP), "socket owner and group");
    }
    let generation = || root.get_json("/v1/status").unwrap()["config"]["generation"].clone();
    let g0 = generation();
    let api = format!("127.0.0.1:{port}");
    let sock = socket.to_str().unwrap();
    let evil = dir.join("evil.toml");
    write_mode(
        &evil,
        &config(dir.path(), port, 9)
            .replace("mode = \"none\"", "mode = \"none\"\non_exit = \"keep\""),
        0o644,
    );
    let evil = evil.to_str().unwrap();

    // --- nobody: no token to read, no socket to open, nothing to change over TCP.
    for file in ["api-token", "read-token", "stator.toml"] {
        let out = nobody("cat", &[dir.join(file).to_str().unwrap()]);
        assert!(
            !out.status.success() && text(&out).contains("Permission denied"),
            "nobody reads {file}: {}",
            text(&out)
        );
    }
    let out = nobody(BIN, &["status", "--socket", sock]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("Permission denied"), "{}", text(&out));
    for (what, args) in [
        ("status", vec!["status", "--api", &api]),
        ("apply", vec!["apply", evil, "--api", &api]),
        ("drain", vec!["drain", "b1", "--api", &api]),
        (
            "wrong token",
            vec!["drain", "b1", "--api", &api, "--token", "guess"],
        ),
    ] {
        let out = nobody(BIN, &args);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out));
        assert!(text(&out).contains("401"), "{what}: {}", text(&out));
    }
    // The read token (a monitoring user's) reads, and changes nothing.
    let out = nobody(BIN, &["status", "--api", &api, "--token", READ_TOKEN]);
    assert!(out.status.success(), "{}", text(&out));
    for (what, args) in [
        (
            "apply",
            vec!["apply", evil, "--api", &api, "--token", READ_TOKEN],
        ),
        (
            "drain",
            vec!["drain", "b1", "--api", &api, "--token", READ_TOKEN],
        ),
    ] {
        let out = nobody(BIN, &args);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out));
        assert!(
            text(&out).contains("403") && text(&out).contains("needs the admin level"),
            "{what}: {}",
            text(&out)
        );
    }
    let tcp_read = ApiClient::new(&api, Some(READ_TOKEN.into())).unwrap();
    assert_eq!(
        tcp_read
            .request("GET", "/v1/config", &[], &[])
            .unwrap()
            .status,
        403,
        "the configuration's text may hold secrets"
    );
    assert_eq!(generation(), g0, "nothing applied");
    let b = root.get_json("/v1/backends").unwrap();
    assert_eq!(b["backends"][0]["drain"]["state"], "none", "{b}");

    // --- a member of the socket's group is an operator: it may drain.
    let member = |args: &[&str]| as_user(64_001, 64_001, &[GROUP], BIN, args);
    let out = member(&["status", "--socket", sock]);
    assert!(out.status.success(), "{}", text(&out));
    let out = member(&["drain", "b1", "--socket", sock]);
    assert!(out.status.success(), "{}", text(&out));
    let out = member(&["undrain", "b1", "--socket", sock]);
    assert!(out.status.success(), "{}", text(&out));

    // --- the socket's mode loosened by mistake: the peer's credentials still keep nobody out.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let out = nobody(BIN, &["drain", "b1", "--socket", sock]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("403") && text(&out).contains("uid 65534"),
        "{}",
        text(&out)
    );
    assert_eq!(
        root.get_json("/v1/backends").unwrap()["backends"][0]["drain"]["state"],
        "none"
    );

    // --- the upgrade socket (docs/operations.md, "Upgrades"): whoever connects can take the
    // node's sockets and make it drain and exit, so root's only — mode 0600, and a socket
    // whose mode was loosened still closes on nobody after the peer-credential check.
    let upgrade = dir.join("run/api.upgrade.sock");
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let m = std::fs::metadata(&upgrade).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600, "upgrade socket mode");
        assert_eq!(m.uid(), 0, "upgrade socket owner");
    }
    let upgrade_args = [
        "upgrade",
        "--socket",
        upgrade.to_str().unwrap(),
        "--timeout",
        "5",
    ];
    let out = nobody(BIN, &upgrade_args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("Permission denied"), "{}", text(&out));
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&upgrade, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let out = nobody(BIN, &upgrade_args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("closed the connection"),
        "{}",
        text(&out)
    );
    assert!(
        run.0.try_wait().unwrap().is_none(),
        "the node was neither replaced nor stopped"
    );
    assert_eq!(root.get_json("/v1/status").unwrap()["phase"], "running");
    assert!(
        std::fs::read_to_string(dir.join("stator.log"))
            .unwrap()
            .contains("upgrade socket: refused a peer of another user"),
        "the refusal is logged"
    );

    // --- the measured attack: a configuration naming a file for the node to write, put
    // through the API — even with the admin token — is refused with its field path.
    let target = dir.join("etc-cron-evil");
    let attack = config(dir.path(), port, 9)
        + &format!(
            "[bgp]\nlocal_as = 65010\nrouter_id = \"10.0.0.1\"\nbird_config = \"{}\"\n\
             bird_socket = \"{}\"\n[[bgp.neighbor]]\naddress = \"10.0.0.2\"\nremote_as = 65000\n",
            target.display(),
            dir.join("fake-bird.ctl").display()
        );
    let tcp_admin = ApiClient::new(&api, Some(ADMIN_TOKEN.into())).unwrap();
    let r = tcp_admin
        .request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/toml")],
            attack.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 422, "{}", r.text());
    let body = r.json().unwrap();
    assert_eq!(body["field"], "bgp.bird_config", "{body}");
    assert!(
        !target.exists(),
        "nothing written at the path the caller chose"
    );
    assert_eq!(generation(), g0);
    // The same token may change what is not a file: the admin level works over TCP.
    let r = tcp_admin
        .request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/toml")],
            std::fs::read_to_string(&conf)
                .unwrap()
                .replace("name = \"web\"", "name = \"web2\"")
                .as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    // --- SIGTERM: the socket is removed.
    let _ = Command::new("kill")
        .args(["-TERM", &run.0.id().to_string()])
        .status();
    let status = run.0.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the socket is removed at exit");

    // --- a token in a configuration file every user can read: refused at start.
    let open = dir.join("open.toml");
    write_mode(
        &open,
        &config(dir.path(), free_port(), 9).replace(
            &format!("token_file = \"{}/api-token\"", dir.path().display()),
            "token = \"in-the-open\"",
        ),
        0o644,
    );
    let out = Command::new(BIN)
        .args(["run", "-c"])
        .arg(&open)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("api.token") && text(&out).contains("can be read by every user"),
        "{}",
        text(&out)
    );
    let _keep: PathBuf = dir.path().to_owned();
}
