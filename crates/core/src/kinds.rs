//! One list of kinds per family (qdisc, balancer, dispatch): a fieldless enum, its `ALL` array
//! and its names, generated from one list so `ALL` cannot miss a variant. Property tests and
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
