//! Experiments W-* — the worker under test driven to the exact boundaries of the spec's rules
//! (`W` is not a letter of §11). Where the P-api rows probe the fenced functions directly, these
//! drive a worker process with its ordinary commands and arrange the database around it: free and
//! held neighbouring leases, expiry with nobody taking over, and the worker's own statements held
//! on a protocol row until the moment their check must see (see
//! [`fenceproof_harness::faults::row_hold`]). They catch a worker whose own SQL drops a condition,
//! wherever it writes: through the fp_* functions or directly on the tables.

pub mod clock;
pub mod clock_behind;
pub mod commit;
pub mod control;
pub mod lease;
pub mod ledger;
