//! The parameters of `adsl-ack --real` (keys of the scenario's parameter object, all
//! optional, the scenario's `[topology]` table read too) and the TCP variants it runs
//! ("reno/88": congestion control / window clamp in packets).

use super::Variant;
use anyhow::{anyhow, bail, Result};
use serde::Serialize;
use serde_json::Value;

/// Parameters of the real experiment (keys of the scenario's parameter object; all optional).
#[derive(Debug, Clone, Serialize)]
pub struct RealParams {
    pub up_kbit: f64,
    pub down_kbit: f64,
    pub lan_kbit: f64,
    pub up_queue: usize,
    pub down_queue: usize,
    pub delay_ms: f64,
    pub duration_s: u32,
    /// Variants as "cc" or "cc/window" (e.g. "reno/88", "default/none").
    pub variants: Vec<String>,
    /// Run the strong-asymmetry set.
    pub strong: bool,
    pub strong_up_kbit: f64,
    pub strong_down_kbit: f64,
    pub strong_variant: String,
    pub ack_share_max: f64,
}

/// The first of `keys` present in `p` (a key may be a dotted path into nested objects, as the
/// scenario's `[topology]` table arrives: `topology.up_kbps`).
fn get_f64(p: &Value, keys: &[&str], default: f64) -> Result<f64> {
    for k in keys {
        let mut v = Some(p);
        for part in k.split('.') {
            v = v.and_then(|x| x.get(part));
        }
        if let Some(v) = v {
            return v
                .as_f64()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| anyhow!("parameter `{k}`: {v} is not a non-negative number"));
        }
    }
    Ok(default)
}

impl RealParams {
    pub fn from_json(p: &Value, quick: bool) -> Result<Self> {
        let variants = match p.get("real_variants") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| anyhow!("parameter `real_variants`: {v} is not a string"))
                })
                .collect::<Result<Vec<_>>>()?,
            Some(v) => bail!("parameter `real_variants`: {v} is not a list of strings"),
            None => vec![
                "reno/88".into(),
                "default/88".into(),
                "reno/none".into(),
                "default/none".into(),
                "reno/none/88".into(),
                "default/none/88".into(),
            ],
        };
        // The scenario's duration_s (70 s, the paper's) is for the simulator; real runs take
        // real time (25 runs), so they use real_duration_s, default 40 s (quick: 15 s).
        let duration = get_f64(p, &["real_duration_s"], if quick { 15.0 } else { 40.0 })?;
        let duration = if quick { duration.min(15.0) } else { duration };
        let rp = Self {
            up_kbit: get_f64(p, &["up_kbit", "topology.up_kbps"], 800.0)?,
            down_kbit: get_f64(p, &["down_kbit", "topology.down_kbps"], 2100.0)?,
            lan_kbit: get_f64(p, &["lan_kbit", "topology.lan_kbps"], 10_000.0)?,
            up_queue: get_f64(p, &["up_queue", "topology.uplink_fifo_packets"], 100.0)? as usize,
            // Not the scenario's large_queue_packets (1000): with 15–40 s runs a loss-based
            // download overshoots a 5.7 s buffer and spends the run recovering.
            down_queue: get_f64(p, &["real_down_queue"], 300.0)? as usize,
            delay_ms: get_f64(p, &["delay_ms", "topology.wan_delay_ms"], 10.0)?,
            duration_s: duration as u32,
            variants,
            strong: p
                .get("real_strong")
                .and_then(|v| v.as_bool())
                .unwrap_or(true),
            strong_up_kbit: get_f64(p, &["strong_up_kbit"], 128.0)?,
            strong_down_kbit: get_f64(p, &["strong_down_kbit"], 25_000.0)?,
            strong_variant: p
                .get("strong_variant")
                .and_then(|v| v.as_str())
                .unwrap_or("default/none")
                .to_string(),
            ack_share_max: get_f64(p, &["ack_share_max"], 0.5)?,
        };
        if rp.up_kbit < 8.0 || rp.down_kbit < 8.0 || rp.lan_kbit < 8.0 {
            bail!("parameters up_kbit, down_kbit, lan_kbit: must be at least 8 kbit/s");
        }
        if rp.up_queue == 0 || rp.down_queue == 0 {
            bail!("parameters up_queue, down_queue: must be at least 1 packet");
        }
        if rp.duration_s < 5 || rp.duration_s > 600 {
            bail!("parameter duration: {} s is outside 5..600", rp.duration_s);
        }
        if rp.delay_ms > 1000.0 {
            bail!(
                "parameter delay_ms: {} is more than one second",
                rp.delay_ms
            );
        }
        Ok(rp)
    }
}

/// Parse "reno/88" (both windows 88 packets), "default/none", "cubic", or
/// "reno/none/88" (upload window / download window).
pub fn parse_variant(s: &str) -> Result<Variant> {
    let mut parts = s.split('/');
    let cc = parts.next().unwrap_or("");
    if cc.is_empty() || !cc.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("variant `{s}`: `{cc}` is not a congestion control name");
    }
    let window = |w: &str| -> Result<Option<u32>> {
        match w {
            "none" | "" => Ok(None),
            n => Ok(Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|n| (2..=100_000).contains(n))
                    .ok_or_else(|| {
                        anyhow!("variant `{s}`: window `{n}` is not a packet count 2..100000")
                    })?,
            )),
        }
    };
    let up = window(parts.next().unwrap_or("none"))?;
    let down = match parts.next() {
        Some(d) => window(d)?,
        None => up,
    };
    if parts.next().is_some() {
        bail!("variant `{s}`: expected cc[/window[/download window]]");
    }
    Ok(Variant {
        cc: cc.to_string(),
        window_packets: up,
        down_window_packets: down,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn variants_parse() {
        assert_eq!(
            parse_variant("reno/88").unwrap(),
            Variant {
                cc: "reno".into(),
                window_packets: Some(88),
                down_window_packets: Some(88)
            }
        );
        let v = parse_variant("reno/none/88").unwrap();
        assert_eq!((v.window_packets, v.down_window_packets), (None, Some(88)));
        assert_eq!(v.name(), "reno-upnone-down88");
        assert!(parse_variant("reno/1/2/3").is_err());
        assert_eq!(parse_variant("default").unwrap().window_packets, None);
        assert!(parse_variant("reno/x").is_err());
        assert!(parse_variant("re no/88").is_err());
    }

    #[test]
    fn params_have_defaults_and_reject_nonsense() {
        let p = RealParams::from_json(&json!({}), true).unwrap();
        assert_eq!((p.up_kbit, p.down_kbit, p.up_queue), (800.0, 2100.0, 100));
        assert_eq!(p.duration_s, 15);
        assert!(RealParams::from_json(&json!({"up_kbit": "fast"}), true)
            .unwrap_err()
            .to_string()
            .contains("up_kbit"));
        assert!(RealParams::from_json(&json!({"up_queue": 0}), true).is_err());
        assert!(RealParams::from_json(&json!({"real_variants": "reno"}), true).is_err());
        // The scenario's [topology] table is read too.
        let p = RealParams::from_json(
            &json!({"topology": {"up_kbps": 640.0, "wan_delay_ms": 5.0}, "duration_s": 70.0}),
            false,
        )
        .unwrap();
        assert_eq!((p.up_kbit, p.delay_ms, p.duration_s), (640.0, 5.0, 40));
    }
}
