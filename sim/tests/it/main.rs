//! The simulator's integration tests, one binary: the short accuracy
//! scenarios in virtual time over seeds (`virtual_fleet`), and in real time
//! against real agents and Redis (`accuracy`; most are `#[ignore]`d and run
//! by `make accuracy`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod accuracy;
mod virtual_fleet;
