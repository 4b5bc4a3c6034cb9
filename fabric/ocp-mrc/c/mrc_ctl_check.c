/*
 * mrc_ctl_check: calls every function of mrc_ctl.h against lib_mrc.so and checks the
 * results exactly. Needs no RDMA device: without one it runs on a stand-in ibv_context
 * that no call of the controller API dereferences (mrc_ctl_query_device_ex, which asks
 * the device's port, is then checked to refuse a NULL context with EINVAL).
 * First it prints the layout of every controller struct ("layout NAME VALUE"), which
 * the cargo test compares with the Rust side.
 * On a device it then runs a live QP pair on an EXP EV profile and the NSCC CC profile
 * (live_pair below), first in this process, then in another (cross_process: the program
 * again, "--app", on the profiles this process programmed in the device's store).
 *   mrc_ctl_check            exit 0 and "mrc_ctl_check: ok" when every check held
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mrc_ctl.h"
#include "mrcx.h"

static int failures;

#define CHECK(cond)                                                             \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d)\n", \
				__FILE__, __LINE__, #cond, errno);              \
			failures++;                                             \
		}                                                               \
	} while (0)

/* -1 with errno e. */
#define REFUSED(call, e)                                                        \
	do {                                                                    \
		errno = 0;                                                      \
		int rc_ = (call);                                               \
		CHECK(rc_ == -1 && errno == (e));                               \
	} while (0)

#define L(name, v) printf("layout %s %zu\n", name, (size_t)(v))

static void layouts(void)
{
	L("ev", sizeof(struct mrc_ctl_ev));
	L("device_attr", sizeof(struct mrc_ctl_device_attr));
	L("device_attr.cc", offsetof(struct mrc_ctl_device_attr, cc));
	L("device_attr.phy_port_mask", offsetof(struct mrc_ctl_device_attr, phy_port_mask));
	L("fmt_profile_attr", sizeof(struct mrc_ctl_ev_fmt_profile_attr));
	L("fmt_profile_attr.ev_fmt_op", offsetof(struct mrc_ctl_ev_fmt_profile_attr, ev_fmt_op));
	L("ev_op_entry", sizeof(struct mrc_ctl_ev_op_entry));
	L("ev_op_entry.state", offsetof(struct mrc_ctl_ev_op_entry, state));
	L("ev_profile_attr", sizeof(struct mrc_ctl_ev_profile_attr));
	L("ev_profile_attr.ev_fmt_profile_id",
	  offsetof(struct mrc_ctl_ev_profile_attr, ev_fmt_profile_id));
	L("ev_profile_attr.ev_op", offsetof(struct mrc_ctl_ev_profile_attr, ev_op));
	L("ev_profile_attr.ev_fields_op", offsetof(struct mrc_ctl_ev_profile_attr, ev_fields_op));
	L("cc_profile_attr", sizeof(struct mrc_ctl_cc_profile_attr));
	L("nscc_cfg", sizeof(struct mrc_ctl_cc_nscc_cfg));
	L("nscc_cfg.qa_gate", offsetof(struct mrc_ctl_cc_nscc_cfg, qa_gate));
	L("ev_event", sizeof(struct mrc_ctl_ev_event));
	L("ev_event.drop_count", offsetof(struct mrc_ctl_ev_event, drop_count));
	L("ep_req", sizeof(struct mrc_ctl_ep_req));
	L("ep_req.req_ev", offsetof(struct mrc_ctl_ep_req, req_ev));
	L("ep_req.op", offsetof(struct mrc_ctl_ep_req, op));
	L("ep_rsp", sizeof(struct mrc_ctl_ep_rsp));
}

static struct mrc_ctl_ev stev(uint32_t v)
{
	struct mrc_ctl_ev e;
	memset(&e, 0, sizeof(e));
	memcpy(e.val, &v, sizeof(v));
	e.port = 1;
	return e;
}

static uint32_t stev_val(const struct mrc_ctl_ev *e)
{
	uint32_t v;
	memcpy(&v, e->val, sizeof(v));
	return v;
}

/* --- A live QP pair on rxe (device only) ------------------------------------------------
 * EV format profile 14 (UDP: one 16-bit source-port field), explicit EV profile 4 with
 * the four source ports LIVE_EV, NSCC CC profile 3; two QPs of one context connected to
 * each other name both at INIT. WRITEs of known bytes from A into B's MR, checked byte by
 * byte; mrcx.h's mrc_x_qp_transport / mrc_x_qp_evs say what A's transport ran on and
 * sent on each EV: exactly the four EVs, NSCC; a DENY of one takes it out of rotation
 * (not one packet more on it), GOOD puts it back. */
#define LIVE_WRITES 8          /* per phase */
#define LIVE_BYTES 16384       /* one chunk: 32 + 16384 bytes */
#define LIVE_PKTS_PER_WRITE 5  /* ceil(16416 / (4096 - 56)): rxe's 4096-byte MTU less mrc's headers */
static const uint32_t LIVE_EV[4] = { 0xC001, 0xC002, 0xC003, 0xC004 };

static uint8_t live_pattern(uint32_t w, uint32_t i) { return (uint8_t)(w * 29 + i * 11 + 3); }

static int first_ipv4_gid(struct ibv_context *vctx)
{
	for (int i = 0; i < 16; i++) {
		union ibv_gid g;
		if (ibv_query_gid(vctx, 1, i, &g))
			continue;
		static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		if (!memcmp(g.raw, pre, 12))
			return i;
	}
	return -1;
}

/* EV counts of qp into out[4]; checks the EVs are exactly LIVE_EV in order. */
static void live_evs(struct mrc_qp *qp, struct mrc_x_ev_count *out)
{
	size_t n = 0;
	memset(out, 0, 4 * sizeof(*out));
	CHECK(mrc_x_qp_evs(qp, out, 4, &n) == 0);
	CHECK(n == 4);
	for (int i = 0; i < 4; i++)
		CHECK(out[i].ev == LIVE_EV[i]);
}

static uint64_t first_sends(const struct mrc_x_ev_count *c, int i)
{
	return c[i].data_packets - c[i].retransmitted;
}

/* Posts LIVE_WRITES WRITEs from A (phase p's offsets), waits for them in order, checks
 * every byte of B's MR written so far. */
static void live_phase(struct mrc_qp *qa, struct mrc_cq *scq, uint8_t *src, uint32_t lkey,
		       uint8_t *dst, uint32_t rkey, int p)
{
	for (uint32_t k = 0; k < LIVE_WRITES; k++) {
		uint32_t w = p * LIVE_WRITES + k;
		uint8_t *s = src + w * LIVE_BYTES;
		for (uint32_t i = 0; i < LIVE_BYTES; i++)
			s[i] = live_pattern(w, i);
		struct ibv_sge sge = { .addr = (uintptr_t)s, .length = LIVE_BYTES, .lkey = lkey };
		struct ibv_send_wr wr = { 0 }, *bad = NULL;
		wr.wr_id = 5000 + w;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = (uintptr_t)(dst + w * LIVE_BYTES);
		wr.wr.rdma.rkey = rkey;
		CHECK(mrc_post_send(qa, &wr, &bad) == 0);
	}
	struct ibv_wc wc[LIVE_WRITES];
	int got = 0;
	for (int spin = 0; got < LIVE_WRITES && spin < 60000; spin++) {
		int n = mrc_poll_cq(scq, LIVE_WRITES - got, wc + got);
		CHECK(n >= 0);
		if (n < 0)
			break;
		got += n;
		if (!n)
			usleep(1000);
	}
	CHECK(got == LIVE_WRITES);
	for (int i = 0; i < got; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == 5000u + p * LIVE_WRITES + i &&
		      wc[i].byte_len == LIVE_BYTES);
	long bad = 0;
	for (uint32_t w = 0; w < (uint32_t)(p + 1) * LIVE_WRITES; w++)
		for (uint32_t i = 0; i < LIVE_BYTES; i++)
			bad += dst[w * LIVE_BYTES + i] != live_pattern(w, i);
	for (uint32_t i = (p + 1) * LIVE_WRITES * LIVE_BYTES; i < 1 << 20; i++)
		bad += dst[i] != 0;
	CHECK(bad == 0);
}

static void live_ev_state(struct mrc_context *ctx, uint32_t ev, enum mrc_ctl_ev_state st)
{
	struct mrc_ctl_ev_op_entry e = { .ev = stev(ev), .state = st };
	struct mrc_ctl_ev_profile_attr ea;
	memset(&ea, 0, sizeof(ea));
	ea.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
	ea.ev_op.entries = &e;
	ea.ev_op.entry_count = 1;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 4, &ea, MRC_CTL_EV_PROFILE_EV_OP) == 0);
	usleep(100000); /* the QPs re-read the profile every 1 ms */
}

static void live_profiles(struct mrc_context *ctx)
{
	/* format 14: UDP, one 16-bit field */
	struct mrc_ctl_ev_fmt_field ff = { .width = 16 };
	struct mrc_ctl_ev_fmt_profile_attr fa;
	memset(&fa, 0, sizeof(fa));
	fa.profile_state = MRC_CTL_PROFILE_OFFLINE;
	fa.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
	fa.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
	fa.ev_fmt_op.fmt_fields = &ff;
	fa.ev_fmt_op.fmt_field_count = 1;
	CHECK(mrc_ctl_modify_ev_fmt_profile(ctx, 14, &fa,
					    MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE |
						    MRC_CTL_EV_FMT_PROFILE_OP) == 0);
	memset(&fa, 0, sizeof(fa));
	fa.profile_state = MRC_CTL_PROFILE_ONLINE;
	CHECK(mrc_ctl_modify_ev_fmt_profile(ctx, 14, &fa, MRC_CTL_EV_FMT_PROFILE_STATE) == 0);
	/* EV profile 4: EXP, the four source ports */
	struct mrc_ctl_ev_profile_attr ea;
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ea.ev_mode = MRC_CTL_EV_MODE_EXP;
	ea.ev_fmt_profile_id = 14;
	ea.ev_count = 4;
	ea.ev_min_active = 1;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 4, &ea,
					MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
						MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
						MRC_CTL_EV_PROFILE_MIN_ACTIVE) == 0);
	for (int i = 0; i < 4; i++) {
		struct mrc_ctl_ev_op_entry e = { .ev = MRC_CTL_EV_UNPOPULATED,
						 .ev_new = stev(LIVE_EV[i]),
						 .state = MRC_CTL_EV_GOOD };
		memset(&ea, 0, sizeof(ea));
		ea.ev_op.op = MRC_CTL_EV_OP_REPLACE_EV;
		ea.ev_op.entries = &e;
		ea.ev_op.entry_count = 1;
		CHECK(mrc_ctl_modify_ev_profile(ctx, 4, &ea, MRC_CTL_EV_PROFILE_EV_OP) == 0);
	}
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_ONLINE;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 4, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);

}

static void live_unprogram(struct mrc_context *ctx);

/* The controller's side of a DENY or GOOD of EV LIVE_EV[2] during live_pair: in one
 * process it is the same context's call; for a QP pair in another process (cross != NULL)
 * a byte on the pipe to the controller, which answers when it has changed the state. */
struct cross { int to_ctl, from_ctl; };

static void live_set(struct mrc_context *ctx, struct cross *x, enum mrc_ctl_ev_state st)
{
	if (!x) {
		live_ev_state(ctx, LIVE_EV[2], st);
		return;
	}
	char c = st == MRC_CTL_EV_DENIED ? 'D' : 'G', ack = 0;
	CHECK(write(x->to_ctl, &c, 1) == 1);
	CHECK(read(x->from_ctl, &ack, 1) == 1 && ack == c);
}

/* cross == NULL: this process programs the profiles and runs the QPs; else the QPs run on
 * the profiles another process (the controller) programmed in the device's store. */
static void live_pair(struct mrc_context *ctx, struct ibv_context *vctx, struct cross *x)
{
	struct mrc_ctl_ev_profile_attr ea;
	if (!x)
		live_profiles(ctx);
	int gidx = first_ipv4_gid(vctx);
	CHECK(gidx >= 0);
	union ibv_gid gid;
	CHECK(ibv_query_gid(vctx, 1, gidx, &gid) == 0);
	struct ibv_pd *pd = ibv_alloc_pd(vctx);
	uint8_t *src = aligned_alloc(4096, 1 << 20), *dst = aligned_alloc(4096, 1 << 20);
	CHECK(pd && src && dst);
	if (!pd || !src || !dst)
		return;
	memset(dst, 0, 1 << 20);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr =
		ibv_reg_mr(pd, dst, 1 << 20, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(smr && dmr);
	struct mrc_cq *cq[4];
	for (int i = 0; i < 4; i++) {
		cq[i] = mrc_create_cq(ctx, 64, NULL, NULL, 0);
		CHECK(cq[i] != NULL);
	}
	struct mrc_qp *qp[2];
	uint32_t qpn[2] = { 0, 0 };
	for (int i = 0; i < 2; i++) {
		struct mrc_qp_init_attr qa = {
			.send_cq = cq[2 * i], .recv_cq = cq[2 * i + 1],
			.cap = { .max_send_wr = 64, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
			.pd = pd,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
		};
		qp[i] = mrc_create_qp(ctx, &qa);
		CHECK(qp[i] != NULL);
		if (!qp[i])
			return;
		CHECK(mrc_get_qpn(qp[i], &qpn[i]) == 0);
	}
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr v;
		struct mrc_qp_attr m;
		memset(&v, 0, sizeof(v));
		memset(&m, 0, sizeof(m));
		v.qp_state = IBV_QPS_INIT;
		v.port_num = 1;
		m.profile.ev_profile_id = 4;
		m.profile.cc_profile_id = 3;
		CHECK(mrc_modify_qp(qp[i], &v, IBV_QP_STATE | IBV_QP_PORT, &m,
				    MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID) == 0);
	}
	/* held: the profile cannot go OFFLINE under the QPs (holds are per process) */
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_OFFLINE;
	if (!x)
		REFUSED(mrc_ctl_modify_ev_profile(ctx, 4, &ea, MRC_CTL_EV_PROFILE_STATE), EBUSY);
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr v;
		struct mrc_qp_attr m;
		memset(&v, 0, sizeof(v));
		memset(&m, 0, sizeof(m));
		v.qp_state = IBV_QPS_RTR;
		v.path_mtu = IBV_MTU_4096;
		v.dest_qp_num = qpn[1 - i];
		v.ah_attr.is_global = 1;
		v.ah_attr.grh.dgid = gid;
		v.ah_attr.grh.sgid_index = gidx;
		v.ah_attr.port_num = 1;
		/* A says its peer (B) does not generate trim NACKs: B's transport NACKs none */
		m.cap = i == 0 ? MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED : 0;
		CHECK(mrc_modify_qp(qp[i], &v,
				    IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU, &m,
				    MRC_QP_CAP) == 0);
	}
	struct mrc_x_transport_info ti;
	CHECK(mrc_x_qp_transport(qp[0], &ti) == ENOTCONN);
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr v;
		memset(&v, 0, sizeof(v));
		v.qp_state = IBV_QPS_RTS;
		CHECK(mrc_modify_qp(qp[i], &v, IBV_QP_STATE, NULL, 0) == 0);
	}
	int est = 0;
	for (int i = 0; i < 2; i++) {
		struct mrc_async_event ev;
		CHECK(mrc_get_async_event(ctx, &ev) == 0);
		est += ev.event_type == IBV_EVENT_COMM_EST &&
		       (ev.element.qp == qp[0] || ev.element.qp == qp[1]);
		mrc_ack_async_event(&ev);
	}
	CHECK(est == 2);
	for (int i = 0; i < 2; i++) {
		memset(&ti, 0xff, sizeof(ti));
		CHECK(mrc_x_qp_transport(qp[i], &ti) == 0);
		CHECK(ti.cc == MRC_X_CC_NSCC && ti.ev_count == 4 && ti.reserved == 0);
		CHECK(ti.trim_nacks == (i == 0 ? 1u : 0u));
	}
	struct mrc_x_ev_count c0[4], c1[4], c2[4], c3[4];
	size_t n = 0;
	CHECK(mrc_x_qp_evs(qp[0], c0, 2, &n) == E2BIG && n == 4);
	CHECK(mrc_x_qp_evs(qp[0], NULL, 0, NULL) == EINVAL);
	live_evs(qp[0], c0);
	for (int i = 0; i < 4; i++)
		CHECK(c0[i].data_packets == 0 && c0[i].denied == 0 && c0[i].plane == 0 &&
		      c0[i].plane_state == MRC_X_PLANE_UP);

	/* phase 0: all four EVs carry A's packets, and only they */
	live_phase(qp[0], cq[0], src, smr->lkey, dst, dmr->rkey, 0);
	live_evs(qp[0], c1);
	uint64_t sum = 0;
	for (int i = 0; i < 4; i++) {
		CHECK(c1[i].data_packets > 0 && c1[i].denied == 0);
		sum += first_sends(c1, i);
	}
	CHECK(sum == LIVE_WRITES * LIVE_PKTS_PER_WRITE);

	/* phase 1: EV 2 DENIED: out of rotation, not one packet or probe more on it */
	live_set(ctx, x, MRC_CTL_EV_DENIED);
	live_evs(qp[0], c2);
	CHECK(c2[2].denied == 1 && c2[2].data_packets == c1[2].data_packets &&
	      c2[2].probes == c1[2].probes);
	live_phase(qp[0], cq[0], src, smr->lkey, dst, dmr->rkey, 1);
	struct mrc_x_ev_count d[4];
	live_evs(qp[0], d);
	sum = 0;
	for (int i = 0; i < 4; i++)
		sum += first_sends(d, i) - first_sends(c2, i);
	CHECK(sum == LIVE_WRITES * LIVE_PKTS_PER_WRITE);
	CHECK(d[2].denied == 1 && d[2].data_packets == c1[2].data_packets && d[2].probes == c1[2].probes);

	/* phase 2: GOOD again: back in rotation */
	live_set(ctx, x, MRC_CTL_EV_GOOD);
	live_phase(qp[0], cq[0], src, smr->lkey, dst, dmr->rkey, 2);
	live_evs(qp[0], c3);
	sum = 0;
	for (int i = 0; i < 4; i++)
		sum += first_sends(c3, i) - first_sends(d, i);
	CHECK(sum == LIVE_WRITES * LIVE_PKTS_PER_WRITE);
	CHECK(c3[2].denied == 0 && c3[2].data_packets > d[2].data_packets);
	printf("mrc_ctl_check: live EVs (data packets: phase 0 | EV 0x%x denied | back)", LIVE_EV[2]);
	for (int i = 0; i < 4; i++)
		printf(" 0x%x: %llu | %llu | %llu", LIVE_EV[i], (unsigned long long)c1[i].data_packets,
		       (unsigned long long)(d[i].data_packets - c2[i].data_packets),
		       (unsigned long long)(c3[i].data_packets - d[i].data_packets));
	printf("\n");
	if (!failures)
		printf("mrc_ctl_check: %s on EXP EV profile 4 (4 UDP EVs) and NSCC profile 3: "
		       "%d WRITEs of %d bytes verified, %d data packets per phase on exactly those EVs, "
		       "a denied EV out of rotation and back\n",
		       x ? "QP pair in another process than the controller" : "live QP pair",
		       3 * LIVE_WRITES, LIVE_BYTES, LIVE_WRITES * LIVE_PKTS_PER_WRITE);

	for (int i = 0; i < 2; i++)
		CHECK(mrc_destroy_qp(qp[i]) == 0);
	for (int i = 0; i < 4; i++)
		CHECK(mrc_destroy_cq(cq[i]) == 0);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	ibv_dealloc_pd(pd);
	free(src);
	free(dst);
	if (!x)
		live_unprogram(ctx);
}

/* EV profile 4, then format 14, back to INIT (CC profile 3 goes at the end of main). */
static void live_unprogram(struct mrc_context *ctx)
{
	struct mrc_ctl_ev_profile_attr ea;
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_OFFLINE;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 4, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);
	ea.profile_state = MRC_CTL_PROFILE_INIT;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 4, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);
	struct mrc_ctl_ev_fmt_profile_attr fa;
	memset(&fa, 0, sizeof(fa));
	fa.profile_state = MRC_CTL_PROFILE_OFFLINE;
	CHECK(mrc_ctl_modify_ev_fmt_profile(ctx, 14, &fa, MRC_CTL_EV_FMT_PROFILE_STATE) == 0);
	fa.profile_state = MRC_CTL_PROFILE_INIT;
	CHECK(mrc_ctl_modify_ev_fmt_profile(ctx, 14, &fa, MRC_CTL_EV_FMT_PROFILE_STATE) == 0);
}

/* The application process of cross_process: "--app TO FROM" (pipe descriptors). Its
 * context never calls mrc_ctl_modify_*: the profiles it names are the controller's. */
static int app_main(int to_ctl, int from_ctl)
{
	int ndev = 0;
	struct ibv_device **list = ibv_get_device_list(&ndev);
	struct ibv_context *vctx = list && ndev > 0 ? ibv_open_device(list[0]) : NULL;
	CHECK(vctx != NULL);
	if (!vctx)
		return 1;
	struct mrc_context *ctx = mrc_create_context(vctx, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return 1;
	struct cross x = { to_ctl, from_ctl };
	live_pair(ctx, vctx, &x);
	CHECK(mrc_destroy_context(ctx) == 0);
	ibv_close_device(vctx);
	ibv_free_device_list(list);
	if (failures)
		fprintf(stderr, "mrc_ctl_check --app: %d checks failed\n", failures);
	return failures ? 1 : 0;
}

/* The controller (this process) programs EV format 14, EV profile 4 and CC profile 3 in
 * the device's store; another process (this program again, --app) runs the QP pair on
 * them, and the controller's DENY and GOOD of one EV reach that process's QPs. */
static void cross_process(struct mrc_context *ctx)
{
	live_profiles(ctx);
	int up[2], down[2];
	CHECK(pipe(up) == 0 && pipe(down) == 0);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		char a[16], b[16];
		snprintf(a, sizeof(a), "%d", up[1]);
		snprintf(b, sizeof(b), "%d", down[0]);
		execl("/proc/self/exe", "mrc_ctl_check", "--app", a, b, (char *)NULL);
		_exit(127);
	}
	CHECK(pid > 0);
	close(up[1]);
	close(down[0]);
	char c;
	while (pid > 0 && read(up[0], &c, 1) == 1) {
		CHECK(c == 'D' || c == 'G');
		live_ev_state(ctx, LIVE_EV[2], c == 'D' ? MRC_CTL_EV_DENIED : MRC_CTL_EV_GOOD);
		CHECK(write(down[1], &c, 1) == 1);
	}
	int status = -1;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(up[0]);
	close(down[1]);
	live_unprogram(ctx);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--app") == 0)
		return app_main(atoi(argv[2]), atoi(argv[3]));
	layouts();

	uint32_t cur = 0, last = 1, ven = 0, last_ven = 1;
	mrc_ctl_query_version(&cur, &last, &ven, &last_ven);
	CHECK(cur == MRC_CTL_API_VER(1, 0, 1) && last == 0);
	CHECK(ven == MRC_CTL_API_VER(1, 0, 0) && last_ven == 0);

	int ndev = 0;
	struct ibv_device **list = ibv_get_device_list(&ndev);
	struct ibv_context *vctx = NULL;
	if (list && ndev > 0)
		vctx = ibv_open_device(list[0]);
	static struct ibv_context stand_in; /* never dereferenced by these calls */
	int have_device = vctx != NULL;
	if (!vctx)
		vctx = &stand_in;
	printf("mrc_ctl_check: %s\n", have_device ? "on a device" : "without a device");

	struct mrc_ctl_device_attr da;
	memset(&da, 0, sizeof(da));
	REFUSED(mrc_ctl_query_device(NULL, &da), EINVAL);
	CHECK(mrc_ctl_query_device(vctx, &da) == 0);
	CHECK(da.mrc_ctl_protocol_version == MRC_CTL_PROTOCOL_VERSION_1);
	CHECK(da.ev.ev_max_fmt_profiles == 64 && da.ev.ev_max_profiles == 64);
	CHECK(da.ev.ev_max_count == 65536 && da.ev.ev_free_count == 65536);
	CHECK(da.ev.ev_max_count_profile == 4096 && da.ev.ev_count_align == 1);
	CHECK(da.ev.ev_max_width == 32 && da.ev.ev_op_max_entries == 0);
	CHECK(da.ev.ev_fmt_mode_mask ==
	      (MRC_CTL_EV_FMT_MODE_STEV | MRC_CTL_EV_FMT_MODE_SRV6 | MRC_CTL_EV_FMT_MODE_UDP));
	CHECK(da.ev.ev_mode_mask ==
	      (MRC_CTL_EV_MODE_AUTO | MRC_CTL_EV_MODE_EXP | MRC_CTL_EV_MODE_GEN));
	CHECK(da.cc.cc_max_profiles == 64 && da.cc.algorithms &&
	      strcmp(da.cc.algorithms[0], "uet-1.0-nscc") == 0 && da.cc.algorithms[1] == NULL);
	CHECK(da.phy_port_mask == 2);
	CHECK(da.opt_attr == (MRC_CTL_OPT_CAP_EV_EVENT | MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT));
	int supported = 7;
	if (have_device) {
		CHECK(mrc_ctl_query_device_ex(vctx, NULL, &da, &supported) == 0);
		CHECK(supported == 1);
	} else {
		REFUSED(mrc_ctl_query_device_ex(NULL, NULL, &da, &supported), EINVAL);
		CHECK(supported == 7);
	}

	struct mrc_context *ctx = mrc_create_context(vctx, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return 1;

	/* Ports: port 1 only, ENABLED; disabling it is the driver's. */
	struct mrc_ctl_port_attr pa = { .port_admin_state = MRC_CTL_PORT_ADMIN_DISABLED };
	CHECK(mrc_ctl_query_port(ctx, 1, &pa, MRC_CTL_PORT_ADMIN_STATE) == 0);
	CHECK(pa.port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED);
	REFUSED(mrc_ctl_query_port(ctx, 2, &pa, MRC_CTL_PORT_ADMIN_STATE), EINVAL);
	CHECK(mrc_ctl_modify_port(ctx, 1, &pa, MRC_CTL_PORT_ADMIN_STATE) == 0);
	pa.port_admin_state = MRC_CTL_PORT_ADMIN_DISABLED;
	REFUSED(mrc_ctl_modify_port(ctx, 1, &pa, MRC_CTL_PORT_ADMIN_STATE), EPERM);

	/* EV format profile 13: STEV, two 16-bit fields, OFFLINE then ONLINE. */
	struct mrc_ctl_ev_fmt_field ff[2] = { { .width = 16 }, { .width = 16 } };
	struct mrc_ctl_ev_fmt_profile_attr fa;
	memset(&fa, 0, sizeof(fa));
	fa.profile_state = MRC_CTL_PROFILE_ONLINE;
	REFUSED(mrc_ctl_modify_ev_fmt_profile(ctx, 13, &fa, MRC_CTL_EV_FMT_PROFILE_STATE), EINVAL);
	fa.profile_state = MRC_CTL_PROFILE_OFFLINE;
	fa.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_STEV;
	fa.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_MODIFY_FIELDS;
	fa.ev_fmt_op.fmt_fields = ff;
	fa.ev_fmt_op.fmt_field_count = 2;
	CHECK(mrc_ctl_modify_ev_fmt_profile(ctx, 13, &fa,
					    MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE |
						    MRC_CTL_EV_FMT_PROFILE_OP) == 0);
	memset(&fa, 0, sizeof(fa));
	fa.profile_state = MRC_CTL_PROFILE_ONLINE;
	CHECK(mrc_ctl_modify_ev_fmt_profile(ctx, 13, &fa, MRC_CTL_EV_FMT_PROFILE_STATE) == 0);
	struct mrc_ctl_ev_fmt_field qf[1];
	memset(&fa, 0, sizeof(fa));
	fa.ev_fmt_op.op = MRC_CTL_EV_FMT_OP_QUERY_FIELDS;
	fa.ev_fmt_op.fmt_fields = qf;
	fa.ev_fmt_op.fmt_field_count = 1;
	REFUSED(mrc_ctl_query_ev_fmt_profile(ctx, 13, &fa,
					     MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_OP),
		E2BIG);
	CHECK(fa.ev_fmt_op.fmt_field_count == 2);
	struct mrc_ctl_ev_fmt_field qf2[2] = { { 0 }, { 0 } };
	fa.ev_fmt_op.fmt_fields = qf2;
	CHECK(mrc_ctl_query_ev_fmt_profile(ctx, 13, &fa,
					   MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_MODE |
						   MRC_CTL_EV_FMT_PROFILE_OP) == 0);
	CHECK(fa.cur_profile_state == MRC_CTL_PROFILE_ONLINE &&
	      fa.ev_fmt_mode == MRC_CTL_EV_FMT_MODE_STEV && qf2[0].width == 16 &&
	      qf2[1].width == 16);

	/* An EV event CQ with a channel, armed. */
	struct mrc_comp_channel *ch = NULL;
	CHECK(mrc_create_comp_channel(ctx, &ch) == 0);
	struct mrc_cq *evcq = mrc_ctl_create_ev_event_cq(ctx, 8, (void *)0x77, ch, 0);
	CHECK(evcq != NULL);
	CHECK(mrc_req_notify_cq(evcq, 0) == 0);

	/* Explicit EV profile 1: four EVs (i << 16 | i), replaced one by one. */
	struct mrc_ctl_ev_profile_attr ea;
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ea.ev_mode = MRC_CTL_EV_MODE_EXP;
	ea.ev_fmt_profile_id = 13;
	ea.ev_count = 4;
	ea.ev_min_active = 1;
	ea.ev_event_mask = MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD;
	int offline_mask = MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_MODE |
			   MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT |
			   MRC_CTL_EV_PROFILE_MIN_ACTIVE | MRC_CTL_EV_PROFILE_EVENT_MASK;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 1, &ea, offline_mask) == 0);
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_ONLINE;
	REFUSED(mrc_ctl_modify_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_STATE), EINVAL);
	for (uint32_t i = 0; i < 4; i++) {
		struct mrc_ctl_ev_op_entry e = { .ev = MRC_CTL_EV_UNPOPULATED,
						 .ev_new = stev(i << 16 | i),
						 .state = MRC_CTL_EV_GOOD };
		memset(&ea, 0, sizeof(ea));
		ea.ev_op.op = MRC_CTL_EV_OP_REPLACE_EV;
		ea.ev_op.entries = &e;
		ea.ev_op.entry_count = 1;
		CHECK(mrc_ctl_modify_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_EV_OP) == 0);
	}
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_ONLINE;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);
	CHECK(mrc_ctl_query_device(vctx, &da) == 0);
	CHECK(da.ev.ev_free_count == 65536 - 4);

	/* DENY EV 2, then the state query says so; an unknown EV is ENOENT. */
	struct mrc_ctl_ev_op_entry deny = { .ev = stev(2 << 16 | 2), .state = MRC_CTL_EV_DENIED };
	memset(&ea, 0, sizeof(ea));
	ea.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
	ea.ev_op.entries = &deny;
	ea.ev_op.entry_count = 1;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_EV_OP) == 0);
	struct mrc_ctl_ev_op_entry ask[2] = { { .ev = stev(2 << 16 | 2) }, { .ev = stev(3 << 16 | 3) } };
	memset(&ea, 0, sizeof(ea));
	ea.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_STATE;
	ea.ev_op.entries = ask;
	ea.ev_op.entry_count = 2;
	CHECK(mrc_ctl_query_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_EV_OP) == 0);
	CHECK(ask[0].state == MRC_CTL_EV_DENIED && ask[1].state == MRC_CTL_EV_GOOD);
	struct mrc_ctl_ev_op_entry nobody = { .ev = stev(99) };
	ea.ev_op.entries = &nobody;
	ea.ev_op.entry_count = 1;
	REFUSED(mrc_ctl_query_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_EV_OP), ENOENT);
	/* The array: short is E2BIG with the count, then all four. */
	struct mrc_ctl_ev_op_entry arr[4];
	memset(arr, 0, sizeof(arr));
	memset(&ea, 0, sizeof(ea));
	ea.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
	ea.ev_op.entries = arr;
	ea.ev_op.entry_count = 3;
	REFUSED(mrc_ctl_query_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_EV_OP), E2BIG);
	CHECK(ea.ev_op.entry_count == 4);
	CHECK(mrc_ctl_query_ev_profile(ctx, 1, &ea,
				       MRC_CTL_EV_PROFILE_EV_OP | MRC_CTL_EV_PROFILE_STATE |
					       MRC_CTL_EV_PROFILE_COUNT) == 0);
	CHECK(ea.cur_profile_state == MRC_CTL_PROFILE_ONLINE && ea.ev_count == 4 &&
	      ea.ev_mode == MRC_CTL_EV_MODE_EXP && ea.ev_fmt_profile_id == 13);
	for (uint32_t i = 0; i < 4; i++)
		CHECK(stev_val(&arr[i].ev) == (i << 16 | i) && arr[i].ev.port == 1);
	CHECK(arr[2].state == MRC_CTL_EV_DENIED);

	/* Un-deny: a GOOD event arrives on the EV CQ (and its channel). */
	deny.state = MRC_CTL_EV_GOOD;
	memset(&ea, 0, sizeof(ea));
	ea.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
	ea.ev_op.entries = &deny;
	ea.ev_op.entry_count = 1;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_EV_OP) == 0);
	struct mrc_cq *got_cq = NULL;
	void *got_ctx = NULL;
	CHECK(mrc_get_cq_event(ch, &got_cq, &got_ctx) == 0);
	CHECK(got_cq == evcq && got_ctx == (void *)0x77);
	mrc_ack_cq_events(evcq, 1);
	struct mrc_ctl_ev_event evs[4];
	memset(evs, 0, sizeof(evs));
	CHECK(mrc_ctl_poll_ev_event(evcq, 4, evs) == 1);
	CHECK(evs[0].profile_id == 1 && stev_val(&evs[0].ev) == (2 << 16 | 2) &&
	      evs[0].state == MRC_CTL_EV_GOOD && evs[0].drop_count == 0);
	CHECK(mrc_ctl_poll_ev_event(evcq, 4, evs) == 0);
	CHECK(mrc_ctl_poll_ev_event(NULL, 4, evs) == -EINVAL);

	/* Generated EV profile 2: one fixed 16-bit field 0x42, one field 0xA0 | 3..6. */
	struct mrc_ctl_ev_field gf[2] = {
		{ .width = 16, .init_val = 0x42, .min_val = 0, .max_val = 0, .mask = 0 },
		{ .width = 16, .init_val = 0xA0, .min_val = 3, .max_val = 6, .mask = 0x0F },
	};
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ea.ev_mode = MRC_CTL_EV_MODE_GEN;
	ea.ev_fmt_profile_id = 13;
	ea.ev_count = 4;
	ea.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS;
	ea.ev_fields_op.fields = gf;
	ea.ev_fields_op.field_count = 2;
	REFUSED(mrc_ctl_modify_ev_profile(ctx, 2, &ea,
					  offline_mask | MRC_CTL_EV_PROFILE_EV_OP |
						  MRC_CTL_EV_PROFILE_EV_FIELDS_OP),
		EINVAL);
	CHECK(mrc_ctl_modify_ev_profile(ctx, 2, &ea, offline_mask | MRC_CTL_EV_PROFILE_EV_FIELDS_OP) == 0);
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_ONLINE;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 2, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);
	memset(arr, 0, sizeof(arr));
	memset(&ea, 0, sizeof(ea));
	ea.ev_op.op = MRC_CTL_EV_OP_QUERY_EV_ARRAY;
	ea.ev_op.entries = arr;
	ea.ev_op.entry_count = 4;
	CHECK(mrc_ctl_query_ev_profile(ctx, 2, &ea, MRC_CTL_EV_PROFILE_EV_OP) == 0);
	for (uint32_t i = 0; i < 4; i++)
		CHECK(stev_val(&arr[i].ev) == (0x42u << 16 | (0xA3 + i)));
	struct mrc_ctl_ev_field qg[2];
	memset(qg, 0, sizeof(qg));
	memset(&ea, 0, sizeof(ea));
	ea.ev_fields_op.op = MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS;
	ea.ev_fields_op.fields = qg;
	ea.ev_fields_op.field_count = 2;
	CHECK(mrc_ctl_query_ev_profile(ctx, 2, &ea, MRC_CTL_EV_PROFILE_EV_FIELDS_OP) == 0);
	CHECK(qg[1].init_val == 0xA0 && qg[1].max_val == 6 && qg[1].mask == 0x0F);

	/* CC profile 3: NSCC with its parameters; an unknown algorithm is EINVAL. */
	struct mrc_ctl_cc_nscc_cfg nscc = {
		.disable_qa = 0, .adjust_bytes_threshold = 32768, .adjust_period_threshold = 20000,
		.base_rtt = 12000, .eta = 600.0f, .fi = 2000.0f, .fi_scale = 0.5f, .gamma = 0.75f,
		.max_md_jump = 0.25f, .max_cwnd = 1000000, .qa_gate = 3, .qa_threshold = 48000,
		.target_delay = 9000,
	};
	struct mrc_ctl_cc_profile_attr ca;
	memset(&ca, 0, sizeof(ca));
	ca.profile_state = MRC_CTL_PROFILE_OFFLINE;
	ca.algorithm = "dcqcn";
	REFUSED(mrc_ctl_modify_cc_profile(ctx, 3, &ca,
					  MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM),
		EINVAL);
	ca.algorithm = "uet-1.0-nscc";
	CHECK(mrc_ctl_modify_cc_profile(ctx, 3, &ca,
					MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM) == 0);
	memset(&ca, 0, sizeof(ca));
	ca.profile_state = MRC_CTL_PROFILE_ONLINE;
	REFUSED(mrc_ctl_modify_cc_profile(ctx, 3, &ca, MRC_CTL_CC_PROFILE_STATE), EINVAL);
	struct mrc_ctl_cc_nscc_cfg bad = nscc;
	bad.gamma = 0.0f;
	ca.cc_config = &bad;
	REFUSED(mrc_ctl_modify_cc_profile(ctx, 3, &ca,
					  MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CONFIG),
		EINVAL);
	ca.cc_config = &nscc;
	CHECK(mrc_ctl_modify_cc_profile(ctx, 3, &ca,
					MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CONFIG) == 0);
	memset(&ca, 0, sizeof(ca));
	CHECK(mrc_ctl_query_cc_profile(ctx, 3, &ca,
				       MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_ALGORITHM) == 0);
	CHECK(ca.cur_profile_state == MRC_CTL_PROFILE_ONLINE && ca.algorithm &&
	      strcmp(ca.algorithm, "uet-1.0-nscc") == 0);
	REFUSED(mrc_ctl_query_cc_profile(ctx, 0, &ca, MRC_CTL_CC_PROFILE_STATE), EINVAL);

	if (have_device) {
		live_pair(ctx, vctx, NULL);
		cross_process(ctx);
	} else
		CHECK(mrc_x_qp_evs(NULL, NULL, 0, NULL) == EINVAL);

	/* Endpoint operations: not supported (no connectionless responder). */
	struct mrc_ctl_ep_req req;
	memset(&req, 0, sizeof(req));
	req.req_id = 1;
	req.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_STEV;
	req.req_ev = stev(7);
	struct mrc_ctl_ep_rsp rsp;
	int nrsp = 5;
	REFUSED(mrc_ctl_ep_batch_send_wait(ctx, 0, MRC_CTL_EP_OP_EV_PROBE, &req, 1, 1000000, &rsp,
					   &nrsp),
		ENOTSUP);
	CHECK(nrsp == 0);
	REFUSED(mrc_ctl_ep_batch_send_wait(ctx, 0, MRC_CTL_EP_OP_EV_PROBE, &req, 0, 1000000, &rsp,
					   &nrsp),
		EINVAL);

	/* Profiles back to INIT; the EV CQ and channel go. */
	memset(&ea, 0, sizeof(ea));
	ea.profile_state = MRC_CTL_PROFILE_OFFLINE;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);
	CHECK(mrc_ctl_modify_ev_profile(ctx, 2, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);
	ea.profile_state = MRC_CTL_PROFILE_INIT;
	CHECK(mrc_ctl_modify_ev_profile(ctx, 1, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);
	CHECK(mrc_ctl_modify_ev_profile(ctx, 2, &ea, MRC_CTL_EV_PROFILE_STATE) == 0);
	CHECK(mrc_ctl_query_device(vctx, &da) == 0);
	CHECK(da.ev.ev_free_count == 65536);
	/* On a device the tables are the node's (the device's profile store): leave them as
	 * found, every profile in INIT, so the next run (or another program) starts clean. */
	memset(&ca, 0, sizeof(ca));
	ca.profile_state = MRC_CTL_PROFILE_OFFLINE;
	CHECK(mrc_ctl_modify_cc_profile(ctx, 3, &ca, MRC_CTL_CC_PROFILE_STATE) == 0);
	ca.profile_state = MRC_CTL_PROFILE_INIT;
	CHECK(mrc_ctl_modify_cc_profile(ctx, 3, &ca, MRC_CTL_CC_PROFILE_STATE) == 0);
	for (int i = 0; i < 1 + have_device; i++) {
		uint64_t id = i == 0 ? 13 : 14; /* 14: live_unprogram's */
		if (id == 13) {
			memset(&fa, 0, sizeof(fa));
			fa.profile_state = MRC_CTL_PROFILE_OFFLINE;
			CHECK(mrc_ctl_modify_ev_fmt_profile(ctx, id, &fa, MRC_CTL_EV_FMT_PROFILE_STATE) == 0);
			fa.profile_state = MRC_CTL_PROFILE_INIT;
			CHECK(mrc_ctl_modify_ev_fmt_profile(ctx, id, &fa, MRC_CTL_EV_FMT_PROFILE_STATE) == 0);
		}
		memset(&fa, 0, sizeof(fa));
		fa.cur_profile_state = MRC_CTL_PROFILE_ONLINE;
		CHECK(mrc_ctl_query_ev_fmt_profile(ctx, id, &fa, MRC_CTL_EV_FMT_PROFILE_STATE) == 0);
		CHECK(fa.cur_profile_state == MRC_CTL_PROFILE_INIT);
	}
	memset(&ca, 0, sizeof(ca));
	ca.cur_profile_state = MRC_CTL_PROFILE_ONLINE;
	CHECK(mrc_ctl_query_cc_profile(ctx, 3, &ca, MRC_CTL_CC_PROFILE_STATE) == 0);
	CHECK(ca.cur_profile_state == MRC_CTL_PROFILE_INIT && ca.algorithm == NULL);
	CHECK(mrc_destroy_cq(evcq) == 0);
	CHECK(mrc_destroy_comp_channel(ch) == 0);
	CHECK(mrc_destroy_context(ctx) == 0);
	if (have_device)
		ibv_close_device(vctx);
	if (list)
		ibv_free_device_list(list);

	if (failures) {
		fprintf(stderr, "mrc_ctl_check: %d checks failed\n", failures);
		return 1;
	}
	printf("mrc_ctl_check: ok\n");
	return 0;
}
