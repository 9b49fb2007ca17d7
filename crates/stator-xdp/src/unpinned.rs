//! A BPF object of this crate's loaded with fresh, unpinned maps, for what runs beside the
//! forwarder rather than as the data plane: the benchmarks' baselines, kernel-repeat wrapper,
//! live-frames generator and sink (`stator-bench`). It hands out what those need — program
//! descriptors, maps by name, a [`BenchFrame`] record written safely, an attachment — so the
//! harnesses live outside this crate without reaching into its loader or its `unsafe`.

use std::path::Path;

use aya::Ebpf;
use aya::maps::{Array, Map};
use aya::programs::{ProgramFd, Xdp};
use stator_abi::BenchFrame;

use crate::attach::{Attachment, attach_loaded};
use crate::error::{Result, XdpError};
use crate::forwarder::{load_unpinned, program_fd};
use crate::options::AttachMode;
use crate::sys::Rec;

/// An object's XDP programs, loaded (verified) with their own maps; nothing pinned but the
/// links [`UnpinnedObject::attach`] makes, which the caller removes. Dropping it unloads all.
pub struct UnpinnedObject {
    ebpf: Ebpf,
    name: &'static str,
}

impl std::fmt::Debug for UnpinnedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnpinnedObject")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl UnpinnedObject {
    /// Loads the ELF `object` (one of [`crate::objects`], called `name` in errors) and each
    /// of its XDP `programs`. Needs root.
    pub fn load(object: &[u8], name: &'static str, programs: &[&str]) -> Result<Self> {
        Ok(Self {
            ebpf: load_unpinned(object, name, programs)?,
            name,
        })
    }

    /// The descriptor of loaded program `program` (for `BPF_PROG_TEST_RUN`, a program array).
    pub fn program_fd(&self, program: &str) -> Option<&ProgramFd> {
        program_fd(&self.ebpf, program)
    }

    /// Loaded program `program`, to attach it or duplicate its descriptor.
    pub fn program_mut(&mut self, program: &str) -> Option<&mut Xdp> {
        self.ebpf.program_mut(program)?.try_into().ok()
    }

    /// Map `map` of the object, to open as a typed aya map; a missing one is
    /// [`XdpError::Load`].
    pub fn map_mut(&mut self, map: &'static str) -> Result<&mut Map> {
        let object = self.name;
        self.ebpf.map_mut(map).ok_or_else(|| XdpError::Load {
            object: object.into(),
            source: format!("map {map} missing").into(),
        })
    }

    /// Writes `frame` as element 0 of array map `map` (whose values are
    /// `struct stator_bench_frame`).
    pub fn set_bench_frame(&mut self, map: &'static str, frame: BenchFrame) -> Result<()> {
        let object = self.name;
        Array::<_, Rec<BenchFrame>>::try_from(self.map_mut(map)?)
            .map_err(|e| XdpError::map(object, "open the frame map", e))?
            .set(0, Rec(frame), 0)
            .map_err(|e| XdpError::map(object, "set the frame", e))
    }

    /// Attaches `program` to `iface` (native mode, calling thread's namespace), its link
    /// pinned as `<pin_path>/link_<iface>` (an existing link there gets this program instead).
    pub fn attach(&mut self, program: &str, pin_path: &Path, iface: &str) -> Result<Attachment> {
        attach_loaded(
            &mut self.ebpf,
            program,
            pin_path,
            iface,
            AttachMode::Native,
            |_| Vec::new(),
        )
    }
}
