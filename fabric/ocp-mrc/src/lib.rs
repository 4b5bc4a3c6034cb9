//! `lib_mrc.so`: OCP MRC 1.0's application API (`mrc.h`, published with the OCP MRC 1.0
//! specification) implemented in software on mrc's transport over the RDMA UD datapath of
//! [`mrc_fabric::verbs`], so a program written for an MRC NIC runs on any verbs device,
//! Soft-RoCE included. The declarations are the project's own
//! (`fabric/ocp-mrc/include/mrc.h`), written to the published ABI: the same struct
//! layouts, enum values and function signatures, so a program compiled against the
//! published header links this library unchanged. docs/OCP_MRC.md lists every call.
//!
//! Layout:
//! - [`abi`]: the ABI's values (versions, masks, capabilities, limits) and the
//!   `#[repr(C)]` structs that need no libibverbs type;
//! - [`state`]: the QP state machine of `mrc_modify_qp` and the mapping of `mrc_qp_attr`
//!   onto the transport's parameters (pure, tested on any host);
//! - [`wire`]: the two messages the library adds on top of the transport (the placement
//!   header of every WRITE chunk, the in-band rendezvous);
//! - `ffi` and `runtime` (feature `verbs`): the exported C functions and the QP runtime
//!   (UD datapath, caller-progress [`mrc_fabric::engine::Worker`] driven by one progress
//!   thread per QP, device-checked placement through a loopback RC QP).
//!
//! - [`ctl`]: the controller API `mrc_ctl.h` (EV format, EV and CC profiles, EV
//!   denial and events) mapped onto the transport (pure, tested on any host);
//!   `ctl_ffi` (feature `verbs`) exports its C functions;
//! - [`store`]: the node-wide profile store (one file per verbs device) that a
//!   controller process writes and the QPs of other processes read;
//! - [`ext`] (always built, no libibverbs): the C extension `mrcx.h` (`mrc_x_` calls) for
//!   what OCP's API lacks: a context over UDP sockets without a verbs device, connection
//!   handles, application memory and progress on the caller's thread.
//!
//! No panic crosses the C boundary: every exported function runs its body under
//! `catch_unwind` and answers a panic with `EIO`.
#![warn(missing_docs)]

pub mod abi;
pub mod ctl;
pub mod ext;
pub mod state;
pub mod store;
pub mod wire;
mod wrlist;

#[cfg(feature = "verbs")]
pub mod ctl_ffi;
#[cfg(feature = "verbs")]
pub mod ffi;
#[cfg(feature = "verbs")]
mod runtime;
