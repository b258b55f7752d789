//! `netsched lab sweep --on slurm` on a real Slurm cluster of one node (this machine), started
//! by the test itself: munged, slurmctld and slurmd in the foreground with every path inside a
//! temporary folder the test owns, on free ports, and stopped by their pids at the end
//! whatever happens. Needs root and Debian's `slurm-wlm` and `munge` packages (installed by
//! `scripts/test`); skips with the reason when not root, or when the packages are absent
//! outside CI (under `CI=true` their absence is a failure).
//!
//! The sweep (3 grid points × 4 seeds of np-dispatch) goes to Slurm as one job array; one
//! task of the slowest grid point is cancelled while it runs; the merge lists it with its
//! Slurm state and log; `--status` reports it; running the same command again submits that
//! run alone and completes the sweep, whose `sweep.csv` is byte-identical to a local run of the
//! same sweep.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const DAEMONS: [&str; 5] = ["munged", "mungekey", "slurmctld", "slurmd", "sbatch"];

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `None` when the test can run; otherwise why not (a failure under CI when packages lack).
fn skip_reason() -> Option<String> {
    if netsched_testbed::quick_tier() {
        return Some("not in the quick tier (scripts/test --quick)".into());
    }
    if !is_root() {
        return Some("not root: the test starts munged, slurmctld and slurmd".into());
    }
    let missing: Vec<&str> = DAEMONS
        .iter()
        .copied()
        .filter(|d| which(d).is_none())
        .collect();
    if !missing.is_empty() {
        let msg = format!(
            "{} not installed (Debian packages slurm-wlm and munge)",
            missing.join(", ")
        );
        if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
            panic!("CI=true and {msg}: scripts/test installs them");
        }
        return Some(msg);
    }
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A one-node Slurm cluster; its daemons are stopped, its jobs cancelled and its folder
/// removed when dropped (also on panic).
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
}

impl Cluster {
    fn start() -> Cluster {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        // A fresh folder (mkdtemp) under the system's temporary folder, not inside the
        // checkout: munged refuses a socket unless every folder above it is searchable by all
        // ("execute permissions for all required"), and a checkout may sit in a folder of mode
        // 0700. `Drop` removes it once the daemons are gone.
        let dir = netsched_testbed::TempDir::new("slurm")
            .expect("a temporary folder")
            .keep();
        let mut c = Cluster {
            conf: dir.join("slurm.conf"),
            dir: dir.clone(),
            daemons: Vec::new(),
        };
        for sub in ["munge", "run", "state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        // munged wants its key private and its socket's folder (and parents) searchable.
        std::fs::set_permissions(dir.join("munge"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        for d in [dir.clone(), dir.join("run")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let key = dir.join("munge/munge.key");
        let o = Command::new(which("mungekey").unwrap())
            .args(["--create", "--keyfile"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(o.status.success(), "mungekey: {o:?}");
        let socket = dir.join("run/munge.sock");
        let munged = Command::new(which("munged").unwrap())
            .arg("--foreground")
            .arg("--key-file")
            .arg(&key)
            .arg("--socket")
            .arg(&socket)
            .arg("--pid-file")
            .arg(dir.join("run/munged.pid"))
            .arg("--log-file")
            .arg(dir.join("munge/munged.log"))
            .arg("--seed-file")
            .arg(dir.join("munge/munged.seed"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        c.daemons.push(("munged", munged));
        c.wait_for("munged socket", Duration::from_secs(20), |_| {
            socket.exists()
        });
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
            .split('.')
            .next()
            .unwrap()
            .to_string();
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let mem_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|k| k.parse::<u64>().ok())
            })
            .map(|kib| kib / 1024 / 2)
            .unwrap_or(512);
        let (ctld_port, d_port) = (free_port(), free_port());
        let d = dir.display();
        let conf = format!(
            "ClusterName=nstest{nanos}\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmUser=root\nSlurmdUser=root\n\
             SlurmctldPort={ctld_port}\nSlurmdPort={d_port}\n\
             AuthType=auth/munge\nCredType=cred/munge\n\
             AuthInfo=socket={socket}\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/run/slurmctld.pid\nSlurmdPidFile={d}/run/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n\
             JobAcctGatherType=jobacct_gather/none\nMpiDefault=none\n\
             ReturnToService=2\nSchedulerType=sched/backfill\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mib} State=UNKNOWN\n\
             PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
            socket = socket.display()
        );
        std::fs::write(&c.conf, conf).unwrap();
        for (name, bin) in [("slurmctld", "slurmctld"), ("slurmd", "slurmd")] {
            let child = Command::new(which(bin).unwrap())
                .arg("-D")
                .arg("-f")
                .arg(&c.conf)
                .env("SLURM_CONF", &c.conf)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("log/{name}.err"))).unwrap())
                .spawn()
                .unwrap();
            c.daemons.push((name, child));
        }
        c.wait_for("the node to be idle", Duration::from_secs(60), |c| {
            c.slurm("sinfo", &["--noheader", "--format=%T"])
                .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
                .unwrap_or(false)
        });
        c
    }

    /// A Slurm client call against this cluster.
    fn slurm(&self, tool: &str, args: &[&str]) -> std::io::Result<Output> {
        Command::new(tool)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .output()
    }

    /// Wait (bounded) for `ok`, panicking with the daemons' logs on timeout; a daemon that
    /// exits is a failure at once.
    fn wait_for(&mut self, what: &str, limit: Duration, mut ok: impl FnMut(&Cluster) -> bool) {
        let t = Instant::now();
        loop {
            if ok(self) {
                return;
            }
            for (name, child) in &mut self.daemons {
                if let Ok(Some(st)) = child.try_wait() {
                    panic!("{name} exited ({st}) while waiting for {what}");
                }
            }
            assert!(t.elapsed() < limit, "no {what} after {limit:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Job ids this cluster still lists as pending or running.
    fn active_jobs(&self) -> BTreeSet<String> {
        self.slurm("squeue", &["--noheader", "--array", "--format=%i"])
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn print_logs(&self) {
        for f in ["log/slurmctld.log", "log/slurmd.log", "munge/munged.log"] {
            let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            eprintln!("--- {f} (last lines)");
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

/// Processes (other than this one) whose command line, working folder or environment names
/// `dir`.
fn processes_using(dir: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in rd.flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let p = e.path();
        let cmd = std::fs::read(p.join("cmdline")).unwrap_or_default();
        let env = std::fs::read(p.join("environ")).unwrap_or_default();
        let cwd = std::fs::read_link(p.join("cwd")).unwrap_or_default();
        let has = |b: &[u8]| String::from_utf8_lossy(b).contains(&needle);
        if has(&cmd) || has(&env) || cwd.starts_with(dir) {
            found.push(format!(
                "{pid}: {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            ));
        }
    }
    found
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_logs();
        }
        // Jobs first (their processes end with them), then the daemons, by their pids.
        if self.daemons.len() == 3 {
            let _ = self.slurm("scancel", &["--user=root"]);
            let t = Instant::now();
            while !self.active_jobs().is_empty() && t.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        for (_, child) in self.daemons.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let t = Instant::now();
            while matches!(child.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(15) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let left = processes_using(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
        if !left.is_empty() && !std::thread::panicking() {
            panic!("processes left behind by the test cluster: {left:?}");
        }
    }
}

/// The `netsched` binary the Slurm jobs run: `NETSCHED_BIN` when set (scripts/test sets it to
/// the binary its workspace build made, so nothing is built twice), else built first with
/// `cargo build -p netsched`, so the jobs run this tree's code. (Built alone, the package's
/// features resolve apart from the workspace's, and cargo rebuilds half the workspace.)
fn netsched_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("NETSCHED_BIN") {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "NETSCHED_BIN={}: no such file",
            bin.display()
        );
        return bin;
    }
    let release = !cfg!(debug_assertions);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q", "-p", "netsched"]);
    if release {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("cargo build -p netsched");
    assert!(st.success(), "cargo build -p netsched failed");
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join(if release { "release" } else { "debug" })
        .join("netsched")
}

fn sweep_args(out: &Path) -> Vec<String> {
    [
        "lab",
        "sweep",
        "np-dispatch",
        "--grid",
        "traffic.packets=300,600,20000",
        "--seeds",
        "4",
        "--metric",
        "idle_percent",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([out.to_string_lossy().into_owned()])
    .collect()
}

fn run_netsched(c: &Cluster, bin: &Path, args: &[String], extra: &[&str]) -> Output {
    let o = Command::new(bin)
        .args(args)
        .args(extra)
        .env("SLURM_CONF", &c.conf)
        .current_dir(&c.dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!(
        "$ netsched {} {}\n{}{}",
        args.join(" "),
        extra.join(" "),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Wait until none of `jobs` is pending or running. The limit counts from the last change in
/// the number of finished runs, so a slow machine gets more time while the sweep progresses.
fn wait_jobs_end(c: &mut Cluster, jobs: &[String], runs: &Path, stall: Duration) {
    let done = |runs: &Path| {
        std::fs::read_dir(runs)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().join("results.json").exists())
                    .count()
            })
            .unwrap_or(0)
    };
    let mut last = done(runs);
    let mut since = Instant::now();
    loop {
        let active = c.active_jobs();
        let live = active.iter().any(|a| {
            jobs.iter()
                .any(|j| a == j || a.starts_with(&format!("{j}_")))
        });
        if !live {
            return;
        }
        let now = done(runs);
        if now != last {
            last = now;
            since = Instant::now();
        }
        assert!(
            since.elapsed() < stall,
            "jobs {jobs:?} made no progress in {stall:?} (still listed: {active:?})"
        );
        for (name, child) in &mut c.daemons {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("{name} exited ({st}) during the sweep");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn slurm_json(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("slurm.json")).unwrap()).unwrap()
}

fn submission(out: &Path, k: usize) -> (String, String, Vec<u64>) {
    let j = slurm_json(out);
    let s = &j["submissions"][k];
    (
        s["array_job"].as_str().unwrap().to_string(),
        s["merge_job"].as_str().unwrap().to_string(),
        s["indices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect(),
    )
}

#[test]
fn sweep_on_a_one_node_slurm_cluster_matches_the_local_sweep_and_resumes() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let started = Instant::now();
    let bin = netsched_binary();
    let mut c = Cluster::start();
    eprintln!("cluster up in {:.1} s", started.elapsed().as_secs_f64());
    let local = c.dir.join("local");
    let remote = c.dir.join("on-slurm");

    // The reference: the same sweep on this machine.
    let o = run_netsched(&c, &bin, &sweep_args(&local), &[]);
    assert!(o.status.success(), "local sweep failed");
    let local_csv = std::fs::read(local.join("sweep.csv")).unwrap();

    // Refusals name what is wrong, in Slurm's own words where Slurm refuses.
    let o = run_netsched(
        &c,
        &bin,
        &sweep_args(&c.dir.join("bad")),
        &["--on", "slurm", "--partition", "no-such-partition"],
    );
    assert!(!o.status.success());
    assert!(
        stderr_of(&o).contains("sbatch refused") && stderr_of(&o).contains("nvalid partition"),
        "{}",
        stderr_of(&o)
    );
    assert!(
        !c.dir.join("bad").exists(),
        "a refused submission leaves no folder"
    );
    let o = run_netsched(
        &c,
        &bin,
        &sweep_args(&c.dir.join("bad")),
        &["--on", "slurm", "--time", "soon"],
    );
    assert!(!o.status.success());
    assert!(stderr_of(&o).contains("--time"), "{}", stderr_of(&o));
    let o = Command::new(&bin)
        .args(sweep_args(&c.dir.join("bad")))
        .args(["--on", "slurm"])
        .env("PATH", c.dir.join("no-such-folder"))
        .output()
        .unwrap();
    assert!(
        stderr_of(&o).contains("sbatch not found"),
        "{}",
        stderr_of(&o)
    );
    let mut other = sweep_args(&local);
    other[2] = "lvs-cluster".into();
    other[4] = "client.concurrency=15,30".into();
    let o = run_netsched(&c, &bin, &other, &["--on", "slurm"]);
    assert!(
        stderr_of(&o).contains("holds a sweep of np-dispatch"),
        "{}",
        stderr_of(&o)
    );
    if Path::new("/dev/shm").is_dir() {
        let shm = PathBuf::from(format!("/dev/shm/netsched-sweep-{}", std::process::id()));
        let o = run_netsched(&c, &bin, &sweep_args(&shm), &["--on", "slurm"]);
        let e = stderr_of(&o);
        let on_tmpfs = std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(1) == Some("/dev/shm") && l.contains(" tmpfs "));
        if on_tmpfs {
            assert!(e.contains("is on tmpfs"), "{e}");
            assert!(!shm.exists(), "the refused folder is removed again");
        }
        let _ = std::fs::remove_dir_all(&shm);
    }

    // The sweep on Slurm: one array of 12 tasks, at most 2 at once, and the merge job.
    let args = sweep_args(&remote);
    let slurm_opts = ["--on", "slurm", "--max-parallel", "2"];
    let o = run_netsched(&c, &bin, &args, &slurm_opts);
    assert!(o.status.success(), "submission failed");
    let (array, merge, indices) = submission(&remote, 0);
    assert_eq!(
        indices,
        (0..12).collect::<Vec<u64>>(),
        "one array of all runs"
    );
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(remote.join("runs.json")).unwrap()).unwrap();
    let hash = |i: usize| plan["runs"][i]["hash"].as_str().unwrap().to_string();

    // Cancel one run of the slowest grid point (indices 8..12) while it runs: its task is
    // RUNNING and its temporary folder exists.
    let runs = remote.join("runs");
    let t = Instant::now();
    let victim = loop {
        let active = c.active_jobs();
        let running = c
            .slurm(
                "squeue",
                &[
                    "--noheader",
                    "--array",
                    "--states=RUNNING",
                    "--format=%i",
                    &format!("--jobs={array}"),
                ],
            )
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let found = (8..12).find(|&i| {
            running.lines().any(|l| l.trim() == format!("{array}_{i}"))
                && std::fs::read_dir(&runs)
                    .map(|rd| {
                        rd.flatten().any(|e| {
                            e.file_name()
                                .to_string_lossy()
                                .starts_with(&format!(".{}.tmp-", hash(i)))
                        })
                    })
                    .unwrap_or(false)
        });
        if let Some(i) = found {
            break i;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "no run of the last grid point seen running (active: {active:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = c.slurm("scancel", &[&format!("{array}_{victim}")]).unwrap();
    assert!(o.status.success(), "scancel: {o:?}");
    eprintln!("cancelled run {victim} (task {array}_{victim}) while it ran");
    wait_jobs_end(
        &mut c,
        &[array.clone(), merge.clone()],
        &runs,
        Duration::from_secs(60),
    );

    // Cancelled mid-run: no result folder, and the merge names the task's state and log.
    assert!(
        !runs.join(hash(victim)).exists(),
        "a cancelled run leaves no runs/<hash>/"
    );
    let log = format!("logs/{array}_{victim}.out");
    let md = std::fs::read_to_string(remote.join("sweep.md")).expect("the merge job's sweep.md");
    assert!(
        md.contains("Runs that failed") && md.contains("CANCELLED") && md.contains(&log),
        "{md}"
    );
    let st = run_netsched(
        &c,
        &bin,
        &["lab".into(), "sweep".into(), "--status".into()],
        &[remote.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(st.status.success());
    assert!(
        text.contains("12 run(s): 11 done, 0 running, 1 failed, 0 pending"),
        "{text}"
    );
    assert!(
        text.contains(&format!("failed: run {victim} ")) && text.contains("CANCELLED"),
        "{text}"
    );
    assert!(text.contains(&log), "{text}");

    // The same command again: the one missing run alone is submitted, and the sweep completes.
    let o = run_netsched(&c, &bin, &args, &slurm_opts);
    assert!(o.status.success(), "resubmission failed");
    let (array2, merge2, indices2) = submission(&remote, 1);
    assert_eq!(indices2, vec![victim as u64], "only the missing run");
    wait_jobs_end(&mut c, &[array2, merge2], &runs, Duration::from_secs(60));
    let st = run_netsched(
        &c,
        &bin,
        &["lab".into(), "sweep".into(), "--status".into()],
        &[remote.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(
        text.contains("12 run(s): 12 done, 0 running, 0 failed, 0 pending"),
        "{text}"
    );
    let remote_csv = std::fs::read(remote.join("sweep.csv")).unwrap();
    assert!(
        remote_csv == local_csv,
        "sweep.csv differs:\n--- local\n{}\n--- slurm\n{}",
        String::from_utf8_lossy(&local_csv),
        String::from_utf8_lossy(&remote_csv)
    );
    let md = std::fs::read_to_string(remote.join("sweep.md")).unwrap();
    assert!(!md.contains("Runs that failed"), "{md}");
    // Nothing half-written is left in runs/: twelve complete folders.
    let names: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 12, "{names:?}");
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    // A local sweep's status comes from its folder alone.
    let st = run_netsched(
        &c,
        &bin,
        &["lab".into(), "sweep".into(), "--status".into()],
        &[local.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(
        text.contains("(local): 12 run(s): 12 done, 0 running, 0 failed, 0 pending"),
        "{text}"
    );
    let dir = c.dir.clone();
    drop(c);
    assert!(!dir.exists(), "the cluster's folder is removed");
    assert!(processes_using(&dir).is_empty());
    eprintln!("whole test: {:.1} s", started.elapsed().as_secs_f64());
}

/// Scale figures for docs/benchmarks.md (not run by default: about 25 minutes on a 2-CPU node,
/// where Slurm starts under one task per second): a 1,000-run sweep
/// submitted as one array, its time to finish on the one-node cluster, and the merge's time,
/// beside the same sweep run locally.
#[test]
#[ignore]
fn scale_1000_run_sweep() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let bin = netsched_binary();
    let mut c = Cluster::start();
    let values: Vec<String> = (100..350).map(|p| p.to_string()).collect();
    let args = |out: &Path| -> Vec<String> {
        [
            "lab",
            "sweep",
            "np-dispatch",
            "--seeds",
            "4",
            "--metric",
            "idle_percent",
            "--grid",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            format!("traffic.packets={}", values.join(",")),
            "--out".into(),
            out.to_string_lossy().into_owned(),
        ])
        .collect()
    };
    let quiet = |c: &Cluster, a: &[String], extra: &[&str]| {
        Command::new(&bin)
            .args(a)
            .args(extra)
            .env("SLURM_CONF", &c.conf)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let remote = c.dir.join("on-slurm");
    let t = Instant::now();
    let o = quiet(&c, &args(&remote), &["--on", "slurm"]);
    let submit = t.elapsed();
    assert!(o.status.success(), "{}", stderr_of(&o));
    let (array, merge, indices) = submission(&remote, 0);
    assert_eq!(indices.len(), 1000);
    wait_jobs_end(
        &mut c,
        &[array, merge],
        &remote.join("runs"),
        Duration::from_secs(120),
    );
    let finished = t.elapsed();
    let t = Instant::now();
    let o = quiet(
        &c,
        &["lab".into(), "sweep-merge".into()],
        &[remote.to_str().unwrap()],
    );
    let merge_time = t.elapsed();
    assert!(o.status.success(), "{}", stderr_of(&o));
    let t = Instant::now();
    let o = quiet(
        &c,
        &["lab".into(), "sweep".into(), "--status".into()],
        &[remote.to_str().unwrap()],
    );
    let status_time = t.elapsed();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("1000 done"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let local = c.dir.join("local");
    let t = Instant::now();
    let o = quiet(&c, &args(&local), &[]);
    let local_time = t.elapsed();
    assert!(o.status.success(), "{}", stderr_of(&o));
    assert!(
        std::fs::read(local.join("sweep.csv")).unwrap()
            == std::fs::read(remote.join("sweep.csv")).unwrap(),
        "sweep.csv differs"
    );
    let t = Instant::now();
    let o = quiet(
        &c,
        &["lab".into(), "sweep-merge".into()],
        &[local.to_str().unwrap()],
    );
    let local_merge = t.elapsed();
    assert!(o.status.success(), "{}", stderr_of(&o));
    println!(
        "1000 runs: submit (one sbatch array + merge job) {:.2} s; submitted → merged on Slurm {:.1} s; \
         merge alone {:.2} s; --status {:.2} s; same sweep locally {:.1} s (tabulating alone {:.2} s)",
        submit.as_secs_f64(),
        finished.as_secs_f64(),
        merge_time.as_secs_f64(),
        status_time.as_secs_f64(),
        local_time.as_secs_f64(),
        local_merge.as_secs_f64()
    );
}

/// What needs no cluster: option checks, a sweep task's bad index, and `--status` of a local
/// sweep read from its folder alone.
#[test]
fn options_and_local_status_without_a_cluster() {
    use netsched_lab::{cli, slurm};
    let e = cli::main_with(&[
        "sweep",
        "np-dispatch",
        "--grid",
        "cost.rules=5",
        "--partition",
        "short",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("Slurm options") && e.contains("--on slurm"),
        "{e}"
    );
    let e = cli::main_with(&["sweep", "vm-delay", "--grid", "backend.batch=1", "--real"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--real sweeps run on Slurm"), "{e}");
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sweep-status-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let e = slurm::status(&dir).unwrap_err().to_string();
    assert!(e.contains("is not a sweep's output folder"), "{e}");
    let out = dir.to_str().unwrap();
    cli::main_with(&[
        "sweep",
        "np-dispatch",
        "--grid",
        "cost.rules=5,40",
        "--seeds",
        "2",
        "--set",
        "traffic.packets=300",
        "--metric",
        "idle_percent",
        "--out",
        out,
    ])
    .unwrap();
    let st = slurm::status(&dir).unwrap();
    assert_eq!((st.total, st.done, st.running, st.pending), (4, 4, 0, 0));
    assert!(st.failed.is_empty() && st.slurm_jobs.is_empty());
    // One run removed, another "in progress" (a temporary folder of a live process).
    let plan = netsched_lab::sweep::Plan::read(&dir).unwrap();
    std::fs::remove_dir_all(plan.run_dir(&dir, 0)).unwrap();
    std::fs::remove_dir_all(plan.run_dir(&dir, 1)).unwrap();
    let tmp = dir.join("runs").join(format!(
        ".{}.tmp-{}-0",
        plan.runs[1].hash,
        std::process::id()
    ));
    std::fs::create_dir_all(&tmp).unwrap();
    let st = slurm::status(&dir).unwrap();
    assert_eq!((st.done, st.running, st.pending), (2, 1, 1), "{st:?}");
    // A task with an index past the run list is an error naming both.
    let e = cli::main_with(&["sweep-task", out, "7"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("run index 7") && e.contains("4 run(s)"), "{e}");
    // Running the missing run as a task completes it, and removes the stale temporary folder.
    cli::main_with(&["sweep-task", out, "1"]).unwrap();
    assert!(!tmp.exists());
    let st = slurm::status(&dir).unwrap();
    assert_eq!((st.done, st.running, st.pending), (3, 0, 1), "{st:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
