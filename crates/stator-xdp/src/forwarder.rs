//! The loaded forwarder: program + pinned maps, and what the controller does with them.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use aya::programs::{ProgramError, ProgramFd, Xdp};
use aya::{Ebpf, EbpfLoader};
use stator_abi::{
    Beat, Probe, STATOR_FAMILY_NONE, STATOR_PROBE_ETHERTYPE, STATOR_PROBE_F_CFG,
    STATOR_PROBE_F_VADDR, STATOR_PROBE_MAGIC,
};
use stator_core::{Snapshot, ValidSnapshot};

use crate::clock::{self, ProgramClock};
use crate::ct4;
use crate::error::{Result, XdpError, log_tail};
use crate::maps::{Maps, check_pins};
use crate::objects;
use crate::options::{ConntrackMode, XdpOptions};
use crate::program::{addr_bytes, encode};
use crate::sys;
use crate::testrun::{TestRunOpts, TestRunOutput, run_xdp};

/// Name of the forwarder's XDP program in its object.
pub const PROGRAM_NAME: &str = "stator_fwd";

/// The forwarder's tail-called programs by `stator_progs` index (docs/forwarding.md §9, §10.2):
/// a fragment, a first fragment decided here, a redirect's inner packet.
pub const TAIL_PROGRAMS: [(u32, &str); 3] = [
    (stator_abi::STATOR_TAIL_FRAG, "stator_fragment"),
    (stator_abi::STATOR_TAIL_FIRST, "stator_first"),
    (stator_abi::STATOR_TAIL_INNER, "stator_inner"),
];

/// What [`Forwarder::commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitReport {
    /// The generation (0 or 1) packets use now.
    pub active_gen: u32,
    /// `Snapshot::generation` of the committed snapshot.
    pub config_generation: u64,
    /// VIPs, reals and Maglev slots written.
    pub vips: usize,
    /// Reals written.
    pub reals: usize,
    /// Slots written.
    pub slots: u32,
    /// Time to write the inactive half.
    pub write_time: Duration,
    /// Time waiting for the grace period after the flip.
    pub grace_time: Duration,
}

/// The answer of [`Forwarder::self_test`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfTest {
    /// The generation the program read.
    pub active_gen: u32,
    /// The config generation of that half.
    pub config_generation: u64,
    /// Whether an address of the active snapshot was probed and found.
    pub vaddr_checked: bool,
    /// How long the test run took (program only, as the kernel measured it).
    pub run_ns: u32,
}

/// Stator's XDP forwarder, loaded: the program (not necessarily attached anywhere) and its
/// pinned maps.
#[derive(Debug)]
pub struct Forwarder {
    pub(crate) ebpf: Ebpf,
    /// The XDP program attached to interfaces: `stator_fwd`, or `stator_xsk` for the AF_XDP
    /// plane ([`Forwarder::load_xsk`]).
    pub(crate) program: &'static str,
    pub(crate) maps: Maps,
    pub(crate) opts: XdpOptions,
    clock: ProgramClock,
    nonce: AtomicU32,
}

impl Forwarder {
    /// Loads the forwarder: creates the pin directory, checks that maps already pinned there
    /// have this build's layout (then reuses them: connection table, counters and the active
    /// generation survive a restart), loads and verifies the program, and maps the arrays.
    pub fn load(opts: &XdpOptions) -> Result<Self> {
        Self::load_object(opts, forwarder_object(opts), PROGRAM_NAME, &[], None)
    }

    /// [`Forwarder::load`] with the program's clock given instead of measured (tests: a clock
    /// with a known offset shows in every stamp; [`ProgramClock::HELPER`] keeps the helper).
    pub fn load_with_clock(opts: &XdpOptions, clock: ProgramClock) -> Result<Self> {
        Self::load_object(opts, forwarder_object(opts), PROGRAM_NAME, &[], Some(clock))
    }

    /// Loads another compiled `stator_fwd` object (a build of `bpf/stator_fwd.bpf.c` for the
    /// same ABI) as [`Forwarder::load`] does: for benchmarks that compare two builds of the
    /// program in one sitting (`stator bench xdp --object`). Pinned maps of another layout are
    /// refused the same way.
    pub fn load_from(opts: &XdpOptions, object: &[u8]) -> Result<Self> {
        Self::load_object(opts, object, PROGRAM_NAME, &[], None)
    }

    /// Loads XDP program `program` of `object` (and its `extra` programs) over the
    /// forwarder's pinned maps, as [`Forwarder::load`] describes, with `clock` (`None`:
    /// [`ProgramClock::for_load`]) written into the object's clock parameters (an object
    /// without them, such as an older build measured by `--object`, ignores it).
    pub(crate) fn load_object(
        opts: &XdpOptions,
        object: &[u8],
        program: &'static str,
        extra: &[&str],
        clock: Option<ProgramClock>,
    ) -> Result<Self> {
        if !sys::is_root() {
            return Err(XdpError::NotRoot {
                what: "loading the XDP forwarder".into(),
            });
        }
        opts.validate()?;
        let clock = clock.unwrap_or_else(ProgramClock::for_load);
        crate::bpffs::ensure_bpffs(&opts.pin_path)?;
        std::fs::create_dir_all(&opts.pin_path).map_err(|e| {
            XdpError::io(
                format!("creating pin directory {}", opts.pin_path.display()),
                e,
            )
        })?;
        let slots = opts
            .slots_per_gen
            .checked_mul(2)
            .ok_or(XdpError::InvalidOptions {
                reason: "slots_per_gen too large".into(),
            })?;
        let ct4 = ct4::Geometry::for_load(opts, sys::possible_cpus()?)?;
        let legacy_until = ct4::legacy_until_ns(&opts.pin_path, &ct4, crate::monotonic_coarse_ns());
        check_pins(
            object,
            &opts.pin_path,
            &[
                ("stator_ct", opts.ct_entries),
                (ct4::MAP, ct4.max_entries),
                ("stator_slots", slots),
                ("stator_frag", opts.frag_entries),
                ("stator_hold", opts.hold_ring),
            ],
        )?;
        let mut ebpf = EbpfLoader::new()
            .default_map_pin_directory(&opts.pin_path)
            .map_max_entries("stator_ct", opts.ct_entries)
            .map_max_entries(ct4::MAP, ct4.max_entries)
            .map_max_entries("stator_slots", slots)
            .map_max_entries("stator_frag", opts.frag_entries)
            .map_max_entries("stator_hold", opts.hold_ring)
            .override_global(clock::TICK_GLOBAL, &clock.tick_ns(), false)
            .override_global(clock::BASE_GLOBAL, &clock.base_ns(), false)
            .override_global(ct4::BUCKETS_GLOBAL, &ct4.buckets, false)
            .override_global(ct4::LEGACY_GLOBAL, &legacy_until, false)
            .load(object)
            .map_err(|e| XdpError::Load {
                object: "stator_fwd".into(),
                source: Box::new(e),
            })?;
        load_xdp(&mut ebpf, program)?;
        for p in extra {
            load_xdp(&mut ebpf, p)?;
        }
        if program == PROGRAM_NAME {
            // the rare paths of the decision, tail-called (docs/xdp.md)
            load_tail_programs(&mut ebpf)?;
        }
        if ct4.buckets != 0 {
            tracing::info!(
                buckets_per_cpu = ct4.buckets,
                mib = ct4.bytes() >> 20,
                upgrade_window_s =
                    legacy_until.saturating_sub(crate::monotonic_coarse_ns()) / 1_000_000_000,
                "IPv4 connection table: stator_ct4, 4-way buckets on every CPU"
            );
        }
        let maps = Maps::open(&opts.pin_path)?;
        maps.ctl
            .set_fib_cache_us(opts.fib_cache.map_or(0, |d| d.as_micros() as u32));
        Ok(Self {
            ebpf,
            program,
            maps,
            opts: opts.clone(),
            clock,
            nonce: AtomicU32::new(1),
        })
    }

    /// The options it was loaded with.
    pub fn options(&self) -> &XdpOptions {
        &self.opts
    }

    /// How the program reads the time.
    pub fn clock(&self) -> ProgramClock {
        self.clock
    }

    /// The maps (counters, connection table, tx ports, …).
    pub fn maps(&self) -> &Maps {
        &self.maps
    }

    /// The program's file descriptor (for BPF_PROG_TEST_RUN or a tail call).
    pub fn program(&self) -> &ProgramFd {
        program_fd(&self.ebpf, self.program).expect("the program is loaded by Forwarder::load")
    }

    /// A duplicate of the program's file descriptor, for another thread.
    pub fn program_fd_owned(&self) -> Result<OwnedFd> {
        self.program()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| XdpError::io("duplicating the program fd", e))
    }

    /// Runs the program once over `frame` (BPF_PROG_TEST_RUN).
    pub fn test_run(&self, frame: &[u8], opts: TestRunOpts) -> Result<TestRunOutput> {
        run_xdp(self.program(), frame, opts).map_err(|e| XdpError::io("BPF_PROG_TEST_RUN", e))
    }

    /// The generation packets use.
    pub fn active_generation(&self) -> u32 {
        self.maps.active_generation()
    }

    /// Makes `snap` the configuration every packet sees, in one step: encodes it (refusing only
    /// what the maps have no room for), writes it completely into the inactive generation,
    /// flips `stator_ctl.active_gen` with one atomic store, then waits for an RCU grace period
    /// (`membarrier(MEMBARRIER_CMD_GLOBAL)`) so that no packet still uses the old half when the
    /// next commit overwrites it. On error the active generation is untouched.
    pub fn commit(&mut self, snap: &ValidSnapshot) -> Result<CommitReport> {
        let start = Instant::now();
        let next = self.maps.active_generation() ^ 1;
        let enc = encode(snap, next, self.maps.slots_per_gen())?;
        self.maps.write_generation(next, &enc)?;
        let written = Instant::now();
        self.maps.ctl.set_active_gen(next);
        if sys::membarrier_global().is_err() {
            // nohz_full kernels refuse MEMBARRIER_CMD_GLOBAL: wait far longer than any XDP
            // invocation instead (not a proof, documented in docs/xdp.md).
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(CommitReport {
            active_gen: next,
            config_generation: snap.generation,
            vips: enc.vips.len(),
            reals: enc.reals.len(),
            slots: enc.slots_used,
            write_time: written - start,
            grace_time: written.elapsed(),
        })
    }

    /// The active configuration read back from the maps (`None` if nothing was ever
    /// committed). After a restart this is what the previous run committed: the controller
    /// keeps its real ids, so pinned connection-table entries stay meaningful.
    pub fn active_snapshot(&self) -> Result<Option<Snapshot>> {
        self.maps.active_snapshot()
    }

    /// Commits an empty snapshot with default node parameters unless something is active.
    pub fn ensure_programmed(&mut self) -> Result<bool> {
        if self.active_snapshot()?.is_some() {
            return Ok(false);
        }
        self.commit(&ValidSnapshot::empty())?;
        Ok(true)
    }

    /// Turns the next-hop cache on (`Some(lifetime)`) or off (`None`: a FIB lookup for every
    /// packet), effective for the next packet.
    pub fn set_fib_cache(&mut self, lifetime: Option<Duration>) -> Result<()> {
        let opts = XdpOptions {
            fib_cache: lifetime,
            ..self.opts.clone()
        };
        opts.validate()?;
        self.maps
            .ctl
            .set_fib_cache_us(lifetime.map_or(0, |d| d.as_micros() as u32));
        self.opts = opts;
        Ok(())
    }

    /// Writes the controller's heartbeat (`stator_beat[0]`, docs/forwarding.md §3.2): from the
    /// next packet on, VIP traffic is passed (counted `stale_pass`) while `now` is more than
    /// `beat.stale_after_ns` past `beat.refreshed_ns`; a `stale_after_ns` of 0 turns the check
    /// off. Times are CLOCK_MONOTONIC_COARSE nanoseconds ([`crate::monotonic_coarse_ns`]), the
    /// program's clock. Fails only under maps pinned by a build without the heartbeat.
    pub fn set_beat(&self, beat: Beat) -> Result<()> {
        match &self.maps.beat {
            Some(m) => {
                m.store(beat);
                Ok(())
            }
            None => Err(XdpError::NotLoaded {
                pin_path: self.opts.pin_path.join("stator_beat"),
            }),
        }
    }

    /// The heartbeat the program reads (`None` under maps of a build without it).
    pub fn beat(&self) -> Option<Beat> {
        self.maps.beat.as_ref().map(sys::MmapArray::load)
    }

    /// Sets (`Some`) or clears (`None`) the test clock the program uses instead of the kernel
    /// clock. Tests only.
    pub fn set_test_clock(&self, ns: Option<u64>) {
        self.maps.ctl.set_test_clock(ns.unwrap_or(0));
    }

    /// Lets the program redirect to interface `ifindex`.
    pub fn add_tx_port(&mut self, ifindex: u32) -> Result<()> {
        self.maps
            .tx_ports
            .insert(ifindex, ifindex, None, 0)
            .map_err(|e| XdpError::map("stator_tx_ports", "update", e))
    }

    /// Removes interface `ifindex` from the redirect targets.
    pub fn remove_tx_port(&mut self, ifindex: u32) -> Result<()> {
        self.maps
            .tx_ports
            .remove(ifindex)
            .map_err(|e| XdpError::map("stator_tx_ports", "delete", e))
    }

    /// Proves the program, its maps and the active generation answer: runs a self-test probe
    /// frame (ethertype 0x88B5, `struct stator_probe`) through BPF_PROG_TEST_RUN on the
    /// loopback device and checks that the program read the active generation from
    /// `stator_ctl`, found `stator_cfg` of that generation programmed with the config
    /// generation user space sees, and (when the active snapshot has a VIP) found its address
    /// in `stator_vtab`. The probe counts only in `self_test` and `act_pass`; no traffic
    /// counter, connection-table entry or flood window is touched.
    pub fn self_test(&self) -> Result<SelfTest> {
        let fail = |reason: String| XdpError::SelfTest { reason };
        let active = self.maps.active_generation();
        let cfg = self.maps.node_cfg(active);
        let snap = self.maps.read_generation(active)?;
        let addr = snap
            .as_ref()
            .and_then(|s| s.vips.keys().next().map(|k| addr_bytes(k.addr)));
        let nonce = self.nonce.fetch_add(1, Ordering::Relaxed);
        let probe = Probe {
            magic: STATOR_PROBE_MAGIC,
            nonce,
            addr: addr.map_or([0; 16], |a| a.0),
            family: addr.map_or(STATOR_FAMILY_NONE as u8, |a| a.1),
            ..Probe::default()
        };
        let mut frame = vec![0u8; 14];
        frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xfe]);
        frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xff]);
        frame[12..14].copy_from_slice(&(STATOR_PROBE_ETHERTYPE as u16).to_be_bytes());
        frame.extend_from_slice(&probe.to_bytes());
        let out = self.test_run(&frame, TestRunOpts::default())?;
        if out.action != 2 {
            return Err(fail(format!(
                "probe returned XDP action {}, not PASS",
                out.action
            )));
        }
        let answer = Probe::from_bytes(out.data.get(14..).unwrap_or(&[]))
            .ok_or_else(|| fail("probe frame came back truncated".into()))?;
        if answer.magic != STATOR_PROBE_MAGIC || answer.answer != !nonce {
            return Err(fail(
                "the program did not answer the probe (is this Stator's forwarder?)".into(),
            ));
        }
        if answer.active_gen != active {
            return Err(fail(format!(
                "the program reads generation {}, user space sees {active}",
                answer.active_gen
            )));
        }
        if answer.result & STATOR_PROBE_F_CFG == 0 {
            return Err(fail(format!("generation {active} is not programmed")));
        }
        if answer.config_generation != cfg.config_generation {
            return Err(fail(format!(
                "the program sees config generation {}, user space {}",
                answer.config_generation, cfg.config_generation
            )));
        }
        if addr.is_some() && answer.result & STATOR_PROBE_F_VADDR == 0 {
            return Err(fail(format!(
                "a VIP address of generation {active} is missing from stator_vtab"
            )));
        }
        Ok(SelfTest {
            active_gen: answer.active_gen,
            config_generation: answer.config_generation,
            vaddr_checked: addr.is_some(),
            run_ns: out.duration_ns,
        })
    }
}

/// Loads the forwarder's tail-called programs and puts them into `stator_progs`, replacing
/// those of an earlier load (the map is pinned).
pub(crate) fn load_tail_programs(ebpf: &mut Ebpf) -> Result<()> {
    for (_, name) in TAIL_PROGRAMS {
        load_xdp(ebpf, name)?;
    }
    let fds: Vec<(u32, ProgramFd)> = TAIL_PROGRAMS
        .iter()
        .map(|&(i, name)| {
            let fd = program_fd(ebpf, name)
                .ok_or_else(|| XdpError::Load {
                    object: name.to_string(),
                    source: "loaded but has no fd".into(),
                })?
                .try_clone()
                .map_err(|e| XdpError::io("duplicating a program fd", e))?;
            Ok((i, fd))
        })
        .collect::<Result<_>>()?;
    let map = ebpf.map_mut("stator_progs").ok_or_else(|| XdpError::Load {
        object: "stator_fwd".into(),
        source: "no map stator_progs in the object".into(),
    })?;
    let mut progs = aya::maps::ProgramArray::try_from(map)
        .map_err(|e| XdpError::map("stator_progs", "opening", e))?;
    for (i, fd) in &fds {
        progs
            .set(*i, fd, 0)
            .map_err(|e| XdpError::map("stator_progs", "update", e))?;
    }
    Ok(())
}

/// Loads XDP program `name` of `ebpf`, turning a verifier rejection into a clear error.
pub(crate) fn load_xdp(ebpf: &mut Ebpf, name: &str) -> Result<()> {
    let prog: &mut Xdp = ebpf
        .program_mut(name)
        .ok_or_else(|| XdpError::Load {
            object: name.to_string(),
            source: format!("no program `{name}` in the object").into(),
        })?
        .try_into()
        .map_err(|e: ProgramError| XdpError::Load {
            object: name.to_string(),
            source: Box::new(e),
        })?;
    // A signal during verification makes the kernel answer EAGAIN: load again, as libbpf does.
    stator_sys::retry_interrupted(|| prog.load(), load_errno).map_err(|e| match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => XdpError::VerifierRejected {
            program: name.to_string(),
            log_tail: log_tail(&verifier_log.to_string(), 40),
            source: io_error,
        },
        other => XdpError::Load {
            object: name.to_string(),
            source: Box::new(other),
        },
    })
}

/// The OS error of a failed program load, for [`stator_sys::retry_interrupted`].
fn load_errno(e: &ProgramError) -> Option<i32> {
    match e {
        ProgramError::LoadError { io_error, .. } => io_error.raw_os_error(),
        _ => None,
    }
}

/// The embedded forwarder built for `opts.conntrack`.
fn forwarder_object(opts: &XdpOptions) -> &'static [u8] {
    match opts.conntrack {
        ConntrackMode::PerCpu => objects::FORWARDER,
        ConntrackMode::Shared => objects::FORWARDER_SHARED,
    }
}

/// Loads and verifies XDP program `program` of the ELF `object` without attaching it or
/// pinning anything (for tooling and tests). A rejection is [`XdpError::VerifierRejected`]
/// carrying the tail of the verifier log.
pub fn verify(object: &[u8], program: &str) -> Result<()> {
    load_unpinned(object, program, &[program]).map(drop)
}

/// Loads the ELF `object` (called `name` in errors) with fresh, unpinned maps and loads each
/// of its XDP `programs` into the kernel: what benchmarks, baselines and [`verify`] need.
pub(crate) fn load_unpinned(object: &[u8], name: &str, programs: &[&str]) -> Result<Ebpf> {
    if !sys::is_root() {
        return Err(XdpError::NotRoot {
            what: "loading BPF programs".into(),
        });
    }
    let mut ebpf = Ebpf::load(object).map_err(|e| XdpError::Load {
        object: name.to_string(),
        source: Box::new(e),
    })?;
    for p in programs {
        load_xdp(&mut ebpf, p)?;
    }
    Ok(ebpf)
}

/// The fd of loaded XDP program `name`.
pub(crate) fn program_fd<'a>(ebpf: &'a Ebpf, name: &str) -> Option<&'a ProgramFd> {
    let prog: &Xdp = ebpf.program(name)?.try_into().ok()?;
    prog.fd().ok()
}
