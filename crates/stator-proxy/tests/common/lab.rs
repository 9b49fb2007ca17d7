//! The two-namespace lab of the steering tests: a server and a client namespace joined by a
//! veth pair (`vs` ↔ `vc`), the server on 10.78.0.1/16, the client with 10.78.1.1–n. Names
//! carry the process id; both namespaces are removed on drop, also when the test fails.

use std::net::Ipv4Addr;

use stator_lab::netns::{self, Netns};

/// The server's address.
pub const SERVER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);

/// The client address `i` (1-based).
pub fn client_addr(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 1, i)
}

/// A server and a client namespace joined by veth.
pub struct Lab {
    pub server: Netns,
    pub client: Netns,
}

impl Lab {
    /// Namespaces `<prefix>s<pid><tag>` and `<prefix>c<pid><tag>`, the client with `clients`
    /// addresses. Fails (never skips) when not root.
    pub fn new(prefix: &str, tag: &str, clients: u8) -> Self {
        assert!(
            netns::is_root(),
            "this test needs root (CAP_BPF, CAP_NET_ADMIN, network namespaces, a reuseport BPF \
             program); run as root"
        );
        let pid = std::process::id();
        let (server, client) = netns::pair(
            &format!("{prefix}s{pid}{tag}"),
            "vs",
            &format!("{prefix}c{pid}{tag}"),
            "vc",
        )
        .expect("server and client namespaces joined by veth");
        let lab = Self { server, client };
        lab.server
            .addr_add("vs", &format!("{SERVER}/16"))
            .expect("server address");
        let batch: String = (1..=clients)
            .map(|i| format!("addr add {}/16 dev vc\n", client_addr(i)))
            .collect();
        lab.client.ip_batch(&batch).expect("client addresses");
        lab
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.server.clone().delete();
        let _ = self.client.clone().delete();
    }
}
