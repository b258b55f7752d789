//! Real-traffic runs of experiments whose data plane lives in a crate that depends on the lab's
//! scenarios (so the run cannot live in that crate without a dependency cycle).

pub mod vm_delay;
