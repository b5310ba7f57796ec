//! The signals lockctl catches (instead of dying of them) and passes on to its child.

use rustix::process::{kill_process, Pid, Signal as Sig};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::exit::Failure;

/// A caught signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caught {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// SIGHUP.
    Hangup,
    /// SIGQUIT.
    Quit,
}

impl Caught {
    /// The conventional name, `SIGINT` etc.
    pub fn name(self) -> &'static str {
        match self {
            Caught::Interrupt => "SIGINT",
            Caught::Terminate => "SIGTERM",
            Caught::Hangup => "SIGHUP",
            Caught::Quit => "SIGQUIT",
        }
    }

    fn signal(self) -> Sig {
        match self {
            Caught::Interrupt => Sig::INT,
            Caught::Terminate => Sig::TERM,
            Caught::Hangup => Sig::HUP,
            Caught::Quit => Sig::QUIT,
        }
    }

    /// The signal number.
    pub fn number(self) -> u8 {
        u8::try_from(self.signal().as_raw()).unwrap_or(0)
    }
}

/// Handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT. While they exist these signals no longer
/// end lockctl; they are delivered here.
#[derive(Debug)]
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> Result<Signals, Failure> {
        let install = |kind: SignalKind| {
            signal(kind)
                .map_err(|err| Failure::internal(format!("cannot install a signal handler: {err}")))
        };
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
            quit: install(SignalKind::quit())?,
        })
    }

    /// The next caught signal. Cancel-safe.
    pub async fn recv(&mut self) -> Caught {
        let caught = tokio::select! {
            got = self.interrupt.recv() => got.map(|()| Caught::Interrupt),
            got = self.terminate.recv() => got.map(|()| Caught::Terminate),
            got = self.hangup.recv() => got.map(|()| Caught::Hangup),
            got = self.quit.recv() => got.map(|()| Caught::Quit),
        };
        match caught {
            Some(caught) => caught,
            // A stream only ends when the runtime shuts down; nothing comes after that.
            None => std::future::pending().await,
        }
    }
}

/// Sends `caught` to process `pid`. A process that is already gone is not an error.
pub fn forward(pid: Option<u32>, caught: Caught) {
    send(pid, caught.signal());
}

/// Sends SIGTERM to process `pid`.
pub fn terminate(pid: Option<u32>) {
    send(pid, Sig::TERM);
}

fn send(pid: Option<u32>, signal: Sig) {
    let Some(pid) = pid
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(Pid::from_raw)
    else {
        return;
    };
    // ESRCH: it exited already, and its status is about to be collected.
    let _ = kill_process(pid, signal);
}
