//! What the figures were measured on: CPU, cores, kernel, load, Redis version, command line.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    /// 1, 5 and 15 minute load averages when the run started and ended.
    pub load_at_start: String,
    pub load_at_end: String,
    pub redis_version: String,
    /// `private redis-server` or `REDIS_URL` / `--url`.
    pub redis: String,
    pub command: String,
    pub git_commit: Option<String>,
}

impl Machine {
    pub fn describe(redis_version: String, redis: String) -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("model name"))
                    .and_then(|rest| rest.split_once(':'))
                    .map(|(_, model)| model.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|k| format!("Linux {}", k.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.to_owned());
        let git_commit = std::process::Command::new("git")
            .args(["describe", "--always", "--dirty"])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel,
            load_at_start: load(),
            load_at_end: String::new(),
            redis_version,
            redis,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            git_commit,
        }
    }

    pub fn finish(&mut self) {
        self.load_at_end = load();
    }

    pub fn markdown(&self) -> String {
        let end = if self.load_at_end.is_empty() {
            String::new()
        } else {
            format!(", {} at the end", self.load_at_end)
        };
        format!(
            "- Machine: {} × {} ({}), {}\n- Redis {} ({})\n- Load average (1/5/15 min): {} at the start{}\n- Command: `{}`{}\n",
            self.cores,
            self.cpu,
            std::env::consts::ARCH,
            self.kernel,
            self.redis_version,
            self.redis,
            self.load_at_start,
            end,
            self.command,
            self.git_commit
                .as_ref()
                .map(|c| format!(" at `{c}`"))
                .unwrap_or_default(),
        )
    }
}

/// The three load averages from /proc/loadavg.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "unknown".into())
}
