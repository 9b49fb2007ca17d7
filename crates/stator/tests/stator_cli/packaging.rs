//! Installing like a system service, without root: `scripts/deb.sh` builds a Debian package
//! from this test's `stator` binary and the package is inspected (`dpkg-deb -I`, `-c`, `-x`,
//! `-e`): control fields, the files and their places, the conffiles, the configuration passing
//! `stator check` with `on_exit = "keep"`, the systemd units — the node's and the backend's
//! `stator-decap.service` with its `decap.env` — (`systemd-analyze verify` where systemd is
//! installed), completions for bash, zsh and fish, man pages, md5sums. Then
//! `scripts/install.sh` (what `make install` runs) into a staging directory with another
//! prefix, twice: the unit names that prefix, and an edited configuration is kept. The
//! admin API's access setup (`scripts/access-setup.sh`, run by `make install` and the
//! package's postinst): a root-only random token, kept when it exists. And `stator --version`
//! names the commit the tree is at.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_stator");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn temp(name: &str) -> PathBuf {
    let d = stator_testkit::scratch::unique_path(&format!("stator-{name}"), "");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The commit `git` says the source tree is at, if it is a checkout.
fn git_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[test]
fn version_names_the_commit() {
    let v = text(&run(Command::new(BIN).arg("--version")));
    println!("{}", v.trim());
    assert!(
        v.starts_with(&format!("stator {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    match git_commit() {
        Some(c) => assert!(v.contains(&format!("(commit {c}, ")), "{v} vs git {c}"),
        None => assert!(
            v.contains("commit unknown: built outside a git checkout"),
            "{v}"
        ),
    }
}

#[test]
fn the_debian_package() {
    let dir = temp("deb");
    // Uncompressed: xz (the script's default) spends ~20 s on the binary and tests nothing
    // of ours.
    let out = run(Command::new(repo().join("scripts/deb.sh"))
        .env("STATOR_BIN", BIN)
        .env("DEB_COMPRESSION", "none")
        .env("OUT", &dir));
    let deb = PathBuf::from(text(&out).trim());
    assert!(deb.starts_with(&dir) && deb.exists(), "{deb:?}");
    println!(
        "{} ({} KiB)",
        deb.display(),
        std::fs::metadata(&deb).unwrap().len() / 1024
    );

    let info = text(&run(Command::new("dpkg-deb").arg("-I").arg(&deb)));
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} in\n{info}"))
            .to_owned()
    };
    assert_eq!(field("Package"), "stator");
    let arch = text(&run(Command::new("dpkg").arg("--print-architecture")));
    assert_eq!(field("Architecture"), arch.trim());
    let version = field("Version");
    assert!(version.starts_with(env!("CARGO_PKG_VERSION")), "{version}");
    if let Some(c) = git_commit() {
        assert!(version.ends_with(&format!(".{c}")), "{version} names {c}");
    }
    assert!(field("Depends").contains("libc6 (>="), "{info}");
    assert!(field("Recommends").contains("bird2"));
    for script in ["postinst", "prerm", "postrm", "conffiles", "md5sums"] {
        assert!(info.contains(script), "{script} in\n{info}");
    }

    let contents = text(&run(Command::new("dpkg-deb").arg("-c").arg(&deb)));
    for path in [
        "./usr/bin/stator",
        "./usr/lib/systemd/system/stator.service",
        "./usr/lib/systemd/system/stator-decap.service",
        "./etc/stator/stator.toml",
        "./etc/stator/decap.env",
        "./usr/share/bash-completion/completions/stator",
        "./usr/share/zsh/vendor-completions/_stator",
        "./usr/share/fish/vendor_completions.d/stator.fish",
        "./usr/share/man/man1/stator.1.gz",
        "./usr/share/man/man1/stator-run.1.gz",
        "./usr/share/man/man1/stator-withdraw.1.gz",
        "./usr/share/man/man1/stator-xdp-attach.1.gz",
        "./usr/share/doc/stator/operations.md",
        "./usr/share/doc/stator/examples/grafana-dashboard.json",
        "./usr/share/stator/access-setup.sh",
    ] {
        assert!(
            contents.lines().any(|l| l.ends_with(&format!(" {path}"))),
            "{path} in the package:\n{contents}"
        );
    }
    assert!(
        !contents.contains("stator-generate") && !contents.contains("stator-lab-serve"),
        "hidden subcommands get no page"
    );
    assert!(
        contents.lines().all(|l| l.contains(" root/root ")),
        "owned by root"
    );

    let root = dir.join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    let control = dir.join("control");
    run(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control));
    assert_eq!(
        std::fs::read_to_string(control.join("conffiles")).unwrap(),
        "/etc/stator/stator.toml\n/etc/stator/decap.env\n"
    );
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(
        postinst.contains("/usr/share/stator/access-setup.sh /etc"),
        "postinst creates the group and the token:\n{postinst}"
    );
    assert!(
        contents
            .lines()
            .any(|l| l.starts_with("-rw-r----- ") && l.ends_with(" ./etc/stator/stator.toml")),
        "the configuration is not readable by every user:\n{contents}"
    );
    run(Command::new("md5sum")
        .args(["--quiet", "-c"])
        .arg(control.join("md5sums"))
        .current_dir(&root));

    // The binary runs and is the one packaged (stripped of debug information).
    let packaged = root.join("usr/bin/stator");
    let v = text(&run(Command::new(&packaged).arg("--version")));
    assert_eq!(v, text(&run(Command::new(BIN).arg("--version"))));

    // The configuration: the minimal example, forwarding kept across restarts, valid.
    let conf = root.join("etc/stator/stator.toml");
    let toml = std::fs::read_to_string(&conf).unwrap();
    assert!(toml.contains("\non_exit = \"keep\""), "{toml}");
    let check = run(Command::new(&packaged).arg("check").arg(&conf));
    println!("{}", text(&check).trim());

    // The unit: stop withdraws (SIGTERM), reload is SIGHUP after a check, a node under
    // systemd's watchdog, withdrawn by `stator withdraw` after an unclean stop.
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/stator.service")).unwrap();
    for line in [
        "ExecStart=/usr/bin/stator run -c /etc/stator/stator.toml",
        "ExecStartPre=/usr/bin/stator check /etc/stator/stator.toml",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "KillSignal=SIGTERM",
        "WantedBy=multi-user.target",
        "RuntimeDirectory=stator",
        "LimitNOFILE=1048576",
        // Supervision: readiness, the watchdog, and the withdrawal after an unclean stop.
        "Type=notify",
        // the successor `stator upgrade` starts says MAINPID= itself
        "NotifyAccess=all",
        "WatchdogSec=10s",
        "ExecStopPost=/usr/bin/stator withdraw --unless-clean -c /etc/stator/stator.toml",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} in\n{unit}");
    }
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
    {
        // Verified with the paths of the extracted package (the checked commands must exist).
        let local = dir.join("stator.service");
        std::fs::write(
            &local,
            unit.replace("/usr/bin/stator", &packaged.display().to_string()),
        )
        .unwrap();
        run(Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&local));
        println!("systemd-analyze verify: the unit is valid");
    } else {
        println!("systemd-analyze is not installed here: the unit was not verified by systemd");
    }

    // The backend's unit (docs/quickstart.md, "Backend"): decap and the VIPs on lo from
    // /etc/stator/decap.env, undone on stop. quickstart_netns runs its commands as root.
    let decap =
        std::fs::read_to_string(root.join("usr/lib/systemd/system/stator-decap.service")).unwrap();
    for line in [
        "Type=oneshot",
        "RemainAfterExit=yes",
        "EnvironmentFile=/etc/stator/decap.env",
        "ExecStart=/usr/bin/stator decap attach --iface ${STATOR_DECAP_IFACES} \
         --addr ${STATOR_DECAP_ADDRS} --vip ${STATOR_DECAP_VIPS}",
        "ExecStop=/usr/bin/stator decap detach --all --vip ${STATOR_DECAP_VIPS}",
        "WantedBy=multi-user.target",
    ] {
        assert!(decap.lines().any(|l| l == line), "{line} in\n{decap}");
    }
    let env = std::fs::read_to_string(root.join("etc/stator/decap.env")).unwrap();
    for var in [
        "STATOR_DECAP_IFACES=",
        "STATOR_DECAP_ADDRS=",
        "STATOR_DECAP_VIPS=",
    ] {
        assert!(env.lines().any(|l| l.starts_with(var)), "{var} in\n{env}");
    }
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
    {
        let local = dir.join("stator-decap.service");
        let env_path = dir.join("decap.env");
        std::fs::write(&env_path, &env).unwrap();
        std::fs::write(
            &local,
            decap
                .replace("/usr/bin/stator", &packaged.display().to_string())
                .replace("/etc/stator/decap.env", &env_path.display().to_string()),
        )
        .unwrap();
        run(Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&local));
        println!("systemd-analyze verify: stator-decap.service is valid");
    }

    // Completions and man pages.
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    assert!(read("usr/share/bash-completion/completions/stator").contains("complete -F"));
    assert!(read("usr/share/zsh/vendor-completions/_stator").starts_with("#compdef stator"));
    assert!(read("usr/share/fish/vendor_completions.d/stator.fish").contains("complete -c stator"));
    let page = run(Command::new("gzip")
        .args(["-dc"])
        .arg(root.join("usr/share/man/man1/stator-run.1.gz")));
    let page = text(&page);
    assert!(page.contains(".TH STATOR-RUN 1"), "{page}");
    assert!(page.contains("/etc/stator/stator.toml"), "{page}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The unit's `ExecStopPost=stator withdraw --unless-clean`, without BIRD or root: after a
/// clean stop it does nothing (exit 0); after an unclean one it tries BIRD and fails — exit
/// 1, within its timeout — when BIRD does not answer, with the configuration and without it.
/// (Withdrawals that BIRD confirms are in lab_failures 7–9.)
#[test]
fn withdraw_after_a_clean_stop_does_nothing_and_fails_in_time_without_bird() {
    let dir = temp("withdraw");
    let socket = dir.join("no-bird.ctl");
    let conf = dir.join("stator.toml");
    let minimal = std::fs::read_to_string(repo().join("examples/minimal.toml")).unwrap();
    std::fs::write(
        &conf,
        format!(
            "{minimal}\n[bgp]\nlocal_as = 65010\nbird_socket = \"{}\"\nbird_config = \"{}\"\n\n\
             [[bgp.neighbor]]\nname = \"tor1_v4\"\naddress = \"10.0.0.1\"\nremote_as = 65000\n",
            socket.display(),
            dir.join("stator-bird.conf").display()
        ),
    )
    .unwrap();
    let withdraw = |config: &Path, result: &str| {
        let t = std::time::Instant::now();
        let out = Command::new(BIN)
            .args(["withdraw", "--unless-clean", "--timeout", "0.5", "-c"])
            .arg(config)
            .arg("--bird-socket")
            .arg(&socket)
            .env("SERVICE_RESULT", result)
            .env("EXIT_CODE", "killed")
            .env("EXIT_STATUS", "KILL")
            .output()
            .unwrap();
        let took = t.elapsed();
        let all = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        println!(
            "SERVICE_RESULT={result} -c {}: {} in {took:?}\n{all}",
            config.display(),
            out.status
        );
        (out.status, took, all)
    };
    let (status, _, text) = withdraw(&conf, "success");
    assert!(status.success(), "{text}");
    assert!(text.contains("clean stop: nothing to withdraw"), "{text}");
    for config in [conf.clone(), dir.join("gone.toml")] {
        let (status, took, text) = withdraw(&config, "signal");
        assert_eq!(status.code(), Some(1), "{text}");
        assert!(
            text.contains("BIRD did not confirm the withdrawal"),
            "{text}"
        );
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn make_install_into_a_staging_directory() {
    let dir = temp("install");
    let install = || {
        run(Command::new(repo().join("scripts/install.sh"))
            .env("STATOR_BIN", BIN)
            .env("DESTDIR", &dir)
            .env("PREFIX", "/opt/stator"))
    };
    let first = install();
    println!("{}", text(&first).trim());
    assert!(dir.join("opt/stator/bin/stator").exists());
    let unit =
        std::fs::read_to_string(dir.join("opt/stator/lib/systemd/system/stator.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/opt/stator/bin/stator run -c /etc/stator/stator.toml"),
        "{unit}"
    );
    let decap =
        std::fs::read_to_string(dir.join("opt/stator/lib/systemd/system/stator-decap.service"))
            .unwrap();
    assert!(
        decap.contains("ExecStart=/opt/stator/bin/stator decap attach ")
            && decap.contains("EnvironmentFile=/etc/stator/decap.env"),
        "{decap}"
    );
    assert!(dir.join("opt/stator/share/man/man1/stator.1.gz").exists());
    assert!(
        dir.join("opt/stator/share/zsh/vendor-completions/_stator")
            .exists()
    );
    // An operator's configuration is never overwritten.
    let conf = dir.join("etc/stator/stator.toml");
    std::fs::write(&conf, "# edited\n").unwrap();
    let env = dir.join("etc/stator/decap.env");
    std::fs::write(&env, "# edited\n").unwrap();
    let second = install();
    assert!(text(&second).contains("keeping the existing /etc/stator/stator.toml"));
    assert!(text(&second).contains("keeping the existing /etc/stator/decap.env"));
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), "# edited\n");
    assert_eq!(std::fs::read_to_string(&env).unwrap(), "# edited\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_access_setup_makes_a_private_token_once() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp("access");
    // The host's group database is not this test's to change: `getent` says the group
    // exists and `chgrp` records what it was asked.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, body) in [
        ("getent", "exit 0"),
        ("groupadd", "echo groupadd called >&2; exit 1"),
        ("chgrp", "echo \"$@\" >> \"$(dirname \"$0\")/chgrp.log\""),
    ] {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let etc = dir.join("etc");
    std::fs::create_dir_all(etc.join("stator")).unwrap();
    let conf = etc.join("stator/stator.toml");
    std::fs::write(&conf, "# shipped\n").unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o640)).unwrap();
    let setup = || {
        run(Command::new(repo().join("scripts/access-setup.sh"))
            .arg(&etc)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            ))
    };
    let first = setup();
    let token_path = etc.join("stator/api-token");
    let token = std::fs::read_to_string(&token_path).unwrap();
    let mode = std::fs::metadata(&token_path).unwrap().permissions().mode() & 0o777;
    println!("{}", text(&first).trim());
    assert_eq!(mode, 0o600, "the token is root's alone");
    assert_eq!(token.trim().len(), 64, "32 random bytes in hex: {token:?}");
    assert!(token.trim().bytes().all(|b| b.is_ascii_hexdigit()));
    setup();
    assert_eq!(
        std::fs::read_to_string(&token_path).unwrap(),
        token,
        "an existing token is kept"
    );
    let chgrp = std::fs::read_to_string(bin.join("chgrp.log")).unwrap_or_default();
    if runs_as_root() {
        // As root the shipped file (root, 0640) is given the group `stator`.
        assert!(chgrp.contains("stator"), "{chgrp}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether this test runs as root (the shipped file is then owned by root).
fn runs_as_root() -> bool {
    text(&run(Command::new("id").arg("-u"))).trim() == "0"
}
