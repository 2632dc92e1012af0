//! An allowed response's quota fields, as the VM writes them. The
//! `ratelimit-policy` value is a function of the rule's name and the limit
//! in force alone, so the VM keeps the values it wrote (direct-mapped by the
//! rule's name, a fixed number) and a hot key's responses format none; the
//! `ratelimit` value is written into one buffer the VM reuses. The bytes are
//! those of [`headers::write_quota_fields`] (a test holds the two together).

use meshlimit_core::decision::Quota;
use meshlimit_core::fingerprint::fnv1a;
use meshlimit_core::headers::{self, HeaderStyle, IETF_FIELD_ROOM};
use meshlimit_core::Limit;

/// Policy values a VM keeps: each at most a rule's name and
/// [`IETF_FIELD_ROOM`] bytes twice (the name, the value), whatever the rules.
const POLICIES: usize = 16;

/// One kept `ratelimit-policy` value and what it was written for.
struct Policy {
    rule: String,
    limit: Limit,
    value: String,
    /// The value's first bytes are the rule's name as an sf-string, which
    /// the `ratelimit` value starts with too.
    name_len: usize,
}

/// A VM's quota field values.
pub struct QuotaFields {
    policies: Box<[Option<Policy>]>,
    /// The `ratelimit` value's buffer, cleared for each response.
    value: String,
}

impl Default for QuotaFields {
    fn default() -> Self {
        QuotaFields {
            policies: std::iter::repeat_with(|| None).take(POLICIES).collect(),
            value: String::new(),
        }
    }
}

impl QuotaFields {
    /// Hands `emit` each quota field for `quota` in `style`, in order, as
    /// [`headers::write_quota_fields`] does.
    pub fn write(
        &mut self,
        style: HeaderStyle,
        quota: &Quota<'_>,
        mut emit: impl FnMut(&'static str, &str),
    ) {
        let policy = match style {
            HeaderStyle::Ietf => policy(&mut self.policies, quota),
            HeaderStyle::Legacy | HeaderStyle::Off => None,
        };
        let Some(policy) = policy else {
            headers::write_quota_fields(style, quota, emit);
            return;
        };
        emit("ratelimit-policy", &policy.value);
        self.value.clear();
        self.value
            .push_str(policy.value.get(..policy.name_len).unwrap_or_default());
        headers::write_ratelimit_params(&mut self.value, quota);
        emit("ratelimit", &self.value);
    }
}

/// The `ratelimit-policy` value of `quota`'s rule and limit: the kept one, or
/// written into its entry (taking over another rule's).
fn policy<'p>(policies: &'p mut [Option<Policy>], quota: &Quota<'_>) -> Option<&'p Policy> {
    let at = usize::try_from(fnv1a(quota.rule.as_bytes()) % POLICIES as u64).unwrap_or(0);
    let entry = policies.get_mut(at)?;
    let kept = entry
        .as_ref()
        .is_some_and(|p| p.limit == quota.limit && p.rule == quota.rule);
    if !kept {
        *entry = Some(written(quota));
    }
    entry.as_ref()
}

/// The policy value of `quota`'s rule and limit, written.
fn written(quota: &Quota<'_>) -> Policy {
    let mut value = String::with_capacity(IETF_FIELD_ROOM + quota.rule.len());
    headers::write_sf_string(&mut value, quota.rule);
    let name_len = value.len();
    value.clear();
    headers::write_policy_value(&mut value, quota.rule, &quota.limit);
    Policy {
        rule: quota.rule.to_string(),
        limit: quota.limit,
        value,
        name_len,
    }
}

#[cfg(test)]
mod tests {
    use std::num::{NonZeroU32, NonZeroU64};

    use super::*;

    fn limit(requests: u32, per_s: u64) -> Limit {
        let n = NonZeroU32::new(requests).unwrap();
        Limit::new(n, NonZeroU64::new(per_s * 1_000_000_000).unwrap(), n)
    }

    fn written(
        fields: &mut QuotaFields,
        style: HeaderStyle,
        q: &Quota<'_>,
    ) -> Vec<(String, String)> {
        let mut out = Vec::new();
        fields.write(style, q, |n, v| out.push((n.to_string(), v.to_string())));
        out
    }

    fn expected(style: HeaderStyle, q: &Quota<'_>) -> Vec<(String, String)> {
        let mut out = Vec::new();
        headers::write_quota_fields(style, q, |n, v| out.push((n.to_string(), v.to_string())));
        out
    }

    #[test]
    fn a_kept_policy_is_written_again_when_the_limit_in_force_changes() {
        let mut fields = QuotaFields::default();
        let per_minute = limit(100, 60);
        let per_hour = limit(1_000, 3_600);
        let q = |limit| Quota {
            rule: "per-key",
            limit,
            remaining: 7,
            reset_ns: 1,
        };
        for limit in [per_minute, per_minute, per_hour, per_minute] {
            let quota = q(limit);
            assert_eq!(
                written(&mut fields, HeaderStyle::Ietf, &quota),
                expected(HeaderStyle::Ietf, &quota)
            );
        }
        // Two rules in one entry take it from each other, never each other's value.
        let names = [
            "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q",
        ];
        for name in names.iter().chain(names.iter()) {
            let quota = Quota {
                rule: name,
                ..q(per_minute)
            };
            assert_eq!(
                written(&mut fields, HeaderStyle::Ietf, &quota),
                expected(HeaderStyle::Ietf, &quota)
            );
        }
    }

    #[test]
    fn the_same_bytes_as_the_fields_written_each_time() {
        let mut fields = QuotaFields::default();
        let styles = [HeaderStyle::Ietf, HeaderStyle::Legacy, HeaderStyle::Off];
        let rules = ["per-key", "a.b_c-9", "q\"uote\\", "x"];
        let limits = [
            limit(1, 1),
            limit(100, 60),
            limit(5_000_000, 3_600),
            limit(7, 86_400),
        ];
        let quotas = [(0, 0), (7, 1), (u32::MAX, u64::MAX), (42, 1_500_000_000)];
        for style in styles {
            for rule in rules {
                for limit in limits {
                    for (remaining, reset_ns) in quotas {
                        let quota = Quota {
                            rule,
                            limit,
                            remaining,
                            reset_ns,
                        };
                        // Written, then kept: both as written afresh.
                        for _ in 0..2 {
                            assert_eq!(
                                written(&mut fields, style, &quota),
                                expected(style, &quota)
                            );
                        }
                    }
                }
            }
        }
    }
}
