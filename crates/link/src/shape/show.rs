//! `netsched shape show`: the installed classes and qdiscs with their counters.

use super::error::ShapeError;
use super::state;
use super::tc::Target;
use super::tc_error::TcError;
use serde::Serialize;
use std::fmt::Write as _;

/// One HTB class with its counters (from `tc -s class show`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClassState {
    pub dev: String,
    pub classid: String,
    pub parent: String,
    /// "ack", "bulk" or "" (inner class), by the layout `apply` installs.
    pub role: String,
    pub prio: Option<u32>,
    pub rate: String,
    pub ceil: String,
    pub sent_bytes: u64,
    pub packets: u64,
    pub drops: u64,
    pub overlimits: u64,
    pub backlog_bytes: u64,
    pub backlog_packets: u64,
}

/// One qdisc with its counters (from `tc -s -j qdisc show`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QdiscState {
    pub dev: String,
    pub kind: String,
    pub handle: String,
    pub parent: String,
    pub packets: u64,
    /// Bytes sent (was `bytes`; the classes' name).
    pub sent_bytes: u64,
    pub drops: u64,
    pub backlog_bytes: u64,
    pub backlog_packets: u64,
    /// The queue limit of a qdisc that counts packets (pfifo, fq_codel, …), or of one that
    /// counts bytes (bfifo, tbf) — tc's one `limit` split by its unit (was `limit`).
    pub limit_packets: Option<u64>,
    pub limit_bytes: Option<u64>,
}

/// Whether `kind`'s `limit` counts bytes (tc-bfifo(8), tc-tbf(8)); otherwise packets.
fn limit_in_bytes(kind: &str) -> bool {
    matches!(kind, "bfifo" | "tbf")
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ShapeState {
    pub classes: Vec<ClassState>,
    pub qdiscs: Vec<QdiscState>,
}

impl ShapeState {
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<12} {:<6} {:<5} {:<4} {:>12} {:>12} {:>10} {:>8} {:>9}",
            "dev", "class", "role", "prio", "rate", "packets", "bytes", "drops", "backlog"
        );
        for c in &self.classes {
            let _ = writeln!(
                s,
                "{:<12} {:<6} {:<5} {:<4} {:>12} {:>12} {:>10} {:>8} {:>6}p/{}b",
                c.dev,
                c.classid,
                c.role,
                c.prio.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                c.rate,
                c.packets,
                c.sent_bytes,
                c.drops,
                c.backlog_packets,
                c.backlog_bytes
            );
        }
        let _ = writeln!(s, "\nqdiscs:");
        for q in &self.qdiscs {
            let _ = writeln!(
                s,
                "{:<12} {:<8} {:<6} parent {:<6} limit {:<6} packets {:<10} drops {:<8} backlog {}p/{}b",
                q.dev,
                q.kind,
                q.handle,
                q.parent,
                match (q.limit_packets, q.limit_bytes) {
                    (Some(p), _) => format!("{p}p"),
                    (None, Some(b)) => format!("{b}b"),
                    (None, None) => "-".into(),
                },
                q.packets,
                q.drops,
                q.backlog_packets,
                q.backlog_bytes
            );
        }
        s
    }

    /// The class with `classid` (e.g. "1:10") on `dev`.
    pub fn class(&self, dev: &str, classid: &str) -> Option<&ClassState> {
        self.classes
            .iter()
            .find(|c| c.dev == dev && c.classid == classid)
    }
}

/// Read classes and qdiscs of `t.dev` (and of its IFB, if `apply` installed one).
pub fn show(t: &Target) -> Result<ShapeState, ShapeError> {
    let Some(link) = t.link(&t.dev)? else {
        return Err(ShapeError::NoSuchInterface {
            dev: t.dev.clone(),
            ns: t.ns_suffix(),
        });
    };
    let mut devs = vec![t.dev.clone()];
    let (cookie, _) = t.netns_id()?;
    if let Some(ifb) = state::load(t, cookie, link.ifindex)?.and_then(|s| s.ifb) {
        if t.link_exists(&ifb.dev) {
            devs.push(ifb.dev);
        }
    }
    let mut st = ShapeState::default();
    for dev in &devs {
        // `tc -j class show` is not JSON in iproute2 6.1 for htb, so the text form is parsed.
        let text = t
            .run("tc", &["-s", "class", "show", "dev", dev], None)
            .map_err(|e| TcError::Command {
                command: format!("tc -s class show dev {dev}"),
                source: Box::new(e),
            })?;
        st.classes.extend(parse_class_text(dev, &text));
        for q in t.qdisc_json(dev, true)? {
            let g = |k: &str| q.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
            let s = |k: &str| q.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
            let kind = s("kind");
            let limit = q
                .get("options")
                .and_then(|o| o.get("limit"))
                .and_then(|l| l.as_u64());
            let (limit_packets, limit_bytes) = if limit_in_bytes(&kind) {
                (None, limit)
            } else {
                (limit, None)
            };
            st.qdiscs.push(QdiscState {
                dev: dev.clone(),
                kind,
                handle: s("handle"),
                parent: if q.get("root").and_then(|r| r.as_bool()) == Some(true) {
                    "root".into()
                } else {
                    s("parent")
                },
                packets: g("packets"),
                sent_bytes: g("bytes"),
                drops: g("drops"),
                backlog_bytes: g("backlog"),
                backlog_packets: g("qlen"),
                limit_packets,
                limit_bytes,
            });
        }
    }
    Ok(st)
}

/// Parse `tc -s class show` text (iproute2 6.x layout):
/// `class htb 1:20 parent 1:1 leaf 20: prio 1 rate 700Kbit ceil 760Kbit burst ...`
/// ` Sent 86 bytes 1 pkt (dropped 0, overlimits 0 requeues 0)`
/// ` backlog 0b 0p requeues 0`
pub fn parse_class_text(dev: &str, text: &str) -> Vec<ClassState> {
    let mut out: Vec<ClassState> = Vec::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| {
            w.iter()
                .position(|x| *x == key)
                .and_then(|i| w.get(i + 1))
                .map(|s| s.trim_end_matches([',', ')']).to_string())
        };
        let num = |s: Option<String>| {
            s.map(|s| {
                s.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                    .parse::<u64>()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
        };
        if w.first() == Some(&"class") && w.len() >= 3 {
            let classid = w[2].to_string();
            let role = match classid.as_str() {
                "1:10" => "ack",
                "1:20" => "bulk",
                _ => "",
            };
            out.push(ClassState {
                dev: dev.to_string(),
                parent: if w.get(3) == Some(&"root") {
                    "root".into()
                } else {
                    after("parent").unwrap_or_default()
                },
                classid,
                role: role.into(),
                prio: after("prio").and_then(|p| p.parse().ok()),
                rate: after("rate").unwrap_or_default(),
                ceil: after("ceil").unwrap_or_default(),
                ..Default::default()
            });
        } else if let Some(c) = out.last_mut() {
            if w.first() == Some(&"Sent") {
                c.sent_bytes = num(w.get(1).map(|s| s.to_string()));
                c.packets = num(w.get(3).map(|s| s.to_string()));
                c.drops = num(after("(dropped"));
                c.overlimits = num(after("overlimits"));
            } else if w.first() == Some(&"backlog") {
                c.backlog_bytes = num(w.get(1).map(|s| s.to_string()));
                c.backlog_packets = num(w.get(2).map(|s| s.to_string()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_names_every_number_with_its_unit() {
        let st = ShapeState {
            classes: vec![ClassState {
                prio: Some(1),
                ..ClassState::default()
            }],
            qdiscs: vec![QdiscState {
                limit_packets: Some(100),
                limit_bytes: Some(3000),
                ..QdiscState::default()
            }],
        };
        let v = serde_json::to_value(&st).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}\n{v}");
        assert!(limit_in_bytes("tbf") && !limit_in_bytes("pfifo"));
    }

    #[test]
    fn class_text_is_parsed() {
        let text = "class htb 1:1 root rate 760Kbit ceil 760Kbit burst 1599b cburst 1599b \n \
Sent 86 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n\n\
class htb 1:20 parent 1:1 leaf 20: prio 1 rate 700Kbit ceil 760Kbit burst 1599b cburst 1599b \n \
Sent 9086 bytes 12 pkt (dropped 3, overlimits 4 requeues 0) \n backlog 1514b 1p requeues 0\n";
        let c = parse_class_text("eth1", text);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].parent, "root");
        assert_eq!(c[1].role, "bulk");
        assert_eq!(c[1].prio, Some(1));
        assert_eq!((c[1].sent_bytes, c[1].packets, c[1].drops), (9086, 12, 3));
        assert_eq!((c[1].backlog_bytes, c[1].backlog_packets), (1514, 1));
        assert_eq!(c[1].rate, "700Kbit");
    }
}
