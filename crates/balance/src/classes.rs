//! Service classes of L7 requests: the `queue` discipline, the `[[class]]` tables and
//! `default_class` of the configuration, their checks, and the [`Classifier`] that puts each
//! request in one class once its head has been read.
//!
//! A class is P0's client class (P0 §2.3.1, §3.2.3: a percentile target `P` and a deadline
//! that decides whether a request was served in time), matched here not only by source
//! address, as the thesis does with its IP table, but also by a request header or a path
//! prefix, or the TLS client certificate's subject. Which rule decides, in this order (most
//! specific to the request first):
//! 1. a `client_subject` rule equal to the subject of the connection's verified client
//!    certificate (tls.rs `client_subject`: its commonName, else its first DNS or email
//!    subjectAltName; RFC 5280 §4.1.2.6, §4.2.1.6), byte for byte;
//! 2. a `header` rule whose field has exactly the value (the first class in file order);
//! 3. a `path_prefix` rule (the longest prefix of the path wins);
//! 4. a `sources` CIDR (the longest prefix wins, as nfq's address table: core's
//!    [`CidrTable`]; `10.0.1.0/24` in one class beats `10.0.0.0/16` in another);
//! 5. otherwise `default_class` (when absent: the last class, the lowest, as the thesis's
//!    "anything else" class D).
//!
//! Checks (each error names the file's key and the value): a class needs a name (unique,
//! the characters of a server name), `percentile` in 1..=100 (required with
//! `discipline = "percentile"`), a `deadline` that is `"auto"` or a duration above 0 and not
//! beyond the class's queue timeout, at least one rule unless it is the default class (a
//! class matched by nothing would never see a request: an error, not a warning), no CIDR,
//! header rule, path prefix or client subject given to two classes (the second could never
//! match), and its own `queue_limit` / `queue_timeout` no larger than the balancer's, and a `max_hold` that is
//! `"off"`, `"deadline"` or a duration above 0 not beyond the class's queue timeout. At most
//! [`MAX_CLASSES`] classes (the Percentile queue's bound), [`MAX_SOURCES`] CIDRs each.
//!
//! Cost per request: one hash look-up of the client subject (with a certificate), one header
//! look-up per header rule, a scan of the path prefixes (longest first) and one
//! longest-prefix match; no allocation.

use netsched_core::classify::{Cidr, CidrTable};
use netsched_core::qdisc::percentile::{MaxHold, PERCENTILE_MAX_CLASSES};
use netsched_core::qdisc::ClassId;
use netsched_core::units::{format_duration, parse_duration_in};
use netsched_core::{Nanos, SEC};
use serde::Deserialize;
use std::fmt;
use std::net::IpAddr;

/// Most classes (one bit each in the Percentile queue's mask).
pub const MAX_CLASSES: usize = PERCENTILE_MAX_CLASSES;
/// Most CIDRs of one class.
pub const MAX_SOURCES: usize = 4096;
/// Longest header name or value, path prefix and client subject of a rule.
pub const MAX_RULE_BYTES: usize = 1024;

/// The order in which waiting requests leave the queue when a server slot frees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueKind {
    /// Arrival order, whatever the class (the balancer's queue before classes existed).
    #[default]
    Fifo,
    /// Strict priority in class order: the first class's oldest request, then the second's...
    /// (HAProxy `set-priority-class`); the last class starves while the first keeps it busy.
    /// `"priority"` is its old spelling, read with a warning (`config::old_spellings`).
    #[serde(rename = "strict_priority", alias = "priority")]
    Priority,
    /// P0's percentile scheduler: the class furthest below its target (lowest
    /// `S / (N·P)`) sends its oldest request (core's `PercentileQueue`).
    Percentile,
}

impl QueueKind {
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Fifo => "fifo",
            QueueKind::Priority => "strict_priority",
            QueueKind::Percentile => "percentile",
        }
    }
}

/// `header = { name = "x-class", value = "gold" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderRule {
    pub name: String,
    pub value: String,
}

/// One `[[class]]` table as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConf {
    pub name: String,
    /// P0's target in percent, 1..=100.
    #[serde(default)]
    pub percentile: Option<u32>,
    /// `"auto"` (P0's running mean response time) or a duration, e.g. `"200ms"`.
    #[serde(default)]
    pub deadline: Option<String>,
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub header: Option<HeaderRule>,
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// The subject of the connection's verified TLS client certificate, exactly.
    #[serde(default)]
    pub client_subject: Option<String>,
    /// Most requests of this class waiting at once (default and maximum: `defaults.queue_limit`).
    #[serde(default)]
    pub queue_limit: Option<usize>,
    /// Longest wait of this class (default and maximum: `timeouts.queue`).
    #[serde(default)]
    pub queue_timeout: Option<String>,
    /// With `discipline = "percentile"`: how long a request of this class may wait before it
    /// leaves whatever P0's rule says (`"off"`, `"deadline"` or a duration; default
    /// [`DEFAULT_MAX_HOLD`], capped by the class's queue timeout).
    #[serde(default)]
    pub max_hold: Option<String>,
}

/// The default `max_hold` of a class: nfq's default bound on holding a request (docs/nfq.md,
/// `[limits] max_hold`), far above a web request's deadline, so P0's rule decides whenever
/// waits are short and the bound acts only on a class the rule would leave waiting (and no
/// longer than the class's queue timeout, when that is shorter).
pub const DEFAULT_MAX_HOLD: Nanos = SEC;

/// A class's deadline: P0's automatic one, or fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// The running mean response time of every completed request (P0 §3.2.2).
    Auto,
    Fixed(Nanos),
}

impl Deadline {
    /// `"auto"` or a duration in `1ns ..= max`; the error text names the rule.
    pub fn parse(text: &str, max: Nanos) -> Result<Self, String> {
        if text == "auto" {
            return Ok(Deadline::Auto);
        }
        parse_duration_in(text, 1, max)
            .map(Deadline::Fixed)
            .map_err(|e| format!("\"auto\" or a duration above 0 up to the queue timeout: {e}"))
    }

    pub fn fixed(self) -> Option<Nanos> {
        match self {
            Deadline::Auto => None,
            Deadline::Fixed(ns) => Some(ns),
        }
    }
}

impl fmt::Display for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Deadline::Auto => f.write_str("auto"),
            Deadline::Fixed(ns) => f.write_str(&format_duration(*ns)),
        }
    }
}

/// A class ready to run: its checked settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSpec {
    pub name: String,
    pub percentile: u32,
    pub deadline: Deadline,
    pub queue_limit: usize,
    pub queue_timeout: Nanos,
    /// The percentile queue's bound on waiting (core `MaxHold`).
    pub max_hold: MaxHold,
}

/// Why the classes of a configuration cannot be used; the text names the key and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassError {
    TooMany {
        count: usize,
    },
    /// `class[i].field = value: why`.
    Field {
        index: usize,
        name: String,
        field: &'static str,
        value: String,
        why: String,
    },
    /// A class no rule can reach.
    Unmatched {
        index: usize,
        name: String,
    },
    UnknownDefault {
        name: String,
    },
    /// Classes or a discipline other than FIFO in mode "l4".
    L4,
    /// `discipline = "percentile"` or `"strict_priority"` with no class.
    NoClasses {
        queue: &'static str,
    },
}

impl fmt::Display for ClassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassError::TooMany { count } => {
                write!(f, "class: {count} tables, at most {MAX_CLASSES}")
            }
            ClassError::Field {
                index,
                name,
                field,
                value,
                why,
            } => write!(f, "class[{index}] ({name:?}).{field} = {value}: {why}"),
            ClassError::Unmatched { index, name } => write!(
                f,
                "class[{index}] ({name:?}): matched by nothing (give it sources, header, \
                 path_prefix or client_subject, or make it default_class)"
            ),
            ClassError::UnknownDefault { name } => {
                write!(f, "default_class = {name:?}: no [[class]] has that name")
            }
            ClassError::L4 => f.write_str(
                "class / discipline: only in mode \"l7\" (a class is decided from the request \
                 head and judged on its response time)",
            ),
            ClassError::NoClasses { queue } => {
                write!(
                    f,
                    "discipline = \"{queue}\": needs at least one [[class]] table"
                )
            }
        }
    }
}

impl std::error::Error for ClassError {}

/// The one class of a balancer configured without classes.
pub const IMPLICIT_CLASS: &str = "default";

/// Every class with its settings, and the classifier: what `[[class]]` and `default_class`
/// compile to.
#[derive(Debug, Clone)]
pub struct ClassSet {
    pub queue: QueueKind,
    pub specs: Vec<ClassSpec>,
    pub classifier: Classifier,
}

/// The balancer-wide bounds a class must stay within.
#[derive(Debug, Clone, Copy)]
pub struct QueueBounds {
    pub queue_limit: usize,
    pub queue_timeout: Nanos,
}

impl ClassSet {
    /// Check and compile. No `[[class]]`: one class ("default") that takes every request.
    pub fn build(
        queue: QueueKind,
        confs: &[ClassConf],
        default_class: Option<&str>,
        bounds: QueueBounds,
    ) -> Result<ClassSet, ClassError> {
        if confs.len() > MAX_CLASSES {
            return Err(ClassError::TooMany { count: confs.len() });
        }
        if confs.is_empty() {
            if queue != QueueKind::Fifo {
                return Err(ClassError::NoClasses {
                    queue: queue.name(),
                });
            }
            if let Some(d) = default_class {
                return Err(ClassError::UnknownDefault { name: d.into() });
            }
            return Ok(ClassSet {
                queue,
                specs: vec![ClassSpec {
                    name: IMPLICIT_CLASS.into(),
                    percentile: 100,
                    deadline: Deadline::Auto,
                    queue_limit: bounds.queue_limit,
                    queue_timeout: bounds.queue_timeout,
                    max_hold: MaxHold::Off,
                }],
                classifier: Classifier::single(),
            });
        }
        let default = match default_class {
            None => confs.len() - 1,
            Some(d) => confs
                .iter()
                .position(|c| c.name == d)
                .ok_or_else(|| ClassError::UnknownDefault { name: d.into() })?,
        };
        let mut specs = Vec::with_capacity(confs.len());
        for (i, c) in confs.iter().enumerate() {
            specs.push(spec(i, c, confs, queue, bounds)?);
        }
        let classifier = Classifier::build(confs, default)?;
        Ok(ClassSet {
            queue,
            specs,
            classifier,
        })
    }

    pub fn index_of(&self, name: &str) -> Option<ClassId> {
        self.specs.iter().position(|s| s.name == name)
    }
}

fn field_err(
    i: usize,
    c: &ClassConf,
    field: &'static str,
    value: impl fmt::Display,
    why: impl Into<String>,
) -> ClassError {
    ClassError::Field {
        index: i,
        name: c.name.clone(),
        field,
        value: value.to_string(),
        why: why.into(),
    }
}

/// One class's settings, checked.
fn spec(
    i: usize,
    c: &ClassConf,
    all: &[ClassConf],
    queue: QueueKind,
    bounds: QueueBounds,
) -> Result<ClassSpec, ClassError> {
    check_class_name(&c.name).map_err(|e| field_err(i, c, "name", format!("{:?}", c.name), e))?;
    if all[..i].iter().any(|o| o.name == c.name) {
        return Err(field_err(
            i,
            c,
            "name",
            format!("{:?}", c.name),
            "used twice",
        ));
    }
    let percentile = match (c.percentile, queue) {
        (None, QueueKind::Percentile) => {
            return Err(field_err(
                i,
                c,
                "percentile",
                "(missing)",
                "needed with discipline = \"percentile\" (P0's target, 1..=100)",
            ))
        }
        (None, _) => 100,
        (Some(p), _) if !(1..=100).contains(&p) => {
            return Err(field_err(
                i,
                c,
                "percentile",
                p,
                "must be in 1..=100 (percent)",
            ))
        }
        (Some(p), _) => p,
    };
    let queue_limit = match c.queue_limit {
        None => bounds.queue_limit,
        Some(n) if n == 0 || n > bounds.queue_limit => {
            return Err(field_err(
                i,
                c,
                "queue_limit",
                n,
                format!("must be 1..={} (defaults.queue_limit)", bounds.queue_limit),
            ))
        }
        Some(n) => n,
    };
    let queue_timeout = match &c.queue_timeout {
        None => bounds.queue_timeout,
        Some(t) => parse_duration_in(t, netsched_core::MS, bounds.queue_timeout).map_err(|e| {
            field_err(
                i,
                c,
                "queue_timeout",
                format!("{t:?}"),
                format!("at most timeouts.queue: {e}"),
            )
        })?,
    };
    let deadline = match &c.deadline {
        None => Deadline::Auto,
        Some(t) => Deadline::parse(t, queue_timeout.min(3600 * SEC))
            .map_err(|why| field_err(i, c, "deadline", format!("{t:?}"), why))?,
    };
    let max_hold = match &c.max_hold {
        None => MaxHold::Fixed(DEFAULT_MAX_HOLD.min(queue_timeout)),
        Some(t) => match MaxHold::parse(t) {
            Ok(MaxHold::Fixed(ns)) if ns > queue_timeout => {
                return Err(field_err(
                    i,
                    c,
                    "max_hold",
                    format!("{t:?}"),
                    format!(
                        "beyond the class's queue timeout ({}): the request would be refused first",
                        format_duration(queue_timeout)
                    ),
                ))
            }
            Ok(m) => m,
            Err(why) => return Err(field_err(i, c, "max_hold", format!("{t:?}"), why)),
        },
    };
    Ok(ClassSpec {
        name: c.name.clone(),
        percentile,
        deadline,
        queue_limit,
        queue_timeout,
        max_hold,
    })
}

/// A class name takes the characters of a server name (it labels metric series): 1 to 64
/// of `[A-Za-z0-9_.-]`.
fn check_class_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 64 {
        return Err("must be 1 to 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err("only letters, digits, '_', '-' and '.'");
    }
    Ok(())
}

/// Puts a request in its class (see the module header for the order of the rules).
#[derive(Debug, Clone)]
pub struct Classifier {
    subjects: std::collections::HashMap<String, ClassId>,
    headers: Vec<(hyper::header::HeaderName, Vec<u8>, ClassId)>,
    /// Longest prefix first.
    paths: Vec<(String, ClassId)>,
    /// Longest prefix match; its default class is `default_class`.
    sources: CidrTable,
}

impl Classifier {
    /// Everything in class 0.
    pub fn single() -> Self {
        Classifier {
            subjects: Default::default(),
            headers: Vec::new(),
            paths: Vec::new(),
            sources: CidrTable::new(0),
        }
    }

    fn build(confs: &[ClassConf], default: ClassId) -> Result<Self, ClassError> {
        let mut k = Classifier {
            subjects: Default::default(),
            headers: Vec::new(),
            paths: Vec::new(),
            sources: CidrTable::new(default),
        };
        for (i, c) in confs.iter().enumerate() {
            if c.sources.is_empty()
                && c.header.is_none()
                && c.path_prefix.is_none()
                && c.client_subject.is_none()
                && i != default
            {
                return Err(ClassError::Unmatched {
                    index: i,
                    name: c.name.clone(),
                });
            }
            k.add_sources(i, c)?;
            k.add_subject(i, c, confs)?;
            if let Some(h) = &c.header {
                let value = format!("{{ name = {:?}, value = {:?} }}", h.name, h.value);
                let name = hyper::header::HeaderName::from_bytes(h.name.as_bytes())
                    .ok()
                    .filter(|_| h.name.len() <= MAX_RULE_BYTES)
                    .ok_or_else(|| field_err(i, c, "header", &value, "not a valid field name"))?;
                if h.value.len() > MAX_RULE_BYTES
                    || hyper::header::HeaderValue::from_str(&h.value).is_err()
                {
                    return Err(field_err(i, c, "header", &value, "not a valid field value"));
                }
                if let Some((_, _, j)) = k
                    .headers
                    .iter()
                    .find(|(n, v, _)| *n == name && v == h.value.as_bytes())
                {
                    let why = format!("the same rule as class[{j}] ({:?})", confs[*j].name);
                    return Err(field_err(i, c, "header", &value, why));
                }
                k.headers.push((name, h.value.as_bytes().to_vec(), i));
            }
            if let Some(p) = &c.path_prefix {
                if !p.starts_with('/')
                    || p.len() > MAX_RULE_BYTES
                    || p.contains(char::is_whitespace)
                {
                    let why = format!(
                        "must start with /, hold no whitespace, at most {MAX_RULE_BYTES} bytes"
                    );
                    return Err(field_err(i, c, "path_prefix", format!("{p:?}"), why));
                }
                if let Some((_, j)) = k.paths.iter().find(|(q, _)| q == p) {
                    let why = format!("the same prefix as class[{j}] ({:?})", confs[*j].name);
                    return Err(field_err(i, c, "path_prefix", format!("{p:?}"), why));
                }
                k.paths.push((p.clone(), i));
            }
        }
        k.paths.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        Ok(k)
    }

    fn add_subject(
        &mut self,
        i: usize,
        c: &ClassConf,
        all: &[ClassConf],
    ) -> Result<(), ClassError> {
        let Some(subject) = &c.client_subject else {
            return Ok(());
        };
        let shown = format!("{subject:?}");
        if subject.is_empty() || subject.len() > MAX_RULE_BYTES {
            let why = format!("1 to {MAX_RULE_BYTES} bytes");
            return Err(field_err(i, c, "client_subject", shown, why));
        }
        if let Some(&j) = self.subjects.get(subject) {
            let why = format!("the same subject as class[{j}] ({:?})", all[j].name);
            return Err(field_err(i, c, "client_subject", shown, why));
        }
        self.subjects.insert(subject.clone(), i);
        Ok(())
    }

    fn add_sources(&mut self, i: usize, c: &ClassConf) -> Result<(), ClassError> {
        if c.sources.len() > MAX_SOURCES {
            return Err(field_err(
                i,
                c,
                "sources",
                format!("[{} entries]", c.sources.len()),
                format!("at most {MAX_SOURCES}"),
            ));
        }
        for (k, text) in c.sources.iter().enumerate() {
            let shown = format!("{text:?} (sources[{k}])");
            let cidr: Cidr = text
                .parse()
                .map_err(|e: netsched_core::classify::CidrError| {
                    field_err(i, c, "sources", &shown, e.to_string())
                })?;
            if let Some(j) = self
                .sources
                .lookup_match(cidr.network())
                .filter(|(m, _)| *m == cidr)
                .map(|(_, j)| j)
            {
                let why = if j == i {
                    "listed twice".to_string()
                } else {
                    format!("also in class[{j}]: the same network cannot be in two classes")
                };
                return Err(field_err(i, c, "sources", &shown, why));
            }
            self.sources.add(cidr, i);
        }
        Ok(())
    }

    /// The class of a request from `peer`, on a connection whose verified client certificate
    /// has `subject` (when one), with this head.
    pub fn classify(
        &self,
        peer: IpAddr,
        subject: Option<&str>,
        path: &str,
        headers: &hyper::HeaderMap,
    ) -> ClassId {
        if let Some(&class) = subject.and_then(|s| self.subjects.get(s)) {
            return class;
        }
        for (name, value, class) in &self.headers {
            if headers
                .get_all(name)
                .iter()
                .any(|v| v.as_bytes() == value.as_slice())
            {
                return *class;
            }
        }
        for (prefix, class) in &self.paths {
            if path.starts_with(prefix.as_str()) {
                return *class;
            }
        }
        self.sources.lookup(peer)
    }

    /// Whether every request goes to one class (no rule to evaluate).
    pub fn is_trivial(&self) -> bool {
        self.subjects.is_empty()
            && self.headers.is_empty()
            && self.paths.is_empty()
            && self.sources.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: QueueBounds = QueueBounds {
        queue_limit: 100,
        queue_timeout: SEC,
    };

    fn conf(name: &str) -> ClassConf {
        ClassConf {
            name: name.into(),
            percentile: Some(50),
            deadline: None,
            sources: Vec::new(),
            header: None,
            path_prefix: None,
            client_subject: None,
            queue_limit: None,
            queue_timeout: None,
            max_hold: None,
        }
    }

    fn build(confs: &[ClassConf], default: Option<&str>) -> Result<ClassSet, String> {
        ClassSet::build(QueueKind::Percentile, confs, default, B).map_err(|e| e.to_string())
    }

    /// Header first, then the longest path prefix, then the longest source prefix, then
    /// the default class (overlapping CIDRs: the longer wins).
    #[test]
    fn rules_decide_in_their_documented_order() {
        let mut gold = conf("gold");
        gold.header = Some(HeaderRule {
            name: "x-class".into(),
            value: "gold".into(),
        });
        gold.sources = vec!["10.0.1.0/24".into()];
        let mut api = conf("api");
        api.path_prefix = Some("/api".into());
        let mut apiv2 = conf("apiv2");
        apiv2.path_prefix = Some("/api/v2".into());
        let mut lan = conf("lan");
        lan.sources = vec!["10.0.0.0/16".into()];
        let rest = conf("rest");
        let set = build(&[gold, api, apiv2, lan, rest], Some("rest")).unwrap();
        let k = &set.classifier;
        let mut h = hyper::HeaderMap::new();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(k.classify(ip("192.0.2.1"), None, "/", &h), 4, "default");
        assert_eq!(k.classify(ip("10.0.9.9"), None, "/", &h), 3, "the /16");
        assert_eq!(
            k.classify(ip("10.0.1.9"), None, "/", &h),
            0,
            "the /24 beats the /16"
        );
        assert_eq!(
            k.classify(ip("10.0.1.9"), None, "/api/x", &h),
            1,
            "path before source"
        );
        assert_eq!(
            k.classify(ip("10.0.1.9"), None, "/api/v2/x", &h),
            2,
            "longest path"
        );
        h.insert("x-class", "silver".parse().unwrap());
        assert_eq!(k.classify(ip("192.0.2.1"), None, "/api/v2", &h), 2);
        h.append("x-class", "gold".parse().unwrap());
        assert_eq!(
            k.classify(ip("192.0.2.1"), None, "/api/v2", &h),
            0,
            "header first"
        );
    }

    /// A client certificate's subject comes before every other rule, compared exactly; two
    /// classes cannot share one, and an empty one is refused.
    #[test]
    fn a_client_subject_rule_decides_first_and_exactly() {
        let mut gold = conf("gold");
        gold.client_subject = Some("client-a".into());
        let mut api = conf("api");
        api.path_prefix = Some("/api".into());
        let set = build(&[gold.clone(), api, conf("rest")], None).unwrap();
        let k = &set.classifier;
        let h = hyper::HeaderMap::new();
        let ip = "192.0.2.1".parse::<IpAddr>().unwrap();
        assert!(!k.is_trivial());
        assert_eq!(k.classify(ip, Some("client-a"), "/api", &h), 0);
        assert_eq!(k.classify(ip, Some("Client-A"), "/api", &h), 1);
        assert_eq!(k.classify(ip, Some("client-a2"), "/", &h), 2);
        assert_eq!(k.classify(ip, None, "/", &h), 2);
        let mut twin = conf("twin");
        twin.client_subject = Some("client-a".into());
        assert_eq!(
            build(&[gold.clone(), twin, conf("rest")], None).unwrap_err(),
            "class[1] (\"twin\").client_subject = \"client-a\": the same subject as class[0] \
             (\"gold\")"
        );
        gold.client_subject = Some(String::new());
        let e = build(&[gold, conf("rest")], None).unwrap_err();
        assert!(e.contains("client_subject = \"\": 1 to 1024 bytes"), "{e}");
    }

    /// Every bad input of the issue, each error naming the key and the value.
    #[test]
    fn bad_classes_are_refused_naming_key_and_value() {
        let with = |f: fn(&mut ClassConf)| {
            let mut a = conf("a");
            a.sources = vec!["10.0.0.0/8".into()];
            f(&mut a);
            build(&[a, conf("b")], None).unwrap_err()
        };
        let e = with(|a| a.percentile = Some(0));
        assert_eq!(
            e,
            "class[0] (\"a\").percentile = 0: must be in 1..=100 (percent)"
        );
        let e = with(|a| a.percentile = Some(101));
        assert!(e.contains("percentile = 101"), "{e}");
        let e = with(|a| a.percentile = None);
        assert!(e.contains("percentile = (missing)"), "{e}");
        let e = with(|a| a.deadline = Some("0ms".into()));
        assert!(e.contains("deadline = \"0ms\""), "{e}");
        let e = with(|a| a.deadline = Some("2s".into()));
        assert!(
            e.contains("deadline = \"2s\"") && e.contains("queue timeout"),
            "{e}"
        );
        let e = with(|a| {
            a.queue_timeout = Some("100ms".into());
            a.deadline = Some("200ms".into());
        });
        assert!(
            e.contains("deadline = \"200ms\""),
            "beyond the class's own timeout: {e}"
        );
        let e = with(|a| a.deadline = Some("soon".into()));
        assert!(e.contains("deadline = \"soon\""), "{e}");
        let e = with(|a| a.max_hold = Some("0ms".into()));
        assert_eq!(
            e,
            "class[0] (\"a\").max_hold = \"0ms\": \"off\", \"deadline\" or a duration above zero: got zero"
        );
        let e = with(|a| a.max_hold = Some("later".into()));
        assert!(e.contains("max_hold = \"later\""), "{e}");
        let e = with(|a| a.max_hold = Some("2s".into()));
        assert!(
            e.contains("max_hold = \"2s\"") && e.contains("queue timeout (1s)"),
            "{e}"
        );
        let e = with(|a| a.sources.push("10.0.0.0/8".into()));
        assert!(
            e.contains("sources[1]") && e.contains("listed twice"),
            "{e}"
        );
        let e = with(|a| a.sources.push("10.0.0.1/8".into()));
        assert!(e.contains("10.0.0.1/8") && e.contains("host bits"), "{e}");
        let e = with(|a| a.queue_limit = Some(101));
        assert!(e.contains("queue_limit = 101"), "{e}");
        let e = with(|a| a.queue_timeout = Some("5s".into()));
        assert!(e.contains("queue_timeout = \"5s\""), "{e}");
        let e = with(|a| a.path_prefix = Some("api".into()));
        assert!(e.contains("path_prefix = \"api\""), "{e}");
        let e = with(|a| a.name = "b".into());
        assert!(e.contains("used twice"), "{e}");
        let e = with(|a| {
            a.header = Some(HeaderRule {
                name: "bad name".into(),
                value: "x".into(),
            })
        });
        assert!(e.contains("header = { name = \"bad name\""), "{e}");
        // The same network in two classes; a class matched by nothing; unknown default.
        let mut a = conf("a");
        a.sources = vec!["10.0.0.0/8".into()];
        let mut b = conf("b");
        b.sources = vec!["10.0.0.0/8".into()];
        let e = build(&[a.clone(), b, conf("c")], None).unwrap_err();
        assert!(
            e.contains("class[1]") && e.contains("also in class[0]"),
            "{e}"
        );
        let e = build(&[conf("lost"), a.clone()], Some("a")).unwrap_err();
        assert_eq!(
            e,
            "class[0] (\"lost\"): matched by nothing (give it sources, header, path_prefix or \
             client_subject, or make it default_class)"
        );
        let e = build(&[a.clone(), conf("c")], Some("gold")).unwrap_err();
        assert_eq!(e, "default_class = \"gold\": no [[class]] has that name");
        let e = ClassSet::build(QueueKind::Priority, &[], None, B).unwrap_err();
        assert_eq!(
            e.to_string(),
            "discipline = \"strict_priority\": needs at least one [[class]] table"
        );
        let many: Vec<ClassConf> = (0..65).map(|i| conf(&format!("c{i}"))).collect();
        assert!(build(&many, None).unwrap_err().contains("at most 64"));
    }

    /// No classes: one implicit class with the balancer's bounds; default deadline is auto.
    #[test]
    fn no_classes_is_one_class_and_deadline_defaults_to_auto() {
        let set = ClassSet::build(QueueKind::Fifo, &[], None, B).unwrap();
        assert_eq!(set.specs.len(), 1);
        assert_eq!(set.specs[0].name, IMPLICIT_CLASS);
        assert!(set.classifier.is_trivial());
        let mut a = conf("a");
        a.sources = vec!["10.0.0.0/8".into()];
        a.deadline = Some("200ms".into());
        let set = build(&[a, conf("b")], None).unwrap();
        assert_eq!(
            set.specs[0].deadline,
            Deadline::Fixed(200 * netsched_core::MS)
        );
        assert_eq!(set.specs[1].deadline, Deadline::Auto);
        assert_eq!(set.specs[1].queue_limit, 100);
        assert_eq!(set.index_of("b"), Some(1));
        // max_hold: 1 s by default, no longer than the class's queue timeout; or as written.
        assert_eq!(set.specs[1].max_hold, MaxHold::Fixed(SEC));
        let mut a = conf("a");
        a.sources = vec!["10.0.0.0/8".into()];
        a.queue_timeout = Some("300ms".into());
        let mut b = conf("b");
        b.max_hold = Some("deadline".into());
        let set = build(&[a, b], None).unwrap();
        let ms = netsched_core::MS;
        assert_eq!(set.specs[0].max_hold, MaxHold::Fixed(300 * ms));
        assert_eq!(set.specs[1].max_hold, MaxHold::Deadline);
    }
}
