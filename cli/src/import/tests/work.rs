//! The importer's work grows linearly with its input, counted in steps
//! (`super::step`: a sibling indexed, a name tried), not timed: a count does
//! not depend on how busy the machine is. A quadratic importer would take
//! seconds on thousands of sibling descriptors and minutes on a 4 MiB file.

use super::*;

/// Runs `f` and returns the steps it took on this thread.
fn steps(f: impl FnOnce()) -> u64 {
    STEPS.with(|s| s.set(0));
    f();
    STEPS.with(std::cell::Cell::get)
}

/// An envoyproxy/ratelimit file: `n` values of `user` with their own limits,
/// named by `value(i)`, then a limit on every `user` (last, where a scan for
/// it from each value goes furthest).
fn siblings(n: usize, value: impl Fn(usize) -> String) -> String {
    let mut text = String::from("domain: d\ndescriptors:\n");
    for i in 0..n {
        text.push_str(&format!(
            "  - key: user\n    value: \"{}\"\n    rate_limit: {{ unit: second, requests_per_unit: 1 }}\n",
            value(i)
        ));
    }
    text.push_str("  - key: user\n    rate_limit: { unit: second, requests_per_unit: 100 }\n");
    text
}

#[test]
fn sibling_descriptors_are_indexed_by_key_not_scanned() {
    let text = siblings(8_000, |i| format!("v{i}"));
    let mut i = Imported::default();
    let n = steps(|| i = envoy(&text, &["user=header:x-user"]));
    assert_eq!(errors(&i), Vec::<String>::new());
    assert_eq!(i.rules.len(), 8_001);
    // One step a value-less sibling indexed and one a rule named; a scan of
    // the siblings for each would be 64 million.
    assert!(n <= 2 * 8_001, "{n} steps");
}

#[test]
fn values_that_give_the_same_name_are_named_in_linear_tries() {
    // `a!`, `a@`… all read `user_a`: each then takes the next free `-n`.
    let marks = ['!', '@', '#', '%', '^', '&', '(', ')', '+', '='];
    let text = siblings(4_000, |i| {
        let mut v = String::from("a");
        let mut k = i;
        loop {
            v.push(marks[k % marks.len()]);
            k /= marks.len();
            if k == 0 {
                break v;
            }
        }
    });
    let mut i = Imported::default();
    let n = steps(|| i = envoy(&text, &["user=header:x-user"]));
    assert_eq!(errors(&i), Vec::<String>::new());
    assert_eq!(i.rules.len(), 4_001);
    assert_eq!(i.rules[3_999].name, "d.user_a-4000");
    assert!(n <= 3 * 4_001, "{n} steps");
}

#[test]
fn names_cut_to_the_same_stem_are_found_in_linear_tries() {
    // Hints alike in their first 62 characters: every `-n` suffix cuts them
    // to the same stem, so each hint's tries meet the others' names.
    let stem = "s".repeat(62);
    let alphabet: Vec<char> = ('a'..='z').chain('0'..='9').collect();
    let mut names = rule::Names::default();
    let mut given = HashSet::new();
    let n = steps(|| {
        for round in 0..3 {
            for a in &alphabet {
                for b in &alphabet {
                    let name = names.unique(&format!("{stem}{a}{b}{round}"));
                    assert!(name.len() <= MAX_RULE_NAME, "{name}");
                    assert!(given.insert(name.clone()), "{name} given twice");
                }
            }
        }
    });
    let hints = 3 * alphabet.len() * alphabet.len();
    assert!(n <= 3 * hints as u64, "{n} steps for {hints} names");
}

#[test]
fn a_file_of_more_limits_than_the_cap_is_refused_with_its_count() {
    let text = siblings(MAX_LIMITS, |i| format!("v{i}"));
    let e = errors(&envoy(&text, &["user=header:x-user"]));
    assert_eq!(
        e,
        [
            "rl.yaml: field descriptors: 10001 descriptors, more than the 10000 one import reads: \
          split the file"
        ]
    );
    let limit =
        "- namespace: ns\n  max_value: 1\n  seconds: 1\n  variables: [\"descriptors[0].k\"]\n";
    let e = errors(&convert(
        ImportFormat::Limitador,
        "l.yaml",
        &limit.repeat(MAX_LIMITS + 1),
        &mapping(&["k=header:x-k"]),
    ));
    assert_eq!(
        e,
        ["l.yaml: 10001 limits, more than the 10000 one import reads: split the file"]
    );
}
