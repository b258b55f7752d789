//! A reload: the configuration file read again and applied, or refused with the old
//! configuration kept. From SIGHUP (the daemon's loop) and `ctl reload` (the control thread)
//! alike, one at a time.
//!
//! Order: the file is read and checked, the TLS certificates and client CAs loaded whole (not
//! yet in force),
//! the servers, algorithm, timeouts and classes applied (`Service::reload`, all or nothing),
//! then the certificates put in force. What cannot change without a restart (`mode`,
//! `listen`, `relay`, `threads`, TLS on or off) is kept and named in the notes.

use crate::config::{Config, Mode, Relay};
use crate::config_error::StartError;
use crate::service::Service;
use crate::tls::Certificates;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What a reload needs of the running balancer.
pub struct Reloader {
    config_path: PathBuf,
    mode: Mode,
    listen: Vec<SocketAddr>,
    relay: Relay,
    threads: usize,
    service: Arc<Service>,
    tls: Option<Arc<Certificates>>,
    /// One reload at a time (a SIGHUP and a `ctl reload` together).
    one: Mutex<()>,
}

impl Reloader {
    /// For a balancer started with `cfg` read from `path`.
    pub fn new(
        cfg: &Config,
        path: &Path,
        service: Arc<Service>,
        tls: Option<Arc<Certificates>>,
    ) -> Reloader {
        Reloader {
            config_path: path.to_path_buf(),
            mode: cfg.mode,
            listen: cfg.listen.clone(),
            relay: cfg.relay,
            threads: cfg.threads,
            service,
            tls,
            one: Mutex::new(()),
        }
    }

    /// The configuration file.
    pub fn path(&self) -> &Path {
        &self.config_path
    }

    /// Re-read the configuration file and apply it; on error the old configuration stays.
    /// Returns notes on what was kept or is now in force.
    pub fn reload(&self) -> Result<Vec<String>, StartError> {
        let _one = self.one.lock().unwrap_or_else(|p| p.into_inner());
        let cfg = Config::load(&self.config_path).map_err(StartError::Config)?;
        let mut notes = Vec::new();
        let certs = match (&self.tls, &cfg.tls) {
            (Some(tls), Some(conf)) => {
                Some(tls.prepare(conf).map_err(|source| StartError::Tls {
                    file: self.config_path.clone(),
                    source,
                })?)
            }
            (None, None) => None,
            _ => {
                notes.push("turning TLS on or off needs a restart; kept the old setting".into());
                None
            }
        };
        if cfg.mode != self.mode
            || cfg.listen != self.listen
            || cfg.relay != self.relay
            || cfg.threads != self.threads
        {
            notes.push(
                "mode, listen, relay and threads changes need a restart; kept the old ones"
                    .to_string(),
            );
        }
        notes.extend(
            self.service
                .reload(&cfg)
                .map_err(|source| StartError::Reload {
                    file: self.config_path.clone(),
                    source,
                })?,
        );
        if let (Some(tls), Some(certs)) = (&self.tls, certs) {
            let n = tls.install(certs);
            notes.push(format!(
                "{n} TLS certificates in force{}",
                tls.client_auth().note()
            ));
        }
        Ok(notes)
    }
}
