//! How an imported rule's name and period are written.

use super::*;

#[test]
fn names_are_valid_and_unique() {
    let mut taken = rule::Names::default();
    assert_eq!(taken.unique("Edge.Path_/files/*"), "edge.path_-files");
    assert_eq!(taken.unique("edge.path_-files"), "edge.path_-files-2");
    let long = "x".repeat(100);
    let a = taken.unique(&long);
    let b = taken.unique(&long);
    assert_eq!(a.len(), MAX_RULE_NAME);
    assert_eq!(b.len(), MAX_RULE_NAME);
    assert!(b.ends_with("-2"));
    assert_eq!(taken.unique("***"), "rule");
}

#[test]
fn periods_take_the_largest_whole_unit() {
    assert_eq!(period(1), "1s");
    assert_eq!(period(90), "90s");
    assert_eq!(period(120), "2m");
    assert_eq!(period(7_200), "2h");
    assert_eq!(period(30 * 86_400), "30d");
}
