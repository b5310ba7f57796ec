//! Starting client processes: the same binary, `client` subcommand, with everything a
//! client needs on its command line. A client killed by a fault is replaced by a new
//! process in the same slot (same proxies, same holder label) with the next incarnation
//! number, so that its acquisition ids and its log file are new.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

use rustix::process::{kill_process, Pid, Signal};

use crate::BoxError;

/// A running client process.
#[derive(Debug)]
pub struct ClientProc {
    /// Its process.
    pub child: Child,
    /// Its pid, for SIGSTOP/SIGCONT.
    pub pid: i32,
    /// Closing it stops the client.
    pub stdin: Option<ChildStdin>,
}

/// What it takes to start (or restart) the client in each slot.
#[derive(Debug)]
pub struct Spawner {
    /// This binary.
    pub exe: PathBuf,
    /// Where logs go.
    pub dir: PathBuf,
    /// Arguments every client gets.
    pub common: Vec<String>,
    /// Arguments of the client in each slot (lock URLs, protocol, seed).
    pub per_client: Vec<Vec<String>>,
    /// The incarnation each slot is at (how many times its client was replaced).
    pub incarnations: Vec<u32>,
}

impl Spawner {
    /// Starts the client of slot `id` (its next incarnation after the first).
    pub fn spawn(&mut self, id: usize) -> Result<ClientProc, BoxError> {
        let incarnation = match self.incarnations.get_mut(id) {
            Some(n) => {
                *n += 1;
                *n - 1
            }
            None => return Err(format!("no client slot {id}").into()),
        };
        let stem = if incarnation == 0 {
            format!("client-{id}")
        } else {
            format!("client-{id}r{incarnation}")
        };
        let mut command = Command::new(&self.exe);
        command
            .arg("client")
            .args(["--id", &id.to_string()])
            .args(["--incarnation", &incarnation.to_string()])
            .arg("--log")
            .arg(self.dir.join(format!("{stem}.jsonl")))
            .args(&self.common)
            .args(self.per_client.get(id).map(Vec::as_slice).unwrap_or(&[]));
        let stderr = File::create(self.dir.join(format!("{stem}.stderr")))?;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?;
        let stdin = child.stdin.take();
        let pid = i32::try_from(child.id())?;
        Ok(ClientProc { child, pid, stdin })
    }
}

/// SIGSTOP (`stop`) or SIGCONT of a process (a client, or a server of a replicated
/// deployment). It lives here, with the processes, so that the deployments (`ha`) need not
/// reach up into the fault injector that drives them.
pub fn signal(pid: u32, stop: bool) -> Result<(), BoxError> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or("not a process id")?;
    kill_process(pid, if stop { Signal::STOP } else { Signal::CONT })?;
    Ok(())
}
