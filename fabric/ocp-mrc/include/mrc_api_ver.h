/*
 * mrc_api_ver.h: API version numbers of lib_mrc.so, mrc's software implementation of
 * the OCP MRC 1.0 application API. The project's own declarations, written to the
 * published ABI (docs/OCP_MRC.md). SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef MRC_API_VER_H
#define MRC_API_VER_H

/* A version is major << 24 | minor << 16 | subminor. */
#define MRC_API_VER_MAJOR_OFFSET 24
#define MRC_API_VER_MINOR_OFFSET 16
#define MRC_API_VER_SUBMINOR_OFFSET 0
#define MRC_API_VER(major, minor, subminor)                                     \
	(((major) << MRC_API_VER_MAJOR_OFFSET) |                                \
	 ((minor) << MRC_API_VER_MINOR_OFFSET) |                                \
	 ((subminor) << MRC_API_VER_SUBMINOR_OFFSET))
/* "Whatever is newest". */
#define MRC_API_VER_LATEST MRC_API_VER(0xFF, 0xFF, 0xFFFF)

#define MRC_API_CURRENT_VERSION MRC_API_VER(1, 0, 1)
#define MRC_API_LAST_SUPPORTED_VERSION MRC_API_VER(0, 0, 0)

/* The version the including program is written to; the newest unless it says. */
#ifndef MRC_API_VER_USED
#define MRC_API_VER_USED MRC_API_CURRENT_VERSION
#elif MRC_API_VER_USED == MRC_API_VER_LATEST
#undef MRC_API_VER_USED
#define MRC_API_VER_USED MRC_API_CURRENT_VERSION
#endif
#if MRC_API_VER_USED > MRC_API_CURRENT_VERSION
#error "MRC_API_VER_USED is newer than this header"
#endif

#define MRC_VENDOR_API_CURRENT_VERSION MRC_API_VER(1, 0, 0)
#define MRC_VENDOR_API_LAST_SUPPORTED_VERSION MRC_API_VER(0, 0, 0)
#ifndef MRC_VENDOR_API_VER_USED
#define MRC_VENDOR_API_VER_USED MRC_VENDOR_API_CURRENT_VERSION
#elif MRC_VENDOR_API_VER_USED == MRC_API_VER_LATEST
#undef MRC_VENDOR_API_VER_USED
#define MRC_VENDOR_API_VER_USED MRC_VENDOR_API_CURRENT_VERSION
#endif
#if MRC_VENDOR_API_VER_USED > MRC_VENDOR_API_CURRENT_VERSION
#error "MRC_VENDOR_API_VER_USED is newer than this header"
#endif

#endif /* MRC_API_VER_H */
