//! Case tables shared by the suites that run them against both control
//! planes (a module of each suite, not a suite of its own).

#![allow(dead_code)]

pub mod placement;
