/*
 * mrc_ctl_api_ver.h: controller API version numbers of lib_mrc.so (mrc's software
 * implementation of OCP MRC 1.0). The project's own declarations, written to the
 * published ABI (docs/OCP_MRC.md). SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef MRC_CTL_API_VER_H
#define MRC_CTL_API_VER_H

/* A version is major << 24 | minor << 16 | subminor, as the application API's. */
#define MRC_CTL_API_VER_MAJOR_OFFSET 24
#define MRC_CTL_API_VER_MINOR_OFFSET 16
#define MRC_CTL_API_VER_SUBMINOR_OFFSET 0
#define MRC_CTL_API_VER(major, minor, subminor)                                 \
	(((major) << MRC_CTL_API_VER_MAJOR_OFFSET) |                            \
	 ((minor) << MRC_CTL_API_VER_MINOR_OFFSET) |                            \
	 ((subminor) << MRC_CTL_API_VER_SUBMINOR_OFFSET))
#define MRC_CTL_API_VER_LATEST MRC_CTL_API_VER(0xFF, 0xFF, 0xFFFF)

#define MRC_CTL_API_CURRENT_VERSION MRC_CTL_API_VER(1, 0, 1)
#define MRC_CTL_API_LAST_SUPPORTED_VERSION MRC_CTL_API_VER(0, 0, 0)

#ifndef MRC_CTL_API_VER_USED
#define MRC_CTL_API_VER_USED MRC_CTL_API_CURRENT_VERSION
#elif MRC_CTL_API_VER_USED == MRC_CTL_API_VER_LATEST
#undef MRC_CTL_API_VER_USED
#define MRC_CTL_API_VER_USED MRC_CTL_API_CURRENT_VERSION
#endif
#if MRC_CTL_API_VER_USED > MRC_CTL_API_CURRENT_VERSION
#error "MRC_CTL_API_VER_USED is newer than this header"
#endif

#define MRC_CTL_VENDOR_API_CURRENT_VERSION MRC_CTL_API_VER(1, 0, 0)
#define MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION MRC_CTL_API_VER(0, 0, 0)
#ifndef MRC_CTL_VENDOR_API_VER_USED
#define MRC_CTL_VENDOR_API_VER_USED MRC_CTL_VENDOR_API_CURRENT_VERSION
#elif MRC_CTL_VENDOR_API_VER_USED == MRC_CTL_API_VER_LATEST
#undef MRC_CTL_VENDOR_API_VER_USED
#define MRC_CTL_VENDOR_API_VER_USED MRC_CTL_VENDOR_API_CURRENT_VERSION
#endif
#if MRC_CTL_VENDOR_API_VER_USED > MRC_CTL_VENDOR_API_CURRENT_VERSION
#error "MRC_CTL_VENDOR_API_VER_USED is newer than this header"
#endif

#endif /* MRC_CTL_API_VER_H */
