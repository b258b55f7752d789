//! Property tests: whatever bytes a trace or a configuration holds, `netsched replay` returns
//! an error or a result, never a panic; broken input (binary, empty, out-of-range numbers) is
//! an error.

use crate::config::parse_toml;
use crate::replay_balance::{self, BalanceReplayConfig};
use crate::replay_qdisc::{self, QdiscReplayConfig};
use crate::trace::TraceReader;
use anyhow::Result;
use netsched_core::qdisc::QdiscKind;
use proptest::prelude::*;

const FIFO: &str = "[qdisc]\nkind = \"fifo\"\nqueue_limit = 4\n[service]\nrate = \"1mbit\"\n";
const WLC: &str = "[balancer]\nkind = \"wlc\"\n[[servers]]\naddr = \"10.0.0.1\"\n\
                   [[servers]]\naddr = \"10.0.0.2\"\nweight = 2\n";

fn replay_qdisc(config: &[u8], trace: &[u8], json: bool) -> Result<Vec<u8>> {
    let cfg: QdiscReplayConfig = parse_toml("c.toml", config)?;
    let (q, service) = replay_qdisc::setup("c.toml", &cfg)?;
    let mut tr = TraceReader::new("t".into(), trace, json);
    let mut out = Vec::new();
    replay_qdisc::replay(q, service, &mut tr, &mut out)?;
    Ok(out)
}

fn replay_balance(config: &[u8], trace: &[u8], json: bool) -> Result<Vec<u8>> {
    let cfg: BalanceReplayConfig = parse_toml("c.toml", config)?;
    let (b, table) = replay_balance::setup("c.toml", &cfg)?;
    let mut tr = TraceReader::new("t".into(), trace, json);
    let mut out = Vec::new();
    replay_balance::replay(&cfg, b, table, &mut tr, &mut out)?;
    Ok(out)
}

/// Text a field might hold: huge and negative numbers, floats, units, garbage.
fn field_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| format!("{v}ns")),
        any::<i64>().prop_map(|v| format!("{v}ms")),
        any::<f64>().prop_map(|v| format!("{v}s")),
        Just("18446744073709551616".to_string()),
        Just("1e400s".to_string()),
        Just("NaNs".to_string()),
        Just("-0ms".to_string()),
        "[ -~]{0,12}",
    ]
}

/// A number that is out of range for the field it is put in (so the row must be refused).
fn bad_number(field: usize) -> BoxedStrategy<String> {
    match field {
        // time: no unit, or beyond 30 days
        0 => prop_oneof![
            (1u64..).prop_map(|v| v.to_string()),
            (2_592_000_001u64..u64::MAX / 1_000_000_000).prop_map(|s| format!("{s}s")),
            Just(format!("{}ns", u64::MAX)),
        ]
        .boxed(),
        // size: beyond u32::MAX bytes, or negative
        1 => prop_oneof![
            (u64::from(u32::MAX) + 1..).prop_map(|v| v.to_string()),
            (1i64..).prop_map(|v| format!("-{v}")),
        ]
        .boxed(),
        // id: beyond u64::MAX or negative
        _ => prop_oneof![
            Just("18446744073709551616".to_string()),
            (1u64..).prop_map(|v| format!("-{v}")),
            Just("1.5".to_string()),
        ]
        .boxed(),
    }
}

/// A `[qdisc]` body of `kind` with `v` in every number it has (limits, quanta, weights,
/// deadlines, batch): exhaustive, so a new kind is fuzzed here too.
fn qdisc_with(kind: QdiscKind, v: u64) -> String {
    let lim = format!("queue_limit = {v}, size_limit = {v}");
    let body = match kind {
        QdiscKind::Fifo => format!("queue_limit = {v}\nsize_limit = {v}"),
        QdiscKind::StrictPriority => format!("bands = [{{ {lim} }}, {{ {lim} }}]"),
        QdiscKind::Drr => format!("classes = [{{ quantum = {v}, {lim} }}, {{ quantum = 1 }}]"),
        QdiscKind::Wf2qPlus => format!("classes = [{{ weight = {}, {lim} }}, {{ weight = 1 }}]", v.min(u64::from(u32::MAX))),
        QdiscKind::Edf => format!("drop_expired = true\nclasses = [{{ deadline = \"{v}us\", {lim} }}, {{ deadline = \"1us\" }}]"),
        QdiscKind::AckSeparation => format!("ack = {{ {lim} }}\nother = {{ {lim} }}\nack_filter = true"),
        QdiscKind::Percentile => format!("percentiles = [{}, 50]\nqueue_limit = {v}\ndeadline = {{ ns = {v} }}", v.min(100)),
        QdiscKind::DelayConstrained => format!(
            "batch = {v}\ninterfaces = [{{ priority = 1, bitmap_len = {}, queue_limit = {v} }}, {{ priority = 2, bitmap_len = 2 }}]",
            v.min(u64::from(u32::MAX))
        ),
    };
    format!("kind = \"{}\"\n{body}", kind.name())
}

/// The extreme configs are not all refused: some of them replay, so the test reaches the
/// disciplines and not only the parsers.
#[test]
fn extreme_configs_reach_the_disciplines() {
    let trace = b"time,class,size,id\n0,0,100,1\n1ms,1,100,2\n";
    for &kind in QdiscKind::ALL {
        let q = format!(
            "[qdisc]\n{}\n[service]\nrate = \"1mbit\"\n",
            qdisc_with(kind, 2)
        );
        let ok = replay_qdisc(q.as_bytes(), trace, false);
        assert!(ok.is_ok(), "{kind}: {:?}\n{q}", ok.err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_trace_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512),
                                         json in any::<bool>()) {
        let _ = replay_qdisc(FIFO.as_bytes(), &bytes, json);
        let _ = replay_balance(WLC.as_bytes(), &bytes, json);
        let mut csv = b"time,class,size,id\n".to_vec();
        csv.extend(&bytes);
        let _ = replay_qdisc(FIFO.as_bytes(), &csv, false);
    }

    #[test]
    fn arbitrary_fields_never_panic(cells in proptest::collection::vec((field_text(), field_text(),
                                        field_text(), field_text()), 0..8)) {
        let mut csv = String::from("time,class,size,id\n");
        let mut jsonl = String::new();
        let mut conns = String::from("time,event,conn,client,dest\n");
        for (t, c, s, i) in &cells {
            csv.push_str(&format!("{t},{c},{s},{i}\n"));
            jsonl.push_str(&serde_json::json!({"time": t, "class": c, "size": s, "id": i}).to_string());
            jsonl.push('\n');
            conns.push_str(&format!("{t},open,{i},{c}:1,{s}:2\n"));
        }
        let _ = replay_qdisc(FIFO.as_bytes(), csv.as_bytes(), false);
        let _ = replay_qdisc(FIFO.as_bytes(), jsonl.as_bytes(), true);
        let _ = replay_balance(WLC.as_bytes(), conns.as_bytes(), false);
    }

    /// A row whose time, size or id is out of range is an error naming its line and field.
    #[test]
    fn out_of_range_numbers_are_errors((field, bad) in (0usize..3).prop_flat_map(|f| (Just(f), bad_number(f))),
                                       json in any::<bool>()) {
        let mut row = ["1ms".to_string(), "0".to_string(), "100".to_string(), "7".to_string()];
        row[[0, 2, 3][field]] = bad.clone();
        let name = ["time", "size", "id"][field];
        let trace = if json {
            format!("{{\"time\":\"0\",\"class\":0,\"size\":1,\"id\":1}}\n{}\n",
                    serde_json::json!({"time": row[0], "class": row[1], "size": row[2], "id": row[3]}))
        } else {
            format!("time,class,size,id\n0,0,1,1\n{}\n", row.join(","))
        };
        let err = replay_qdisc(FIFO.as_bytes(), trace.as_bytes(), json).unwrap_err().to_string();
        let line = if json { "t:2:" } else { "t:3:" };
        prop_assert!(err.contains(line) && err.contains(&format!("`{name}`")), "{}", err);
    }

    /// Binary (non-UTF-8) and empty traces are errors.
    #[test]
    fn binary_and_empty_traces_are_errors(prefix in "[a-z,]{0,20}", bad in 0x80u8..0xc0,
                                          blank in "[ \n#]{0,8}") {
        let mut bytes = prefix.into_bytes();
        bytes.push(bad);
        prop_assert!(replay_qdisc(FIFO.as_bytes(), &bytes, false).is_err());
        prop_assert!(replay_balance(WLC.as_bytes(), &bytes, true).is_err());
        let blank = if blank.contains('#') { blank.replace('#', "\n#") } else { blank };
        prop_assert!(replay_qdisc(FIFO.as_bytes(), blank.as_bytes(), false).is_err());
    }

    #[test]
    fn arbitrary_config_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let trace = b"time,class,size,id\n0,0,100,1\n";
        let _ = replay_qdisc(&bytes, trace, false);
        let _ = replay_balance(&bytes, b"time,event,conn,client,dest\n0,open,1,1.2.3.4:5,6.7.8.9:10\n", false);
    }

    /// Every qdisc and balancer kind with huge or zero numbers in its options: an error or a
    /// replay, never a panic or an attempt to allocate the number.
    #[test]
    fn configs_with_extreme_numbers_never_panic(
        qkind in proptest::sample::select(QdiscKind::ALL),
        bkind in proptest::sample::select(netsched_core::balance::BalancerKind::ALL),
        field in proptest::sample::select(&["queue_limit", "size_limit", "batch", "table_bits",
                                            "table_size", "max_entries", "expiration_ms",
                                            "active_weight"][..]),
        value in prop_oneof![Just(0u64), Just(1), Just(u64::from(u32::MAX)), Just(i64::MAX as u64)],
        rate in field_text(),
    ) {
        let trace = b"time,class,size,id\n0,0,100,1\n1ms,1,100,2\n";
        let q = format!("[qdisc]\n{}\n[service]\nrate = \"{rate}\"\n", qdisc_with(qkind, value));
        let _ = replay_qdisc(q.as_bytes(), trace, false);
        let q = format!("[qdisc]\nkind = \"{}\"\n{field} = {value}\n[service]\nrate = \"1mbit\"\n",
                        qkind.name());
        let _ = replay_qdisc(q.as_bytes(), trace, false);
        let b = format!("[balancer]\nkind = \"{}\"\n{field} = {value}\n[[servers]]\naddr = \"10.0.0.1\"\n",
                        bkind.name());
        let _ = replay_balance(b.as_bytes(), b"time,event,conn,client,dest\n0,open,1,1.2.3.4:5,6.7.8.9:10\n", false);
    }
}
