//! The share function (docs/design/regions.md): how much of a `global` limit each
//! region enforces, from every region's demand in the last period.
//!
//! ```text
//! share_r = floor + (1 − R × floor) × demand_r / Σ demand     (equal split when Σ demand = 0)
//! ```
//!
//! Pure: every region's rebalancer evaluates it on the same sealed demand and gets
//! the same vector, so the shares the regions publish sum to 1 without any
//! exchange beyond reading each other's demand.

/// The share of every region, in the order of `demand`. A demand that is negative
/// or not finite counts as none. Every share is at least `floor` (taken as at most
/// `1 / R`) and the shares sum to 1 (to within float rounding); no regions, no
/// shares.
pub(crate) fn shares(demand: &[f64], floor: f64) -> Vec<f64> {
    let regions = demand.len();
    if regions == 0 {
        return Vec::new();
    }
    let r = regions as f64;
    let floor = if floor.is_finite() {
        floor.clamp(0.0, 1.0 / r)
    } else {
        0.0
    };
    let clean: Vec<f64> = demand
        .iter()
        .map(|d| if d.is_finite() && *d > 0.0 { *d } else { 0.0 })
        .collect();
    let total: f64 = clean.iter().sum();
    let movable = (1.0 - r * floor).max(0.0);
    if total <= 0.0 || !total.is_finite() {
        return vec![1.0 / r; regions];
    }
    clean
        .iter()
        .map(|d| floor + movable * (d / total))
        .collect()
}

/// The largest share one region can hold: `1 − (R − 1) × floor`.
#[cfg(test)]
pub(crate) fn max_share(regions: usize, floor: f64) -> f64 {
    1.0 - (regions.saturating_sub(1) as f64) * floor
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const FLOOR: f64 = 0.1;

    #[test]
    fn demand_in_one_region_gives_it_all_but_the_floors() {
        let s = shares(&[300.0, 0.0, 0.0], FLOOR);
        assert!((s[0] - 0.8).abs() < 1e-12, "{s:?}");
        assert!((s[1] - 0.1).abs() < 1e-12 && (s[2] - 0.1).abs() < 1e-12);
        assert!((max_share(3, FLOOR) - 0.8).abs() < 1e-12);
    }

    #[test]
    fn no_demand_is_an_equal_split() {
        assert_eq!(shares(&[0.0, 0.0], FLOOR), vec![0.5, 0.5]);
        assert_eq!(shares(&[f64::NAN, -3.0, 0.0, 0.0], FLOOR), vec![0.25; 4]);
        assert!(shares(&[], FLOOR).is_empty());
    }

    #[test]
    fn a_floor_too_large_for_the_regions_is_an_equal_split() {
        // Eleven regions cannot each hold 10%: the floor becomes 1/11.
        let s = shares(&[5.0; 11], FLOOR);
        assert!(s.iter().all(|x| (x - 1.0 / 11.0).abs() < 1e-12), "{s:?}");
    }

    proptest! {
        #[test]
        fn every_share_is_at_least_the_floor_and_they_sum_to_one(
            demand in prop::collection::vec(
                prop_oneof![Just(0.0), 0.0f64..1e12, Just(f64::NAN), -1e3f64..0.0],
                1..=10,
            ),
        ) {
            let s = shares(&demand, FLOOR);
            prop_assert_eq!(s.len(), demand.len());
            for x in &s {
                prop_assert!(*x >= FLOOR - 1e-12, "{s:?} from {demand:?}");
                prop_assert!(*x <= max_share(demand.len(), FLOOR) + 1e-12);
            }
            let sum: f64 = s.iter().sum();
            prop_assert!((sum - 1.0).abs() <= 1e-9, "sum {sum} of {s:?} from {demand:?}");
        }

        #[test]
        fn more_demand_never_means_a_smaller_share(
            demand in prop::collection::vec(0.0f64..1e9, 2..=10),
            extra in 0.0f64..1e9,
        ) {
            let before = shares(&demand, FLOOR)[0];
            let mut more = demand.clone();
            more[0] += extra;
            prop_assert!(shares(&more, FLOOR)[0] >= before - 1e-12);
        }
    }
}
