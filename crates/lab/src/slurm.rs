//! `netsched lab sweep --on slurm`: a sweep's runs as one Slurm job array, and a merge job.
//!
//! The grid is expanded once ([`sweep::plan`]) and kept as `runs.json` in the output folder,
//! which every node must see at the same path (a shared filesystem: a folder on tmpfs or ramfs
//! is refused). Array task `i` runs `netsched lab sweep-task <out> <i>`: run `i` of the list,
//! written under a temporary name in `runs/` and renamed into `runs/<hash>/` when complete. A
//! second job, `--dependency=afterany:<array>`, runs `netsched lab sweep-merge <out>`, which
//! tabulates with the same code as a local sweep ([`sweep::tabulate`]) and lists the runs that
//! failed with their Slurm state and log file (`logs/<array>_<i>.out`).
//!
//! Only runs without results, and not still queued or running from an earlier submission, go
//! into the array, so the same command completes a sweep after a partial failure. The job ids
//! are kept in `slurm.json`; `--status` asks `squeue` (and `sacct`, where accounting is on)
//! about them. Every Slurm call goes through Slurm's own client tools.

use crate::limits;
use crate::outdir::OutDir;
use crate::series_error::RunFailure;
use crate::sweep::{self, Plan, SweepSpec};
use anyhow::{anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Slurm options of `lab sweep --on slurm`.
#[derive(Debug, Clone, Default)]
pub struct SlurmOpts {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--time` (Slurm's time limit syntax, per task).
    pub time: Option<String>,
    /// At most this many array tasks at once (`--array=...%N`).
    pub max_parallel: Option<u64>,
    /// Further `sbatch` arguments, passed as they are to both jobs.
    pub sbatch_args: Vec<String>,
}

/// Name of the record of Slurm submissions in a sweep's output folder.
pub const JOBS_FILE: &str = "slurm.json";
/// Bound on reading `slurm.json`.
const MAX_JOBS_BYTES: u64 = 16 << 20;
/// Bound on reading `/proc/self/mounts`.
const MAX_MOUNTS_BYTES: u64 = 4 << 20;
/// Most array tasks running at once (`--max-parallel`).
pub const MAX_PARALLEL: u64 = 100_000;

/// One `sbatch` submission of a sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Submission {
    /// The array job's id.
    pub array_job: String,
    /// The merge job's id.
    pub merge_job: String,
    /// Run indices in the array (each its array task id).
    pub indices: Vec<usize>,
}

/// `slurm.json`: every submission of this sweep, oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Jobs {
    pub submissions: Vec<Submission>,
}

impl Jobs {
    fn read(out: &Path) -> anyhow::Result<Option<Jobs>> {
        let path = out.join(JOBS_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text =
            netsched_report::read::read_text(&path, MAX_JOBS_BYTES, "sweep Slurm job record")?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| anyhow!("cannot parse {}: {e}", path.display()))
    }

    fn write(&self, out: &Path) -> anyhow::Result<()> {
        Ok(sweep::write_atomic(
            &out.join(JOBS_FILE),
            serde_json::to_string_pretty(self)?.as_bytes(),
        )?)
    }
}

/// How long a Slurm client call may take before it is stopped (a controller that does not
/// answer makes `squeue` retry for a long time).
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on what is kept of a Slurm tool's output.
const MAX_TOOL_OUTPUT: u64 = 64 << 20;

/// Run a Slurm client tool; its stdout, or its own error text. Stopped (by its pid) after
/// [`TOOL_TIMEOUT`].
fn tool(name: &str, args: &[String], stdin: Option<&str>) -> anyhow::Result<String> {
    let mut cmd = Command::new(name);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow!("{name} not found on PATH: --on slurm needs Slurm's client tools on this machine (Debian package slurm-client)")
        } else {
            anyhow!("cannot run {name}: {e}")
        }
    })?;
    if let Some(text) = stdin {
        if let Some(mut pipe) = child.stdin.take() {
            let _ = pipe.write_all(text.as_bytes());
        }
    }
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(MAX_TOOL_OUTPUT).read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_t = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err_t = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + TOOL_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{name} {}: no answer in {} s (is slurmctld up, and SLURM_CONF right?)",
                    args.join(" "),
                    TOOL_TIMEOUT.as_secs()
                );
            }
            Err(e) => bail!("cannot wait for {name}: {e}"),
        }
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    if !status.success() {
        let err = String::from_utf8_lossy(&stderr).trim().to_string();
        let err = if err.is_empty() {
            String::from_utf8_lossy(&stdout).trim().to_string()
        } else {
            err
        };
        bail!("{name} refused ({status}): {err}");
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// `sbatch --parsable ARGS` with `script` on stdin: the job id.
fn sbatch(args: &[String], script: &str) -> anyhow::Result<String> {
    let mut all = vec!["--parsable".to_string()];
    all.extend(args.iter().cloned());
    let out = tool("sbatch", &all, Some(script))?;
    // `--parsable` prints `jobid` or `jobid;cluster`.
    let id = out
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        bail!(
            "sbatch: unexpected reply {:?} (expected a job id)",
            out.trim()
        );
    }
    Ok(id)
}

/// `0-3,5,7-9` for the sorted indices (Slurm's `--array` list).
pub fn array_list(indices: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let mut j = i;
        while j + 1 < indices.len() && indices[j + 1] == indices[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            indices[i].to_string()
        } else {
            format!("{}-{}", indices[i], indices[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// `s` quoted for `/bin/sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The filesystem type holding `path` (longest mount point prefix in `/proc/self/mounts`).
fn fs_type(path: &Path) -> Option<(String, String)> {
    let text = netsched_report::read::read_text(
        Path::new("/proc/self/mounts"),
        MAX_MOUNTS_BYTES,
        "mount table",
    )
    .ok()?;
    let mut best: Option<(String, String)> = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 3 {
            continue;
        }
        let mnt = f[1].replace("\\040", " ");
        if path.starts_with(&mnt) && best.as_ref().is_none_or(|(m, _)| mnt.len() >= m.len()) {
            best = Some((mnt, f[2].to_string()));
        }
    }
    best
}

/// Refuse an output folder that other nodes cannot see: tmpfs, ramfs and the like.
pub fn check_shared(out: &Path) -> anyhow::Result<()> {
    if let Some((mnt, fs)) = fs_type(out) {
        if ["tmpfs", "ramfs", "devtmpfs"].contains(&fs.as_str()) {
            bail!(
                "output folder {} is on {fs} (mounted at {mnt}), in this machine's memory: Slurm tasks on other nodes cannot see it; choose an --out on a filesystem the nodes share",
                out.display()
            );
        }
    }
    Ok(())
}

/// Is this process root? (`/proc/self` belongs to the effective user.)
fn euid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// States of a job that has ended (Slurm's job state codes).
fn is_terminal(state: &str) -> bool {
    let s = state.split_whitespace().next().unwrap_or("");
    matches!(
        s,
        "BOOT_FAIL"
            | "CANCELLED"
            | "COMPLETED"
            | "DEADLINE"
            | "FAILED"
            | "NODE_FAIL"
            | "OUT_OF_MEMORY"
            | "PREEMPTED"
            | "TIMEOUT"
            | "REVOKED"
            | "SPECIAL_EXIT"
    )
}

/// The state of a task that Slurm no longer lists (it ended, and accounting is off or has
/// not got it).
pub const UNKNOWN: &str = "UNKNOWN (ended; no longer listed by squeue, and sacct has no record)";

/// What Slurm says about one array task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskState {
    /// Slurm's state (`RUNNING`, `CANCELLED`, ...), or `UNKNOWN` once Slurm has forgotten the
    /// job and accounting is off.
    pub state: String,
    /// The array job.
    pub array_job: String,
    /// The task's log file.
    pub log: PathBuf,
}

/// `jobid_task|state` lines → task index → state.
fn parse_states(text: &str, job: &str) -> BTreeMap<usize, String> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let mut f = line.split('|');
        let (Some(id), Some(state)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((j, t)) = id.trim().split_once('_') else {
            continue;
        };
        if j != job {
            continue;
        }
        if let Ok(t) = t.parse::<usize>() {
            m.insert(t, state.trim().to_string());
        }
    }
    m
}

/// Each submitted run's latest Slurm state: `squeue` (which still lists jobs that ended a few
/// minutes ago), then `sacct` where accounting is on.
pub fn task_states(out: &Path, jobs: &Jobs) -> BTreeMap<usize, TaskState> {
    let mut m = BTreeMap::new();
    for sub in &jobs.submissions {
        let job = &sub.array_job;
        let args: Vec<String> = ["--noheader", "--array", "--states=all", "--format=%i|%T"]
            .iter()
            .map(|s| s.to_string())
            .chain([format!("--jobs={job}")])
            .collect();
        let mut states = tool("squeue", &args, None)
            .map(|t| parse_states(&t, job))
            .unwrap_or_default();
        if states.len() < sub.indices.len() {
            let args: Vec<String> = ["--noheader", "--parsable2", "--allocations"]
                .iter()
                .map(|s| s.to_string())
                .chain([format!("--jobs={job}"), "--format=JobID,State".to_string()])
                .collect();
            if let Ok(t) = tool("sacct", &args, None) {
                for (k, v) in parse_states(&t, job) {
                    states.entry(k).or_insert(v);
                }
            }
        }
        for &i in &sub.indices {
            let state = states
                .get(&i)
                .cloned()
                .unwrap_or_else(|| UNKNOWN.to_string());
            m.insert(
                i,
                TaskState {
                    state,
                    array_job: job.clone(),
                    log: out.join("logs").join(format!("{job}_{i}.out")),
                },
            );
        }
    }
    m
}

/// Submit a sweep to Slurm: write `runs.json`, submit the runs without results as one job
/// array and a merge job after it.
pub fn submit(spec: &SweepSpec, o: &SlurmOpts) -> anyhow::Result<()> {
    let (plan, out) = sweep::plan(spec)?;
    if let Some(n) = o.max_parallel {
        limits::check_count("--max-parallel", n, MAX_PARALLEL)?;
    }
    if plan.real {
        match euid() {
            Some(0) => {}
            uid => bail!(
                "--real: a real run needs root on its node, and Slurm runs each task as the submitting user ({}); submit as root",
                uid.map(|u| format!("uid {u}")).unwrap_or_else(|| "uid unknown".into())
            ),
        }
    }
    // Slurm's tools are there (a clear error now, before any folder is made).
    tool("sbatch", &["--version".to_string()], None)?;
    let dir = OutDir::create(&out)?;
    let out = out
        .canonicalize()
        .map_err(|e| anyhow!("cannot resolve {}: {e}", out.display()))?;
    check_shared(&out)?;
    sweep::check_same_experiment(&plan, &out)?;
    let old_plan = if out.join(sweep::PLAN_FILE).exists() {
        Some(Plan::read(&out)?)
    } else {
        None
    };
    let mut jobs = Jobs::read(&out)?.unwrap_or_default();
    // Tasks of earlier submissions still queued or running: not submitted again.
    let states = task_states(&out, &jobs);
    let live: BTreeMap<usize, &TaskState> = states
        .iter()
        .filter(|(_, s)| !is_terminal(&s.state) && s.state != UNKNOWN)
        .map(|(i, s)| (*i, s))
        .collect();
    if !live.is_empty() && old_plan.as_ref() != Some(&plan) {
        let ids: BTreeSet<&str> = live.values().map(|s| s.array_job.as_str()).collect();
        bail!(
            "output folder {} has {} task(s) of another run list still queued or running (job(s) {}): wait for them or scancel them first",
            out.display(),
            live.len(),
            ids.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    if old_plan.is_some() && old_plan.as_ref() != Some(&plan) {
        // A widened or changed grid: earlier array indices name other runs now.
        jobs = Jobs::default();
    }
    for sub in ["runs", "logs"] {
        std::fs::create_dir_all(out.join(sub))
            .map_err(|e| anyhow!("cannot create {}: {e}", out.join(sub).display()))?;
    }
    plan.write(&out)?;
    let missing: Vec<usize> = (0..plan.runs.len())
        .filter(|i| !live.contains_key(i) && sweep::done(&plan, &out, *i).is_none())
        .collect();
    let done = plan.runs.len() - missing.len() - live.len();
    if missing.is_empty() {
        if live.is_empty() {
            eprintln!(
                "[lab] sweep {}: all {} run(s) done; tabulating here",
                plan.experiment,
                plan.runs.len()
            );
            dir.keep();
            return merge(&out);
        }
        eprintln!(
            "[lab] sweep {}: nothing to submit: {done} run(s) done, {} queued or running in Slurm",
            plan.experiment,
            live.len()
        );
        dir.keep();
        return Ok(());
    }
    let exe = std::env::current_exe()
        .map_err(|e| anyhow!("cannot find the running netsched executable: {e}"))?;
    let exe = shell_quote(&exe.to_string_lossy());
    let out_q = shell_quote(&out.to_string_lossy());
    let mut common = vec![format!("--chdir={}", out.display())];
    if let Some(p) = &o.partition {
        common.push(format!("--partition={p}"));
    }
    if let Some(t) = &o.time {
        common.push(format!("--time={t}"));
    }
    common.extend(o.sbatch_args.iter().cloned());
    let mut array_args = vec![
        format!(
            "--array={}{}",
            array_list(&missing),
            o.max_parallel.map(|n| format!("%{n}")).unwrap_or_default()
        ),
        format!("--job-name=netsched-sweep-{}", plan.experiment),
        format!("--output={}/logs/%A_%a.out", out.display()),
    ];
    if plan.real {
        array_args.push("--exclusive".to_string());
    }
    array_args.extend(common.iter().cloned());
    let task_script =
        format!("#!/bin/sh\nexec {exe} lab sweep-task {out_q} \"$SLURM_ARRAY_TASK_ID\"\n");
    let array_job = sbatch(&array_args, &task_script)?;
    let mut after: BTreeSet<String> = live.values().map(|s| s.array_job.clone()).collect();
    after.insert(array_job.clone());
    let mut merge_args = vec![
        format!(
            "--dependency=afterany:{}",
            after.into_iter().collect::<Vec<_>>().join(":")
        ),
        format!("--job-name=netsched-sweep-merge-{}", plan.experiment),
        format!("--output={}/logs/merge_%j.out", out.display()),
    ];
    merge_args.extend(common.iter().cloned());
    let merge_script = format!("#!/bin/sh\nexec {exe} lab sweep-merge {out_q}\n");
    let merge_job = match sbatch(&merge_args, &merge_script) {
        Ok(id) => id,
        Err(e) => {
            // No array without its merge: cancel it, so the next attempt starts clean.
            let _ = tool("scancel", std::slice::from_ref(&array_job), None);
            return Err(e.context(format!("array job {array_job} cancelled again")));
        }
    };
    jobs.submissions.push(Submission {
        array_job: array_job.clone(),
        merge_job: merge_job.clone(),
        indices: missing.clone(),
    });
    jobs.write(&out)?;
    dir.keep();
    eprintln!(
        "[lab] sweep {}: {} run(s): {done} done, {} queued or running from before, {} submitted as array job {array_job}; merge job {merge_job} → {}",
        plan.experiment,
        plan.runs.len(),
        live.len(),
        missing.len(),
        out.join("sweep.md").display()
    );
    println!("{array_job} {merge_job}");
    Ok(())
}

/// `lab sweep-task <out> <i>`: run `i` of the sweep in `<out>`.
pub fn task(out: &Path, index: usize) -> anyhow::Result<()> {
    let plan = Plan::read(out)?;
    sweep::run_one(&plan, out, index)?;
    Ok(())
}

/// `lab sweep-merge <out>`: tabulate the sweep in `<out>` (after its array job), naming each
/// failed run's Slurm state and log.
pub fn merge(out: &Path) -> anyhow::Result<()> {
    let plan = Plan::read(out)?;
    let jobs = Jobs::read(out)?.unwrap_or_default();
    let states = task_states(out, &jobs);
    let outcomes = (0..plan.runs.len())
        .map(|i| match sweep::done(&plan, out, i) {
            Some(r) => Ok(r),
            None => Err(match states.get(&i) {
                Some(s) => RunFailure::Slurm {
                    state: s.state.clone(),
                    array_job: s.array_job.clone(),
                    log: s.log.clone(),
                },
                None => RunFailure::NeverSubmitted,
            }),
        })
        .collect();
    let failures = sweep::tabulate(&plan, out, outcomes)?;
    eprintln!(
        "[lab] sweep {}: {} run(s), {} failed → {}",
        plan.experiment,
        plan.runs.len(),
        failures.len(),
        out.join("sweep.md").display()
    );
    println!("{}", out.join("sweep.md").display());
    Ok(sweep::failures_error(out, &failures)?)
}

/// A sweep's progress (`lab sweep --status`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    pub total: usize,
    pub done: usize,
    pub running: usize,
    pub pending: usize,
    /// Failed runs: index and what is known (Slurm state and log, or the error).
    pub failed: Vec<(usize, String)>,
    /// The array jobs, for Slurm sweeps.
    pub slurm_jobs: Vec<String>,
}

/// Is a local run's temporary folder `.<hash>.tmp-<pid>-<n>` owned by a live process?
fn local_running(out: &Path, hash: &str) -> bool {
    let prefix = format!(".{hash}.tmp-");
    let Ok(rd) = std::fs::read_dir(out.join("runs")) else {
        return false;
    };
    rd.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.strip_prefix(&prefix)
            .and_then(|rest| rest.split('-').next())
            .is_some_and(|pid| Path::new("/proc").join(pid).exists())
    })
}

/// The progress of the sweep in `out`: from Slurm for a submitted sweep, from the folder alone
/// for a local one.
pub fn status(out: &Path) -> anyhow::Result<Status> {
    let plan = Plan::read(out)?;
    let jobs = Jobs::read(out)?;
    let mut st = Status {
        total: plan.runs.len(),
        ..Status::default()
    };
    match jobs {
        Some(jobs) => {
            let out_abs = out.canonicalize().unwrap_or_else(|_| out.to_path_buf());
            let states = task_states(&out_abs, &jobs);
            st.slurm_jobs = jobs
                .submissions
                .iter()
                .map(|s| s.array_job.clone())
                .collect();
            for i in 0..plan.runs.len() {
                if sweep::done(&plan, out, i).is_some() {
                    st.done += 1;
                    continue;
                }
                match states.get(&i) {
                    None => st.pending += 1,
                    Some(s) if s.state == "PENDING" => st.pending += 1,
                    Some(s) if !is_terminal(&s.state) && s.state != UNKNOWN => st.running += 1,
                    Some(s) => st.failed.push((
                        i,
                        format!(
                            "Slurm state {} (array job {}), log {}",
                            s.state,
                            s.array_job,
                            s.log.display()
                        ),
                    )),
                }
            }
        }
        None => {
            let failures: Vec<sweep::Failure> = match netsched_report::read::read_text(
                &out.join(sweep::FAILURES_FILE),
                sweep::MAX_PLAN_BYTES,
                "sweep failure list",
            ) {
                Ok(t) => serde_json::from_str(&t).unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            for (i, run) in plan.runs.iter().enumerate() {
                if sweep::done(&plan, out, i).is_some() {
                    st.done += 1;
                } else if local_running(out, &run.hash) {
                    st.running += 1;
                } else if let Some(f) = failures.iter().find(|f| f.hash == run.hash) {
                    st.failed.push((i, f.reason.clone()));
                } else {
                    st.pending += 1;
                }
            }
        }
    }
    Ok(st)
}

/// Print `status(out)`.
pub fn print_status(out: &Path) -> anyhow::Result<()> {
    let plan = Plan::read(out)?;
    let st = status(out)?;
    let on = if st.slurm_jobs.is_empty() {
        "local".to_string()
    } else {
        format!("Slurm array job(s) {}", st.slurm_jobs.join(", "))
    };
    println!(
        "sweep of {} in {} ({on}): {} run(s): {} done, {} running, {} failed, {} pending",
        plan.experiment,
        out.display(),
        st.total,
        st.done,
        st.running,
        st.failed.len(),
        st.pending
    );
    for (i, why) in &st.failed {
        println!(
            "failed: run {i} ({} seed {}): {why}",
            plan.label(*i),
            plan.runs[*i].seed
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_lists_compress_runs_of_indices() {
        assert_eq!(array_list(&[0, 1, 2, 3, 5, 7, 8, 9]), "0-3,5,7-9");
        assert_eq!(array_list(&[4]), "4");
        assert_eq!(array_list(&[]), "");
    }

    #[test]
    fn shell_quoting_survives_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn states_parse_from_squeue_and_sacct_lines() {
        let m = parse_states(
            "12_0|RUNNING\n12_3|CANCELLED by 0\n13_1|PENDING\nbad\n",
            "12",
        );
        assert_eq!(m.get(&0).map(String::as_str), Some("RUNNING"));
        assert_eq!(m.get(&3).map(String::as_str), Some("CANCELLED by 0"));
        assert_eq!(m.len(), 2);
        assert!(is_terminal("CANCELLED by 0") && !is_terminal("RUNNING"));
    }
}
