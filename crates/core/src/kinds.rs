//! One list of kinds per family (qdisc, balancer, dispatch): a fieldless enum, its `ALL` array
//! and its names, generated from one list so `ALL` cannot miss a variant. The disciplines'
//! list is here too ([`qdisc_list`]): `qdisc/any.rs` expands it into [`crate::qdisc::QdiscKind`],
//! [`crate::qdisc::AnyQdisc`] and their dispatch, so a discipline is added in one line. Property tests and
//! benches map every kind to a configuration by an exhaustive `match`, so a new kind fails to
//! compile until they cover it.

/// `kinds! { /// doc \n pub enum Name { Variant => "name", ... } }`
macro_rules! kinds {
    ($(#[$meta:meta])* pub enum $name:ident { $($variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($variant,)+
        }

        impl $name {
            /// Every kind, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The name a configuration uses (`kind = "..."`).
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The kind called `name`, if any.
            pub fn from_name(name: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|k| k.name() == name)
            }

            /// All names, separated by `sep` (for help texts and errors).
            pub fn names(sep: &str) -> String {
                let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
                names.join(sep)
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use kinds;

/// The discipline list: variant (of `QdiscKind`, `QdiscConfig` and `AnyQdisc`), the name
/// `kind = "..."` reads, and the discipline's type. `qdisc_list!(m)` calls `m!` with the list;
/// `qdisc/any.rs` is the one caller.
macro_rules! qdisc_list {
    ($callback:ident) => {
        $callback! {
            Fifo => "fifo" => Fifo,
            StrictPriority => "strict_priority" => StrictPriority,
            Drr => "drr" => Drr,
            Wf2qPlus => "wf2q_plus" => Wf2qPlus,
            Edf => "edf" => Edf,
            AckSeparation => "ack_separation" => AckSeparation,
            Percentile => "percentile" => PercentileQueue,
            DelayConstrained => "delay_constrained" => DelayConstrained,
        }
    };
}
pub(crate) use qdisc_list;

#[cfg(test)]
mod tests {
    use crate::qdisc::{QdiscConfig, QdiscKind};

    /// Every kind of the list is a `kind = "..."` the configuration reads, and every kind the
    /// configuration reads is in the list (serde's "unknown variant" error lists them all).
    #[test]
    fn the_discipline_list_and_the_configuration_agree() {
        for k in QdiscKind::ALL {
            let e = serde_json::from_str::<QdiscConfig>(&format!(r#"{{"kind":"{}"}}"#, k.name()));
            if let Err(e) = e {
                assert!(!e.to_string().contains("unknown variant"), "{k}: {e}");
            }
            assert_eq!(QdiscKind::from_name(k.name()), Some(*k));
        }
        let e = serde_json::from_str::<QdiscConfig>(r#"{"kind":"no_such_kind"}"#)
            .unwrap_err()
            .to_string();
        let listed: Vec<&str> = e.split('`').skip(3).step_by(2).collect();
        assert_eq!(listed.len(), QdiscKind::ALL.len(), "{e}");
        for name in listed {
            assert!(
                QdiscKind::from_name(name).is_some(),
                "{name} not in the list: {e}"
            );
        }
    }
}
