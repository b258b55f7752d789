//! Load balancers with Linux IPVS semantics (P4).
