//! [`ReuseportSteering`]: loads `stator_reuseport.o`, fills its maps, attaches it to a group.

use std::fmt;
use std::os::fd::AsFd;

use aya::maps::{Array, MapData, MapError, PerCpuArray, ReusePortSockArray};
use aya::programs::{ProgramError, SkReuseport};
use aya::{Ebpf, EbpfError, EbpfLoader};
use stator_abi::{
    OFFSETOF_stator_rp_cfg_flags, OFFSETOF_stator_rp_cfg_key, OFFSETOF_stator_rp_cfg_table_size,
    OFFSETOF_stator_rp_cfg_workers, RpCounter, SIZEOF_stator_rp_cfg, STATOR_RP_CNT_MAX,
    STATOR_RP_F_CPU, STATOR_RP_F_PORT,
};
use stator_hash::SlotChange;

use crate::error::{ROOT_HINT, chain};
use crate::table::default_table_size;
use crate::{HashFields, Result, RssKey, SteerError, SteeringTable};

/// The compiled program (build.rs runs clang on `bpf/stator_reuseport.bpf.c`).
pub static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stator_reuseport.o"));

/// The program's name in the object.
pub const PROGRAM_NAME: &str = "stator_reuseport";

const CFG_MAP: &str = "stator_rp_cfg";
const SOCKS_MAP: &str = "stator_rp_socks";
const TABLE_MAP: &str = "stator_rp_table";
const COUNTERS_MAP: &str = "stator_rp_cnt";
const CPUS_MAP: &str = "stator_rp_cpus";

/// How to build a steering group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteeringOptions {
    /// Worker capacity: worker ids are `0..workers` (at most `STATOR_RP_MAX_WORKERS`). All of
    /// them are live after [`ReuseportSteering::load`].
    pub workers: u32,
    /// Table size M, a prime; `None` = [`default_table_size`]`(workers)`. It is fixed for the
    /// group's lifetime: a different M would move almost every client.
    pub table_size: Option<u32>,
    /// Toeplitz key; `None` = [`RssKey::random`]. To keep clients on their workers across a
    /// new load of the program, pass the old group's [`ReuseportSteering::key`].
    pub key: Option<RssKey>,
    /// Which client fields are hashed.
    pub fields: HashFields,
    /// `steering = "cpu"`: worker `i` is pinned to CPU `cpus[i]` (one CPU per worker id), and
    /// a select run also counts whether it ran on its worker's CPU (`cpu_local`,
    /// `cpu_remote`). Take these options from [`crate::ReceiveSteering::listener_options`], so
    /// the table is the one receive steering sends packets by.
    pub cpus: Option<Vec<u32>>,
}

impl SteeringOptions {
    /// `workers` workers, the default table size, a random key, the address only.
    pub fn new(workers: u32) -> Self {
        Self {
            workers,
            table_size: None,
            key: None,
            fields: HashFields::Addr,
            cpus: None,
        }
    }
}

/// Counters of the program, summed over CPUs (`enum stator_rp_counter`): every run of the
/// program is counted in exactly one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteerCounters {
    values: [u64; STATOR_RP_CNT_MAX as usize],
}

impl SteerCounters {
    /// One counter.
    pub fn get(&self, counter: RpCounter) -> u64 {
        self.values[counter.index() as usize]
    }

    /// Every counter with its metric label, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (RpCounter, u64)> + '_ {
        RpCounter::ALL.iter().map(|&c| (c, self.get(c)))
    }

    /// Runs of the program, all outcomes together (not the locality counters beside them).
    pub fn runs(&self) -> u64 {
        RpCounter::ALL
            .iter()
            .filter(|c| c.is_outcome())
            .map(|&c| self.get(c))
            .sum()
    }

    /// `self - earlier`, counter by counter (saturating).
    pub fn since(&self, earlier: &Self) -> Self {
        let mut values = self.values;
        for (v, e) in values.iter_mut().zip(earlier.values) {
            *v = v.saturating_sub(e);
        }
        Self { values }
    }
}

impl fmt::Display for SteerCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (c, v)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={v}", c.label())?;
        }
        Ok(())
    }
}

/// What the kernel says about the loaded program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramStats {
    /// Runs counted by the kernel — only while run-time statistics are enabled
    /// (`aya::sys::enable_stats(Stats::RunTime)`, or the `kernel.bpf_stats_enabled` sysctl).
    pub runs: u64,
    /// Time spent in those runs.
    pub run_time: std::time::Duration,
    /// Instructions the verifier accepted (kernel ≥ 5.16).
    pub verified_instructions: Option<u32>,
}

/// What [`ReuseportSteering::set_workers`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkersChange {
    /// The slots rewritten, with their new workers (`MaglevTable::delta`).
    pub changes: Vec<SlotChange>,
    /// The table before the change: `previous.slots()[change.index]` is the worker a slot left.
    pub previous: SteeringTable,
}

/// One `SO_REUSEPORT` group's steering program and maps, owned by the process that serves the
/// group (the proxy's listener). Dropping it leaves the program attached to the group for as
/// long as a socket of the group is open, with the table it last had.
pub struct ReuseportSteering {
    ebpf: Ebpf,
    socks: ReusePortSockArray<MapData>,
    table_map: Array<MapData, u32>,
    counters: PerCpuArray<MapData, u64>,
    table: SteeringTable,
}

impl fmt::Debug for ReuseportSteering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReuseportSteering")
            .field("workers", &self.table.workers())
            .field("live", &self.table.live())
            .field("table_size", &self.table.size())
            .field("fields", &self.table.fields())
            .finish_non_exhaustive()
    }
}

impl ReuseportSteering {
    /// Loads the program for a group of `opts.workers` workers, all of them live: builds the
    /// Maglev table, writes it and the configuration, and has the kernel verify the program.
    /// Nothing is attached yet: give each worker's socket to [`Self::set_socket`] and attach
    /// with [`Self::attach`].
    ///
    /// # Errors
    /// [`SteerError::InvalidOption`] for bad options, [`SteerError::Random`] when no key can be
    /// drawn, [`SteerError::Load`] when the kernel refuses (not root, verifier), and
    /// [`SteerError::Map`] when a map write fails.
    pub fn load(opts: &SteeringOptions) -> Result<Self> {
        let key = match opts.key {
            Some(k) => k,
            None => RssKey::random()?,
        };
        let size = opts
            .table_size
            .unwrap_or_else(|| default_table_size(opts.workers));
        let table = SteeringTable::new(opts.workers, size, key, opts.fields)?;
        if let Some(cpus) = &opts.cpus
            && (cpus.len() != opts.workers as usize || opts.fields != HashFields::Addr)
        {
            return Err(SteerError::InvalidOption {
                field: "cpus",
                reason: format!(
                    "{} CPUs for {} workers hashed by {}: steering = \"cpu\" needs one CPU \
                         per worker and the address alone",
                    cpus.len(),
                    opts.workers,
                    opts.fields
                ),
            });
        }
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(SOCKS_MAP, opts.workers)
            .map_max_entries(TABLE_MAP, size)
            .load(OBJECT)
            .map_err(load_error)?;
        let socks = ReusePortSockArray::try_from(take_map(&mut ebpf, SOCKS_MAP)?)
            .map_err(|e| map_error(SOCKS_MAP, "opening", e))?;
        let mut table_map: Array<MapData, u32> = Array::try_from(take_map(&mut ebpf, TABLE_MAP)?)
            .map_err(|e| map_error(TABLE_MAP, "opening", e))?;
        let counters = PerCpuArray::try_from(take_map(&mut ebpf, COUNTERS_MAP)?)
            .map_err(|e| map_error(COUNTERS_MAP, "opening", e))?;
        for (index, &worker) in (0u32..).zip(table.slots()) {
            table_map
                .set(index, worker, 0)
                .map_err(|e| map_error(TABLE_MAP, &format!("writing slot {index} of"), e))?;
        }
        if let Some(cpus) = &opts.cpus {
            // borrowed, not taken: a map taken and dropped here would close the fd the
            // program is about to be verified with
            let map = ebpf.map_mut(CPUS_MAP).ok_or_else(|| SteerError::Load {
                source: format!("the object has no map {CPUS_MAP}").into(),
                hint: "",
            })?;
            let mut cpus_map: Array<&mut MapData, u32> =
                Array::try_from(map).map_err(|e| map_error(CPUS_MAP, "opening", e))?;
            for (worker, &cpu) in (0u32..).zip(cpus) {
                cpus_map
                    .set(worker, cpu, 0)
                    .map_err(|e| map_error(CPUS_MAP, "writing", e))?;
            }
        }
        // The configuration goes last: until it is written the program defers to the kernel.
        let mut cfg: Array<MapData, [u8; SIZEOF_stator_rp_cfg]> =
            Array::try_from(take_map(&mut ebpf, CFG_MAP)?)
                .map_err(|e| map_error(CFG_MAP, "opening", e))?;
        cfg.set(0, cfg_bytes(&table, opts.cpus.is_some()), 0)
            .map_err(|e| map_error(CFG_MAP, "writing", e))?;
        let program: &mut SkReuseport = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| SteerError::Load {
                source: format!("the object has no program {PROGRAM_NAME}").into(),
                hint: "",
            })?
            .try_into()
            .map_err(program_error)?;
        // A signal during verification makes the kernel answer EAGAIN: load again.
        stator_sys::retry_interrupted(|| program.load(), load_errno).map_err(program_error)?;
        // Every slot of a new socket array is empty: a worker without a socket is skipped.
        Ok(Self {
            ebpf,
            socks,
            table_map,
            counters,
            table,
        })
    }

    /// Puts `socket` — the worker's own `SO_REUSEPORT` socket, bound (UDP) or listening (TCP) —
    /// into the worker's slot of the socket array. The kernel empties the slot by itself when
    /// the socket closes.
    ///
    /// # Errors
    /// [`SteerError::UnknownWorker`] for an id at or above the capacity; [`SteerError::Map`]
    /// when the kernel refuses the socket (not bound with `SO_REUSEPORT`, a TCP socket not yet
    /// listening, or a socket already in another steering group).
    pub fn set_socket(&mut self, worker: u32, socket: impl AsFd) -> Result<()> {
        self.check_worker(worker)?;
        self.socks
            .set(worker, &socket.as_fd(), 0)
            .map_err(|e| SteerError::Map {
                map: SOCKS_MAP,
                op: format!("putting worker {worker}'s socket into"),
                detail: chain(&e),
                source: Box::new(e),
                hint: " (the socket must have SO_REUSEPORT, be bound — and listening, for TCP \
                        — and belong to no other steering group)",
            })
    }

    /// Empties the worker's slot of the socket array (closing the socket does the same).
    ///
    /// # Errors
    /// [`SteerError::UnknownWorker`], or [`SteerError::Map`] when the kernel refuses.
    pub fn clear_socket(&mut self, worker: u32) -> Result<()> {
        self.check_worker(worker)?;
        match self.socks.clear_index(&worker) {
            Ok(()) => Ok(()),
            // already empty
            Err(MapError::KeyNotFound) => Ok(()),
            Err(MapError::SyscallError(e)) if e.io_error.kind() == std::io::ErrorKind::NotFound => {
                Ok(())
            }
            Err(e) => Err(map_error(SOCKS_MAP, "clearing", e)),
        }
    }

    /// Attaches the program to the `SO_REUSEPORT` group of `socket` (`SO_ATTACH_REUSEPORT_EBPF`;
    /// any bound socket of the group will do). It replaces whatever program the group had.
    ///
    /// # Errors
    /// [`SteerError::Attach`] when the socket has no reuseport group.
    pub fn attach(&mut self, socket: impl AsFd) -> Result<()> {
        let program: &mut SkReuseport = self
            .ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| SteerError::Load {
                source: format!("the object has no program {PROGRAM_NAME}").into(),
                hint: "",
            })?
            .try_into()
            .map_err(program_error)?;
        program.attach(socket).map_err(|e| SteerError::Attach {
            op: "attaching",
            detail: chain(&e),
            source: Box::new(e),
        })
    }

    /// Removes whatever program the group of `socket` has (`SO_DETACH_REUSEPORT_BPF`): the
    /// kernel's own 4-tuple hash picks sockets again.
    ///
    /// # Errors
    /// [`SteerError::Attach`] when the group has no program or the socket no group.
    pub fn detach(socket: impl AsFd) -> Result<()> {
        SkReuseport::detach(socket).map_err(|e| SteerError::Attach {
            op: "detaching",
            detail: chain(&e),
            source: Box::new(e),
        })
    }

    /// Rebuilds the table over the `live` workers and rewrites the slots that changed, one
    /// 32-bit store each: a slot moves once from its old worker to its new one, so a client
    /// never flaps between them. With Maglev's table a worker that leaves gives up only its own
    /// slots (its clients spread over the others), and one that comes back takes exactly those
    /// slots again; no other client moves.
    ///
    /// To retire a worker without dropping its pending connections, call this first and close
    /// its socket after: the requests in its accept queue then migrate to the workers that now
    /// own their clients (docs/steering.md).
    ///
    /// # Errors
    /// [`SteerError::UnknownWorker`] for an id at or above the capacity; [`SteerError::Map`] when
    /// a write fails (the slots written so far keep their new workers; calling again with the
    /// same set finishes the change).
    pub fn set_workers(&mut self, live: &[u32]) -> Result<WorkersChange> {
        let next = self.table.with_live(live)?;
        // After a failed call `self.table` is still the old table, so calling again rewrites
        // every changed slot (some of them a second time, harmlessly).
        let changes = next.delta(&self.table)?;
        for change in &changes {
            self.table_map
                .set(change.index, change.id, 0)
                .map_err(|e| {
                    map_error(TABLE_MAP, &format!("writing slot {} of", change.index), e)
                })?;
        }
        let previous = std::mem::replace(&mut self.table, next);
        Ok(WorkersChange { changes, previous })
    }

    /// The program's counters, summed over CPUs.
    ///
    /// # Errors
    /// [`SteerError::Map`] when the map cannot be read.
    pub fn counters(&self) -> Result<SteerCounters> {
        let mut out = SteerCounters::default();
        for counter in RpCounter::ALL {
            let per_cpu = self
                .counters
                .get(&counter.index(), 0)
                .map_err(|e| map_error(COUNTERS_MAP, "reading", e))?;
            out.values[counter.index() as usize] = per_cpu.iter().copied().sum();
        }
        Ok(out)
    }

    /// The program's counters on each CPU (index = CPU): where each decision ran.
    ///
    /// # Errors
    /// [`SteerError::Map`] when the map cannot be read.
    pub fn counters_per_cpu(&self) -> Result<Vec<SteerCounters>> {
        let mut out: Vec<SteerCounters> = Vec::new();
        for counter in RpCounter::ALL {
            let per_cpu = self
                .counters
                .get(&counter.index(), 0)
                .map_err(|e| map_error(COUNTERS_MAP, "reading", e))?;
            if out.len() < per_cpu.len() {
                out.resize(per_cpu.len(), SteerCounters::default());
            }
            for (cpu, v) in per_cpu.iter().enumerate() {
                out[cpu].values[counter.index() as usize] = *v;
            }
        }
        Ok(out)
    }

    /// The kernel's statistics of the program (run time, runs, verified size).
    ///
    /// # Errors
    /// [`SteerError::Load`] when the program's information cannot be read.
    pub fn program_stats(&self) -> Result<ProgramStats> {
        let program: &SkReuseport = self
            .ebpf
            .program(PROGRAM_NAME)
            .ok_or_else(|| SteerError::Load {
                source: format!("the object has no program {PROGRAM_NAME}").into(),
                hint: "",
            })?
            .try_into()
            .map_err(program_error)?;
        let info = program.info().map_err(program_error)?;
        Ok(ProgramStats {
            runs: info.run_count(),
            run_time: info.run_time(),
            verified_instructions: info.verified_instruction_count(),
        })
    }

    /// The table the program uses, for predicting its choices ([`SteeringTable::pick`]).
    pub fn table(&self) -> &SteeringTable {
        &self.table
    }

    /// The Toeplitz key (pass it to a new load to keep clients where they are).
    pub fn key(&self) -> RssKey {
        self.table.key()
    }

    fn check_worker(&self, worker: u32) -> Result<()> {
        if worker >= self.table.workers() {
            return Err(SteerError::UnknownWorker {
                worker,
                workers: self.table.workers(),
            });
        }
        Ok(())
    }
}

/// The OS error of a failed program load, for [`stator_sys::retry_interrupted`].
pub(crate) fn load_errno(e: &ProgramError) -> Option<i32> {
    match e {
        ProgramError::LoadError { io_error, .. } => io_error.raw_os_error(),
        _ => None,
    }
}

/// `struct stator_rp_cfg` as bytes, fields at the offsets the C header gives (also the
/// receive-steering program's configuration, with `cpu` false and the address alone hashed).
pub(crate) fn cfg_bytes(table: &SteeringTable, cpu: bool) -> [u8; SIZEOF_stator_rp_cfg] {
    let mut b = [0u8; SIZEOF_stator_rp_cfg];
    let mut flags = match table.fields() {
        HashFields::Addr => 0,
        HashFields::AddrPort => STATOR_RP_F_PORT,
    };
    if cpu {
        flags |= STATOR_RP_F_CPU;
    }
    b[OFFSETOF_stator_rp_cfg_key..OFFSETOF_stator_rp_cfg_key + 40]
        .copy_from_slice(table.key().bytes());
    let mut put = |off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put(OFFSETOF_stator_rp_cfg_table_size, table.size());
    put(OFFSETOF_stator_rp_cfg_flags, flags);
    put(OFFSETOF_stator_rp_cfg_workers, table.workers());
    b
}

fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map> {
    ebpf.take_map(name).ok_or_else(|| SteerError::Load {
        source: format!("the object has no map {name}").into(),
        hint: "",
    })
}

pub(crate) fn is_eperm(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.raw_os_error() == Some(1)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

fn load_error(e: EbpfError) -> SteerError {
    let hint = if is_eperm(&e) { ROOT_HINT } else { "" };
    SteerError::Load {
        source: chain(&e).into(),
        hint,
    }
}

fn program_error(e: ProgramError) -> SteerError {
    let hint = if is_eperm(&e) { ROOT_HINT } else { "" };
    let source: Box<dyn std::error::Error + Send + Sync> = match e {
        // the verifier's log says why; keep its tail in the message
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("{io_error}; verifier log (tail):\n{}", tail.join("\n")).into()
        }
        other => chain(&other).into(),
    };
    SteerError::Load { source, hint }
}

fn map_error(map: &'static str, op: &str, source: MapError) -> SteerError {
    let hint = if is_eperm(&source) { ROOT_HINT } else { "" };
    SteerError::Map {
        map,
        op: op.to_owned(),
        detail: chain(&source),
        source: Box::new(source),
        hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stator_abi::RpCfg;

    /// The proxy keeps a group in its listener, which moves between threads.
    #[test]
    fn a_group_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<ReuseportSteering>();
        send_sync::<crate::SteeringTable>();
    }

    #[test]
    fn cfg_bytes_follow_the_header_layout() {
        let table = SteeringTable::new(5, 1009, RssKey::microsoft(), HashFields::AddrPort).unwrap();
        let b = cfg_bytes(&table, false);
        let cfg = RpCfg {
            key: *RssKey::microsoft().bytes(),
            table_size: 1009,
            flags: STATOR_RP_F_PORT,
            workers: 5,
            _pad0: 0,
        };
        let mut want = Vec::new();
        want.extend_from_slice(&cfg.key);
        want.extend_from_slice(&cfg.table_size.to_ne_bytes());
        want.extend_from_slice(&cfg.flags.to_ne_bytes());
        want.extend_from_slice(&cfg.workers.to_ne_bytes());
        want.extend_from_slice(&cfg._pad0.to_ne_bytes());
        assert_eq!(b.as_slice(), want.as_slice());
    }

    #[test]
    fn counters_subtract_and_print_labels() {
        let mut a = SteerCounters::default();
        a.values[RpCounter::SelectOwn.index() as usize] = 10;
        a.values[RpCounter::SelectProbe.index() as usize] = 3;
        let mut b = a;
        b.values[RpCounter::SelectOwn.index() as usize] = 15;
        let d = b.since(&a);
        assert_eq!(d.get(RpCounter::SelectOwn), 5);
        assert_eq!(d.get(RpCounter::SelectProbe), 0);
        assert_eq!(b.runs(), 18);
        assert!(
            b.to_string().contains("select_own=15 select_probe=3"),
            "{b}"
        );
    }

    #[test]
    fn the_object_carries_the_program() {
        // The ELF parses and names the program and the four maps (no kernel needed).
        let obj = aya_obj_names(OBJECT);
        for name in [PROGRAM_NAME, CFG_MAP, SOCKS_MAP, TABLE_MAP, COUNTERS_MAP] {
            assert!(obj.iter().any(|n| n == name), "{name} missing from {obj:?}");
        }
    }

    /// Symbol names of the object (a crude ELF symbol scan: enough to see the names).
    fn aya_obj_names(object: &[u8]) -> Vec<String> {
        object
            .split(|&b| b == 0)
            .filter_map(|s| std::str::from_utf8(s).ok())
            .filter(|s| s.starts_with("stator_"))
            .map(str::to_owned)
            .collect()
    }
}
