//! `-FI_ENOSYS` for every slot of an `fi_ops_*` table the provider does not implement.
//!
//! libfabric's inline wrappers call through the tables without checking for NULL, so every
//! slot needs a function of exactly its type. `sN` takes N arguments of any types and
//! returns `-FI_ENOSYS` as the slot's `int` or `ssize_t`; the compiler infers the types
//! from the slot (`Some(s3)` in a slot of type `fn(*mut fid, u64, *mut c_void) -> c_int`
//! is `s3::<*mut fid, u64, *mut c_void, c_int>`), so each stub has the slot's exact ABI.
#![allow(improper_ctypes_definitions, clippy::too_many_arguments)]

use crate::Ret;
use crate::ffi::FI_ENOSYS;

pub(crate) unsafe extern "C" fn s1<A0, R: Ret>(_: A0) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s2<A0, A1, R: Ret>(_: A0, _: A1) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s3<A0, A1, A2, R: Ret>(_: A0, _: A1, _: A2) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s4<A0, A1, A2, A3, R: Ret>(_: A0, _: A1, _: A2, _: A3) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s5<A0, A1, A2, A3, A4, R: Ret>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s6<A0, A1, A2, A3, A4, A5, R: Ret>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s8<A0, A1, A2, A3, A4, A5, A6, A7, R: Ret>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
    _: A6,
    _: A7,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s9<A0, A1, A2, A3, A4, A5, A6, A7, A8, R: Ret>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
    _: A6,
    _: A7,
    _: A8,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s10<A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, R: Ret>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
    _: A6,
    _: A7,
    _: A8,
    _: A9,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s11<A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, R: Ret>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
    _: A6,
    _: A7,
    _: A8,
    _: A9,
    _: A10,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s12<A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, R: Ret>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
    _: A6,
    _: A7,
    _: A8,
    _: A9,
    _: A10,
    _: A11,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s13<
    A0,
    A1,
    A2,
    A3,
    A4,
    A5,
    A6,
    A7,
    A8,
    A9,
    A10,
    A11,
    A12,
    R: Ret,
>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
    _: A6,
    _: A7,
    _: A8,
    _: A9,
    _: A10,
    _: A11,
    _: A12,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s14<
    A0,
    A1,
    A2,
    A3,
    A4,
    A5,
    A6,
    A7,
    A8,
    A9,
    A10,
    A11,
    A12,
    A13,
    R: Ret,
>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
    _: A6,
    _: A7,
    _: A8,
    _: A9,
    _: A10,
    _: A11,
    _: A12,
    _: A13,
) -> R {
    R::neg(FI_ENOSYS)
}

pub(crate) unsafe extern "C" fn s16<
    A0,
    A1,
    A2,
    A3,
    A4,
    A5,
    A6,
    A7,
    A8,
    A9,
    A10,
    A11,
    A12,
    A13,
    A14,
    A15,
    R: Ret,
>(
    _: A0,
    _: A1,
    _: A2,
    _: A3,
    _: A4,
    _: A5,
    _: A6,
    _: A7,
    _: A8,
    _: A9,
    _: A10,
    _: A11,
    _: A12,
    _: A13,
    _: A14,
    _: A15,
) -> R {
    R::neg(FI_ENOSYS)
}
