//! `mrc-sim`: scenario files ([`scenario`]), limits checked before allocation ([`limits`]),
//! built-in experiments ([`experiments`], the PFC ones in [`pfc`](mod@pfc)), result tables,
//! JSON and plots ([`output`]), the text of `design` and `trace` ([`design`](mod@design)),
//! their figures ([`figure`]).

pub mod design;
pub mod experiments;
pub mod figure;
pub mod limits;
pub mod output;
pub mod pfc;
pub mod scenario;
