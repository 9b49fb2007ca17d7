//! Who is calling, and what they may do: the admin API's access model (docs/operations.md,
//! "Who can do what").
//!
//! - **Unix socket** (`api.socket`, the CLI's default): the kernel lets a process connect
//!   only if it may write the socket file (mode 0660, owner root, group `api.socket_group`);
//!   then the peer's credentials, as the kernel recorded them at `connect` (`SO_PEERCRED`,
//!   `SO_PEERGROUPS`), are checked again: root, the node's own user and members of the group
//!   get the `admin` level, anyone else a `403` — so a socket whose mode an operator loosened
//!   by mistake still admits no one else.
//! - **TCP** (`api.listen`, only with a token): every request carries `Authorization: Bearer`;
//!   the token's level is the caller's (`api.token` admin, `api.read_token` read). No token,
//!   or a wrong one: `401`.
//! - **Levels**: `read` may `GET`/`HEAD` everything but `/v1/config` (its text may hold
//!   secrets); everything else needs `admin`. A caller below the level a request needs gets
//!   `403` with the level it would need.

use std::net::SocketAddr;

use axum::http::{Method, Request};
use stator_config::AccessLevel;
use stator_sys::creds::PeerCreds;

pub use stator_control::tokens::Tokens;

/// Who may use the Unix socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnixPolicy {
    /// The node's own user.
    pub own_uid: u32,
    /// `api.socket_group`'s id, when the group exists.
    pub group: Option<u32>,
}

impl UnixPolicy {
    /// The level a peer gets: `admin` for root, the node's user and the group's members.
    pub fn level(&self, peer: &PeerCreds) -> Option<AccessLevel> {
        let trusted = peer.uid == 0
            || peer.uid == self.own_uid
            || self.group.is_some_and(|g| peer.in_group(g));
        trusted.then_some(AccessLevel::Admin)
    }
}

/// Where a request came from (a request extension the connection sets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// A TCP client.
    Tcp(SocketAddr),
    /// A process on the Unix socket, with the level its credentials give.
    Unix {
        /// Its credentials.
        creds: PeerCreds,
        /// Its level (`None`: not allowed).
        level: Option<AccessLevel>,
    },
}

/// The level a request needs.
pub fn required<B>(req: &Request<B>) -> AccessLevel {
    let read_only = matches!(*req.method(), Method::GET | Method::HEAD);
    if read_only && req.uri().path() != "/v1/config" {
        AccessLevel::Read
    } else {
        AccessLevel::Admin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    #[test]
    fn reads_need_read_and_everything_else_admin() {
        assert_eq!(required(&req(Method::GET, "/v1/status")), AccessLevel::Read);
        assert_eq!(required(&req(Method::HEAD, "/metrics")), AccessLevel::Read);
        assert_eq!(
            required(&req(Method::GET, "/v1/config")),
            AccessLevel::Admin
        );
        assert_eq!(
            required(&req(Method::PUT, "/v1/config")),
            AccessLevel::Admin
        );
        assert_eq!(
            required(&req(Method::POST, "/v1/config:validate")),
            AccessLevel::Admin
        );
        assert_eq!(
            required(&req(Method::POST, "/v1/backends/b/drain")),
            AccessLevel::Admin
        );
    }

    #[test]
    fn tokens_grant_their_level_only() {
        let t = Tokens {
            admin: Some("admin-secret".into()),
            read: Some("read-secret".into()),
        };
        assert_eq!(t.level("admin-secret"), Some(AccessLevel::Admin));
        assert_eq!(t.level("read-secret"), Some(AccessLevel::Read));
        assert_eq!(t.level("read-secreT"), None);
        assert_eq!(t.level(""), None);
        assert_eq!(Tokens::default().level(""), None);
        assert!(!Tokens::default().any());
    }

    #[test]
    fn the_socket_admits_root_the_node_and_the_group() {
        let p = UnixPolicy {
            own_uid: 500,
            group: Some(990),
        };
        let peer = |uid, gid, groups: &[u32]| PeerCreds {
            pid: 1,
            uid,
            gid,
            groups: groups.to_vec(),
        };
        assert_eq!(p.level(&peer(0, 0, &[])), Some(AccessLevel::Admin));
        assert_eq!(p.level(&peer(500, 500, &[])), Some(AccessLevel::Admin));
        assert_eq!(p.level(&peer(1000, 990, &[])), Some(AccessLevel::Admin));
        assert_eq!(
            p.level(&peer(1000, 1000, &[4, 990])),
            Some(AccessLevel::Admin)
        );
        assert_eq!(p.level(&peer(65534, 65534, &[65534])), None);
        let no_group = UnixPolicy {
            own_uid: 0,
            group: None,
        };
        assert_eq!(no_group.level(&peer(1000, 990, &[990])), None);
    }
}
