//! The experiments on real Linux (namespaces, real TCP), one folder or file per experiment.
pub mod lvs_cluster;
