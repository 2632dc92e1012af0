//! What the agent's other tasks call on the service: the sweep of idle pool keys and the region tasks' shares.

use super::*;

#[tokio::test(start_paused = true)]
async fn the_services_sweep_drops_the_pools_idle_keys() {
    let (svc, _, _) = service_and_store(Mode::Delayed(MS), 8);
    svc.lease(&request(&["fast"])).await;
    assert_eq!(svc.pooled_keys(), 1);
    svc.sweep_pools();
    assert_eq!(svc.pooled_keys(), 1, "just asked for");
    // Nothing pooled, no denial, its demand decayed: dropped.
    tokio::time::advance(Duration::from_secs(10)).await;
    svc.sweep_pools();
    assert_eq!(svc.pooled_keys(), 0);
}

#[test]
fn the_region_tasks_set_the_services_own_shares() {
    let (svc, _) = service(Mode::Delayed(MS), 8);
    // What the region tasks do with the handle, each call its own.
    assert!(svc
        .shares()
        .enable(0.1, meshlimit_core::secret::KeyIds::placeholder()));
    svc.shares().install(crate::regions::table::ShareTable::new(
        Some(7),
        Default::default(),
    ));
    assert_eq!(svc.shares().table().period, Some(7));
}
