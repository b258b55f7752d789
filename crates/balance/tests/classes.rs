//! Service classes on a running L7 balancer on loopback: a flood from one class leaves the
//! other its share, every request is counted once (N = S + fail), `show-classes`,
//! `set-class` and its refusals, per-class `/metrics`, and a reload that keeps the counters
//! of the classes that remain.

mod common;
use common::*;
use netsched_testbed::TempDir;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn ctl(r: &netsched_balance::Running, line: &str) -> Result<String, String> {
    netsched_balance::control::request(&r.control_socket, line).map_err(|e| e.to_string())
}

/// One request with `x-class: <class>`; (status, body).
async fn get_class(addr: SocketAddr, path: &str, class: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nx-class: {class}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    parse(&out)
}

/// `show-classes --json`, every number in it named with its unit (docs/cli.md).
fn classes_json(r: &netsched_balance::Running) -> Value {
    let v = serde_json::from_str(&ctl(r, "show-classes --json").unwrap()).unwrap();
    let bad = netsched_util::json_units::violations(&v);
    assert!(bad.is_empty(), "numbers without their unit: {bad:?}\n{v}");
    v
}

fn class<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no class {name}: {v}"))
}

fn config(dir: &TempDir, b: &Backend, queue: &str, classes: &str) -> String {
    config_text(
        "l7",
        "{ kind = \"wlc\" }",
        &format!("admin = \"127.0.0.1:0\"\ndiscipline = \"{queue}\"\ndefault_class = \"rest\""),
        &format!(
            "[timeouts]\nqueue = \"3s\"\n[defaults]\nmaxconn = 1\nqueue_limit = 100\n{classes}"
        ),
        &[b],
        dir,
    )
}

const CLASSES: &str = "\
[[class]]
name = \"flood\"
percentile = 50
queue_limit = 8
header = { name = \"x-class\", value = \"flood\" }

[[class]]
name = \"gold\"
percentile = 90
header = { name = \"x-class\", value = \"gold\" }

[[class]]
name = \"rest\"
percentile = 50
";

/// 16 clients of class `flood` loop on a backend held to one request at a time (20 ms each);
/// the flood's own `queue_limit` (8) refuses its excess, counted as `class_queue_full` of
/// that class, so it never fills the queue of the others. Meanwhile `gold` sends 10 requests
/// one after the other. Both classes have a 2 s deadline, which every request served meets:
/// the percentile queue then orders by target alone — gold (P = 90) with one request
/// waiting has `S/(N·P) ≤ 1/0.9·S/(S+1)`, the flood (P = 50) with 8 waiting
/// `S/((S+8)·0.5)`, higher as soon as it has served a few — so each gold request gets one of
/// the next slots and all are served, far inside the 3 s queue timeout. (With auto
/// deadlines P0 deliberately makes a class that is ahead of its target yield to one below
/// it; that equalisation is the unit test `queue::tests::a_flood_from_one_class_...`.)
/// Afterwards every class has N = S + fail (nothing in progress), and `/metrics` has the
/// per-class series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_class_leaves_the_other_its_share() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-classes-flood").unwrap();
    let classes = CLASSES
        .replace(
            "percentile = 50\nqueue_limit = 8",
            "percentile = 50\nqueue_limit = 8\ndeadline = \"2s\"",
        )
        .replace("percentile = 90", "percentile = 90\ndeadline = \"2s\"");
    assert_eq!(classes.matches("deadline").count(), 2);
    let r = start(&config(&dir, &b, "percentile", &classes), &dir).await;
    let addr = r.listen[0];
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood = Vec::new();
    for _ in 0..16 {
        let stop = stop.clone();
        flood.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) && n < 400 {
                let (s, _) = get_class(addr, "/sleep/20", "flood").await;
                if s != 200 {
                    // Refused at once: do not spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                n += 1;
            }
        }));
    }
    // Let the flood fill its share of the queue first.
    assert!(
        eventually(|| class(&classes_json(&r), "flood")["queued"].as_u64() >= Some(4)).await,
        "the flood never queued"
    );
    let mut gold = Vec::new();
    for _ in 0..10 {
        gold.push(get_class(addr, "/sleep/20", "gold").await);
    }
    stop.store(true, Ordering::SeqCst);
    for f in flood {
        f.await.unwrap();
    }
    for (s, body) in &gold {
        assert_eq!(
            (*s, body.as_str()),
            (200, "a"),
            "gold was refused: {gold:?}"
        );
    }
    assert!(
        eventually(|| {
            let v = classes_json(&r);
            v["classes"].as_array().unwrap().iter().all(|c| {
                c["n"].as_u64().unwrap() == c["s"].as_u64().unwrap() + c["fail"].as_u64().unwrap()
            })
        })
        .await,
        "counts do not add up: {}",
        classes_json(&r)
    );
    let v = classes_json(&r);
    assert_eq!(v["discipline"], "percentile");
    let (f, g) = (class(&v, "flood"), class(&v, "gold"));
    assert_eq!(g["n"], 10, "{v}");
    assert_eq!(
        g["served_at_once"].as_u64().unwrap() + g["served_from_queue"].as_u64().unwrap(),
        10
    );
    let refused = |c: &Value, why: &str| {
        c["refused"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p[0] == why)
            .map(|p| p[1].as_u64().unwrap())
            .unwrap()
    };
    assert!(refused(f, "class_queue_full") > 0, "{v}");
    assert_eq!(refused(g, "class_queue_full") + refused(g, "queue_full"), 0);
    let m = metrics_text(&r);
    assert_eq!(
        metric(&m, "netsched_balance_class_requests_total{class=\"gold\"}"),
        10.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "netsched_balance_class_refused_total{class=\"flood\",reason=\"class_queue_full\"}"
        ) > 0.0,
        "{m}"
    );
    assert!(
        m.contains("netsched_balance_class_wait_seconds_count{class=\"gold\"}"),
        "{m}"
    );
    assert!(
        m.contains("netsched_balance_class_attainment{class=\"gold\"}"),
        "{m}"
    );
}

/// `set-class` changes a target and a deadline (seen in `show-classes`), and refuses unknown
/// names, fields and values, naming them; `show-classes` refuses other options.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_class_and_show_classes_through_the_control_socket() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-classes-ctl").unwrap();
    let r = start(&config(&dir, &b, "percentile", CLASSES), &dir).await;
    assert_eq!(get_class(r.listen[0], "/", "gold").await.0, 200);
    let out = ctl(&r, "set-class gold percentile 75").unwrap();
    assert_eq!(out, "gold percentile 75 (from the next decision)\n");
    ctl(&r, "set-class gold deadline 150ms").unwrap();
    let v = classes_json(&r);
    let g = class(&v, "gold");
    assert_eq!(
        (g["percentile"].as_u64(), g["deadline"].as_str()),
        (Some(75), Some("150ms"))
    );
    assert_eq!(g["deadline_now_ns"].as_u64(), Some(150_000_000));
    assert_eq!(g["n"], 1);
    let table = ctl(&r, "show-classes").unwrap();
    assert!(table.starts_with("discipline percentile\n"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("gold ")), "{table}");
    for (line, want) in [
        (
            "set-class silver percentile 70",
            "no class \"silver\" (classes: flood, gold, rest)",
        ),
        (
            "set-class gold percentile 0",
            "percentile \"0\": must be a whole number in 1..=100",
        ),
        ("set-class gold percentile 101", "percentile \"101\""),
        ("set-class gold deadline 0ms", "deadline \"0ms\""),
        ("set-class gold deadline 5s", "deadline \"5s\""),
        ("set-class gold weight 3", "unknown field \"weight\""),
        ("set-class gold", "missing percentile|deadline"),
        (
            "set-class gold deadline 1s extra",
            "unexpected argument \"extra\"",
        ),
        ("show-classes --yaml", "unknown option \"--yaml\""),
    ] {
        let e = ctl(&r, line).unwrap_err();
        assert!(e.contains(want), "{line}: {e}");
    }
    // Nothing changed by the refused lines.
    let v = classes_json(&r);
    assert_eq!(class(&v, "gold")["percentile"], 75);
}

/// A reload with other classes rebuilds the queue: the class that remains keeps its
/// counters, the removed one is gone from `show-classes` and `/metrics`, the new one starts
/// at 0. A reload with the same classes changes settings in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_the_counters_of_classes_that_remain() {
    let b = http_backend("a").await;
    let dir = TempDir::new("bal-classes-reload").unwrap();
    let r = start(&config(&dir, &b, "percentile", CLASSES), &dir).await;
    for c in ["gold", "gold", "flood", "other"] {
        assert_eq!(get_class(r.listen[0], "/", c).await.0, 200);
    }
    let same = CLASSES.replace("percentile = 90", "percentile = 80");
    std::fs::write(
        dir.path().join("balance.toml"),
        config(&dir, &b, "percentile", &same),
    )
    .unwrap();
    let notes = r.reload().unwrap();
    assert!(
        notes.iter().any(|n| n == "class gold settings changed"),
        "{notes:?}"
    );
    let v = classes_json(&r);
    assert_eq!(
        (
            class(&v, "gold")["percentile"].as_u64(),
            class(&v, "gold")["n"].as_u64()
        ),
        (Some(80), Some(2))
    );
    let other = CLASSES
        .replace("name = \"flood\"", "name = \"silver\"")
        .replace("value = \"flood\"", "value = \"silver\"");
    std::fs::write(
        dir.path().join("balance.toml"),
        config(&dir, &b, "priority", &other),
    )
    .unwrap();
    let notes = r.reload().unwrap();
    assert!(
        notes.iter().any(|n| n == "class flood removed"),
        "{notes:?}"
    );
    let v = classes_json(&r);
    assert_eq!(v["discipline"], "strict_priority");
    assert_eq!(class(&v, "gold")["n"], 2);
    assert_eq!(
        class(&v, "gold")["s"].as_u64().unwrap() + class(&v, "gold")["fail"].as_u64().unwrap(),
        2
    );
    assert_eq!(class(&v, "rest")["n"], 1);
    assert_eq!(class(&v, "silver")["n"], 0);
    assert!(v["classes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "flood"));
    let m = metrics_text(&r);
    assert!(!m.contains("class=\"flood\""), "{m}");
    assert_eq!(
        metric(&m, "netsched_balance_class_requests_total{class=\"gold\"}"),
        2.0
    );
    assert_eq!(get_class(r.listen[0], "/", "gold").await.0, 200);
    assert_eq!(class(&classes_json(&r), "gold")["n"], 3);
}

/// Bad class configurations are refused at load, naming the file, key and value.
#[test]
fn bad_class_files_are_refused_naming_file_key_and_value() {
    let dir = TempDir::new("bal-classes-bad").unwrap();
    let base = "mode = \"l7\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = { kind = \"rr\" }\n";
    for (text, want) in [
        (
            "discipline = \"percentile\"\n[[class]]\nname = \"a\"\npercentile = 0\n",
            "class[0] (\"a\").percentile = 0: must be in 1..=100",
        ),
        (
            "discipline = \"lifo\"\n",
            "unknown variant `lifo`",
        ),
        (
            "default_class = \"gold\"\n[[class]]\nname = \"a\"\n",
            "default_class = \"gold\": no [[class]] has that name",
        ),
        (
            "[[class]]\nname = \"a\"\ndeadline = \"2s\"\nsources = [\"10.0.0.0/8\"]\n[[class]]\nname = \"b\"\n",
            "class[0] (\"a\").deadline = \"2s\"",
        ),
        (
            "[[class]]\nname = \"a\"\nsources = [\"10.0.0.0/8\"]\n[[class]]\nname = \"b\"\nsources = [\"10.0.0.0/8\"]\n[[class]]\nname = \"c\"\n",
            "class[1] (\"b\").sources = \"10.0.0.0/8\" (sources[0]): also in class[0]",
        ),
        (
            "[[class]]\nname = \"a\"\n[[class]]\nname = \"b\"\n",
            "class[0] (\"a\"): matched by nothing",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, format!("{base}{text}")).unwrap();
        let e = netsched_balance::config::Config::load(&path).unwrap_err().to_string();
        assert!(e.starts_with(&path.display().to_string()), "{e}");
        assert!(e.contains(want), "{text}: {e}");
    }
    let l4 = "mode = \"l4\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = { kind = \"rr\" }\ndiscipline = \"strict_priority\"\n";
    let path = dir.path().join("l4.toml");
    std::fs::write(&path, l4).unwrap();
    let e = netsched_balance::config::Config::load(&path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("only in mode \"l7\""), "{e}");
}

/// The example of docs/balance-classes.md ("Service classes and the queue discipline") is a valid
/// configuration with the classes it describes.
#[test]
fn the_documented_example_parses() {
    let doc = include_str!("../../../docs/balance-classes.md");
    let section = doc
        .split("## Service classes and the queue discipline")
        .nth(1)
        .expect("section");
    let example = section
        .split("```toml\n")
        .nth(1)
        .and_then(|t| t.split("```").next())
        .expect("example");
    let text = format!(
        "mode = \"l7\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = {{ kind = \"rr\" }}\n{example}"
    );
    let cfg = netsched_balance::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let set = cfg.class_set().unwrap();
    let names: Vec<&str> = set.specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["gold", "silver", "bronze"]);
    let h = hyper::HeaderMap::new();
    let ip = "10.0.1.7".parse().unwrap();
    assert_eq!(set.classifier.classify(ip, None, "/", &h), 1);
    assert_eq!(
        set.classifier
            .classify("192.0.2.1".parse().unwrap(), None, "/", &h),
        2
    );
}
