//! The live status page a daemon serves beside `/metrics`: `GET /` answers one self-contained
//! HTML page (`status.html`: inline CSS and script, nothing fetched from elsewhere, which the
//! page's Content-Security-Policy enforces) and `GET /status.json` answers the samples the page
//! draws.
//!
//! Why the JSON is made from the exposition: it is built by rendering the same registry a
//! scrape renders and reading it back ([`crate::parse_exposition`]), so a number on the page is
//! the number `/metrics` gives at that instant, and no daemon keeps a second way to read its
//! counters. It runs on the listener's connection thread, never on a packet path. Histogram
//! buckets are left out (the page shows `_sum / _count`) and so is every family outside the
//! daemon's prefix. Each daemon supplies a [`Page`]: its prefix and a layout (JSON: which
//! families make which table, column and summary figure), which the page's script reads.
//!
//! Bounds: the JSON is at most [`MAX_STATUS_BYTES`] (beyond it the answer is 503 and says
//! so; the page shows the error); the page itself is a constant.

use crate::{parse_exposition, render, Shared};
use std::fmt::Write as _;
use std::time::Instant;

/// Largest `/status.json` answered; a registry whose samples need more gets 503.
pub const MAX_STATUS_BYTES: usize = 4 << 20;

const PAGE: &str = include_str!("status.html");
/// Where `status.html` takes the daemon's layout.
const LAYOUT_SLOT: &str = "/*LAYOUT*/null";

/// A daemon's status page: the prefix of its families and the layout its page draws.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    /// Families whose name starts with this are sent to the page (e.g. `netsched_balance_`).
    pub prefix: &'static str,
    /// JSON object read by the page's script: `title`, `summary` and `tables` (status.html
    /// documents the fields).
    pub layout: &'static str,
}

impl Page {
    /// The HTML page with this layout in it. `</` is escaped so a layout can never close
    /// the script element it sits in.
    pub fn html(&self) -> String {
        PAGE.replacen(LAYOUT_SLOT, &self.layout.replace("</", "<\\/"), 1)
    }
}

/// The body of `/status.json`: `{"uptime_ms":…,"samples":[[name,{label:value},value],…]}`,
/// or the reason it cannot be answered (too large).
pub fn status_json(registry: &Shared, page: &Page, started: Instant) -> Result<String, String> {
    let text = render(registry);
    let samples = parse_exposition(&text).map_err(|e| format!("exposition: {e}"))?;
    let mut out = String::with_capacity(text.len() / 2 + 64);
    let _ = write!(
        out,
        "{{\"uptime_ms\":{},\"samples\":[",
        started.elapsed().as_millis()
    );
    let mut first = true;
    for s in samples
        .iter()
        .filter(|s| s.name.starts_with(page.prefix) && !s.name.ends_with("_bucket"))
    {
        if !first {
            out.push(',');
        }
        first = false;
        out.push('[');
        string(&mut out, &s.name);
        out.push_str(",{");
        for (i, (k, v)) in s.labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            string(&mut out, k);
            out.push(':');
            string(&mut out, v);
        }
        out.push_str("},");
        if s.value.is_finite() {
            let _ = write!(out, "{}", s.value);
        } else {
            out.push_str("null");
        }
        out.push(']');
        if out.len() > MAX_STATUS_BYTES {
            return Err(format!(
                "status is larger than {MAX_STATUS_BYTES} bytes; read /metrics instead"
            ));
        }
    }
    out.push_str("]}");
    Ok(out)
}

/// A JSON string literal.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '<' => out.push_str("\\u003c"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;
    use std::sync::{Arc, Mutex};

    const PAGE_T: Page = Page {
        prefix: "demo_",
        layout: r#"{"title":"demo </script>"}"#,
    };

    #[test]
    fn json_has_the_prefixed_samples_without_buckets_and_escapes_markup() {
        let mut reg = Registry::default();
        let f: Family<Vec<(String, String)>, Counter> = Family::default();
        reg.register("demo_requests", "R", f.clone());
        reg.register("other_requests", "O", Counter::<u64>::default());
        let h = Histogram::new([0.1, 1.0].into_iter());
        reg.register("demo_response_seconds", "H", h.clone());
        f.get_or_create(&vec![("backend".into(), "a<b&c".into())])
            .inc_by(3);
        h.observe(0.5);
        let shared: Shared = Arc::new(Mutex::new(reg));
        let j = status_json(&shared, &PAGE_T, Instant::now()).unwrap();
        assert!(
            j.contains(r#"["demo_requests_total",{"backend":"a\u003cb&c"},3]"#),
            "{j}"
        );
        assert!(j.contains(r#"["demo_response_seconds_sum",{},0.5]"#), "{j}");
        assert!(j.contains(r#"["demo_response_seconds_count",{},1]"#), "{j}");
        assert!(!j.contains("_bucket") && !j.contains("other_"), "{j}");
        assert!(j.starts_with("{\"uptime_ms\":") && j.ends_with("]}"), "{j}");
    }

    #[test]
    fn the_layout_goes_into_the_page_and_cannot_close_its_script() {
        let html = PAGE_T.html();
        assert!(!html.contains(LAYOUT_SLOT));
        assert!(
            html.contains(r#"{"title":"demo <\/script>"}"#),
            "layout not in the page"
        );
        assert!(!html.contains("demo </script>"));
        // Self-contained: nothing loaded from another origin.
        for bad in ["http://", "https://", "src=\"//"] {
            assert!(!html.contains(bad), "page refers to {bad}");
        }
    }

    #[test]
    fn a_status_larger_than_the_bound_is_refused_with_the_reason() {
        let mut reg = Registry::default();
        let f: Family<Vec<(String, String)>, Counter> = Family::default();
        reg.register("demo_requests", "R", f.clone());
        let long = "x".repeat(1000);
        for i in 0..(MAX_STATUS_BYTES / 1000 + 10) {
            f.get_or_create(&vec![("backend".into(), format!("{long}{i}"))])
                .inc();
        }
        let shared: Shared = Arc::new(Mutex::new(reg));
        let e = status_json(&shared, &PAGE_T, Instant::now()).unwrap_err();
        assert!(e.contains("larger than") && e.contains("/metrics"), "{e}");
    }
}
