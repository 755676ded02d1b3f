//! Fake remote tools: an HTTP service on 127.0.0.1, run as its own process by the harness, offering
//! the four capability classes of spec section 09, with fault knobs, and a durable ledger of every
//! side effect that really happened. The ledger survives the death of any caller and is read by the
//! harness as an oracle: it is the truth about how many real resources exist.
//!
//! - [`ledger`]: the append-only, fsynced ledger (created resources and rejected requests);
//! - [`tools`]: the capability classes and their create / query semantics;
//! - [`faults`]: per-tool and per-call faults (latency, hang, commit-then-drop, commit-then-hang, 5xx);
//! - [`observe`]: what each create and query sees of its callers' database sessions (open transactions);
//! - [`caller`]: which process made a call (its pid and process group, from the kernel's socket tables);
//! - [`http`]: a deliberately small HTTP/1.1 (one request per connection) for server and client;
//! - [`server`]: routing; [`client`]: what dispatchers and the harness use to talk to the tools.

pub mod caller;
pub mod client;
pub mod digest;
pub mod faults;
pub mod http;
pub mod ledger;
pub mod observe;
pub mod server;
pub mod tools;
