//! [`ReceiveSteering`]: the NIC's receive-side scaling in software for `steering = "cpu"` —
//! `stator_rss.o` at XDP on the interfaces clients arrive on, sending each client's packets
//! to the CPU of the worker that serves it (docs/steering.md §8).

use std::collections::BTreeSet;
use std::fmt;

use aya::maps::{Array, CpuMap, HashMap as BpfHashMap, MapData, PerCpuArray};
use aya::programs::xdp::XdpLinkId;
use aya::programs::{Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use stator_abi::{
    RssCounter, SIZEOF_stator_rp_cfg, STATOR_RSS_CNT_MAX, STATOR_RSS_MAX_CPUS, STATOR_RSS_MAX_PORTS,
};

use crate::error::{ROOT_HINT, chain};
use crate::table::default_table_size;
use crate::{HashFields, Result, RssKey, SteerError, SteeringOptions, SteeringTable};

/// The compiled program (build.rs runs clang on `bpf/stator_rss.bpf.c`).
pub static RSS_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_rss.o"));

/// The program's name in the object.
pub const RSS_PROGRAM_NAME: &str = "stator_rss";

const CFG_MAP: &str = "stator_rss_cfg";
const TABLE_MAP: &str = "stator_rss_table";
const CPUS_MAP: &str = "stator_rss_cpus";
const CPUMAP_MAP: &str = "stator_rss_cpumap";
const PORTS_MAP: &str = "stator_rss_ports";
const COUNTERS_MAP: &str = "stator_rss_cnt";

/// Packets each CPU's queue of the CPUMAP holds before the kernel drops (counted by the
/// kernel's `xdp:xdp_cpumap_enqueue` tracepoint): what a NIC's receive ring holds.
pub const DEFAULT_QUEUE_SIZE: u32 = 2048;

/// A transport protocol of a steered port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// TCP (`IPPROTO_TCP`).
    Tcp,
    /// UDP (`IPPROTO_UDP`).
    Udp,
}

impl Transport {
    fn number(self) -> u32 {
        match self {
            Self::Tcp => 6,
            Self::Udp => 17,
        }
    }
}

/// How the program is attached to an interface.
///
/// Generic is the default: a packet moved to another CPU keeps its socket buffer, with its
/// checksum state. In native mode the driver's frame is rebuilt into a new buffer on the
/// target CPU and the checksum state is lost — right for a NIC, whose frames carry complete
/// checksums (the stack then verifies them in software), wrong for veth and loopback, whose
/// packets carry partial checksums and would be dropped as corrupt (measured: every
/// redirected TCP packet lost on veth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RssAttachMode {
    /// In the stack (`XDP_FLAGS_SKB_MODE`), on any interface.
    #[default]
    Generic,
    /// In the driver (physical NICs with XDP support).
    Native,
}

/// How to build receive steering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// Worker `i`'s CPU: the listeners' workers are pinned one per CPU in this order. No CPU
    /// twice, each below `STATOR_RSS_MAX_CPUS`.
    pub cpus: Vec<u32>,
    /// Table size M, a prime; `None` = [`default_table_size`] of the CPU count.
    pub table_size: Option<u32>,
    /// Toeplitz key; `None` = [`RssKey::random`].
    pub key: Option<RssKey>,
    /// Packets each CPU's queue holds ([`DEFAULT_QUEUE_SIZE`]).
    pub queue_size: u32,
}

impl ReceiveOptions {
    /// Workers on `cpus`, the default table size, a random key and queue size.
    pub fn new(cpus: Vec<u32>) -> Self {
        Self {
            cpus,
            table_size: None,
            key: None,
            queue_size: DEFAULT_QUEUE_SIZE,
        }
    }
}

/// Counters of the program (`enum stator_rss_counter`), per CPU: every run is counted in
/// exactly one counter, on the CPU it ran on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RssCounters {
    /// `per_cpu[cpu][counter index]`.
    pub per_cpu: Vec<[u64; STATOR_RSS_CNT_MAX as usize]>,
}

impl RssCounters {
    /// One counter summed over CPUs.
    pub fn get(&self, counter: RssCounter) -> u64 {
        self.per_cpu
            .iter()
            .map(|c| c[counter.index() as usize])
            .sum()
    }
}

impl fmt::Display for RssCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in RssCounter::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", c.label(), self.get(*c))?;
        }
        Ok(())
    }
}

/// The receive-steering program and its maps, owned by the node's process. Dropping it
/// detaches the program from every interface it was attached to.
pub struct ReceiveSteering {
    ebpf: Ebpf,
    table: SteeringTable,
    cpus: Vec<u32>,
    ports: BpfHashMap<MapData, u32, u8>,
    steered: BTreeSet<(Transport, u16)>,
    counters: PerCpuArray<MapData, u64>,
    attached: Vec<(String, &'static str)>,
    /// The links of `attached`, in order; empty while detached ([`ReceiveSteering::detach_all`]).
    links: Vec<XdpLinkId>,
}

impl fmt::Debug for ReceiveSteering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiveSteering")
            .field("cpus", &self.cpus)
            .field("table_size", &self.table.size())
            .field("ports", &self.steered)
            .field("attached", &self.attached)
            .finish_non_exhaustive()
    }
}

impl ReceiveSteering {
    /// Loads the program for workers pinned on `opts.cpus`: builds the table over worker ids
    /// `0..cpus.len()` (the same table [`Self::listener_options`] gives each listener), writes
    /// it, the CPUs and one CPUMAP entry per CPU. Nothing is attached and no port is steered
    /// yet.
    ///
    /// # Errors
    /// [`SteerError::InvalidOption`] for bad options, [`SteerError::Random`] when no key can be
    /// drawn, [`SteerError::Receive`] when the kernel refuses the program or a map write.
    pub fn load(opts: &ReceiveOptions) -> Result<Self> {
        let n = opts.cpus.len() as u32;
        if let Some(&cpu) = opts.cpus.iter().find(|&&c| c >= STATOR_RSS_MAX_CPUS) {
            return Err(SteerError::InvalidOption {
                field: "cpus",
                reason: format!("CPU {cpu} is not below {STATOR_RSS_MAX_CPUS}"),
            });
        }
        if opts.cpus.iter().collect::<BTreeSet<_>>().len() != opts.cpus.len() {
            return Err(SteerError::InvalidOption {
                field: "cpus",
                reason: format!("{:?} names a CPU twice: one worker per CPU", opts.cpus),
            });
        }
        if opts.queue_size == 0 {
            return Err(SteerError::InvalidOption {
                field: "queue_size",
                reason: "0 packets: the queue must hold at least one".into(),
            });
        }
        let key = match opts.key {
            Some(k) => k,
            None => RssKey::random()?,
        };
        let size = opts.table_size.unwrap_or_else(|| default_table_size(n));
        let table = SteeringTable::new(n, size, key, HashFields::Addr)?;
        let max_cpu = opts.cpus.iter().copied().max().unwrap_or(0);
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(TABLE_MAP, size)
            .map_max_entries(CPUMAP_MAP, max_cpu + 1)
            .load(RSS_OBJECT)
            .map_err(|e| receive_error("loading stator_rss", &e))?;

        let mut table_map: Array<MapData, u32> = Array::try_from(take(&mut ebpf, TABLE_MAP)?)
            .map_err(|e| receive_error("opening stator_rss_table", &e))?;
        for (slot, &worker) in table.slots().iter().enumerate() {
            table_map
                .set(slot as u32, worker, 0)
                .map_err(|e| receive_error("writing stator_rss_table", &e))?;
        }
        let mut cpus_map: Array<MapData, u32> = Array::try_from(take(&mut ebpf, CPUS_MAP)?)
            .map_err(|e| receive_error("opening stator_rss_cpus", &e))?;
        let mut cpumap = CpuMap::try_from(take(&mut ebpf, CPUMAP_MAP)?)
            .map_err(|e| receive_error("opening stator_rss_cpumap", &e))?;
        for (worker, &cpu) in opts.cpus.iter().enumerate() {
            cpus_map
                .set(worker as u32, cpu, 0)
                .map_err(|e| receive_error("writing stator_rss_cpus", &e))?;
            cpumap.set(cpu, opts.queue_size, None, 0).map_err(|e| {
                receive_error(&format!("adding CPU {cpu} to stator_rss_cpumap"), &e)
            })?;
        }
        let ports = BpfHashMap::try_from(take(&mut ebpf, PORTS_MAP)?)
            .map_err(|e| receive_error("opening stator_rss_ports", &e))?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, COUNTERS_MAP)?)
            .map_err(|e| receive_error("opening stator_rss_cnt", &e))?;
        // The configuration goes last: until it is written every packet keeps its CPU.
        let mut cfg: Array<MapData, [u8; SIZEOF_stator_rp_cfg]> =
            Array::try_from(take(&mut ebpf, CFG_MAP)?)
                .map_err(|e| receive_error("opening stator_rss_cfg", &e))?;
        cfg.set(0, crate::loader::cfg_bytes(&table, false), 0)
            .map_err(|e| receive_error("writing stator_rss_cfg", &e))?;
        let program: &mut Xdp = ebpf
            .program_mut(RSS_PROGRAM_NAME)
            .ok_or_else(|| SteerError::Receive {
                what: "loading stator_rss".into(),
                detail: format!("the object has no program {RSS_PROGRAM_NAME}"),
                hint: "",
            })?
            .try_into()
            .map_err(|e| receive_error("loading stator_rss", &e))?;
        stator_sys::retry_interrupted(|| program.load(), crate::loader::load_errno)
            .map_err(|e| receive_error("loading stator_rss", &e))?;
        Ok(Self {
            ebpf,
            table,
            cpus: opts.cpus.clone(),
            ports,
            steered: BTreeSet::new(),
            counters,
            attached: Vec::new(),
            links: Vec::new(),
        })
    }

    /// What a listener with `steering = "cpu"` loads its reuseport program with: the same key,
    /// table and CPUs, so its program picks the worker this program sent the packet to.
    pub fn listener_options(&self) -> SteeringOptions {
        SteeringOptions {
            workers: self.cpus.len() as u32,
            table_size: Some(self.table.size()),
            key: Some(self.table.key()),
            fields: HashFields::Addr,
            cpus: Some(self.cpus.clone()),
        }
    }

    /// Steers the packets to a listening port (both families).
    ///
    /// # Errors
    /// [`SteerError::InvalidOption`] past `STATOR_RSS_MAX_PORTS`; [`SteerError::Receive`] when
    /// the map write fails.
    pub fn steer_port(&mut self, transport: Transport, port: u16) -> Result<()> {
        if !self.steered.contains(&(transport, port))
            && self.steered.len() >= STATOR_RSS_MAX_PORTS as usize
        {
            return Err(SteerError::InvalidOption {
                field: "ports",
                reason: format!("more than {STATOR_RSS_MAX_PORTS} steered listening ports"),
            });
        }
        self.ports
            .insert(port_key(transport, port), 1, 0)
            .map_err(|e| receive_error("writing stator_rss_ports", &e))?;
        self.steered.insert((transport, port));
        Ok(())
    }

    /// Attaches the program at XDP on `interface`; it stays attached until `self` is dropped.
    /// Returns the mode's name (`"generic"` or `"native"`).
    ///
    /// # Errors
    /// [`SteerError::Receive`] when the interface does not exist, already has an XDP program,
    /// or (native) its driver has no XDP.
    pub fn attach(&mut self, interface: &str, mode: RssAttachMode) -> Result<&'static str> {
        let (m, name) = match mode {
            RssAttachMode::Generic => (XdpMode::Skb, "generic"),
            RssAttachMode::Native => (XdpMode::Driver, "native"),
        };
        let program: &mut Xdp = self
            .ebpf
            .program_mut(RSS_PROGRAM_NAME)
            .expect("loaded in load()")
            .try_into()
            .map_err(|e| receive_error("stator_rss", &e))?;
        let link = match program.attach(interface, m) {
            Ok(link) => link,
            Err(e) => {
                return Err(SteerError::Receive {
                    what: format!("attaching to {interface} ({name})"),
                    detail: chain(&e),
                    hint: " (the interface must exist and have no other XDP program; stator-xdp's \
                        forwarder and receive steering cannot share one)",
                });
            }
        };
        self.attached.push((interface.to_string(), name));
        self.links.push(link);
        Ok(name)
    }

    /// Detaches the program from every interface, keeping its maps and table: another process
    /// can attach its own there (an upgrade: docs/operations.md, "Upgrades"); meanwhile the
    /// stack delivers every packet on the CPU it arrived on. [`Self::attach_again`] undoes it.
    ///
    /// # Errors
    /// [`SteerError::Receive`] when the kernel refuses a detach (the others are still tried).
    pub fn detach_all(&mut self) -> Result<()> {
        let program: &mut Xdp = self
            .ebpf
            .program_mut(RSS_PROGRAM_NAME)
            .expect("loaded in load()")
            .try_into()
            .map_err(|e| receive_error("stator_rss", &e))?;
        let mut first = None;
        for (link, (interface, _)) in self.links.drain(..).zip(&self.attached) {
            if let Err(e) = program.detach(link) {
                first.get_or_insert(SteerError::Receive {
                    what: format!("detaching from {interface}"),
                    detail: chain(&e),
                    hint: "",
                });
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Attaches the program again where [`Self::detach_all`] detached it, in the same modes.
    ///
    /// # Errors
    /// As [`Self::attach`], for the first interface that fails.
    pub fn attach_again(&mut self) -> Result<()> {
        let was = std::mem::take(&mut self.attached);
        self.links.clear();
        let mut first = None;
        for (interface, name) in was {
            let mode = if name == "native" {
                RssAttachMode::Native
            } else {
                RssAttachMode::Generic
            };
            if let Err(e) = self.attach(&interface, mode) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The interfaces the program is attached to, with the mode each took.
    pub fn attached(&self) -> &[(String, &'static str)] {
        &self.attached
    }

    /// The CPUs, worker id order.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// The table the program uses: `table().owner(client)` is the client's worker, whose CPU
    /// is `cpus()[worker]`.
    pub fn table(&self) -> &SteeringTable {
        &self.table
    }

    /// The program's counters, per CPU.
    ///
    /// # Errors
    /// [`SteerError::Receive`] when the map cannot be read.
    pub fn counters(&self) -> Result<RssCounters> {
        let mut out = RssCounters::default();
        for counter in RssCounter::ALL {
            let per_cpu = self
                .counters
                .get(&counter.index(), 0)
                .map_err(|e| receive_error("reading stator_rss_cnt", &e))?;
            if out.per_cpu.len() < per_cpu.len() {
                out.per_cpu
                    .resize(per_cpu.len(), [0; STATOR_RSS_CNT_MAX as usize]);
            }
            for (cpu, v) in per_cpu.iter().enumerate() {
                out.per_cpu[cpu][counter.index() as usize] = *v;
            }
        }
        Ok(out)
    }
}

fn port_key(transport: Transport, port: u16) -> u32 {
    transport.number() << 16 | u32::from(port)
}

fn take(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map> {
    ebpf.take_map(name).ok_or_else(|| SteerError::Receive {
        what: "loading stator_rss".into(),
        detail: format!("the object has no map {name}"),
        hint: "",
    })
}

fn receive_error(what: &str, e: &(dyn std::error::Error + 'static)) -> SteerError {
    let hint = if crate::loader::is_eperm(e) {
        ROOT_HINT
    } else {
        ""
    };
    let detail = chain(e);
    SteerError::Receive {
        what: what.to_string(),
        detail,
        hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_key_is_the_protocol_then_the_port() {
        assert_eq!(port_key(Transport::Tcp, 8080), 6 << 16 | 8080);
        assert_eq!(port_key(Transport::Udp, 53), 17 << 16 | 53);
    }

    #[test]
    fn bad_cpus_are_refused_before_anything_is_loaded() {
        let twice = ReceiveSteering::load(&ReceiveOptions::new(vec![0, 1, 0])).unwrap_err();
        assert!(twice.to_string().contains("names a CPU twice"), "{twice}");
        let far =
            ReceiveSteering::load(&ReceiveOptions::new(vec![STATOR_RSS_MAX_CPUS])).unwrap_err();
        assert!(far.to_string().contains("`cpus`"), "{far}");
        let none = ReceiveSteering::load(&ReceiveOptions::new(vec![])).unwrap_err();
        assert!(none.to_string().contains("`workers`"), "{none}");
    }
}
