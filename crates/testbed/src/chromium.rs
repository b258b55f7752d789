//! Debian's headless Chromium, for the tests of the daemons' status pages: load a page (inside
//! a namespace when the daemon runs in one), let its script run for a budget of virtual time,
//! and read the DOM it built, or save a screenshot. Each run gets a profile folder of its own
//! (`--user-data-dir`, removed afterwards) and is a [`Process`]: stopped with its whole process
//! group after its time limit or when dropped, also when the test fails; any process still
//! naming the profile folder afterwards is killed by id.
//!
//! [`cells`], [`figures`] and [`shown_number`] read what the page shows back into numbers:
//! the page marks its table rows `data-row`, cells `data-col` and summary figures `data-sum`.

use crate::{process::Process, processes_with, TempDir};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where Debian's `chromium` package installs the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Why the browser cannot run here, if it cannot (the reason a test prints when it skips).
pub fn unavailable() -> Option<String> {
    if Path::new(CHROMIUM).exists() {
        None
    } else {
        Some(format!(
            "{CHROMIUM} not found (Debian package `chromium`; scripts/test installs it)"
        ))
    }
}

/// For a test that needs the browser: `true` if it may run. Without chromium it prints why it
/// skips — unless `CI=true`, where every test must run (scripts/test installs chromium), so it
/// panics instead.
pub fn test_allowed(test: &str) -> bool {
    let Some(why) = unavailable() else {
        return true;
    };
    if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
        panic!("{test}: {why}, and CI=true requires it to run");
    }
    eprintln!("SKIP {test}: {why}");
    false
}

/// Load `url` (from inside namespace `ns` when given), run its script for `budget` of virtual
/// time, and return the DOM it serialized. The browser is stopped after `limit`.
pub fn dump_dom(ns: Option<&str>, url: &str, budget: Duration, limit: Duration) -> Result<String> {
    dump_dom_with(ns, url, &[], budget, limit)
}

/// [`dump_dom`] with more switches for the browser (say `--ignore-certificate-errors-spki-list=…`
/// for a test's own certificate).
pub fn dump_dom_with(
    ns: Option<&str>,
    url: &str,
    switches: &[&str],
    budget: Duration,
    limit: Duration,
) -> Result<String> {
    let budget = format!("--virtual-time-budget={}", budget.as_millis());
    let mut args = vec!["--dump-dom", &budget];
    args.extend_from_slice(switches);
    args.push(url);
    let dom = run(ns, &args, limit)?;
    if !dom.contains("<html") {
        bail!("chromium printed no page for {url}: {dom:.200}");
    }
    Ok(dom)
}

/// Load `url` at `width`×`height`, run its script for `budget` of virtual time, and save a PNG
/// screenshot to `png`.
pub fn screenshot(
    ns: Option<&str>,
    url: &str,
    png: &Path,
    (width, height): (u32, u32),
    budget: Duration,
    limit: Duration,
) -> Result<()> {
    let shot = format!("--screenshot={}", png.display());
    let size = format!("--window-size={width},{height}");
    let budget = format!("--virtual-time-budget={}", budget.as_millis());
    let _ = std::fs::remove_file(png);
    run(
        ns,
        &[&shot, &size, "--hide-scrollbars", &budget, url],
        limit,
    )?;
    if !png.exists() {
        bail!("chromium saved no screenshot of {url} at {}", png.display());
    }
    Ok(())
}

/// One browser run with a profile of its own; returns its stdout.
fn run(ns: Option<&str>, args: &[&str], limit: Duration) -> Result<String> {
    if let Some(why) = unavailable() {
        bail!("{why}");
    }
    let profile = TempDir::new("chromium")?;
    let dir = format!("--user-data-dir={}", profile.path().display());
    let mut argv = vec![
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        &dir,
    ];
    argv.extend_from_slice(args);
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).args(&argv);
            c
        }
        None => {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = Process::start(cmd, "chromium")
        .and_then(|p| p.finish(limit))
        .context("headless chromium");
    // Whatever the browser forked outside its group: found by the profile folder it names.
    let left = processes_with(&profile.path().display().to_string());
    for pid in &left {
        crate::sys::signal_pid(*pid, libc::SIGKILL);
    }
    let out = out?;
    if !left.is_empty() {
        bail!("chromium left processes {left:?} behind (killed)");
    }
    Ok(out)
}

/// Undo the entities Chromium writes in text.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The text of the element whose opening tag holds `attr` at `at` (up to its closing tag).
fn text_after(dom: &str, at: usize) -> Option<String> {
    let open_end = at + dom[at..].find('>')?;
    let rest = &dom[open_end + 1..];
    let end = rest.find('<')?;
    Some(unescape(&rest[..end]))
}

/// The value of attribute `name` in the tag around `at`.
fn attr_value<'a>(dom: &'a str, at: usize, name: &str) -> Option<&'a str> {
    let pat = format!("{name}=\"");
    let s = at + dom[at..].find(&pat)? + pat.len();
    let e = s + dom[s..].find('"')?;
    Some(&dom[s..e])
}

/// Every table cell of the page: (row key, column id) → the text shown.
pub fn cells(dom: &str) -> HashMap<(String, String), String> {
    let mut out = HashMap::new();
    for (i, _) in dom.match_indices("<tr data-row=\"") {
        let Some(row) = attr_value(dom, i, "data-row") else {
            continue;
        };
        let end = dom[i..].find("</tr>").map(|e| i + e).unwrap_or(dom.len());
        for (j, _) in dom[i..end].match_indices("data-col=\"") {
            let at = i + j;
            if let (Some(col), Some(text)) = (attr_value(dom, at, "data-col"), text_after(dom, at))
            {
                out.insert((unescape(row), col.to_string()), text);
            }
        }
    }
    out
}

/// Every summary figure of the page: id → the text shown.
pub fn figures(dom: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (i, _) in dom.match_indices("data-sum=\"") {
        if let (Some(id), Some(text)) = (attr_value(dom, i, "data-sum"), text_after(dom, i)) {
            out.insert(id.to_string(), text);
        }
    }
    out
}

/// How many times the page has drawn fresh data (`data-refreshes` on its body).
pub fn refreshes(dom: &str) -> u64 {
    dom.find("<body")
        .and_then(|i| attr_value(dom, i, "data-refreshes"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A number as the page shows it, in the unit `/metrics` uses: `12.5 ms` → 0.0125 and `2.5 s`
/// → 2.5 (seconds),
/// `97.5 %` → 0.975, `1.5 kbit/s` → 1500, `3/s` → 3, `42` → 42. `–` (nothing yet) and words
/// are `None`.
pub fn shown_number(text: &str) -> Option<f64> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let (n, unit) = match t.split_once(' ') {
        Some((n, u)) => (n, u),
        None => (t, ""),
    };
    let v: f64 = n.parse().ok()?;
    let prefix = |u: &str| match u.chars().next() {
        Some('k') => 1e3,
        Some('M') => 1e6,
        Some('G') => 1e9,
        _ => 1.0,
    };
    Some(match unit {
        "" | "bit" | "B" | "s" => v,
        "ms" => v / 1e3,
        "%" => v / 100.0,
        u if u.ends_with("bit") || u.ends_with('B') => v * prefix(u),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_figures_and_numbers_are_read_back_from_a_serialized_page() {
        let dom = r#"<html><body data-refreshes="3"><div data-sum="queued" class="v ">7</div>
<table><tr data-row="s&amp;1"><td>s1</td><td data-col="state" class="">ready</td>
<td data-col="rt" class="">1.5 ms</td></tr><tr data-row="s2"><td data-col="rate" class="">–</td></tr>
</table></body></html>"#;
        let c = cells(dom);
        assert_eq!(c[&("s&1".into(), "state".into())], "ready");
        assert_eq!(c[&("s&1".into(), "rt".into())], "1.5 ms");
        assert_eq!(c[&("s2".into(), "rate".into())], "–");
        assert_eq!(c.len(), 3);
        assert_eq!(figures(dom)["queued"], "7");
        assert_eq!(refreshes(dom), 3);
        assert_eq!(shown_number("1.5 ms"), Some(0.0015));
        assert_eq!(shown_number("7.864 s"), Some(7.864));
        assert_eq!(shown_number("97.5 %"), Some(0.975));
        assert_eq!(shown_number("1.5 kbit/s"), Some(1500.0));
        assert_eq!(shown_number("2 MB"), Some(2e6));
        assert_eq!(shown_number("42"), Some(42.0));
        assert_eq!(shown_number("2.5/s"), Some(2.5));
        assert_eq!(shown_number("–"), None);
        assert_eq!(shown_number("up"), None);
    }
}
