//! The namespace rig of the balancer's root tests (netns, restart, status page): Debian's
//! nginx as backends `a` and `b` on 127.0.0.1:8081 and :8082, each answering 200 with its
//! name, and `netsched-balanced` started from a configuration file. The processes are the
//! testbed's, stopped by their ids when it drops; their files live in the test's folder.
//! Not every test uses every part.

#![allow(dead_code)]

use netsched_testbed::Testbed;
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;

/// The backends: name and port.
pub const BACKENDS: [(&str, u16); 2] = [("a", 8081), ("b", 8082)];

/// What differs between the tests' nginx.
#[derive(Debug, Clone, Copy)]
pub struct Nginx {
    /// `worker_connections`.
    pub connections: u32,
    /// `keepalive_requests` (nginx's default when `None`).
    pub keepalive_requests: Option<u64>,
}

impl Nginx {
    /// nginx's configuration for backend `name` on 127.0.0.1:`port`, its files under
    /// `dir/name` (made here).
    pub fn conf(&self, dir: &Path, name: &str, port: u16) -> String {
        let d = dir.join(name);
        std::fs::create_dir_all(d.join("tmp")).unwrap();
        let keepalive = self
            .keepalive_requests
            .map(|n| format!(" keepalive_requests {n};\n"))
            .unwrap_or_default();
        format!(
            "master_process off;\ndaemon off;\nworker_processes 1;\nuser root root;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
events {{ worker_connections {c}; }}\nhttp {{\n access_log off;\n{keepalive} client_body_temp_path {d}/tmp/body;\n\
 proxy_temp_path {d}/tmp/proxy;\n fastcgi_temp_path {d}/tmp/fastcgi;\n uwsgi_temp_path {d}/tmp/uwsgi;\n scgi_temp_path {d}/tmp/scgi;\n\
 server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"{name}\"; }} }}\n}}\n",
            d = d.display(),
            c = self.connections,
        )
    }

    /// Start the [`BACKENDS`] in `ns`; their pids by name.
    pub fn start(&self, tb: &mut Testbed, ns: &str, dir: &Path) -> HashMap<&'static str, u32> {
        let mut pids = HashMap::new();
        for (name, port) in BACKENDS {
            let conf = dir.join(format!("{name}.conf"));
            std::fs::write(&conf, self.conf(dir, name, port)).unwrap();
            let pid = tb
                .spawn(
                    ns,
                    "nginx",
                    &["-c", conf.to_str().unwrap(), "-e", "stderr"],
                    name,
                )
                .unwrap();
            pids.insert(name, pid);
        }
        pids
    }
}

/// Start `netsched-balanced --config cfg` in `ns`, its output to `log`; its pid.
pub fn start_balancer(tb: &mut Testbed, ns: &str, cfg: &Path, log: &Path) -> u32 {
    let out = std::fs::File::create(log).unwrap();
    tb.spawn_with(
        ns,
        env!("CARGO_BIN_EXE_netsched-balanced"),
        &["--config", cfg.to_str().unwrap()],
        "balance",
        Stdio::null(),
        Stdio::from(out),
    )
    .unwrap()
}
