//! `mrc-sim`: scenario files ([`scenario`]), limits checked before allocation ([`limits`]),
//! built-in experiments ([`experiments`], the PFC ones in [`pfc`](mod@pfc), the plane ones
//! in [`plane_loss`], [`port_loss`] and [`flaps`], layouts compared in [`rails`], goodput over time from [`sampled`] runs), result tables, JSON and
//! plots ([`output`], line charts over time in [`timeline`]), the text of `design` and
//! `trace` ([`design`](mod@design)), their figures ([`figure`]).

pub mod design;
pub mod experiments;
pub mod figure;
pub mod flaps;
pub mod limits;
pub mod output;
pub mod pfc;
pub mod plane_loss;
pub mod port_loss;
pub mod rails;
pub mod sampled;
pub mod scenario;
pub mod timeline;
