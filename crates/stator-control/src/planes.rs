//! The data plane `dataplane.mode` names: XDP ([`XdpPlane`]), AF_XDP ([`AfxdpPlane`]) or none
//! ([`NoPlane`]), loaded but not attached.

use stator_config::DataplaneMode;
use stator_plane::DataPlane;
use stator_plane::noplane::NoPlane;

use crate::afxdp::AfxdpPlane;
use crate::error::ControlError;
use crate::xdp::XdpPlane;

impl XdpPlane {
    pub(crate) fn into_boxed(self) -> Box<dyn DataPlane> {
        Box::new(self)
    }
}

/// The data plane `dataplane.mode` names, loaded (not attached).
pub fn load(config: &stator_config::Config) -> Result<Box<dyn DataPlane>, ControlError> {
    match config.dataplane.mode {
        DataplaneMode::Xdp => {
            let mut p = XdpPlane::load(&XdpPlane::options(config))?;
            p.start_holder(XdpPlane::hold_limits(config))?;
            Ok(p.into_boxed())
        }
        DataplaneMode::Afxdp => {
            let (xdp, cfg) = AfxdpPlane::options(config);
            Ok(AfxdpPlane::load(&xdp, cfg)?.into_boxed())
        }
        DataplaneMode::None => Ok(Box::new(NoPlane::default())),
    }
}
