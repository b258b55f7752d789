//! What is configured on a device, as `tc -j` shows it: the record `apply` and `clear` take
//! before changing anything, compare after restoring, and keep as "what netsched installed".
//!
//! A device's configuration is split into two [`Part`]s, because `netsched shape` owns them
//! separately: the **egress** part (the root qdisc and everything below it: qdiscs, classes,
//! filters) and the **ingress** part (an `ingress`/`clsact` qdisc and its filters). Counters and
//! kernel-assigned reference fields (`refcnt`, action `index`, ...) are removed, so two records
//! are equal exactly when the configuration is.

use super::error::ShapeError;
use super::tc::Target;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most qdiscs + classes of one device a snapshot walks for filters (each is one `tc` call).
pub const MAX_FILTER_PARENTS: usize = 256;

/// Keys that change without the configuration changing: counters, reference counts, action
/// indexes and offload flags.
const VOLATILE: [&str; 14] = [
    "refcnt",
    "ref",
    "bind",
    "index",
    "stats",
    "stats64",
    "xstats",
    "direct_packets_stat",
    "not_in_hw",
    "in_hw",
    "in_hw_count",
    "installed",
    "last_used",
    "expires",
];

/// One side of a device's traffic control, counters removed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub qdiscs: Vec<Value>,
    /// `tc class show` lines (iproute2 6.1 prints HTB classes only as text).
    pub classes: Vec<String>,
    /// `(parent, tc -j filter show ... parent P)` per qdisc or class that has filters.
    pub filters: Vec<(String, Vec<Value>)>,
}

/// The configuration of one device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceConfig {
    pub dev: String,
    pub exists: bool,
    pub ifindex: u32,
    pub kind: String,
    pub up: bool,
    pub egress: Part,
    pub ingress: Part,
}

/// Who a part belongs to, as `apply` and `clear` judge it.
#[derive(Debug, Clone, PartialEq)]
pub enum Owner {
    /// Nothing configured: the kernel's default root qdisc (every qdisc has handle `0:`, no
    /// classes, no filters), or no ingress qdisc.
    Kernel,
    /// Exactly what netsched shape recorded after its last successful apply.
    Netsched,
    /// Anything else: installed by someone else (or changed since netsched installed it).
    Foreign,
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in VOLATILE {
                m.remove(k);
            }
            m.values_mut().for_each(strip);
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(|x| x.as_str()).unwrap_or("")
}

fn is_ingress_qdisc(q: &Value) -> bool {
    matches!(s(q, "kind"), "ingress" | "clsact")
}

impl Part {
    /// Nothing here but kernel defaults: qdiscs of handle `0:` (the kernel's), classes only of
    /// those (an mq's per-queue classes `:1`, `:2`, ...), no filters.
    pub fn is_kernel_default(&self) -> bool {
        self.classes.iter().all(|c| {
            c.split_whitespace()
                .nth(2)
                .is_some_and(|id| id.starts_with(':') || id.starts_with("0:"))
        }) && self.filters.is_empty()
            && self.qdiscs.iter().all(|q| s(q, "handle") == "0:")
    }

    /// `htb 1: root, pfifo 10: parent 1:10` — the qdiscs, for messages.
    pub fn summary(&self) -> String {
        if self.qdiscs.is_empty() {
            return "none".into();
        }
        let mut out: Vec<String> = self
            .qdiscs
            .iter()
            .map(|q| {
                let parent = if q.get("root").and_then(|r| r.as_bool()) == Some(true) {
                    "root".to_string()
                } else {
                    format!("parent {}", s(q, "parent"))
                };
                format!("{} {} {parent}", s(q, "kind"), s(q, "handle"))
            })
            .collect();
        let nf: usize = self.filters.iter().map(|(_, f)| f.len()).sum();
        if !self.classes.is_empty() {
            out.push(format!("{} classes", self.classes.len()));
        }
        if nf > 0 {
            out.push(format!("{nf} filter entries"));
        }
        out.join(", ")
    }

    /// How `self` (before) and `other` (now) differ, in words; None if equal.
    pub fn difference(&self, other: &Part) -> Option<String> {
        if self == other {
            return None;
        }
        if self.qdiscs != other.qdiscs {
            return Some(format!(
                "was [{}], is [{}]",
                self.summary(),
                other.summary()
            ));
        }
        if self.classes != other.classes {
            return Some(format!(
                "classes differ (was {}, is {})",
                self.classes.len(),
                other.classes.len()
            ));
        }
        Some("filters differ".into())
    }
}

impl DeviceConfig {
    /// Record `dev` as it is now.
    pub fn capture(t: &Target, dev: &str) -> Result<Self, ShapeError> {
        let Some(link) = t.link(dev)? else {
            return Ok(Self {
                dev: dev.to_string(),
                ..Default::default()
            });
        };
        let mut egress = Part::default();
        let mut ingress = Part::default();
        for mut q in t.qdisc_json(dev, false)? {
            strip(&mut q);
            if is_ingress_qdisc(&q) {
                ingress.qdiscs.push(q);
            } else {
                egress.qdiscs.push(q);
            }
        }
        let classes = t.run("tc", &["class", "show", "dev", dev], None)?;
        egress.classes = classes
            .lines()
            .filter(|l| l.starts_with("class "))
            .map(|l| l.trim().to_string())
            .collect();
        // Filters hang off classful qdiscs and classes (egress) or ingress/clsact.
        let mut parents: Vec<(String, bool)> = Vec::new();
        for q in &egress.qdiscs {
            if s(q, "handle") != "0:" {
                parents.push((s(q, "handle").to_string(), false));
            }
        }
        for c in &egress.classes {
            if let Some(id) = c.split_whitespace().nth(2) {
                parents.push((id.to_string(), false));
            }
        }
        for q in &ingress.qdiscs {
            match s(q, "kind") {
                "clsact" => {
                    parents.push(("ingress".into(), true));
                    parents.push(("egress".into(), false));
                }
                _ => parents.push(("ffff:".into(), true)),
            }
        }
        if parents.len() > MAX_FILTER_PARENTS {
            return Err(ShapeError::TooManyParents {
                dev: dev.to_string(),
                count: parents.len(),
                max: MAX_FILTER_PARENTS,
            });
        }
        for (p, is_ingress) in parents {
            let mut f = if p == "ingress" || p == "egress" {
                t.json(&["-j", "filter", "show", "dev", dev, &p])?
            } else {
                t.json(&["-j", "filter", "show", "dev", dev, "parent", &p])?
            };
            if f.is_empty() {
                continue;
            }
            f.iter_mut().for_each(strip);
            if is_ingress {
                ingress.filters.push((p, f));
            } else {
                egress.filters.push((p, f));
            }
        }
        Ok(Self {
            dev: dev.to_string(),
            exists: true,
            ifindex: link.ifindex,
            kind: link.kind,
            up: link.up,
            egress,
            ingress,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counters_and_references_do_not_count_as_configuration() {
        let mut a = json!([{"kind":"htb","handle":"1:","refcnt":3,"options":{"direct_packets_stat":5,"r2q":10}}]);
        let mut b = json!([{"kind":"htb","handle":"1:","refcnt":2,"options":{"direct_packets_stat":0,"r2q":10}}]);
        strip(&mut a);
        strip(&mut b);
        assert_eq!(a, b);
        let mut c = json!([{"kind":"htb","handle":"1:","options":{"r2q":11}}]);
        strip(&mut c);
        assert_ne!(a, c);
    }

    #[test]
    fn only_handle_zero_qdiscs_without_classes_are_the_kernel_default() {
        let default_mq = Part {
            qdiscs: vec![
                json!({"kind":"mq","handle":"0:","root":true}),
                json!({"kind":"pfifo_fast","handle":"0:","parent":":1"}),
            ],
            ..Default::default()
        };
        assert!(default_mq.is_kernel_default());
        let mut with_queue_classes = default_mq.clone();
        with_queue_classes.classes = vec!["class mq :1 root".into(), "class mq :2 root".into()];
        assert!(with_queue_classes.is_kernel_default());
        with_queue_classes
            .classes
            .push("class htb 1:1 root rate 1Mbit".into());
        assert!(!with_queue_classes.is_kernel_default());
        // An mq root whose child was replaced by someone (handle 8002:) is not.
        let custom_child = Part {
            qdiscs: vec![
                json!({"kind":"mq","handle":"0:","root":true}),
                json!({"kind":"fq_codel","handle":"8002:","parent":":1"}),
            ],
            ..Default::default()
        };
        assert!(!custom_child.is_kernel_default());
        // pfifo_fast added by hand gets a handle of its own: not the default.
        let added = Part {
            qdiscs: vec![json!({"kind":"pfifo_fast","handle":"8018:","root":true})],
            ..Default::default()
        };
        assert!(!added.is_kernel_default());
        assert!(added
            .difference(&default_mq)
            .unwrap()
            .contains("pfifo_fast 8018: root"));
    }
}
