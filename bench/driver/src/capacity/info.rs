//! Redis's own accounting, read from `INFO`: the server's CPU time, the lease
//! script's calls, the bytes on its connections and its memory.

use std::collections::HashMap;

/// The fields `INFO` answers, `name:value` a line (sections and blank lines
/// skipped).
pub fn fields(info: &str) -> HashMap<&str, &str> {
    info.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim_end().split_once(':'))
        .collect()
}

/// Calls of the commands that run a Lua script (`EVALSHA`, `EVAL`, and their
/// read-only forms), from `INFO commandstats`' `cmdstat_<name>:calls=N,...`.
pub fn script_calls(fields: &HashMap<&str, &str>) -> Option<u64> {
    const SCRIPTS: [&str; 4] = [
        "cmdstat_evalsha",
        "cmdstat_eval",
        "cmdstat_evalsha_ro",
        "cmdstat_eval_ro",
    ];
    let mut total = 0;
    for name in SCRIPTS {
        let Some(stat) = fields.get(name) else {
            continue;
        };
        let calls = stat
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))?
            .parse::<u64>()
            .ok()?;
        total += calls;
    }
    Some(total)
}

/// A field `INFO` did not answer, or not as a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("redis INFO has no readable {0}")]
pub struct MissingField(pub &'static str);

/// What one `INFO all` says, of what the capacity figures need.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Snapshot {
    /// The server's CPU seconds, user and system, all threads.
    pub cpu_s: f64,
    pub script_calls: u64,
    pub net_in: u64,
    pub net_out: u64,
    pub used_memory: u64,
}

impl Snapshot {
    /// Reads a snapshot from `INFO all`'s text.
    pub fn parse(info: &str) -> Result<Snapshot, MissingField> {
        let f = fields(info);
        let num = |name: &'static str| {
            f.get(name)
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or(MissingField(name))
        };
        let whole = |name: &'static str| {
            f.get(name)
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(MissingField(name))
        };
        Ok(Snapshot {
            cpu_s: num("used_cpu_user")? + num("used_cpu_sys")?,
            script_calls: script_calls(&f).ok_or(MissingField("cmdstat_evalsha"))?,
            net_in: whole("total_net_input_bytes")?,
            net_out: whole("total_net_output_bytes")?,
            used_memory: whole("used_memory")?,
        })
    }

    /// What happened between `self` and the later `after`.
    pub fn delta(&self, after: &Snapshot) -> Snapshot {
        Snapshot {
            cpu_s: after.cpu_s - self.cpu_s,
            script_calls: after.script_calls.saturating_sub(self.script_calls),
            net_in: after.net_in.saturating_sub(self.net_in),
            net_out: after.net_out.saturating_sub(self.net_out),
            used_memory: after.used_memory.saturating_sub(self.used_memory),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str =
        "# Server\r\nredis_version:7.0.15\r\n\r\n# Memory\r\nused_memory:1048576\r\n\
used_memory_human:1.00M\r\n\r\n# Stats\r\ntotal_net_input_bytes:5000\r\n\
total_net_output_bytes:3000\r\n\r\n# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\n\
used_cpu_sys_children:9.000000\r\n\r\n# Commandstats\r\n\
cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=0\r\n\
cmdstat_eval:calls=3,usec=60,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n\
cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn reads_the_servers_cpu_script_calls_bytes_and_memory() {
        let s = Snapshot::parse(INFO).unwrap();
        assert_eq!(s.cpu_s, 3.75, "user + sys, not the children's");
        assert_eq!(s.script_calls, 123, "EVALSHA and EVAL, not INFO");
        assert_eq!((s.net_in, s.net_out), (5000, 3000));
        assert_eq!(s.used_memory, 1_048_576);
    }

    #[test]
    fn no_script_run_yet_is_zero_calls_and_a_missing_field_is_named() {
        let fresh = INFO
            .replace("cmdstat_evalsha:", "x:")
            .replace("cmdstat_eval:", "y:");
        assert_eq!(Snapshot::parse(&fresh).unwrap().script_calls, 0);
        let broken = INFO.replace("used_cpu_user", "cpu_user");
        assert_eq!(Snapshot::parse(&broken), Err(MissingField("used_cpu_user")));
        let garbled = INFO.replace("calls=120", "calls=lots");
        assert_eq!(
            Snapshot::parse(&garbled),
            Err(MissingField("cmdstat_evalsha"))
        );
    }

    #[test]
    fn a_delta_is_after_minus_before() {
        let before = Snapshot::parse(INFO).unwrap();
        let after = Snapshot {
            cpu_s: 5.75,
            script_calls: 1123,
            net_in: 6000,
            net_out: 4000,
            used_memory: 2_097_152,
        };
        let d = before.delta(&after);
        assert_eq!(d.script_calls, 1000);
        assert!((d.cpu_s - 2.0).abs() < 1e-9);
        assert_eq!(
            (d.net_in, d.net_out, d.used_memory),
            (1000, 1000, 1_048_576)
        );
    }
}
