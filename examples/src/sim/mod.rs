//! `mrc-sim`: scenario files ([`scenario`]), built-in experiments ([`experiments`]), result
//! tables, JSON and plots ([`output`]).

pub mod experiments;
pub mod output;
pub mod scenario;
