//! placeholder for fetch
