//! The forwarder's maps, opened from their pins, with typed access.
//!
//! Maps are always opened from the pin directory — after a fresh load (aya pinned them by name)
//! and in `stator xdp status|stats` alike — so there is one way in. The arrays user space writes
//! (`stator_ctl`, `stator_cfg`, `stator_vtab`, `stator_reals`, `stator_slots`) are `BPF_F_MMAPABLE` and mapped
//! into memory; the hash maps go through the bpf syscall; per-CPU counters are read and summed.

use std::path::{Path, PathBuf};

use aya::maps::lpm_trie::LpmTrie;
use aya::maps::{
    Array, DevMapHash, HashMap, Map, MapData, MapInfo, MapType, PerCpuArray, PerCpuHashMap,
};
use stator_abi::{
    AddrRec, Beat, Class, Counter, CtEntry, Ctl, DropReason, Flood, FlowKey, FragEntry, FragKey,
    NodeCfg, Peer, PrevRec, Real, STATOR_CNT_MAX, STATOR_DROP_MAX, SfxKey, TraceKeys, Traffic,
    Vaddr, Vip, VipKey,
};

use crate::ct4::{Ct4Table, Occupancy};
use crate::error::{Result, XdpError};
use crate::options::ConntrackMode;
use crate::sys::{ClassData, MmapArray, Rec, Record};

/// Names of the forwarder's maps (also their pin names).
pub const FORWARDER_MAPS: [&str; 29] = [
    "stator_ctl",
    "stator_beat",
    "stator_cfg",
    "stator_vtab",
    "stator_vips",
    "stator_reals",
    "stator_slots",
    "stator_ct",
    "stator_ct4",
    "stator_flood",
    "stator_counters",
    "stator_drops",
    "stator_vipstats",
    "stator_realstat",
    "stator_nh",
    "stator_tx_ports",
    "stator_peers",
    "stator_failover",
    "stator_prev",
    "stator_classes",
    "stator_sfx",
    "stator_frag",
    "stator_hold",
    "stator_holdbuf",
    "stator_trace",
    "stator_trl",
    "stator_trkeys",
    "stator_progs",
    "stator_tcx",
];

/// Pinned maps that hold only statistics: when a build changes one's shape (a counter added),
/// the pin is replaced by a fresh map instead of refusing the load — the counts start again
/// (Prometheus sees a counter reset, as after a restart), and nothing a packet's decision
/// depends on is lost. Every other map must match its pin or the load is refused.
pub const STATISTICS_MAPS: [&str; 4] = [
    "stator_counters",
    "stator_drops",
    "stator_vipstats",
    "stator_realstat",
];

/// Maps earlier builds pinned and this one no longer has (`stator_vaddrs`, replaced by
/// `stator_vtab`): removed by `detach --purge` with the others.
pub const RETIRED_FORWARDER_MAPS: [&str; 1] = ["stator_vaddrs"];

/// The connection table, in either flavour.
pub(crate) enum CtMap {
    PerCpu(PerCpuHashMap<MapData, Rec<FlowKey>, Rec<CtEntry>>),
    Shared(HashMap<MapData, Rec<FlowKey>, Rec<CtEntry>>),
}

/// Every forwarder map, typed.
pub struct Maps {
    pin_path: PathBuf,
    conntrack: ConntrackMode,
    ct_entries: u32,
    slots_per_gen: u32,
    pub(crate) ctl: MmapArray<Ctl>,
    /// The controller's heartbeat (`stator_beat[0]`); `None` under maps pinned by a build
    /// before it (read-only use of an older node's maps).
    pub(crate) beat: Option<MmapArray<Beat>>,
    pub(crate) cfg: MmapArray<NodeCfg>,
    pub(crate) reals: MmapArray<Real>,
    pub(crate) slots: MmapArray<u32>,
    pub(crate) vtab: MmapArray<Vaddr>,
    pub(crate) vips: HashMap<MapData, Rec<VipKey>, Rec<Vip>>,
    pub(crate) peers: MmapArray<Peer>,
    pub(crate) failover: MmapArray<AddrRec>,
    /// The VIPs' previous tables (second chance, `stator_prev`); `None` under maps pinned by a
    /// build before it.
    pub(crate) prev: Option<MmapArray<PrevRec>>,
    pub(crate) classes: LpmTrie<MapData, ClassData, Rec<Class>>,
    pub(crate) sfx: HashMap<MapData, Rec<SfxKey>, Rec<Vip>>,
    pub(crate) frag: HashMap<MapData, Rec<FragKey>, Rec<FragEntry>>,
    pub(crate) ct: CtMap,
    /// The per-CPU build's IPv4 table, when the pinned maps have one in use.
    ct4: Option<Ct4Table>,
    pub(crate) flood: PerCpuArray<MapData, Rec<Flood>>,
    counters: PerCpuArray<MapData, u64>,
    drops: PerCpuArray<MapData, u64>,
    vipstats: PerCpuArray<MapData, Rec<Traffic>>,
    realstat: PerCpuArray<MapData, Rec<Traffic>>,
    pub(crate) tx_ports: DevMapHash<MapData>,
    /// The tracer's keys (`stator_trkeys[0]`).
    pub(crate) trkeys: Array<MapData, Rec<TraceKeys>>,
}

impl std::fmt::Debug for Maps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maps")
            .field("pin_path", &self.pin_path)
            .field("conntrack", &self.conntrack)
            .field("ct_entries", &self.ct_entries)
            .field("ct4_buckets", &self.ct4.as_ref().map(Ct4Table::buckets))
            .field("slots_per_gen", &self.slots_per_gen)
            .finish_non_exhaustive()
    }
}

fn open_pin(dir: &Path, name: &'static str) -> Result<MapData> {
    MapData::from_pin(dir.join(name)).map_err(|e| XdpError::map(name, "opening the pin", e))
}

/// The controller's side of the heartbeat (`stator_beat[0]`, docs/forwarding.md §3.2),
/// opened from its pin: a thread of its own refreshes it, apart from whoever owns the
/// [`crate::Forwarder`].
pub struct BeatWriter {
    map: MmapArray<Beat>,
}

impl std::fmt::Debug for BeatWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BeatWriter")
            .field("beat", &self.map.load())
            .finish()
    }
}

impl BeatWriter {
    /// Opens `stator_beat` pinned under `pin_path` (the forwarder must be loaded).
    ///
    /// # Errors
    /// Not root, or no heartbeat map pinned there (nothing loaded, or a build without it).
    pub fn open(pin_path: &Path) -> Result<Self> {
        if !crate::sys::is_root() {
            return Err(XdpError::NotRoot {
                what: "writing the forwarder's heartbeat".into(),
            });
        }
        if !pin_path.join("stator_beat").exists() {
            return Err(XdpError::NotLoaded {
                pin_path: pin_path.to_path_buf(),
            });
        }
        let md = open_pin(pin_path, "stator_beat")?;
        Ok(Self {
            map: mmap_array("stator_beat", &md)?,
        })
    }

    /// Refreshes the heartbeat now (CLOCK_MONOTONIC_COARSE); the forwarder trusts its tables
    /// for `stale_after` from now.
    pub fn refresh(&self, stale_after: std::time::Duration) {
        self.map.store(Beat {
            refreshed_ns: crate::monotonic_coarse_ns(),
            stale_after_ns: u64::try_from(stale_after.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
        });
    }

    /// Turns the check off: the tables are trusted however old (a clean stop that keeps
    /// forwarding, `on_exit = "keep"`).
    pub fn off(&self) {
        self.map.store(Beat {
            refreshed_ns: crate::monotonic_coarse_ns(),
            stale_after_ns: 0,
        });
    }

    /// The heartbeat as the program reads it.
    pub fn read(&self) -> Beat {
        self.map.load()
    }
}

impl stator_plane::PlaneBeat for BeatWriter {
    fn refresh(&self, stale_after: std::time::Duration) {
        BeatWriter::refresh(self, stale_after);
    }

    fn off(&self) {
        BeatWriter::off(self);
    }
}

fn typed<T>(
    name: &'static str,
    map: Map,
    f: impl FnOnce(Map) -> std::result::Result<T, aya::maps::MapError>,
) -> Result<T> {
    f(map).map_err(|e| XdpError::map(name, "checking its type and sizes", e))
}

fn mmap_array<T: Record>(name: &'static str, md: &MapData) -> Result<MmapArray<T>> {
    let info = md
        .info()
        .map_err(|e| XdpError::map(name, "reading its info", e))?;
    if info.value_size() as usize != size_of::<T>() {
        return Err(XdpError::map(
            name,
            "checking its value size",
            std::io::Error::other(format!(
                "value size {} != {}",
                info.value_size(),
                size_of::<T>()
            )),
        ));
    }
    MmapArray::open(md.fd().as_fd(), info.max_entries())
        .map_err(|e| XdpError::map(name, "mmap (is it BPF_F_MMAPABLE?)", e))
}

use std::os::fd::AsFd as _;

impl Maps {
    /// Opens every forwarder map pinned under `pin_path`.
    pub fn open(pin_path: &Path) -> Result<Self> {
        if !crate::sys::is_root() {
            return Err(XdpError::NotRoot {
                what: "reading the forwarder's pinned maps".into(),
            });
        }
        // Not on a bpffs: nothing can have been pinned there.
        if !crate::sys::on_bpffs(pin_path).unwrap_or(false) || !pin_path.join("stator_ctl").exists()
        {
            return Err(XdpError::NotLoaded {
                pin_path: pin_path.to_path_buf(),
            });
        }
        let ctl = open_pin(pin_path, "stator_ctl")?;
        let cfg = open_pin(pin_path, "stator_cfg")?;
        let reals = open_pin(pin_path, "stator_reals")?;
        let slots = open_pin(pin_path, "stator_slots")?;
        let ct = open_pin(pin_path, "stator_ct")?;
        let ct_info = ct
            .info()
            .map_err(|e| XdpError::map("stator_ct", "reading its info", e))?;
        let slots_per_gen = slots
            .info()
            .map_err(|e| XdpError::map("stator_slots", "reading its info", e))?
            .max_entries()
            / 2;
        let (conntrack, ct) = match ct_info.map_type() {
            Ok(MapType::LruPerCpuHash) => (
                ConntrackMode::PerCpu,
                CtMap::PerCpu(typed("stator_ct", Map::PerCpuLruHashMap(ct), |m| {
                    PerCpuHashMap::try_from(m)
                })?),
            ),
            _ => (
                ConntrackMode::Shared,
                CtMap::Shared(typed("stator_ct", Map::LruHashMap(ct), |m| {
                    HashMap::try_from(m)
                })?),
            ),
        };
        let ct4 = match conntrack {
            ConntrackMode::PerCpu => Ct4Table::open(pin_path, crate::sys::possible_cpus()?)?,
            ConntrackMode::Shared => None,
        };
        let percpu =
            |name: &'static str| -> Result<Map> { Ok(Map::PerCpuArray(open_pin(pin_path, name)?)) };
        Ok(Self {
            pin_path: pin_path.to_path_buf(),
            conntrack,
            ct_entries: ct_info.max_entries(),
            slots_per_gen,
            ctl: mmap_array("stator_ctl", &ctl)?,
            beat: if pin_path.join("stator_beat").exists() {
                Some(mmap_array(
                    "stator_beat",
                    &open_pin(pin_path, "stator_beat")?,
                )?)
            } else {
                None
            },
            cfg: mmap_array("stator_cfg", &cfg)?,
            reals: mmap_array("stator_reals", &reals)?,
            slots: mmap_array("stator_slots", &slots)?,
            vtab: mmap_array("stator_vtab", &open_pin(pin_path, "stator_vtab")?)?,
            peers: mmap_array("stator_peers", &open_pin(pin_path, "stator_peers")?)?,
            failover: mmap_array("stator_failover", &open_pin(pin_path, "stator_failover")?)?,
            prev: if pin_path.join("stator_prev").exists() {
                Some(mmap_array(
                    "stator_prev",
                    &open_pin(pin_path, "stator_prev")?,
                )?)
            } else {
                None
            },
            classes: typed(
                "stator_classes",
                Map::LpmTrie(open_pin(pin_path, "stator_classes")?),
                LpmTrie::try_from,
            )?,
            sfx: typed(
                "stator_sfx",
                Map::HashMap(open_pin(pin_path, "stator_sfx")?),
                HashMap::try_from,
            )?,
            frag: typed(
                "stator_frag",
                Map::LruHashMap(open_pin(pin_path, "stator_frag")?),
                HashMap::try_from,
            )?,
            vips: typed(
                "stator_vips",
                Map::HashMap(open_pin(pin_path, "stator_vips")?),
                HashMap::try_from,
            )?,
            ct,
            ct4,
            flood: typed(
                "stator_flood",
                percpu("stator_flood")?,
                PerCpuArray::try_from,
            )?,
            counters: typed(
                "stator_counters",
                percpu("stator_counters")?,
                PerCpuArray::try_from,
            )?,
            drops: typed(
                "stator_drops",
                percpu("stator_drops")?,
                PerCpuArray::try_from,
            )?,
            vipstats: typed(
                "stator_vipstats",
                percpu("stator_vipstats")?,
                PerCpuArray::try_from,
            )?,
            realstat: typed(
                "stator_realstat",
                percpu("stator_realstat")?,
                PerCpuArray::try_from,
            )?,
            tx_ports: typed(
                "stator_tx_ports",
                Map::DevMapHash(open_pin(pin_path, "stator_tx_ports")?),
                DevMapHash::try_from,
            )?,
            trkeys: typed(
                "stator_trkeys",
                Map::Array(open_pin(pin_path, "stator_trkeys")?),
                Array::try_from,
            )?,
        })
    }

    /// Writes the tracer's keys (`stator_trkeys[0]`): a mark verifies under any of them from
    /// the next packet on (docs/forwarding.md §11.1).
    pub fn set_trace_keys(&mut self, keys: &TraceKeys) -> Result<()> {
        self.trkeys
            .set(0, Rec(*keys), 0)
            .map_err(|e| XdpError::map("stator_trkeys", "update", e))
    }

    /// The tracer's keys as the program reads them.
    pub fn trace_keys(&self) -> Result<TraceKeys> {
        self.trkeys
            .get(&0, 0)
            .map(|r| r.0)
            .map_err(|e| XdpError::map("stator_trkeys", "lookup", e))
    }

    /// The pin directory.
    pub fn pin_path(&self) -> &Path {
        &self.pin_path
    }

    /// The connection-table flavour of the pinned maps.
    pub fn conntrack(&self) -> ConntrackMode {
        self.conntrack
    }

    /// Connection-table capacity.
    pub fn ct_entries(&self) -> u32 {
        self.ct_entries
    }

    /// Maglev slots per generation.
    pub fn slots_per_gen(&self) -> u32 {
        self.slots_per_gen
    }

    /// The generation packets use now.
    pub fn active_generation(&self) -> u32 {
        self.ctl.active_gen() & 1
    }

    /// The next-hop cache lifetime (`None` = a FIB lookup for every packet).
    pub fn fib_cache(&self) -> Option<std::time::Duration> {
        let us = self.ctl.read(0).fib_cache_us;
        (us != 0).then(|| std::time::Duration::from_micros(u64::from(us)))
    }

    /// The active configuration read back from the maps (`None` if never programmed).
    pub fn active_snapshot(&self) -> Result<Option<stator_core::Snapshot>> {
        self.read_generation(self.active_generation())
    }

    /// `stator_cfg[gen]` as it is in the map.
    pub fn node_cfg(&self, generation: u32) -> NodeCfg {
        self.cfg.read(generation & 1)
    }

    /// Global counters and drops by reason, summed across CPUs.
    pub fn counters(&self) -> Result<Counters> {
        let mut c = Counters::default();
        for (i, v) in c.counters.iter_mut().enumerate() {
            *v = sum_u64(&self.counters, "stator_counters", i as u32)?;
        }
        for (i, v) in c.drops.iter_mut().enumerate() {
            *v = sum_u64(&self.drops, "stator_drops", i as u32)?;
        }
        Ok(c)
    }

    /// Traffic of VIP `vip_id`, summed across CPUs.
    pub fn vip_traffic(&self, vip_id: u32) -> Result<Traffic> {
        sum_traffic(&self.vipstats, "stator_vipstats", vip_id)
    }

    /// Traffic of real `real_id`, summed across CPUs.
    pub fn real_traffic(&self, real_id: u32) -> Result<Traffic> {
        sum_traffic(&self.realstat, "stator_realstat", real_id)
    }

    /// The connection-table entries of a flow: one per CPU (per-CPU table; a zero
    /// `last_seen_ns` means none on that CPU) or one (shared table). Empty when absent.
    /// IPv4 flows of the per-CPU build are read from `stator_ct4` (one bucket per CPU), then,
    /// when no CPU has the flow there, from `stator_ct`, where a build before `stator_ct4` left
    /// it (moved on its next packet).
    pub fn conntrack_lookup(&self, flow: &FlowKey) -> Result<Vec<CtEntry>> {
        if let Some(t) = &self.ct4 {
            let v = t.lookup(flow);
            if !v.is_empty() {
                return Ok(v);
            }
        }
        let key = Rec(*flow);
        let found = match &self.ct {
            CtMap::PerCpu(m) => m.get(&key, 0).map(|v| v.iter().map(|r| r.0).collect()),
            CtMap::Shared(m) => m.get(&key, 0).map(|v| vec![v.0]),
        };
        match found {
            Ok(v) => Ok(v),
            Err(aya::maps::MapError::KeyNotFound) => Ok(Vec::new()),
            Err(e) => Err(XdpError::map("stator_ct", "lookup", e)),
        }
    }

    /// The program's clock now, in nanoseconds: the test clock when one is set, else
    /// `CLOCK_MONOTONIC_COARSE` (what `bpf_ktime_get_coarse_ns()` reads). Connection-table
    /// entries' `last_seen_ns` are on this clock.
    pub fn clock_ns(&self) -> u64 {
        match self.ctl.read(0).test_clock_ns {
            0 => crate::monotonic_coarse_ns(),
            t => t,
        }
    }

    /// Calls `f` with every flow of the connection table and its entries (one per CPU for the
    /// per-CPU table, where a zero `last_seen_ns` means none on that CPU; one for the shared
    /// table), stopping after `limit` flows: the per-CPU build's IPv4 table first, then
    /// `stator_ct`. Returns the number of flows visited. The tables change while they are
    /// walked: a flow may be missed or seen twice, as with any walk of a live BPF hash map.
    pub fn conntrack_scan(
        &self,
        limit: usize,
        mut f: impl FnMut(&FlowKey, &[CtEntry]),
    ) -> Result<usize> {
        let mut n = 0;
        if let Some(t) = &self.ct4 {
            n = t.scan(limit, &mut f);
        }
        let limit = limit - n;
        match &self.ct {
            CtMap::PerCpu(m) => {
                for item in m.iter().take(limit) {
                    let (k, v) = item.map_err(|e| XdpError::map("stator_ct", "iterate", e))?;
                    let entries: Vec<CtEntry> = v.iter().map(|r| r.0).collect();
                    f(&k.0, &entries);
                    n += 1;
                }
            }
            CtMap::Shared(m) => {
                for item in m.iter().take(limit) {
                    let (k, v) = item.map_err(|e| XdpError::map("stator_ct", "iterate", e))?;
                    f(&k.0, &[v.0]);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Buckets per CPU of the per-CPU build's IPv4 table (`stator_ct4`), when it is in use.
    pub fn ct4_buckets(&self) -> Option<u32> {
        self.ct4.as_ref().map(Ct4Table::buckets)
    }

    /// How full the per-CPU build's IPv4 table is (a walk of it), when it is in use.
    pub fn ct4_occupancy(&self) -> Option<Occupancy> {
        self.ct4.as_ref().map(Ct4Table::occupancy)
    }

    /// The fragment-table record of a datagram (`stator_frag`), if any.
    pub fn frag_lookup(&self, key: &FragKey) -> Result<Option<FragEntry>> {
        match self.frag.get(&Rec(*key), 0) {
            Ok(v) => Ok(Some(v.0)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(XdpError::map("stator_frag", "lookup", e)),
        }
    }

    /// Records in the fragment table (a walk of a live map: approximate under traffic).
    pub fn frag_len(&self) -> usize {
        self.frag.keys().count()
    }

    /// The SYN-flood guard's window on each CPU.
    pub fn flood_windows(&self) -> Result<Vec<Flood>> {
        let v = self
            .flood
            .get(&0, 0)
            .map_err(|e| XdpError::map("stator_flood", "lookup", e))?;
        Ok(v.iter().map(|r| r.0).collect())
    }

    /// Interfaces in `stator_tx_ports`.
    pub fn tx_ports(&self) -> Result<Vec<u32>> {
        self.tx_ports
            .keys()
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| XdpError::map("stator_tx_ports", "iterate", e))
    }
}

fn sum_u64(map: &PerCpuArray<MapData, u64>, name: &'static str, i: u32) -> Result<u64> {
    let v = map
        .get(&i, 0)
        .map_err(|e| XdpError::map(name, "lookup", e))?;
    Ok(v.iter().copied().fold(0u64, u64::wrapping_add))
}

fn sum_traffic(
    map: &PerCpuArray<MapData, Rec<Traffic>>,
    name: &'static str,
    i: u32,
) -> Result<Traffic> {
    let v = map
        .get(&i, 0)
        .map_err(|e| XdpError::map(name, "lookup", e))?;
    Ok(v.iter().fold(Traffic::default(), |acc, t| Traffic {
        packets: acc.packets.wrapping_add(t.0.packets),
        bytes: acc.bytes.wrapping_add(t.0.bytes),
    }))
}

/// Global counters and drops by reason, summed across CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    counters: [u64; STATOR_CNT_MAX as usize],
    drops: [u64; STATOR_DROP_MAX as usize],
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            counters: [0; STATOR_CNT_MAX as usize],
            drops: [0; STATOR_DROP_MAX as usize],
        }
    }
}

impl Counters {
    /// A counter's value.
    pub fn get(&self, c: Counter) -> u64 {
        self.counters[c.index() as usize]
    }

    /// Drops for a reason.
    pub fn drops(&self, r: DropReason) -> u64 {
        self.drops[r.code() as usize]
    }

    /// Every counter with its label, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        Counter::ALL.iter().map(|&c| (c, self.get(c)))
    }

    /// Every drop reason with its count, in code order.
    pub fn iter_drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.drops(r)))
    }

    /// `self - earlier`, counter by counter (wrapping).
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut d = *self;
        for (a, b) in d.counters.iter_mut().zip(earlier.counters) {
            *a = a.wrapping_sub(b);
        }
        for (a, b) in d.drops.iter_mut().zip(earlier.drops) {
            *a = a.wrapping_sub(b);
        }
        d
    }

    /// Counters that are not zero, with their labels (for test messages and logs).
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<_> = self
            .iter()
            .filter(|(_, n)| *n != 0)
            .map(|(c, n)| (c.label(), n))
            .collect();
        v.extend(
            self.iter_drops()
                .filter(|(_, n)| *n != 0)
                .map(|(r, n)| (r.label(), n)),
        );
        v
    }
}

const BPF_F_RDONLY_PROG: u32 = 1 << 7;

/// What one map of an object looks like (for the pinned-layout check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MapShape {
    pub(crate) map_type: u32,
    pub(crate) key_size: u32,
    pub(crate) value_size: u32,
    pub(crate) max_entries: u32,
    pub(crate) flags: u32,
}

/// Fails with [`XdpError::IncompatiblePin`] when a map already pinned under `pin_path` differs
/// from what `object` (with `overrides` of max_entries) would create: aya reuses pinned maps by
/// name without looking at them, and a program must never run against maps of another layout.
pub(crate) fn check_pins(object: &[u8], pin_path: &Path, overrides: &[(&str, u32)]) -> Result<()> {
    let obj = aya_obj::Object::parse(object).map_err(|e| XdpError::Load {
        object: "stator_fwd".into(),
        source: Box::new(e),
    })?;
    // by name, so the first difference reported does not depend on hash order (`stator_ct`
    // before `stator_ct4`: a changed connection-table flavour is named as such)
    let mut maps: Vec<_> = obj.maps.iter().collect();
    maps.sort_by_key(|(name, _)| name.as_str());
    for (name, m) in maps {
        if !matches!(m.pinning(), aya_obj::maps::PinningType::ByName) {
            continue;
        }
        let path = pin_path.join(name);
        if !path.exists() {
            continue;
        }
        let max_entries = overrides
            .iter()
            .find(|(n, _)| n == name)
            .map_or(m.max_entries(), |(_, v)| *v);
        let want = MapShape {
            map_type: m.map_type(),
            key_size: m.key_size(),
            value_size: m.value_size(),
            max_entries,
            flags: m.map_flags(),
        };
        let info = MapInfo::from_pin(&path).map_err(|e| XdpError::Map {
            map: "pinned map",
            op: "reading its info",
            source: Box::new(e),
        })?;
        let map_type = info.map_type();
        // The kernel adds BPF_F_RDONLY_PROG to devmaps itself (programs must not write them).
        let kernel_added = match map_type {
            Ok(MapType::DevMap | MapType::DevMapHash) => BPF_F_RDONLY_PROG,
            _ => 0,
        };
        let have = MapShape {
            map_type: map_type.map_or(u32::MAX, |t| t as u32),
            key_size: info.key_size(),
            value_size: info.value_size(),
            max_entries: info.max_entries(),
            flags: info.map_flags() & !kernel_added,
        };
        match compare_shapes(&path, &have, &want) {
            Err(e) if STATISTICS_MAPS.contains(&name.as_str()) => {
                tracing::info!(map = %name, pinned = %e, "a statistics map changed shape: replacing \
                               its pin (its counts start again)");
                std::fs::remove_file(&path).map_err(|source| XdpError::Map {
                    map: "pinned statistics map",
                    op: "removing its pin",
                    source: Box::new(source),
                })?;
            }
            r => r?,
        }
    }
    Ok(())
}

/// The kernel's name of a map type (the ones Stator uses), else its number.
fn map_type_name(t: u32) -> String {
    match t {
        1 => "HASH".into(),
        2 => "ARRAY".into(),
        3 => "PROG_ARRAY".into(),
        6 => "PERCPU_ARRAY".into(),
        9 => "LRU_HASH (conntrack shared)".into(),
        10 => "LRU_PERCPU_HASH (conntrack percpu)".into(),
        11 => "LPM_TRIE".into(),
        27 => "RINGBUF".into(),
        25 => "DEVMAP_HASH".into(),
        t => format!("type {t}"),
    }
}

fn compare_shapes(path: &Path, have: &MapShape, want: &MapShape) -> Result<()> {
    if have.map_type != want.map_type {
        return Err(XdpError::IncompatiblePin {
            path: path.to_path_buf(),
            what: "the map type",
            pinned: map_type_name(have.map_type),
            expected: map_type_name(want.map_type),
        });
    }
    let checks: [(&'static str, u32, u32); 4] = [
        ("the key size", have.key_size, want.key_size),
        ("the value size", have.value_size, want.value_size),
        ("max_entries", have.max_entries, want.max_entries),
        ("the map flags", have.flags, want.flags),
    ];
    for (what, pinned, expected) in checks {
        if pinned != expected {
            return Err(XdpError::IncompatiblePin {
                path: path.to_path_buf(),
                what,
                pinned: pinned.to_string(),
                expected: expected.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_mismatch_names_the_property() {
        let a = MapShape {
            map_type: 9,
            key_size: 40,
            value_size: 16,
            max_entries: 1024,
            flags: 0,
        };
        let b = MapShape {
            max_entries: 2048,
            ..a
        };
        assert!(compare_shapes(Path::new("/x"), &a, &a).is_ok());
        let err = compare_shapes(Path::new("/x/stator_ct"), &a, &b).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("max_entries is 1024, expected 2048"), "{msg}");
        assert!(msg.contains("/x/stator_ct"), "{msg}");
    }

    #[test]
    fn counters_since_subtracts() {
        let mut a = Counters::default();
        a.counters[Counter::CtHit.index() as usize] = 5;
        let mut b = a;
        b.counters[Counter::CtHit.index() as usize] = 7;
        b.drops[DropReason::Fib.code() as usize] = 1;
        let d = b.since(&a);
        assert_eq!(d.get(Counter::CtHit), 2);
        assert_eq!(d.drops(DropReason::Fib), 1);
        assert_eq!(d.nonzero(), vec![("ct_hit", 2), ("fib", 1)]);
    }
}
