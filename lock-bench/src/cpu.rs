//! CPU time of this process, without `getrusage` (which would need `unsafe` libc calls):
//! the sum of every thread's time on CPU from /proc/self/task/*/schedstat (nanoseconds),
//! or, where schedstat is missing, utime + stime from /proc/self/stat (clock ticks).

/// CPU seconds this process has used so far, or `None` where /proc is not available.
pub fn process_cpu_s() -> Option<f64> {
    schedstat_s().or_else(stat_s)
}

/// The tokio worker threads live as long as the runtime, so the sum over the threads alive
/// now covers the work measured between two readings.
fn schedstat_s() -> Option<f64> {
    let mut nanos: u64 = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("schedstat");
        let text = std::fs::read_to_string(path).ok()?;
        nanos += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(nanos as f64 / 1e9)
}

fn stat_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces), which ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // In clock ticks of USER_HZ, which Linux fixes at 100 for this interface.
    Some((utime + stime) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let (Some(before), Some(stat_before)) = (process_cpu_s(), stat_s()) else {
            return; // no /proc here
        };
        // Spin until the process has been charged 20 ms of CPU: on a loaded machine 50 ms of
        // wall time can bring far less (other test threads and processes share the cores).
        let mut x = 0u64;
        let started = std::time::Instant::now();
        let mut after = before;
        while after - before <= 0.02 && started.elapsed().as_secs() < 30 {
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
            after = process_cpu_s().unwrap_or(0.0);
        }
        std::hint::black_box(x);
        assert!(after - before > 0.02, "{before} -> {after}");
        assert!(stat_s().unwrap_or(0.0) >= stat_before);
    }
}
