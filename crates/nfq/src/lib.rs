//! # netsched-nfq — P0 on real Linux
//!
//! - [`daemon`]: `netsched nfq`, the percentile scheduler on the NFQUEUE packet path
//! - [`ctl`]: `netsched ctl`, the thesis's control API over a local socket
//! - [`experiment`]: `netsched lab run percentile-web --real`

pub mod ctl;
pub mod daemon;
pub mod experiment;
