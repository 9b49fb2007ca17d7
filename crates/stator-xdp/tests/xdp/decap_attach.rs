//! The decap program's life cycle on a real veth in a namespace of its own (docs/decap.md):
//! attach, re-attach, status, detach, purge, and a pin path outside any bpffs. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::decap_fixture;
#[allow(unused_imports)]
use crate::tunnel;

use stator_lab::netns::{self, Netns};
use stator_xdp::{AttachMode, Decap, DecapConfig, DecapOptions, XdpError, XdpMode};

use crate::decap_fixture::*;

/// Deletes a namespace and a decap pin directory when dropped, also when the test panics.
struct Cleanup {
    ns: Netns,
    pins: PinDir,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = stator_xdp::detach_all(self.pins.path());
        let _ = stator_xdp::decap_purge(self.pins.path());
        let _ = self.ns.clone().delete();
    }
}

/// Attach, re-attach (the program is swapped into the pinned link), status, detach, purge —
/// on a veth pair in a namespace of its own.
#[test]
fn attach_reattach_status_detach() {
    require_root();
    let ns = Netns::create(&format!("stdc{}", std::process::id())).unwrap();
    let guard = Cleanup {
        ns: ns.clone(),
        pins: pin_dir("attach"),
    };
    netns::veth(&ns, "dca", &ns, "dcb").unwrap();
    ns.ip(["link", "add", "dcbr", "type", "bridge"]).unwrap();
    let p = guard.pins.path().to_path_buf();
    ns.run_in(move || {
        let cfg = DecapConfig {
            addrs: [v4(10, 20, 0, 1)].into_iter().collect(),
            gue_port: Some(6080),
            // read back from the maps below, the trie included
            second_chance: Some(stator_xdp::SecondChance {
                from: ["10.1.0.0/24".parse().unwrap(), "fd01::/64".parse().unwrap()]
                    .into_iter()
                    .collect(),
                source_v4: Some(std::net::Ipv4Addr::new(10, 20, 0, 1)),
                source_v6: None,
            }),
        };
        let mut d = Decap::load(&DecapOptions::with_pin_path(&p)).unwrap();
        d.configure(&cfg).unwrap();
        let a = d.attach("dca").unwrap();
        assert_eq!(a.mode, XdpMode::Native, "veth supports native XDP");
        assert!(!a.replaced);
        let first_prog = a.prog_id;

        // a second run (e.g. an upgrade) reuses the maps and swaps its program into the link
        let mut d2 = Decap::load(&DecapOptions::with_pin_path(&p)).unwrap();
        assert_eq!(
            d2.config().unwrap(),
            cfg,
            "the configuration survives in the pinned maps"
        );
        let b = d2.attach("dca").unwrap();
        assert!(b.replaced, "re-attach uses the pinned link");
        assert_ne!(b.prog_id, first_prog);

        // generic mode on the other end
        let mut g = Decap::load(&DecapOptions {
            pin_path: p.clone(),
            attach_mode: AttachMode::Generic,
        })
        .unwrap();
        assert_eq!(g.attach("dcb").unwrap().mode, XdpMode::Generic);

        let st = stator_xdp::decap_status(&p).unwrap();
        let ifaces: Vec<_> = st.attachments.iter().map(|a| a.iface.as_str()).collect();
        assert_eq!(ifaces, ["dca", "dcb"]);
        assert_eq!(st.config, cfg);

        match g.attach("nosuchdev") {
            Err(XdpError::InterfaceMissing { iface }) => assert_eq!(iface, "nosuchdev"),
            other => panic!("expected InterfaceMissing, got {other:?}"),
        }
        // a bridge has no native XDP: `native` insists and says so
        let mut n = Decap::load(&DecapOptions {
            pin_path: p.clone(),
            attach_mode: AttachMode::Native,
        })
        .unwrap();
        match n.attach("dcbr") {
            Err(e @ XdpError::XdpUnsupported { .. }) => {
                assert!(e.to_string().contains("native mode"), "{e}");
            }
            other => panic!("expected XdpUnsupported, got {other:?}"),
        }
        let purge = chain(&stator_xdp::decap_purge(&p).unwrap_err());
        assert!(purge.contains("still attached to dca, dcb"), "{purge}");
        drop((d, d2, g, n));

        // the links outlive the loader objects
        assert_eq!(stator_xdp::decap_status(&p).unwrap().attachments.len(), 2);
        assert_eq!(stator_xdp::detach_all(&p).unwrap(), ["dca", "dcb"]);
        stator_xdp::decap_purge(&p).unwrap();
        assert!(!p.exists(), "purge removes the pin directory");
    })
    .unwrap();
    drop(guard);
}

#[test]
fn a_pin_path_outside_bpffs_gets_a_bpffs_mounted_there() {
    require_root();
    let dir = stator_testkit::scratch::unique_path("stator-decap-nobpffs", "");
    let pins = dir.join("pins");
    let fs_type = |p: &std::path::Path| {
        let out = std::process::Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(p)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    std::fs::create_dir_all(&dir).unwrap();
    assert_ne!(fs_type(&dir), "bpf_fs");
    let decap = Decap::load(&DecapOptions::with_pin_path(&pins));
    let mounted = fs_type(&pins);
    let loaded = decap.as_ref().map(|_| ()).map_err(ToString::to_string);
    // Unmount before asserting, so a failure leaves nothing behind.
    drop(decap);
    let _ = std::process::Command::new("umount").arg(&pins).status();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(loaded, Ok(()));
    assert_eq!(
        mounted, "bpf_fs",
        "the loader mounts a bpffs at the pin path itself"
    );
}
