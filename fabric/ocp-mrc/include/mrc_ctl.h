/*
 * mrc_ctl.h: the OCP MRC 1.0 controller API as lib_mrc.so (mrc's software
 * implementation over RDMA UD QPs) provides it. The project's own declarations, written
 * to the published ABI: the same struct layouts, enum values and function signatures.
 * What each call does here, and what it refuses: docs/OCP_MRC.md.
 *
 * Profiles live in the process that loaded lib_mrc.so: a controller programs them for
 * the QPs of its own process (there is no node-wide daemon).
 *
 * Ports are planes: a context has one port per plane, port 1 its ibv_context's device,
 * ports 2, 3, ... the devices the environment variable MRC_PLANE_DEVICES names
 * ("rxe1", or the whole list "rxe0,rxe1"; at most 8 in all), one UD datapath each under
 * every QP. An EV's port (struct mrc_ctl_ev) is the plane its packets leave from; see
 * struct mrc_ctl_ev and docs/OCP_MRC.md, "Several planes".
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef MRC_CTL_H
#define MRC_CTL_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include "mrc.h"
#include "mrc_ctl_api_ver.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MRC_CTL_MAX_VENDOR_CFG_SIZE 128
#define MRC_CTL_EV_MAX_BYTES 32
/* The "no EV yet" entry of an explicit EV array. */
#define MRC_CTL_EV_UNPOPULATED ((struct mrc_ctl_ev){ .val = { 0 }, .port = 0 })

enum mrc_ctl_protocol_version {
	MRC_CTL_PROTOCOL_VERSION_0 = 0, /* provider's choice */
	MRC_CTL_PROTOCOL_VERSION_1 = 1 << 0,
};

/* Every profile: INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT. */
enum mrc_ctl_profile_state {
	MRC_CTL_PROFILE_INIT,
	MRC_CTL_PROFILE_OFFLINE,
	MRC_CTL_PROFILE_ONLINE,
};

enum mrc_ctl_attr_opt {
	MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE = 1 << 0,
	MRC_CTL_OPT_CAP_CC_PROFILE_MODIFY_ONLINE = 1 << 1,
	MRC_CTL_OPT_CAP_EV_EVENT = 1 << 2,
	MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE = 1 << 3,
	MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT = 1 << 4,
	MRC_CTL_OPT_CAP_EP_OP_EV_PROBE = 1 << 5
};

struct mrc_ctl_device_attr {
	uint32_t mrc_ctl_protocol_version; /* bitmap of enum mrc_ctl_protocol_version */
	struct {
		uint32_t ev_max_fmt_profiles;
		uint32_t ev_max_profiles;
		uint32_t ev_max_count;         /* EVs over all profiles */
		uint32_t ev_free_count;        /* of those, not in use */
		uint32_t ev_max_count_profile; /* EVs in one profile */
		uint32_t ev_count_align;       /* explicit arrays: a multiple of this */
		uint32_t ev_max_width;         /* valid bits of an EV */
		uint32_t ev_fmt_mode_mask;     /* enum mrc_ctl_ev_fmt_mode bits */
		uint32_t ev_mode_mask;         /* enum mrc_ctl_ev_mode bits */
		uint32_t ev_op_max_entries;    /* per EV_OP batch; 0: no cap */
	} ev;
	struct {
		uint32_t cc_max_profiles;
		const char **algorithms; /* NULL-terminated; owned by the library */
	} cc;
	uint32_t phy_port_mask; /* bit N: port N (1-based); one port per plane (0x2 on one
				 * device, 0x6 with MRC_PLANE_DEVICES naming a second) */
	uint32_t opt_attr;      /* enum mrc_ctl_attr_opt bits */
};

/* 0, or -1 with errno (errors as ibv_query_device). */
#if MRC_CTL_API_VER_USED >= MRC_CTL_API_VER(1, 0, 1)
int mrc_ctl_query_device_ex(struct ibv_context *context, struct mrc_context *mcontext,
			    struct mrc_ctl_device_attr *ctl_attr, int *supported);
#endif
int mrc_ctl_query_device(struct ibv_context *context, struct mrc_ctl_device_attr *ctl_attr);

/* May be called before any context exists. */
void mrc_ctl_query_version(uint32_t *current_version, uint32_t *last_supported_version,
			   uint32_t *vendor_version,
			   uint32_t *last_supported_vendor_version);

enum mrc_ctl_port_admin_state {
	MRC_CTL_PORT_ADMIN_DISABLED = 0,
	MRC_CTL_PORT_ADMIN_ENABLED = 1,
};

enum mrc_ctl_port_attr_mask {
	MRC_CTL_PORT_ADMIN_STATE = 1 << 0,
};

struct mrc_ctl_port_attr {
	enum mrc_ctl_port_admin_state port_admin_state;
};

/* 0, or -1 with errno: EINVAL (port 0 or past the context's planes), EIO, EPERM. */
int mrc_ctl_query_port(struct mrc_context *context, uint8_t port_num,
		       struct mrc_ctl_port_attr *attr, int attr_mask);
int mrc_ctl_modify_port(struct mrc_context *context, uint8_t port_num,
			struct mrc_ctl_port_attr *attr, int attr_mask);

/* Where an EV goes in a packet. */
enum mrc_ctl_ev_fmt_mode {
	MRC_CTL_EV_FMT_MODE_STEV = 1 << 0, /* IPv6 flow label + UDP source port */
	MRC_CTL_EV_FMT_MODE_SRV6 = 1 << 1, /* uSID destination, optional one-segment SRH */
	MRC_CTL_EV_FMT_MODE_UDP = 1 << 2,  /* UDP source port */
};

enum mrc_ctl_ev_fmt_op {
	MRC_CTL_EV_FMT_OP_MODIFY_FIELDS,
	MRC_CTL_EV_FMT_OP_QUERY_FIELDS,
};

enum mrc_ctl_ev_fmt_profile_attr_mask {
	MRC_CTL_EV_FMT_PROFILE_STATE = 1 << 0,
	MRC_CTL_EV_FMT_PROFILE_CUR_STATE = 1 << 1,
	MRC_CTL_EV_FMT_PROFILE_MODE = 1 << 2,
	MRC_CTL_EV_FMT_PROFILE_OP = 1 << 3,
	MRC_CTL_EV_FMT_VENDOR_CFG = 1 << 31,
};

struct mrc_ctl_ev_fmt_field {
	uint8_t width; /* bits */
};

struct mrc_ctl_ev_fmt_profile_attr {
	enum mrc_ctl_profile_state profile_state;     /* target state */
	enum mrc_ctl_profile_state cur_profile_state; /* state now */
	enum mrc_ctl_ev_fmt_mode ev_fmt_mode;
	struct {
		enum mrc_ctl_ev_fmt_op op;
		struct mrc_ctl_ev_fmt_field *fmt_fields;
		int fmt_field_count; /* in: array length; out: fields */
	} ev_fmt_op;
	uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

/* 0, or -1 with errno: EINVAL, EBUSY (an EV profile using it is ONLINE), E2BIG, EIO, EPERM. */
int mrc_ctl_modify_ev_fmt_profile(struct mrc_context *mrc_ctx, uint64_t ev_fmt_profile_id,
				  struct mrc_ctl_ev_fmt_profile_attr *attr, int attr_mask);
/* 0, or -1 with errno: EINVAL, E2BIG (fmt_field_count set to what is needed). */
int mrc_ctl_query_ev_fmt_profile(struct mrc_context *mrc_ctx, uint64_t ev_fmt_profile_id,
				 struct mrc_ctl_ev_fmt_profile_attr *attr, int attr_mask);

/* STEV and UDP: the value in the first 4 bytes; SRV6: the destination address in bytes
 * 0..15, the SRH's one segment in bytes 16..31. */
typedef uint8_t mrc_ctl_ev_t[MRC_CTL_EV_MAX_BYTES];

/* port: 1-based, the plane the EV leaves from (port 1: the context's device; port N:
 * plane N-1, MRC_PLANE_DEVICES' devices in order after the context's). REPLACE_EV takes 1 to the controller's
 * context's ports (else EINVAL); AUTO and GEN EVs get port 1 + i mod ports of the
 * controller's context when the array is made. A QP whose context lacks an EV's port, or
 * on several planes one whose planes get no EV or counts more than one apart, is refused
 * at RTS with EINVAL. */
struct mrc_ctl_ev {
	mrc_ctl_ev_t val;
	uint8_t port; /* 1-based */
};

enum mrc_ctl_ev_state {
	MRC_CTL_EV_GOOD = 1 << 0,
	MRC_CTL_EV_ASSUMED_BAD = 1 << 1,
	MRC_CTL_EV_DENIED = 1 << 2,
	MRC_CTL_EV_UNKNOWN = 1 << 31
};

enum mrc_ctl_ev_mode {
	MRC_CTL_EV_MODE_AUTO = 1 << 0, /* the provider picks the EVs */
	MRC_CTL_EV_MODE_EXP = 1 << 1,  /* an explicit array */
	MRC_CTL_EV_MODE_GEN = 1 << 2,  /* generated from the fields */
};

enum mrc_ctl_ev_op {
	MRC_CTL_EV_OP_REPLACE_EV,
	MRC_CTL_EV_OP_MODIFY_EV_STATE,
	MRC_CTL_EV_OP_QUERY_EV_STATE,
	MRC_CTL_EV_OP_QUERY_EV_ARRAY,
};

enum mrc_ctl_ev_fields_op {
	MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS,
	MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS,
};

enum mrc_ctl_ev_profile_attr_mask {
	MRC_CTL_EV_PROFILE_STATE = 1 << 0,
	MRC_CTL_EV_PROFILE_CUR_STATE = 1 << 1,
	MRC_CTL_EV_PROFILE_MODE = 1 << 2,
	MRC_CTL_EV_PROFILE_FMT_ID = 1 << 3,
	MRC_CTL_EV_PROFILE_COUNT = 1 << 4,
	MRC_CTL_EV_PROFILE_MIN_ACTIVE = 1 << 5,
	MRC_CTL_EV_PROFILE_EVENT_MASK = 1 << 6,
	MRC_CTL_EV_PROFILE_EV_OP = 1 << 7,
	MRC_CTL_EV_PROFILE_EV_FIELDS_OP = 1 << 8,
	MRC_CTL_EV_PROFILE_VENDOR_CFG = 1 << 31,
};

/* One field of an EV: init_val with the EV's next bits laid into the mask's bits. */
struct mrc_ctl_ev_field {
	uint32_t width;
	uint32_t init_val;
	uint32_t min_val; /* generated EVs: smallest value of the masked bits */
	uint32_t max_val; /* ... largest */
	uint32_t mask;
};

enum mrc_ctl_ev_op_flags {
	MRC_CTL_EV_OP_F_ALL_COPIES = 1 << 0, /* REPLACE_EV: every occurrence */
};

struct mrc_ctl_ev_op_entry {
	struct mrc_ctl_ev ev;     /* subject */
	struct mrc_ctl_ev ev_new; /* REPLACE_EV: replacement */
	enum mrc_ctl_ev_state state;
	uint32_t flags; /* enum mrc_ctl_ev_op_flags */
};

struct mrc_ctl_ev_profile_attr {
	enum mrc_ctl_profile_state profile_state;
	enum mrc_ctl_profile_state cur_profile_state;
	enum mrc_ctl_ev_mode ev_mode;
	uint64_t ev_fmt_profile_id;
	uint32_t ev_count;
	uint32_t ev_min_active;
	int ev_event_mask; /* MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD */
	struct {
		enum mrc_ctl_ev_op op;
		struct mrc_ctl_ev_op_entry *entries;
		int entry_count;
	} ev_op;
	struct {
		enum mrc_ctl_ev_fields_op op;
		struct mrc_ctl_ev_field *fields;
		int field_count;
	} ev_fields_op;
	uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

/* 0, or -1 with errno: E2BIG, EINVAL, ENOENT (EV not found), EIO, EPERM, EBUSY (a QP uses it). */
int mrc_ctl_modify_ev_profile(struct mrc_context *mrc_ctx, uint64_t ev_profile_id,
			      struct mrc_ctl_ev_profile_attr *attr, int attr_mask);
int mrc_ctl_query_ev_profile(struct mrc_context *mrc_ctx, uint64_t ev_profile_id,
			     struct mrc_ctl_ev_profile_attr *attr, int attr_mask);

enum mrc_ctl_cc_profile_attr_mask {
	MRC_CTL_CC_PROFILE_STATE = 1 << 0,
	MRC_CTL_CC_PROFILE_CUR_STATE = 1 << 1,
	MRC_CTL_CC_PROFILE_ALGORITHM = 1 << 2,
	MRC_CTL_CC_PROFILE_CONFIG = 1 << 3,
	MRC_CTL_CC_PROFILE_VENDOR_CFG = 1 << 31,
};

struct mrc_ctl_cc_profile_attr {
	enum mrc_ctl_profile_state profile_state;
	enum mrc_ctl_profile_state cur_profile_state;
	const char *algorithm; /* one of device_attr.cc.algorithms; NULL: no CC */
	const void *cc_config; /* "uet-1.0-nscc": struct mrc_ctl_cc_nscc_cfg */
	uint8_t vendor_cfg[MRC_CTL_MAX_VENDOR_CFG_SIZE];
};

struct mrc_ctl_cc_nscc_cfg {
	uint8_t disable_qa;               /* non-zero: no quick adapt */
	uint32_t adjust_bytes_threshold;  /* bytes */
	uint32_t adjust_period_threshold; /* ns */
	uint32_t base_rtt;                /* ns */
	float eta;
	float fi;
	float fi_scale;
	float gamma;
	float max_md_jump;
	uint32_t max_cwnd; /* bytes */
	uint8_t qa_gate;
	uint32_t qa_threshold; /* ns */
	uint32_t target_delay; /* ns */
};

/* 0, or -1 with errno: EINVAL, EIO, EPERM, EBUSY. */
int mrc_ctl_modify_cc_profile(struct mrc_context *mrc_ctx, uint64_t cc_profile_id,
			      struct mrc_ctl_cc_profile_attr *attr, int attr_mask);
int mrc_ctl_query_cc_profile(struct mrc_context *mrc_ctx, uint64_t cc_profile_id,
			     struct mrc_ctl_cc_profile_attr *attr, int attr_mask);

struct mrc_ctl_ev_event {
	uint64_t profile_id;
	struct mrc_ctl_ev ev;
	uint32_t drop_count; /* events lost before this one (precise, or 0/1) */
#if MRC_CTL_API_VER_USED >= MRC_CTL_API_VER(1, 0, 1)
	enum mrc_ctl_ev_state state; /* filled for a context of API 1.0.1 or newer */
#endif
};

/* NULL with errno on failure (errors as ibv_create_cq). */
struct mrc_cq *mrc_ctl_create_ev_event_cq(struct mrc_context *mrc_ctx, int cqe,
					  void *cq_context, struct mrc_comp_channel *channel,
					  int comp_vector);
/* Events found, or a negative errno. */
int mrc_ctl_poll_ev_event(struct mrc_cq *ev_cq, int num_entries,
			  struct mrc_ctl_ev_event *ev_event);

enum mrc_ctl_ep_op_type {
	MRC_CTL_EP_OP_EV_PROBE,
	MRC_CTL_EP_OP_PORT_STATUS_UPDATE
};

struct mrc_ctl_ep_req {
	uint16_t req_id;
	union ibv_gid sgid; /* RoCEv2 GIDs only */
	union ibv_gid dgid;
	enum mrc_ctl_ev_fmt_mode ev_fmt_mode;
	struct mrc_ctl_ev req_ev;
	union {
		struct {
			uint32_t port_status; /* 1-based port bits */
		} port_status_update;
	} op;
};

struct mrc_ctl_ep_rsp {
	uint16_t req_id;
	uint8_t port;
	unsigned int rtt; /* ns */
	uint8_t adj_svc_time;
};

/* 0, or -1 with errno: EAGAIN, EINVAL, EIO, ENOMEM, ENOTSUP, EPERM, ETIMEDOUT. */
int mrc_ctl_ep_batch_send_wait(struct mrc_context *mrc_ctx, uint8_t req_tc,
			       enum mrc_ctl_ep_op_type op_type, struct mrc_ctl_ep_req *req,
			       int num_req, uint32_t rsp_timeout, struct mrc_ctl_ep_rsp *rsp,
			       int *num_rsp);

#ifdef __cplusplus
}
#endif

#endif /* MRC_CTL_H */
