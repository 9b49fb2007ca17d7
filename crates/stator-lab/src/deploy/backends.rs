//! The deployment's backends: each one's decapsulation and VIPs, its servers (`stator lab
//! serve` in its namespace), what they answered, and its weight and membership in the
//! configuration the nodes run.

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::state::{read_served, served_path, write_pid};
use super::{Deployment, ECHO_PORT, HTTP_PORT, Served, UDP_PORT, file_err};
use crate::netns::{ChildGuard, NetnsError, Result, run};
use crate::topo::Host;
use crate::wait::wait_until;

impl Deployment {
    pub(super) fn setup_backend(&self, k: usize, host: &Host) -> Result<()> {
        let lab = self.lab();
        for v6 in [false, true] {
            for vip in self.spec.served_vips(v6) {
                lab.add_vip_to_backend(k, vip)?;
            }
        }
        if self.spec.second_chance {
            // a backend passes packets on after bpf_fib_lookup, which answers only for an
            // interface that forwards (docs/decap.md §7)
            host.ns.sysctl("net.ipv4.conf.eth0.forwarding", "1")?;
            host.ns.sysctl("net.ipv6.conf.eth0.forwarding", "1")?;
        }
        let pin = self.pins().join(format!("b{k}"));
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", host.ns.path().display()))
            .arg(&self.spec.binary)
            .args(["decap", "attach", "--iface", "eth0", "--addr"])
            .arg(host.addr(false).to_string())
            .arg("--addr")
            .arg(host.addr(true).to_string())
            .arg("--pin-path")
            .arg(&pin);
        if self.spec.second_chance {
            // accepted from the nodes only; passed on from the backend's own addresses
            let nodes: Vec<String> = lab
                .lbs
                .iter()
                .flat_map(|h| [h.addr(false), h.addr(true)])
                .map(|a| a.to_string())
                .collect();
            cmd.arg("--second-chance-from")
                .arg(nodes.join(","))
                .arg("--source-v4")
                .arg(host.addr(false).to_string())
                .arg("--source-v6")
                .arg(host.addr(true).to_string());
        }
        run(&mut cmd).map(|_| ())
    }

    /// Backend `k`'s decap counters: what `stator decap stats --json` prints.
    pub fn decap_stats_json(&self, k: usize) -> Result<String> {
        let host = &self.backends[k].host;
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", host.ns.path().display()))
            .arg(&self.spec.binary)
            .args(["decap", "stats", "--json", "--pin-path"])
            .arg(self.pins().join(format!("b{k}")));
        let out = run(&mut cmd)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn stats_path(&self, k: usize) -> PathBuf {
        served_path(&self.spec.dir, k)
    }

    /// Starts backend `k`'s servers (`stator lab serve` in its namespace): HTTP and TCP echo
    /// on every address, UDP echo on each VIP. Returns once they listen.
    pub fn backend_start(&mut self, k: usize) -> Result<()> {
        self.backend_stop(k);
        let host = self.backends[k].host.clone();
        let stats = self.stats_path(k);
        let _ = std::fs::remove_file(&stats);
        let log_path = self.spec.dir.join(format!("b{k}-serve.log"));
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(file_err(&log_path))?;
        let err = log.try_clone().map_err(file_err(&log_path))?;
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", host.ns.path().display()))
            .arg(&self.spec.binary)
            .args(["lab", "serve", "--name", &format!("b{k}"), "--netns"])
            .arg(host.ns.name())
            .arg("--http")
            .arg(format!("[::]:{HTTP_PORT}"))
            .arg("--echo")
            .arg(format!("[::]:{ECHO_PORT}"))
            .args(
                [false, true]
                    .into_iter()
                    .flat_map(|v6| self.spec.served_vips(v6))
                    .flat_map(|vip| {
                        [
                            "--udp".to_owned(),
                            SocketAddr::new(vip, UDP_PORT).to_string(),
                        ]
                    }),
            )
            .arg("--stats")
            .arg(&stats)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        let what = format!("stator lab serve in {}", host.ns.name());
        let child = cmd.spawn().map_err(|source| NetnsError::Spawn {
            cmd: what.clone(),
            source,
        })?;
        let mut child = ChildGuard::from_child(child, what.clone());
        write_pid(&self.spec.dir, &format!("b{k}-serve"), child.id())?;
        let mut exited = false;
        wait_until(
            &format!("{what} to listen"),
            Duration::from_secs(10),
            Duration::from_millis(20),
            || {
                exited = !child.is_running();
                exited || stats.exists()
            },
        )?;
        if exited {
            return Err(NetnsError::Failed {
                cmd: what,
                status: "exited".into(),
                stderr: std::fs::read_to_string(&log_path).unwrap_or_default(),
            });
        }
        self.backends[k].serve = Some(child);
        Ok(())
    }

    /// Stops backend `k`'s servers (SIGKILL: open connections are reset by its kernel).
    pub fn backend_stop(&mut self, k: usize) {
        if let Some(mut child) = self.backends[k].serve.take() {
            child.signal(libc::SIGKILL);
            let _ = child.wait_timeout(Duration::from_secs(5));
        }
    }

    /// Freezes backend `k`'s servers (SIGSTOP), as a server that hangs: connections are
    /// still accepted by its kernel, but nothing answers (health checks time out).
    /// [`Deployment::backend_thaw`] resumes them.
    pub fn backend_freeze(&mut self, k: usize) {
        if let Some(child) = &self.backends[k].serve {
            child.signal(libc::SIGSTOP);
        }
    }

    /// Resumes backend `k`'s frozen servers (SIGCONT).
    pub fn backend_thaw(&mut self, k: usize) {
        if let Some(child) = &self.backends[k].serve {
            child.signal(libc::SIGCONT);
        }
    }

    /// What backend `k`'s servers have answered so far (zero before they first report).
    pub fn served(&self, k: usize) -> Served {
        read_served(&self.stats_path(k))
    }

    /// Sets backend `k`'s weight for the next [`Deployment::reload_all`].
    pub fn set_weight(&mut self, k: usize, weight: u16) {
        self.backends[k].weight = weight;
    }

    /// Lists or unlists backend `k` in the configuration, for the next
    /// [`Deployment::reload_all`].
    pub fn set_in_config(&mut self, k: usize, listed: bool) {
        self.backends[k].in_config = listed;
    }
}
