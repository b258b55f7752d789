//! [`AnyBalancer`]: the enum engines dispatch through (no boxed trait object per pick), and
//! [`BalancerConfig`], its serde form (TOML/JSON `kind = "wlc"`, options beside it).

use super::hashing::{DestinationHash, SourceHash, DEFAULT_TABLE_BITS};
use super::leastconn::{
    LeastConn, NeverQueue, Overflow, ShortestExpectedDelay, WeightedFailover, WeightedLeastConn,
};
use super::locality::{
    LocalityLeastConn, LocalityLeastConnReplicated, DEFAULT_EXPIRATION, DEFAULT_MAX_ENTRIES,
};
use super::maglev::{Maglev, DEFAULT_TABLE_SIZE};
use super::random::{LeastRequestP2c, TwoChoices};
use super::rr::{RoundRobin, WeightedRoundRobin};
use super::{Balancer, BalancerConfigError, FlowKey, ServerId, ServerTable};
use crate::rng::SplitMix64;
use crate::time::{Duration, Instant};
use crate::MS;
use serde::{Deserialize, Serialize};

fn default_expiration_ms() -> u64 {
    DEFAULT_EXPIRATION / MS
}
fn default_max_entries() -> usize {
    DEFAULT_MAX_ENTRIES
}
fn default_active_weight() -> u32 {
    256
}
fn default_table_bits() -> u32 {
    DEFAULT_TABLE_BITS
}
fn default_table_size() -> u32 {
    DEFAULT_TABLE_SIZE
}

/// Configuration of a balancer, as written in scenario files. Names are the `ipvsadm -s`
/// scheduler names, plus `least_request` (power of two choices on outstanding requests;
/// `p2c` is read as its other name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BalancerConfig {
    Rr {},
    Wrr {},
    Lc {},
    Wlc {},
    Sed {},
    Nq {},
    Fo {},
    Ovf {},
    Lblc {
        #[serde(default = "default_expiration_ms")]
        expiration_ms: u64,
        #[serde(default = "default_max_entries")]
        max_entries: usize,
        /// Overhead of an active connection in inactive ones when lblc picks a new server:
        /// 256 (`ip_vs_dest_conn_overhead`), or 50 as in Linux 2.4/2.6 `ip_vs_lblc.c`.
        #[serde(default = "default_active_weight")]
        active_weight: u32,
    },
    Lblcr {
        #[serde(default = "default_expiration_ms")]
        expiration_ms: u64,
        #[serde(default = "default_max_entries")]
        max_entries: usize,
    },
    Dh {
        #[serde(default = "default_table_bits")]
        table_bits: u32,
    },
    Sh {
        #[serde(default = "default_table_bits")]
        table_bits: u32,
        #[serde(default)]
        fallback: bool,
        #[serde(default)]
        use_port: bool,
    },
    Mh {
        #[serde(default = "default_table_size")]
        table_size: u32,
        #[serde(default)]
        fallback: bool,
        #[serde(default)]
        use_port: bool,
    },
    Twos {},
    /// Also read as `p2c`, the common name of power-of-two-choices (tower, Envoy docs).
    #[serde(alias = "p2c")]
    LeastRequest {},
}

crate::kinds::kinds! {
    /// Every balancer kind, named as `kind = "..."` reads it. Adding a [`BalancerConfig`]
    /// variant fails to compile until it has a kind here, and a kind fails to compile until
    /// the property tests and benches (exhaustive matches over `BalancerKind`) cover it.
    pub enum BalancerKind {
        Rr => "rr",
        Wrr => "wrr",
        Lc => "lc",
        Wlc => "wlc",
        Sed => "sed",
        Nq => "nq",
        Fo => "fo",
        Ovf => "ovf",
        Lblc => "lblc",
        Lblcr => "lblcr",
        Dh => "dh",
        Sh => "sh",
        Mh => "mh",
        Twos => "twos",
        LeastRequest => "least_request",
    }
}

impl BalancerConfig {
    /// Which kind this is.
    pub fn kind(&self) -> BalancerKind {
        match self {
            BalancerConfig::Rr {} => BalancerKind::Rr,
            BalancerConfig::Wrr {} => BalancerKind::Wrr,
            BalancerConfig::Lc {} => BalancerKind::Lc,
            BalancerConfig::Wlc {} => BalancerKind::Wlc,
            BalancerConfig::Sed {} => BalancerKind::Sed,
            BalancerConfig::Nq {} => BalancerKind::Nq,
            BalancerConfig::Fo {} => BalancerKind::Fo,
            BalancerConfig::Ovf {} => BalancerKind::Ovf,
            BalancerConfig::Lblc { .. } => BalancerKind::Lblc,
            BalancerConfig::Lblcr { .. } => BalancerKind::Lblcr,
            BalancerConfig::Dh { .. } => BalancerKind::Dh,
            BalancerConfig::Sh { .. } => BalancerKind::Sh,
            BalancerConfig::Mh { .. } => BalancerKind::Mh,
            BalancerConfig::Twos {} => BalancerKind::Twos,
            BalancerConfig::LeastRequest {} => BalancerKind::LeastRequest,
        }
    }

    /// The scheduler name (`kind`).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Build the balancer. Randomised balancers take an independent stream split from `rng`
    /// (the others leave it untouched). `Err` names the field that is wrong.
    pub fn build(&self, rng: &mut SplitMix64) -> Result<AnyBalancer, BalancerConfigError> {
        let expiration = |ms: u64| -> Result<Duration, BalancerConfigError> {
            if ms == 0 {
                return Err(BalancerConfigError::TooSmall {
                    field: "expiration_ms",
                    min: 1,
                });
            }
            ms.checked_mul(MS).ok_or(BalancerConfigError::OutOfRange {
                field: "expiration_ms",
                value: ms,
                min: 1,
                max: u64::MAX / MS,
            })
        };
        Ok(match self {
            BalancerConfig::Rr {} => AnyBalancer::Rr(RoundRobin::new()),
            BalancerConfig::Wrr {} => AnyBalancer::Wrr(WeightedRoundRobin::new()),
            BalancerConfig::Lc {} => AnyBalancer::Lc(LeastConn),
            BalancerConfig::Wlc {} => AnyBalancer::Wlc(WeightedLeastConn),
            BalancerConfig::Sed {} => AnyBalancer::Sed(ShortestExpectedDelay),
            BalancerConfig::Nq {} => AnyBalancer::Nq(NeverQueue),
            BalancerConfig::Fo {} => AnyBalancer::Fo(WeightedFailover),
            BalancerConfig::Ovf {} => AnyBalancer::Ovf(Overflow),
            BalancerConfig::Lblc {
                expiration_ms,
                max_entries,
                active_weight,
            } => {
                if *active_weight == 0 {
                    return Err(BalancerConfigError::TooSmall {
                        field: "active_weight",
                        min: 1,
                    });
                }
                AnyBalancer::Lblc(
                    LocalityLeastConn::new(expiration(*expiration_ms)?, *max_entries)
                        .with_active_weight(*active_weight),
                )
            }
            BalancerConfig::Lblcr {
                expiration_ms,
                max_entries,
            } => AnyBalancer::Lblcr(LocalityLeastConnReplicated::new(
                expiration(*expiration_ms)?,
                *max_entries,
            )),
            BalancerConfig::Dh { table_bits } => {
                AnyBalancer::Dh(DestinationHash::new(*table_bits)?)
            }
            BalancerConfig::Sh {
                table_bits,
                fallback,
                use_port,
            } => AnyBalancer::Sh(SourceHash::new(*table_bits, *fallback, *use_port)?),
            BalancerConfig::Mh {
                table_size,
                fallback,
                use_port,
            } => AnyBalancer::Mh(Maglev::new(*table_size, *fallback, *use_port)?),
            BalancerConfig::Twos {} => AnyBalancer::Twos(TwoChoices::from_rng(rng.split())),
            BalancerConfig::LeastRequest {} => {
                AnyBalancer::LeastRequest(LeastRequestP2c::from_rng(rng.split()))
            }
        })
    }

    /// The default configuration of `kind` (exhaustive: a new kind needs one).
    pub fn default_of(kind: BalancerKind) -> BalancerConfig {
        match kind {
            BalancerKind::Rr => BalancerConfig::Rr {},
            BalancerKind::Wrr => BalancerConfig::Wrr {},
            BalancerKind::Lc => BalancerConfig::Lc {},
            BalancerKind::Wlc => BalancerConfig::Wlc {},
            BalancerKind::Sed => BalancerConfig::Sed {},
            BalancerKind::Nq => BalancerConfig::Nq {},
            BalancerKind::Fo => BalancerConfig::Fo {},
            BalancerKind::Ovf => BalancerConfig::Ovf {},
            BalancerKind::Lblc => BalancerConfig::Lblc {
                expiration_ms: default_expiration_ms(),
                max_entries: DEFAULT_MAX_ENTRIES,
                active_weight: default_active_weight(),
            },
            BalancerKind::Lblcr => BalancerConfig::Lblcr {
                expiration_ms: default_expiration_ms(),
                max_entries: DEFAULT_MAX_ENTRIES,
            },
            BalancerKind::Dh => BalancerConfig::Dh {
                table_bits: DEFAULT_TABLE_BITS,
            },
            BalancerKind::Sh => BalancerConfig::Sh {
                table_bits: DEFAULT_TABLE_BITS,
                fallback: false,
                use_port: false,
            },
            BalancerKind::Mh => BalancerConfig::Mh {
                table_size: DEFAULT_TABLE_SIZE,
                fallback: false,
                use_port: false,
            },
            BalancerKind::Twos => BalancerConfig::Twos {},
            BalancerKind::LeastRequest => BalancerConfig::LeastRequest {},
        }
    }

    /// One default configuration of every kind, in [`BalancerKind::ALL`] order (benches,
    /// docs, property tests), so they cover every kind by construction.
    pub fn all_defaults() -> Vec<BalancerConfig> {
        BalancerKind::ALL
            .iter()
            .map(|&k| BalancerConfig::default_of(k))
            .collect()
    }
}

/// Every balancer, statically dispatched.
#[derive(Debug, Clone)]
pub enum AnyBalancer {
    Rr(RoundRobin),
    Wrr(WeightedRoundRobin),
    Lc(LeastConn),
    Wlc(WeightedLeastConn),
    Sed(ShortestExpectedDelay),
    Nq(NeverQueue),
    Fo(WeightedFailover),
    Ovf(Overflow),
    Lblc(LocalityLeastConn),
    Lblcr(LocalityLeastConnReplicated),
    Dh(DestinationHash),
    Sh(SourceHash),
    Mh(Maglev),
    Twos(TwoChoices),
    LeastRequest(LeastRequestP2c),
}

impl Balancer for AnyBalancer {
    #[inline]
    fn pick(&mut self, servers: &ServerTable, key: &FlowKey, now: Instant) -> Option<ServerId> {
        match self {
            AnyBalancer::Rr(b) => b.pick(servers, key, now),
            AnyBalancer::Wrr(b) => b.pick(servers, key, now),
            AnyBalancer::Lc(b) => b.pick(servers, key, now),
            AnyBalancer::Wlc(b) => b.pick(servers, key, now),
            AnyBalancer::Sed(b) => b.pick(servers, key, now),
            AnyBalancer::Nq(b) => b.pick(servers, key, now),
            AnyBalancer::Fo(b) => b.pick(servers, key, now),
            AnyBalancer::Ovf(b) => b.pick(servers, key, now),
            AnyBalancer::Lblc(b) => b.pick(servers, key, now),
            AnyBalancer::Lblcr(b) => b.pick(servers, key, now),
            AnyBalancer::Dh(b) => b.pick(servers, key, now),
            AnyBalancer::Sh(b) => b.pick(servers, key, now),
            AnyBalancer::Mh(b) => b.pick(servers, key, now),
            AnyBalancer::Twos(b) => b.pick(servers, key, now),
            AnyBalancer::LeastRequest(b) => b.pick(servers, key, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn config_from_json_with_defaults_and_options() {
        let c: BalancerConfig = serde_json::from_str(r#"{"kind":"wlc"}"#).unwrap();
        assert_eq!(c, BalancerConfig::Wlc {});
        let c: BalancerConfig =
            serde_json::from_str(r#"{"kind":"mh","table_size":4093,"fallback":true}"#).unwrap();
        assert_eq!(
            c,
            BalancerConfig::Mh {
                table_size: 4093,
                fallback: true,
                use_port: false
            }
        );
        let c: BalancerConfig = serde_json::from_str(r#"{"kind":"least_request"}"#).unwrap();
        assert_eq!(c.name(), "least_request");
    }

    /// The one list of kinds agrees with the serde names: every kind's name parses to a
    /// config of that kind, and every default config's kind is listed once.
    #[test]
    fn kinds_match_serde_names() {
        for &k in BalancerKind::ALL {
            let c: BalancerConfig =
                serde_json::from_str(&format!(r#"{{"kind":"{}"}}"#, k.name())).unwrap();
            assert_eq!(c.kind(), k);
            assert_eq!(BalancerKind::from_name(k.name()), Some(k));
        }
        let kinds: Vec<BalancerKind> = BalancerConfig::all_defaults()
            .iter()
            .map(|c| c.kind())
            .collect();
        assert_eq!(kinds, BalancerKind::ALL);
        assert_eq!(BalancerKind::from_name("p2c"), None);
        // `p2c` is read as least_request (README's name for it), and written back as that.
        let c: BalancerConfig = serde_json::from_str(r#"{"kind":"p2c"}"#).unwrap();
        assert_eq!(c.kind(), BalancerKind::LeastRequest);
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"kind":"least_request"}"#
        );
    }

    #[test]
    fn config_errors_name_the_problem() {
        let e = serde_json::from_str::<BalancerConfig>(r#"{"kind":"wlc","weight":3}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("weight"), "{e}");
        let e = serde_json::from_str::<BalancerConfig>(r#"{"kind":"lbc"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("lbc"), "{e}");
        let mut r = SplitMix64::new(1);
        let e = BalancerConfig::Mh {
            table_size: 1000,
            fallback: false,
            use_port: false,
        }
        .build(&mut r)
        .unwrap_err();
        assert_eq!(
            e,
            BalancerConfigError::NotPrime {
                field: "table_size",
                value: 1000
            }
        );
        let e = BalancerConfig::Lblc {
            expiration_ms: 1,
            max_entries: 1,
            active_weight: 0,
        }
        .build(&mut r)
        .unwrap_err();
        assert_eq!(
            e,
            BalancerConfigError::TooSmall {
                field: "active_weight",
                min: 1
            }
        );
        let e = BalancerConfig::Lblc {
            expiration_ms: 0,
            max_entries: 1,
            active_weight: 256,
        }
        .build(&mut r)
        .unwrap_err();
        assert_eq!(e.field(), "expiration_ms");
        assert!(matches!(e, BalancerConfigError::TooSmall { min: 1, .. }));
        let e = BalancerConfig::Lblcr {
            expiration_ms: u64::MAX,
            max_entries: 1,
        }
        .build(&mut r)
        .unwrap_err();
        assert!(
            matches!(e, BalancerConfigError::OutOfRange { field: "expiration_ms", value, .. } if value == u64::MAX),
            "{e:?}"
        );
    }

    /// Every kind builds, round-trips through JSON, picks an available server, never a
    /// weight-0 one, and returns None when all are drained.
    #[test]
    fn every_kind_drains_weight_zero_and_none_when_empty() {
        let mut rng = SplitMix64::new(9);
        for cfg in BalancerConfig::all_defaults() {
            let json = serde_json::to_string(&cfg).unwrap();
            let back: BalancerConfig = serde_json::from_str(&json).unwrap();
            assert_eq!(back, cfg, "{json}");
            let mut b = cfg.build(&mut rng).unwrap();
            // hash balancers may map a key to the drained server (→ None): only check that
            // a returned server is never the drained one
            let mut t = table(&[2, 0, 3, 1]);
            let mut got_some = false;
            for s in 0..200u32 {
                let k = key_from(0x0A00_0000 + s * 101, 0xC000_0000 + s * 37);
                if let Some(id) = b.pick(&t, &k, s as u64) {
                    assert_ne!(id, ServerId(1), "{} picked a weight-0 server", cfg.name());
                    t.on_open(id).unwrap();
                    got_some = true;
                }
            }
            assert!(got_some, "{}", cfg.name());
            for i in [0, 2, 3] {
                t.set_weight(ServerId(i), 0).unwrap();
            }
            for s in 0..50u32 {
                let k = key_from(0x0A00_0000 + s, 0xC000_0000 + s);
                assert_eq!(b.pick(&t, &k, 1000), None, "{}", cfg.name());
            }
        }
    }
}
