//! The backend side: `stator_decap` (`bpf/stator_decap.bpf.c`, docs/decap.md), which strips
//! GRE, IPIP and GUE headers from packets addressed to this host and passes the inner packet to
//! the kernel stack, so a backend with the VIP on `lo` answers the client directly.
//!
//! Same shape as the forwarder: maps pinned by name under one directory (default
//! [`DEFAULT_DECAP_PIN_PATH`], separate from the forwarder's so that neither `detach --all`
//! touches the other), attachments as pinned bpf_links (`link_<ifname>`) that outlive the
//! process and are swapped in place on a re-attach, counters read and summed per CPU.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use aya::maps::lpm_trie::{Key as LpmKey, LpmTrie};
use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::ProgramFd;
use aya::{Ebpf, EbpfLoader};
use stator_abi::{
    DecapAddr, DecapCfg, DecapCounter, STATOR_DECAP_CNT_MAX, STATOR_DECAP_F_ADDRS,
    STATOR_DECAP_F_SECOND_CHANCE, STATOR_FAMILY_V4, STATOR_FAMILY_V6, STATOR_GUE_PORT,
    STATOR_MAX_DECAP_ADDRS, STATOR_MAX_DECAP_PREFIXES,
};
use stator_core::Prefix;

use crate::attach::{AttachStatus, Attachment, attach_loaded, attached_interfaces, attachments};
use crate::error::{Result, XdpError};
use crate::forwarder::{load_xdp, program_fd};
use crate::maps::check_pins;
use crate::objects;
use crate::options::AttachMode;
use crate::program::addr_bytes;
use crate::sys::{self, Rec};
use crate::testrun::{TestRunOpts, TestRunOutput, run_xdp};

/// Name of the decap program in its object.
pub const DECAP_PROGRAM_NAME: &str = "stator_decap";

/// Default pin directory of the decap program's maps and links.
pub const DEFAULT_DECAP_PIN_PATH: &str = "/sys/fs/bpf/stator-decap";

/// Names of the decap program's maps (also their pin names).
pub const DECAP_MAPS: [&str; 4] = [
    "stator_dcfg",
    "stator_daddrs",
    "stator_dscfrom",
    "stator_dcnt",
];

/// What the decap program accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecapConfig {
    /// Outer destination addresses that are this host's tunnel endpoints. Empty: any
    /// destination (the kernel already filtered the MAC address; the inner destination must
    /// still be local for the stack to deliver it).
    pub addrs: BTreeSet<IpAddr>,
    /// GUE's UDP destination port; `None`: UDP is never decapsulated.
    pub gue_port: Option<u16>,
    /// Second chance (docs/decap.md §7): `None` delivers every packet here, as before.
    pub second_chance: Option<SecondChance>,
}

/// What second chance needs on a backend: who may ask for it and this host's addresses to
/// pass packets on from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecondChance {
    /// Outer sources allowed to ask for a second chance: the load balancers' addresses (a
    /// second chance from anywhere else is delivered here, counted `sc_refused`).
    pub from: BTreeSet<Prefix>,
    /// This host's IPv4 address, the outer source of a packet passed on over IPv4.
    pub source_v4: Option<Ipv4Addr>,
    /// This host's IPv6 address, the outer source of a packet passed on over IPv6.
    pub source_v6: Option<Ipv6Addr>,
}

impl Default for DecapConfig {
    /// Any destination, GUE on the IANA port 6080 (what the forwarder sends by default), no
    /// second chance.
    fn default() -> Self {
        Self {
            addrs: BTreeSet::new(),
            gue_port: Some(STATOR_GUE_PORT as u16),
            second_chance: None,
        }
    }
}

impl DecapConfig {
    /// Checks the configuration against what the maps hold.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| XdpError::InvalidOptions { reason };
        if self.addrs.len() > STATOR_MAX_DECAP_ADDRS as usize {
            return Err(invalid(format!(
                "{} decap addresses, at most {STATOR_MAX_DECAP_ADDRS}",
                self.addrs.len()
            )));
        }
        if let Some(a) = self
            .addrs
            .iter()
            .find(|a| a.is_unspecified() || a.is_multicast())
        {
            return Err(invalid(format!(
                "decap address {a} is not a unicast address"
            )));
        }
        if self.gue_port == Some(0) {
            return Err(invalid(
                "GUE port 0: leave the port out to turn GUE off".into(),
            ));
        }
        if let Some(sc) = &self.second_chance {
            if self.gue_port.is_none() {
                return Err(invalid(
                    "second chance rides on GUE: it needs a GUE port".into(),
                ));
            }
            if sc.from.is_empty() || sc.from.len() > STATOR_MAX_DECAP_PREFIXES as usize {
                return Err(invalid(format!(
                    "second chance needs 1 to {STATOR_MAX_DECAP_PREFIXES} source prefixes \
                     (--second-chance-from: the load balancers), not {}",
                    sc.from.len()
                )));
            }
            if sc.source_v4.is_none() && sc.source_v6.is_none() {
                return Err(invalid(
                    "second chance needs this host's address to pass packets on from \
                     (--source-v4 and/or --source-v6)"
                        .into(),
                ));
            }
            let sources = [sc.source_v4.map(IpAddr::V4), sc.source_v6.map(IpAddr::V6)];
            if let Some(a) = sources
                .iter()
                .flatten()
                .find(|a| a.is_unspecified() || a.is_multicast())
            {
                return Err(invalid(format!(
                    "second-chance source {a} is not a unicast address"
                )));
            }
        }
        Ok(())
    }

    fn encode(&self) -> DecapCfg {
        let mut flags = if self.addrs.is_empty() {
            0
        } else {
            STATOR_DECAP_F_ADDRS as u16
        };
        let (mut src_v4, mut src_v6) = ([0; 4], [0; 16]);
        if let Some(sc) = &self.second_chance {
            flags |= STATOR_DECAP_F_SECOND_CHANCE as u16;
            src_v4 = sc.source_v4.map_or([0; 4], |a| a.octets());
            src_v6 = sc.source_v6.map_or([0; 16], |a| a.octets());
        }
        DecapCfg {
            gue_port: self.gue_port.unwrap_or(0).to_be_bytes(),
            flags,
            src_v4,
            src_v6,
        }
    }
}

/// The `stator_dscfrom` key of `p`: family and padding, then the address (the trie's
/// prefix length counts the first 32 bits too).
fn prefix_key(p: &Prefix) -> LpmKey<[u8; 20]> {
    let (addr, family) = addr_bytes(p.addr);
    let mut data = [0u8; 20];
    data[0] = family;
    data[4..].copy_from_slice(&addr);
    LpmKey::new(32 + u32::from(p.len), data)
}

fn key_prefix(k: &LpmKey<[u8; 20]>) -> Option<Prefix> {
    let mut addr = [0u8; 16];
    addr.copy_from_slice(&k.data()[4..]);
    let key = DecapAddr {
        addr,
        family: k.data()[0],
        _pad0: [0; 3],
    };
    Prefix::new(
        key_addr(&key)?,
        u8::try_from(k.prefix_len().checked_sub(32)?).ok()?,
    )
}

/// Options of [`Decap::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecapOptions {
    /// Directory under a bpffs mount where the maps (by name) and links (`link_<ifname>`) are
    /// pinned.
    pub pin_path: PathBuf,
    /// Attach mode used by [`Decap::attach`].
    pub attach_mode: AttachMode,
}

impl Default for DecapOptions {
    fn default() -> Self {
        Self {
            pin_path: PathBuf::from(DEFAULT_DECAP_PIN_PATH),
            attach_mode: AttachMode::default(),
        }
    }
}

impl DecapOptions {
    /// Options with another pin directory.
    pub fn with_pin_path(pin_path: impl Into<PathBuf>) -> Self {
        Self {
            pin_path: pin_path.into(),
            ..Self::default()
        }
    }
}

/// The decap program's maps, opened from their pins.
pub struct DecapMaps {
    pin_path: PathBuf,
    cfg: Array<MapData, Rec<DecapCfg>>,
    addrs: HashMap<MapData, Rec<DecapAddr>, u8>,
    sc_from: LpmTrie<MapData, [u8; 20], u8>,
    counters: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for DecapMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecapMaps")
            .field("pin_path", &self.pin_path)
            .finish_non_exhaustive()
    }
}

fn open_pin(dir: &Path, name: &'static str) -> Result<MapData> {
    MapData::from_pin(dir.join(name)).map_err(|e| XdpError::map(name, "opening the pin", e))
}

fn addr_key(addr: IpAddr) -> DecapAddr {
    let (addr, family) = addr_bytes(addr);
    DecapAddr {
        addr,
        family,
        _pad0: [0; 3],
    }
}

fn key_addr(k: &DecapAddr) -> Option<IpAddr> {
    match u32::from(k.family) {
        STATOR_FAMILY_V4 => Some(IpAddr::V4(Ipv4Addr::new(
            k.addr[0], k.addr[1], k.addr[2], k.addr[3],
        ))),
        STATOR_FAMILY_V6 => Some(IpAddr::V6(Ipv6Addr::from(k.addr))),
        _ => None,
    }
}

impl DecapMaps {
    /// Opens the maps pinned under `pin_path`.
    pub fn open(pin_path: &Path) -> Result<Self> {
        if !sys::is_root() {
            return Err(XdpError::NotRoot {
                what: "reading the decap program's pinned maps".into(),
            });
        }
        // Not on a bpffs: nothing can have been pinned there.
        if !sys::on_bpffs(pin_path).unwrap_or(false) || !pin_path.join("stator_dcfg").exists() {
            return Err(XdpError::NotLoaded {
                pin_path: pin_path.to_path_buf(),
            });
        }
        let typed = |name: &'static str, e| XdpError::map(name, "checking its type and sizes", e);
        Ok(Self {
            pin_path: pin_path.to_path_buf(),
            cfg: Array::try_from(aya::maps::Map::Array(open_pin(pin_path, "stator_dcfg")?))
                .map_err(|e| typed("stator_dcfg", e))?,
            addrs: HashMap::try_from(aya::maps::Map::HashMap(open_pin(
                pin_path,
                "stator_daddrs",
            )?))
            .map_err(|e| typed("stator_daddrs", e))?,
            sc_from: LpmTrie::try_from(aya::maps::Map::LpmTrie(open_pin(
                pin_path,
                "stator_dscfrom",
            )?))
            .map_err(|e| typed("stator_dscfrom", e))?,
            counters: PerCpuArray::try_from(aya::maps::Map::PerCpuArray(open_pin(
                pin_path,
                "stator_dcnt",
            )?))
            .map_err(|e| typed("stator_dcnt", e))?,
        })
    }

    /// The pin directory.
    pub fn pin_path(&self) -> &Path {
        &self.pin_path
    }

    /// The configuration in the maps.
    pub fn config(&self) -> Result<DecapConfig> {
        let cfg = self
            .cfg
            .get(&0, 0)
            .map_err(|e| XdpError::map("stator_dcfg", "lookup", e))?
            .0;
        let mut addrs = BTreeSet::new();
        if cfg.flags & STATOR_DECAP_F_ADDRS as u16 != 0 {
            for k in self.addrs.keys() {
                let k = k.map_err(|e| XdpError::map("stator_daddrs", "iterate", e))?;
                addrs.insert(key_addr(&k.0).ok_or_else(|| {
                    XdpError::invalid("stator_daddrs holds an unknown address family")
                })?);
            }
        }
        let port = u16::from_be_bytes(cfg.gue_port);
        let second_chance = if cfg.flags & STATOR_DECAP_F_SECOND_CHANCE as u16 != 0 {
            let mut from = BTreeSet::new();
            for k in self.sc_from.keys() {
                let k = k.map_err(|e| XdpError::map("stator_dscfrom", "iterate", e))?;
                from.insert(key_prefix(&k).ok_or_else(|| {
                    XdpError::invalid("stator_dscfrom holds an unknown address family")
                })?);
            }
            Some(SecondChance {
                from,
                source_v4: (cfg.src_v4 != [0; 4]).then(|| Ipv4Addr::from(cfg.src_v4)),
                source_v6: (cfg.src_v6 != [0; 16]).then(|| Ipv6Addr::from(cfg.src_v6)),
            })
        } else {
            None
        };
        Ok(DecapConfig {
            addrs,
            gue_port: (port != 0).then_some(port),
            second_chance,
        })
    }

    /// Makes `cfg` the configuration. No address (or second-chance source) that both the old
    /// and the new configuration accept is ever refused in between: new ones are added first,
    /// the checks are switched on (or off) next, stale ones are removed last.
    pub fn configure(&mut self, cfg: &DecapConfig) -> Result<()> {
        cfg.validate()?;
        let old: Vec<Rec<DecapAddr>> = self
            .addrs
            .keys()
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| XdpError::map("stator_daddrs", "iterate", e))?;
        let wanted: BTreeSet<[u8; 20]> =
            cfg.addrs.iter().map(|a| key_bytes(&addr_key(*a))).collect();
        for a in &cfg.addrs {
            self.addrs
                .insert(Rec(addr_key(*a)), 1u8, 0)
                .map_err(|e| XdpError::map("stator_daddrs", "update", e))?;
        }
        let old_from: Vec<LpmKey<[u8; 20]>> = self
            .sc_from
            .keys()
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| XdpError::map("stator_dscfrom", "iterate", e))?;
        let from = cfg.second_chance.as_ref().map(|sc| &sc.from);
        let wanted_from: BTreeSet<(u32, [u8; 20])> = from
            .into_iter()
            .flatten()
            .map(|p| {
                let k = prefix_key(p);
                (k.prefix_len(), k.data())
            })
            .collect();
        for p in from.into_iter().flatten() {
            self.sc_from
                .insert(&prefix_key(p), 1u8, 0)
                .map_err(|e| XdpError::map("stator_dscfrom", "update", e))?;
        }
        self.cfg
            .set(0, Rec(cfg.encode()), 0)
            .map_err(|e| XdpError::map("stator_dcfg", "update", e))?;
        for k in old.iter().filter(|k| !wanted.contains(&key_bytes(&k.0))) {
            self.addrs
                .remove(k)
                .map_err(|e| XdpError::map("stator_daddrs", "delete", e))?;
        }
        for k in old_from
            .iter()
            .filter(|k| !wanted_from.contains(&(k.prefix_len(), k.data())))
        {
            self.sc_from
                .remove(k)
                .map_err(|e| XdpError::map("stator_dscfrom", "delete", e))?;
        }
        Ok(())
    }

    /// Counters summed across CPUs.
    pub fn counters(&self) -> Result<DecapCounters> {
        let mut c = DecapCounters::default();
        for (i, v) in c.0.iter_mut().enumerate() {
            let per_cpu = self
                .counters
                .get(&(i as u32), 0)
                .map_err(|e| XdpError::map("stator_dcnt", "lookup", e))?;
            *v = per_cpu.iter().copied().fold(0u64, u64::wrapping_add);
        }
        Ok(c)
    }
}

/// The key as plain bytes (the ABI struct has no padding, so this is its identity).
fn key_bytes(k: &DecapAddr) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[..16].copy_from_slice(&k.addr);
    b[16] = k.family;
    b
}

/// The decap counters, summed across CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecapCounters([u64; STATOR_DECAP_CNT_MAX as usize]);

impl DecapCounters {
    /// A counter's value.
    pub fn get(&self, c: DecapCounter) -> u64 {
        self.0[c.index() as usize]
    }

    /// Every counter with its label, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (DecapCounter, u64)> + '_ {
        DecapCounter::ALL.iter().map(|&c| (c, self.get(c)))
    }

    /// Packets decapsulated (GRE + IPIP + GUE).
    pub fn decapsulated(&self) -> u64 {
        self.get(DecapCounter::Gre) + self.get(DecapCounter::Ipip) + self.get(DecapCounter::Gue)
    }

    /// Packets seen: the sum of the outcomes (every packet ends in exactly one).
    pub fn packets(&self) -> u64 {
        self.iter()
            .filter(|(c, _)| c.is_outcome())
            .map(|(_, n)| n)
            .sum()
    }

    /// `self - earlier`, counter by counter (wrapping).
    pub fn since(&self, earlier: &DecapCounters) -> DecapCounters {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(earlier.0) {
            *a = a.wrapping_sub(b);
        }
        d
    }

    /// Counters that are not zero, with their labels (for test messages and logs).
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        self.iter()
            .filter(|(_, n)| *n != 0)
            .map(|(c, n)| (c.label(), n))
            .collect()
    }
}

/// Stator's decap program, loaded: the program (not necessarily attached) and its pinned maps.
#[derive(Debug)]
pub struct Decap {
    ebpf: Ebpf,
    maps: DecapMaps,
    opts: DecapOptions,
}

impl Decap {
    /// Loads the decap program: creates the pin directory, checks that maps already pinned
    /// there have this build's layout (then reuses them: the counters survive a restart),
    /// loads and verifies the program. The configuration in the maps is left as it is (a new
    /// map starts as "any destination, no GUE"): call [`Decap::configure`].
    pub fn load(opts: &DecapOptions) -> Result<Self> {
        if !sys::is_root() {
            return Err(XdpError::NotRoot {
                what: "loading the decap program".into(),
            });
        }
        crate::bpffs::ensure_bpffs(&opts.pin_path)?;
        std::fs::create_dir_all(&opts.pin_path).map_err(|e| {
            XdpError::io(
                format!("creating pin directory {}", opts.pin_path.display()),
                e,
            )
        })?;
        check_pins(objects::DECAP, &opts.pin_path, &[])?;
        let mut ebpf = EbpfLoader::new()
            .default_map_pin_directory(&opts.pin_path)
            .load(objects::DECAP)
            .map_err(|e| XdpError::Load {
                object: DECAP_PROGRAM_NAME.into(),
                source: Box::new(e),
            })?;
        load_xdp(&mut ebpf, DECAP_PROGRAM_NAME)?;
        let maps = DecapMaps::open(&opts.pin_path)?;
        Ok(Self {
            ebpf,
            maps,
            opts: opts.clone(),
        })
    }

    /// The options it was loaded with.
    pub fn options(&self) -> &DecapOptions {
        &self.opts
    }

    /// The maps.
    pub fn maps(&self) -> &DecapMaps {
        &self.maps
    }

    /// Makes `cfg` the configuration (see [`DecapMaps::configure`]).
    pub fn configure(&mut self, cfg: &DecapConfig) -> Result<()> {
        self.maps.configure(cfg)
    }

    /// The configuration in the maps.
    pub fn config(&self) -> Result<DecapConfig> {
        self.maps.config()
    }

    /// Counters summed across CPUs.
    pub fn counters(&self) -> Result<DecapCounters> {
        self.maps.counters()
    }

    /// The program's file descriptor.
    pub fn program(&self) -> &ProgramFd {
        program_fd(&self.ebpf, DECAP_PROGRAM_NAME).expect("the program is loaded by Decap::load")
    }

    /// Runs the program once over `frame` (BPF_PROG_TEST_RUN).
    pub fn test_run(&self, frame: &[u8], opts: TestRunOpts) -> Result<TestRunOutput> {
        run_xdp(self.program(), frame, opts).map_err(|e| XdpError::io("BPF_PROG_TEST_RUN", e))
    }

    /// Attaches the program to `iface` (mode from [`DecapOptions::attach_mode`]: auto tries
    /// native, then generic with a warning), pinning the link as `link_<iface>` so it outlives
    /// this process. If a link is already pinned for `iface`, the program is swapped into it
    /// atomically.
    pub fn attach(&mut self, iface: &str) -> Result<Attachment> {
        let second_chance = self.maps.config().is_ok_and(|c| c.second_chance.is_some());
        attach_loaded(
            &mut self.ebpf,
            DECAP_PROGRAM_NAME,
            &self.opts.pin_path,
            iface,
            self.opts.attach_mode,
            |_| preflight(iface, second_chance),
        )
    }
}

/// What [`decap_status`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecapStatus {
    /// The pin directory.
    pub pin_path: PathBuf,
    /// The configuration in the maps.
    pub config: DecapConfig,
    /// Attachments.
    pub attachments: Vec<AttachStatus>,
}

/// What is loaded, configured and attached under `pin_path`.
pub fn decap_status(pin_path: &Path) -> Result<DecapStatus> {
    let maps = DecapMaps::open(pin_path)?;
    Ok(DecapStatus {
        pin_path: pin_path.to_path_buf(),
        config: maps.config()?,
        attachments: attachments(pin_path)?,
    })
}

/// Removes the decap program's pinned maps (and the directory if it is then empty). Refuses
/// while links are pinned.
pub fn decap_purge(pin_path: &Path) -> Result<()> {
    let left = attached_interfaces(pin_path)?;
    if !left.is_empty() {
        return Err(XdpError::io(
            format!("purging {}", pin_path.display()),
            std::io::Error::other(format!(
                "still attached to {}; detach first",
                left.join(", ")
            )),
        ));
    }
    for name in DECAP_MAPS {
        let p = pin_path.join(name);
        if p.exists() {
            std::fs::remove_file(&p)
                .map_err(|e| XdpError::io(format!("removing {}", p.display()), e))?;
        }
    }
    let _ = std::fs::remove_dir(pin_path);
    Ok(())
}

/// Warnings about the host setup the inner packets need (docs/decap.md, "Sysctls").
fn preflight(iface: &str, second_chance: bool) -> Vec<String> {
    let read = |key: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{key}/rp_filter"))
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    // the kernel applies max(all, iface): strict (1) only when neither says loose (2)
    let effective = read("all").max(read(iface));
    let mut w = Vec::new();
    if effective == Some(1) {
        w.push(format!(
            "strict reverse-path filtering applies to `{iface}` (rp_filter = 1): a decapsulated \
             packet is dropped unless the route back to its client leaves through `{iface}`; \
             if replies take another interface, use loose mode or none: \
             `sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{iface}.rp_filter=2`"
        ));
    }
    // bpf_fib_lookup answers only for an interface that forwards (docs/decap.md §7)
    let off: Vec<&str> = ["ipv4", "ipv6"]
        .into_iter()
        .filter(|fam| {
            std::fs::read_to_string(format!("/proc/sys/net/{fam}/conf/{iface}/forwarding"))
                .is_ok_and(|v| v.trim() == "0")
        })
        .collect();
    if second_chance && !off.is_empty() {
        w.push(format!(
            "second chance passes packets on after a FIB lookup, which the kernel answers only \
             for an interface that forwards; forwarding is off on `{iface}` for {}: until \
             `sysctl -w net.ipv4.conf.{iface}.forwarding=1 net.ipv6.conf.{iface}.forwarding=1`, \
             what should be passed on is dropped (counted sc_fib)",
            off.join(" and ")
        ));
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_encodes_the_address_flag_and_port() {
        let mut c = DecapConfig::default();
        assert_eq!(c.encode().gue_port, 6080u16.to_be_bytes());
        assert_eq!(c.encode().flags, 0);
        c.addrs.insert("10.0.0.1".parse().unwrap());
        c.gue_port = None;
        assert_eq!(c.encode().flags, STATOR_DECAP_F_ADDRS as u16);
        assert_eq!(c.encode().gue_port, [0, 0]);
    }

    #[test]
    fn config_validation_names_the_problem() {
        let mut c = DecapConfig {
            gue_port: Some(0),
            ..DecapConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("GUE port 0"));
        c.gue_port = None;
        c.addrs.insert("224.0.0.1".parse().unwrap());
        assert!(c.validate().unwrap_err().to_string().contains("unicast"));
        c.addrs.clear();
        for i in 0..=STATOR_MAX_DECAP_ADDRS {
            c.addrs.insert(IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + i)));
        }
        assert!(c.validate().unwrap_err().to_string().contains("at most 64"));
    }

    #[test]
    fn second_chance_encodes_its_flag_and_sources_and_is_checked() {
        let mut c = DecapConfig {
            second_chance: Some(SecondChance::default()),
            ..DecapConfig::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("source prefixes")
        );
        let sc = c.second_chance.as_mut().unwrap();
        sc.from
            .insert(Prefix::new("10.1.0.0".parse().unwrap(), 24).unwrap());
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("--source-v4")
        );
        c.second_chance.as_mut().unwrap().source_v4 = Some(Ipv4Addr::new(10, 2, 0, 5));
        c.validate().unwrap();
        let e = c.encode();
        assert_eq!(e.flags, STATOR_DECAP_F_SECOND_CHANCE as u16);
        assert_eq!((e.src_v4, e.src_v6), ([10, 2, 0, 5], [0; 16]));
        c.gue_port = None;
        assert!(c.validate().unwrap_err().to_string().contains("GUE port"));
    }

    #[test]
    fn prefix_keys_round_trip() {
        for (a, len) in [("10.1.0.0", 24), ("2001:db8::", 48), ("192.0.2.7", 32)] {
            let p = Prefix::new(a.parse().unwrap(), len).unwrap();
            let k = prefix_key(&p);
            assert_eq!(k.prefix_len(), 32 + u32::from(len));
            assert_eq!(key_prefix(&k), Some(p));
        }
    }

    #[test]
    fn keys_round_trip() {
        for a in ["192.0.2.7", "2001:db8::7"] {
            let a: IpAddr = a.parse().unwrap();
            assert_eq!(key_addr(&addr_key(a)), Some(a));
        }
    }
}
