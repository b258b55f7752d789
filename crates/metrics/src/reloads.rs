//! `<daemon>_reloads_total{result="ok"|"failed"}`: the reloads a daemon tried (SIGHUP or
//! `ctl reload`) and how they ended. One counter family shared by the daemons that reload, so
//! the series has one name pattern and one meaning everywhere.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The counts of reloads by outcome; cheap to clone (the series are shared).
#[derive(Clone, Default, Debug)]
pub struct Reloads {
    family: Family<Vec<(String, String)>, Counter>,
}

impl Reloads {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register as `{prefix}_reloads_total` on `registry`.
    pub fn register(&self, registry: &mut Registry, prefix: &str) {
        registry.register(
            format!("{prefix}_reloads"),
            "Reloads of the configuration (SIGHUP or ctl reload) by result: ok = applied, \
             failed = refused with the old configuration kept",
            self.family.clone(),
        );
    }

    /// Count one reload that was applied (`true`) or refused (`false`).
    pub fn record(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.family
            .get_or_create(&vec![("result".to_string(), result.to_string())])
            .inc();
    }

    /// Reloads counted with `result` ("ok" or "failed").
    pub fn count(&self, result: &str) -> u64 {
        self.family
            .get_or_create(&vec![("result".to_string(), result.to_string())])
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_count_apart_and_render_with_the_prefix() {
        let r = Reloads::new();
        let mut reg = Registry::default();
        r.register(&mut reg, "netsched_x");
        r.record(true);
        r.record(false);
        r.record(false);
        assert_eq!((r.count("ok"), r.count("failed")), (1, 2));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(
            text.contains("netsched_x_reloads_total{result=\"failed\"} 2"),
            "{text}"
        );
    }
}
