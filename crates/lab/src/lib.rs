//! # netsched-lab — `netsched lab`: the papers' experiments, simulated and real

pub mod cli;
pub mod experiments;
