//! The operator CLI's integration tests, one binary: a module per area, each
//! running the built `meshlimit` as an operator does.
//! `cargo nextest run -p meshlimit-cli --test it MODULE::` runs one;
//! `reference` holds the book's generated reference pages to the code
//! (`make reference` rewrites them).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod bounds;
mod check_rules_dirs;
mod cli;
mod cli_import;
mod cli_rules;
mod reference;
mod rules_wording;
