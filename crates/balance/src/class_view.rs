//! The control commands on service classes: `show-classes [--json]` (the per-class rows of
//! the request queue as a table or as JSON) and `set-class NAME percentile|deadline VALUE`.

use crate::classes::QueueKind;
use crate::queue::ClassView;
use crate::service::Service;
use serde::Serialize;

const SHOW: &str = "show-classes [--json]";
const SET: &str = "set-class NAME percentile P|deadline auto|DURATION";

/// Run `show-classes` or `set-class` (`w`: the words of the line); `Err` names what is wrong.
pub fn command(w: &[&str], svc: &Service) -> Result<String, String> {
    if w.first() == Some(&"show-classes") {
        if let Some(o) = w.get(1).filter(|o| **o != "--json") {
            return Err(format!(
                "show-classes: unknown option {o:?} (usage: {SHOW})"
            ));
        }
        if let Some(x) = w.get(2) {
            return Err(format!(
                "show-classes: unexpected argument {x:?} (usage: {SHOW})"
            ));
        }
        let json = w.get(1) == Some(&"--json");
        return render(svc.queue_kind(), &svc.show_classes(), json)
            .map_err(|e| format!("writing the classes as JSON: {e}"));
    }
    let missing = |what: &str| format!("set-class: missing {what} (usage: {SET})");
    let name = w.get(1).ok_or_else(|| missing("class name"))?;
    let field = w.get(2).ok_or_else(|| missing("percentile|deadline"))?;
    let value = w.get(3).ok_or_else(|| missing("value"))?;
    if let Some(x) = w.get(4) {
        return Err(format!(
            "set-class: unexpected argument {x:?} (usage: {SET})"
        ));
    }
    let done = svc
        .set_class(name, field, value)
        .map_err(|e| format!("set-class: {e}"))?;
    Ok(format!("{done} (from the next decision)\n"))
}

#[derive(Serialize)]
struct Classes<'a> {
    discipline: &'static str,
    classes: &'a [ClassView],
}

/// The answer of `show-classes [--json]`.
pub fn render(
    kind: QueueKind,
    rows: &[ClassView],
    json: bool,
) -> Result<String, serde_json::Error> {
    if json {
        let doc = Classes {
            discipline: kind.name(),
            classes: rows,
        };
        return serde_json::to_string_pretty(&doc).map(|s| s + "\n");
    }
    let mut out = format!("discipline {}\n", kind.name());
    out += &format!(
        "{:<16} {:>3} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>9} {:>8} {}\n",
        "class",
        "P",
        "deadline",
        "now_ms",
        "N",
        "S",
        "fail",
        "attainment",
        "queued",
        "max_hold",
        "by_hold",
        "refused"
    );
    for r in rows {
        let refused: Vec<String> = r
            .refused
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(why, n)| format!("{why}={n}"))
            .collect();
        out += &format!(
            "{:<16} {:>3} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10.3} {:>7} {:>9} {:>8} {}\n",
            r.name,
            r.percentile,
            r.deadline,
            r.deadline_now_ns
                .map_or("-".to_string(), |d| format!("{:.3}", d as f64 / 1e6)),
            r.n,
            r.s,
            r.fail,
            r.attainment,
            r.queued,
            r.max_hold,
            r.served_by_max_hold,
            if refused.is_empty() {
                "-".to_string()
            } else {
                refused.join(",")
            }
        );
    }
    Ok(out)
}
