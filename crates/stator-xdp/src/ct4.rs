//! The per-CPU build's IPv4 connection table, `stator_ct4` (bpf/include/conntrack.h): the
//! geometry the loader chooses and the reader user space walks.
//!
//! A `BPF_F_MMAPABLE` array of [`Ct4Bucket`]s partitioned by CPU: the flow whose flow hash is
//! `h`, seen on CPU `c`, lives in bucket `c × B + (h mod B)`. B is written into the program's
//! read-only data (`stator_ct4_buckets`) and is recovered by readers from the map's size
//! (`max_entries / CPUs`). Readers map the array and read buckets as memory: a lookup is one
//! read per CPU, a walk reads the table once without a syscall per entry. The table changes while
//! it is read; a way being written at that moment can be seen half written (a diagnostic read,
//! never a decision).

use std::collections::HashMap as StdHashMap;
use std::os::fd::AsFd as _;
use std::path::Path;

use aya::maps::MapData;
use stator_abi::{
    Ct4Bucket, Ct4Entry, CtEntry, FlowKey, NodeCfg, STATOR_CT4_WAYS, STATOR_FAMILY_V4,
};

use crate::error::{Result, XdpError};
use crate::options::{ConntrackMode, XdpOptions};
use crate::sys::MmapArray;

/// The program's read-only global holding B, the buckets per CPU (0: IPv4 flows in `stator_ct`).
pub(crate) const BUCKETS_GLOBAL: &str = "stator_ct4_buckets";
/// The program's read-only global: until then, an IPv4 miss consults the pinned `stator_ct`.
pub(crate) const LEGACY_GLOBAL: &str = "stator_ct4_legacy_until_ns";
/// The map's name (and pin name).
pub(crate) const MAP: &str = "stator_ct4";

/// Bytes of a bucket (two cache lines).
pub const BUCKET_BYTES: u64 = size_of::<Ct4Bucket>() as u64;

/// Buckets per CPU of a table built for `ct_entries` flows on each CPU: twice as many ways as
/// flows, rounded up to a power of two (at least 2 buckets), so that a CPU holding
/// `ct_entries` flows fills at most half of its ways.
pub fn buckets_per_cpu(ct_entries: u32) -> u64 {
    let ways = (2 * u64::from(ct_entries.max(1))).next_power_of_two();
    (ways / u64::from(STATOR_CT4_WAYS)).max(2)
}

/// How the loader sizes `stator_ct4` for a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Buckets per CPU, written to [`BUCKETS_GLOBAL`]; 0 = the table is not used.
    pub(crate) buckets: u32,
    /// The map's `max_entries`: CPUs × buckets, or 1 when unused.
    pub(crate) max_entries: u32,
}

impl Geometry {
    /// The geometry for `opts` on a machine with `cpus` possible CPUs.
    pub(crate) fn for_load(opts: &XdpOptions, cpus: u32) -> Result<Self> {
        if opts.conntrack != ConntrackMode::PerCpu || !opts.v4_table {
            return Ok(Self {
                buckets: 0,
                max_entries: 1,
            });
        }
        let buckets = buckets_per_cpu(opts.ct_entries);
        let max_entries = buckets * u64::from(cpus.max(1));
        if max_entries > u64::from(u32::MAX) {
            return Err(XdpError::InvalidOptions {
                reason: format!(
                    "ct_entries {} needs {buckets} buckets on each of {cpus} CPUs for the IPv4 \
                     connection table ({} GiB), more than one BPF array holds: lower \
                     conntrack_entries",
                    opts.ct_entries,
                    (max_entries * BUCKET_BYTES) >> 30
                ),
            });
        }
        Ok(Self {
            buckets: buckets as u32,
            max_entries: max_entries as u32,
        })
    }

    /// Bytes of the table.
    pub(crate) fn bytes(&self) -> u64 {
        u64::from(self.max_entries) * BUCKET_BYTES
    }
}

/// The migration window when the pinned configuration cannot be read: the longest idle timeout
/// the configuration accepts (`dataplane.tcp_timeout` ≤ 1 day).
const LEGACY_WINDOW_FALLBACK_NS: u64 = 86_400 * 1_000_000_000;

/// The time, on the program's clock, until which the program looks an IPv4 flow missing from
/// `stator_ct4` up in the pinned `stator_ct` (the upgrade path), or 0. An upgrade is a pin
/// directory with a per-CPU `stator_ct` and no `stator_ct4`: a build before this table ran
/// there, and its IPv4 flows are in `stator_ct`. They are moved on their next packet for as long
/// as the longest idle timeout of the pinned configuration, after which none is alive anyway.
pub(crate) fn legacy_until_ns(pin_path: &Path, geometry: &Geometry, now_ns: u64) -> u64 {
    if geometry.buckets == 0 || pin_path.join(MAP).exists() || !pin_path.join("stator_ct").exists()
    {
        return 0;
    }
    let window = pinned_max_timeout_ns(pin_path)
        .filter(|&t| t > 0)
        .unwrap_or(LEGACY_WINDOW_FALLBACK_NS);
    now_ns.saturating_add(window)
}

/// The longest idle timeout in either generation of the pinned `stator_cfg`.
fn pinned_max_timeout_ns(pin_path: &Path) -> Option<u64> {
    let md = MapData::from_pin(pin_path.join("stator_cfg")).ok()?;
    let info = md.info().ok()?;
    if info.value_size() as usize != size_of::<NodeCfg>() {
        return None;
    }
    let cfg = MmapArray::<NodeCfg>::open(md.fd().as_fd(), info.max_entries()).ok()?;
    (0..info.max_entries())
        .map(|i| {
            let c = cfg.read(i);
            c.tcp_timeout_ns.max(c.udp_timeout_ns)
        })
        .max()
}

/// The bucket index (within a CPU's part) of an IPv4 flow: its flow hash's low bits.
fn bucket_of(flow: &FlowKey, buckets: u32) -> u32 {
    let h = stator_hash::flow_hash_v4(
        flow.src[..4].try_into().expect("4 bytes"),
        flow.dst[..4].try_into().expect("4 bytes"),
        u16::from_be_bytes(flow.sport),
        u16::from_be_bytes(flow.dport),
        flow.proto,
    );
    h & (buckets - 1)
}

/// `stator_ct4`, mapped.
#[derive(Debug)]
pub(crate) struct Ct4Table {
    arr: MmapArray<Ct4Bucket>,
    buckets: u32,
    cpus: u32,
}

impl Ct4Table {
    /// Maps the pinned table, if this pin directory has one in use: present, of this build's
    /// bucket size, and sized by a loader that used it (at least 2 buckets per CPU).
    pub(crate) fn open(pin_path: &Path, cpus: u32) -> Result<Option<Self>> {
        let path = pin_path.join(MAP);
        if !path.exists() {
            return Ok(None);
        }
        let md = MapData::from_pin(&path).map_err(|e| XdpError::map(MAP, "opening the pin", e))?;
        let info = md
            .info()
            .map_err(|e| XdpError::map(MAP, "reading its info", e))?;
        let cpus = cpus.max(1);
        let buckets = info.max_entries() / cpus;
        if u64::from(info.value_size()) != BUCKET_BYTES
            || buckets < 2
            || !buckets.is_power_of_two()
            || info.max_entries() != buckets * cpus
        {
            return Ok(None);
        }
        let arr = MmapArray::open(md.fd().as_fd(), info.max_entries())
            .map_err(|e| XdpError::map(MAP, "mmap", e))?;
        Ok(Some(Self { arr, buckets, cpus }))
    }

    /// Buckets per CPU.
    pub(crate) fn buckets(&self) -> u32 {
        self.buckets
    }

    /// The entries of an IPv4 flow, one per CPU (zero where that CPU has none); empty when no
    /// CPU has one.
    pub(crate) fn lookup(&self, flow: &FlowKey) -> Vec<CtEntry> {
        if flow.family != STATOR_FAMILY_V4 as u8 {
            return Vec::new();
        }
        let b = bucket_of(flow, self.buckets);
        let v: Vec<CtEntry> = (0..self.cpus)
            .map(|cpu| {
                let bucket = self.arr.read(cpu * self.buckets + b);
                bucket
                    .e
                    .iter()
                    .find(|e| e.holds(flow))
                    .map(Ct4Entry::entry)
                    .unwrap_or_default()
            })
            .collect();
        if v.iter().all(|e| e.last_seen_ns == 0) {
            return Vec::new();
        }
        v
    }

    /// Calls `f` with every flow and its entries (one per CPU, zero where that CPU has none),
    /// stopping after `limit` flows; returns the number visited. A flow lives in the same
    /// bucket index on every CPU, so one pass over the indices gathers each flow once.
    pub(crate) fn scan(&self, limit: usize, f: &mut impl FnMut(&FlowKey, &[CtEntry])) -> usize {
        let mut n = 0;
        let mut seen: StdHashMap<FlowKey, Vec<CtEntry>> = StdHashMap::new();
        let mut order: Vec<FlowKey> = Vec::new();
        for b in 0..self.buckets {
            for cpu in 0..self.cpus {
                let bucket = self.arr.read(cpu * self.buckets + b);
                for e in bucket.e.iter().filter(|e| e.last_seen_ns != 0) {
                    let key = e.flow();
                    let v = seen.entry(key).or_insert_with(|| {
                        order.push(key);
                        vec![CtEntry::default(); self.cpus as usize]
                    });
                    v[cpu as usize] = e.entry();
                }
            }
            for key in order.drain(..) {
                if n == limit {
                    return n;
                }
                if let Some(v) = seen.remove(&key) {
                    f(&key, &v);
                    n += 1;
                }
            }
            seen.clear();
        }
        n
    }

    /// Occupied ways and full buckets (every way taken), over all CPUs.
    pub(crate) fn occupancy(&self) -> Occupancy {
        let mut o = Occupancy {
            ways: u64::from(self.buckets) * u64::from(self.cpus) * u64::from(STATOR_CT4_WAYS),
            ..Occupancy::default()
        };
        for i in 0..self.buckets * self.cpus {
            let used = self
                .arr
                .read(i)
                .e
                .iter()
                .filter(|e| e.last_seen_ns != 0)
                .count() as u64;
            o.used += used;
            if used == u64::from(STATOR_CT4_WAYS) {
                o.full_buckets += 1;
            }
        }
        o
    }
}

/// How full `stator_ct4` is (a walk of the live table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Ways in the table (CPUs × buckets × 4).
    pub ways: u64,
    /// Ways holding a flow (live or expired, not yet reused).
    pub used: u64,
    /// Buckets with every way taken: the next new flow there evicts the least recently seen.
    pub full_buckets: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twice_as_many_ways_as_flows_in_a_power_of_two() {
        assert_eq!(buckets_per_cpu(1), 2);
        assert_eq!(buckets_per_cpu(4096), 2048);
        assert_eq!(buckets_per_cpu(4097), 4096);
        assert_eq!(buckets_per_cpu(1 << 20), 1 << 19);
        assert_eq!(buckets_per_cpu(u32::MAX), 1 << 31);
    }

    #[test]
    fn geometry_is_off_for_the_shared_build_and_refuses_what_no_array_holds() {
        let shared = XdpOptions {
            conntrack: ConntrackMode::Shared,
            ..XdpOptions::default()
        };
        assert_eq!(Geometry::for_load(&shared, 2).unwrap().buckets, 0);
        let lru = XdpOptions {
            v4_table: false,
            ..XdpOptions::default()
        };
        assert_eq!(Geometry::for_load(&lru, 2).unwrap().max_entries, 1);
        let g = Geometry::for_load(&XdpOptions::default(), 2).unwrap();
        assert_eq!((g.buckets, g.max_entries), (1 << 19, 1 << 20));
        assert_eq!(g.bytes(), 128 << 20);
        let huge = XdpOptions {
            ct_entries: 1 << 30,
            ..XdpOptions::default()
        };
        let err = Geometry::for_load(&huge, 64).unwrap_err().to_string();
        assert!(err.contains("lower conntrack_entries"), "{err}");
    }

    #[test]
    fn a_bucket_is_two_cache_lines() {
        assert_eq!(BUCKET_BYTES, 128);
    }
}
