/*
 * mrc_check.c: exercises every call of lib_mrc.so's mrc.h between two processes.
 *
 *   mrc_check server [-d DEV] [-x GID_INDEX] [-p TCP_PORT]
 *   mrc_check client HOST [-d DEV] [-x GID_INDEX] [-p TCP_PORT]
 *
 * The client WRITEs messages of several sizes (1 B to 200000 B, signalled and not, some
 * with immediates) into the server's MR; then, in three rounds, a WRITE the verbs
 * contract forbids (a wrong rkey, past the MR's end, into an MR without REMOTE_WRITE)
 * followed by another WRITE: the forbidden one completes IBV_WC_REM_ACCESS_ERR and the
 * client's QP goes to ERR as an RC requestor's does (the WRITE behind it, one posted in
 * ERR and the receives complete IBV_WC_WR_FLUSH_ERR), after which both sides reset
 * their QPs through RESET-INIT-RTR-RTS and the flushed WRITE is posted again; then a
 * last WRITE_WITH_IMM. The server checks every byte of its MRs, the exact immediates
 * and completion counts, the async events (COMM_EST per connection, one QP_ACCESS_ERR
 * per forbidden WRITE), and WRITEs a reply with immediate back. Both check the queries, the refused
 * calls and their errnos. Exit 0 when every check passed; each failure prints a line.
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mrc.h"

static int failures;
static const char *role = "?";

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			failures++;                                             \
			fprintf(stderr, "mrc_check %s: FAIL %s:%d: ", role,     \
				__FILE__, __LINE__);                            \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, "\n");                                  \
		}                                                               \
	} while (0)
#define FATAL(...)                                                              \
	do {                                                                    \
		fprintf(stderr, "mrc_check %s: FATAL: ", role);                 \
		fprintf(stderr, __VA_ARGS__);                                   \
		fprintf(stderr, "\n");                                          \
		exit(2);                                                        \
	} while (0)

/* The messages the client writes: offset and size in the server's data MR. */
static const struct {
	uint32_t off, len;
	int signaled, imm;
} MSGS[] = {
	{0, 1, 1, 0},         {64, 100, 0, 0},       {4096, 4096, 1, 1},
	{12288, 16384, 0, 0}, {32768, 16385, 1, 1},  {65536, 65536, 0, 1},
	{262144, 200000, 1, 0},
};
#define NMSGS (sizeof(MSGS) / sizeof(MSGS[0]))
#define DATA_BYTES (1 << 20)
#define IMM_BASE 0x4d520000u
#define IMM_LAST 0x4d52ffffu
#define IMM_REPLY 0x52455059u
#define REPLY_BYTES 3000

static uint8_t pattern(uint32_t msg, uint32_t i) { return (uint8_t)(msg * 31 + i * 7 + 1); }

struct wire {
	uint32_t qpn, rkey, rkey_ro, pad;
	uint64_t addr, addr_ro, len;
	uint8_t gid[16];
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void xfer(int fd, void *b, size_t n, int out)
{
	uint8_t *p = b;
	while (n) {
		ssize_t r = out ? send(fd, p, n, 0) : recv(fd, p, n, 0);
		if (r <= 0)
			FATAL("tcp %s: %s", out ? "send" : "recv", r ? strerror(errno) : "closed");
		p += r;
		n -= (size_t)r;
	}
}

static void sync_byte(int fd, int first_out)
{
	char c = 'S';
	xfer(fd, &c, 1, first_out);
	xfer(fd, &c, 1, !first_out);
}

/* Polls until `want` completions arrived (or 60 s); returns how many. */
static int poll_n(struct mrc_cq *cq, struct ibv_wc *wc, int want)
{
	int got = 0;
	double t0 = now_s();
	while (got < want && now_s() - t0 < 60) {
		int n = mrc_poll_cq(cq, want - got, wc + got);
		CHECK(n >= 0, "mrc_poll_cq returned %d", n);
		if (n < 0)
			break;
		got += n;
	}
	return got;
}

static int post_write(struct mrc_qp *qp, void *src, uint32_t len, uint32_t lkey, uint64_t raddr,
		      uint32_t rkey, int signaled, int with_imm, uint32_t imm, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {0}, *bad = NULL;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return mrc_post_send(qp, &wr, &bad);
}

static int modify(struct mrc_qp *qp, struct ibv_qp_attr *v, int vm, struct mrc_qp_attr *m, int mm)
{
	return mrc_modify_qp(qp, v, vm, m, mm);
}

/* The forbidden WRITEs (a wrong rkey, past the MR's end, into a read-only MR), each
 * followed by a TRAIL_BYTES WRITE into the data MR at TRAIL_OFF(r). */
#define NFORBIDDEN 3
#define TRAIL_BYTES 64
#define TRAIL_OFF(r) (960000u + (r) * 4096u)

static uint8_t trail_pattern(uint32_t r, uint32_t i) { return (uint8_t)(0x30 + r * 17 + i * 3); }

/* Polls exactly n send completions and checks them in order: wr_id ids[i], status st[i]
 * (SUCCESS when st is NULL), opcode RDMA_WRITE, this QP. Returns n. */
static int expect_sends(struct mrc_cq *cq, uint32_t qpn, const uint64_t *ids, const int *st, int n,
			const char *what)
{
	struct ibv_wc wc[16];
	int got = poll_n(cq, wc, n);
	CHECK(got == n, "%s: send completions %d of %d", what, got, n);
	for (int i = 0; i < got; i++) {
		int want = st ? st[i] : IBV_WC_SUCCESS;
		CHECK(wc[i].wr_id == ids[i] && (int)wc[i].status == want && wc[i].opcode == IBV_WC_RDMA_WRITE &&
			      wc[i].qp_num == qpn,
		      "%s: send wc %d: wr_id %llu (want %llu) status %d (want %d) opcode %d", what, i,
		      (unsigned long long)wc[i].wr_id, (unsigned long long)ids[i], wc[i].status, want,
		      wc[i].opcode);
	}
	return n;
}

/* The next async event must be `type` on `qp`; counts it in *count. */
static void expect_event(struct mrc_context *ctx, struct mrc_qp *qp, enum ibv_event_type type, int *count)
{
	struct mrc_async_event ev;
	CHECK(mrc_get_async_event(ctx, &ev) == 0, "mrc_get_async_event");
	CHECK(ev.event_type == type && ev.element.qp == qp, "event %d (want %d)", ev.event_type, type);
	*count += ev.event_type == type && ev.element.qp == qp;
	mrc_ack_async_event(&ev);
}

/* Receive completions through the channel until `want` more arrived after wc[have]. */
static int recv_imms(struct mrc_cq *rcq, struct mrc_comp_channel *ch, struct ibv_wc *wc, int have, int want,
		     int *events)
{
	int got = 0, chfd = -1;
	mrc_get_comp_channel_fd(ch, &chfd);
	double t0 = now_s();
	int n;
	while (got < want && now_s() - t0 < 60) {
		struct pollfd p = {.fd = chfd, .events = POLLIN};
		if (poll(&p, 1, 1000) <= 0)
			continue;
		struct mrc_cq *ecq = NULL;
		void *ectx = NULL;
		CHECK(mrc_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == rcq && ectx == (void *)0xc0ffee,
		      "mrc_get_cq_event");
		(*events)++;
		CHECK(mrc_req_notify_cq(rcq, 0) == 0, "re-arm");
		while (got < want && (n = mrc_poll_cq(rcq, want - got, wc + have + got)) > 0)
			got += n;
	}
	return got;
}

/* ERR or RTS -> RESET -> INIT (8 receives) -> RTR -> RTS again, in step with the peer
 * (both QPs must be reset: the connection is made afresh), then its COMM_EST. */
static void reconnect(struct mrc_qp *qp, int fd, int first_out, const struct wire *peer, int gid_index,
		      int *est, struct mrc_context *ctx)
{
	struct ibv_qp_attr v;
	struct ibv_qp_attr qv;
	struct mrc_qp_attr qm;
	memset(&v, 0, sizeof(v));
	v.qp_state = IBV_QPS_RESET;
	CHECK(mrc_modify_qp(qp, &v, IBV_QP_STATE, NULL, 0) == 0, "->RESET");
	CHECK(mrc_query_qp(qp, &qv, IBV_QP_STATE, &qm, 0, NULL) == 0 && qv.qp_state == IBV_QPS_RESET &&
		      qm.mpr.mpr == 8 && qm.timeout == 14,
	      "query at RESET: state %d mpr %u timeout %u", qv.qp_state, qm.mpr.mpr, qm.timeout);
	memset(&v, 0, sizeof(v));
	v.qp_state = IBV_QPS_INIT;
	v.port_num = 1;
	CHECK(mrc_modify_qp(qp, &v, IBV_QP_STATE | IBV_QP_PORT, NULL, 0) == 0, "RESET->INIT again");
	for (int i = 0; i < 8; i++) {
		struct ibv_recv_wr rw = {.wr_id = 100 + i}, *bad = NULL;
		CHECK(mrc_post_recv(qp, &rw, &bad) == 0, "mrc_post_recv %d after the reset", i);
	}
	sync_byte(fd, first_out); /* both reset: neither side's old connection answers */
	memset(&v, 0, sizeof(v));
	v.qp_state = IBV_QPS_RTR;
	v.path_mtu = IBV_MTU_4096;
	v.dest_qp_num = peer->qpn;
	v.ah_attr.is_global = 1;
	memcpy(v.ah_attr.grh.dgid.raw, peer->gid, 16);
	v.ah_attr.grh.sgid_index = gid_index;
	v.ah_attr.port_num = 1;
	CHECK(mrc_modify_qp(qp, &v, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU, NULL, 0) == 0,
	      "INIT->RTR again");
	memset(&v, 0, sizeof(v));
	v.qp_state = IBV_QPS_RTS;
	CHECK(mrc_modify_qp(qp, &v, IBV_QP_STATE, NULL, 0) == 0, "RTR->RTS again");
	expect_event(ctx, qp, IBV_EVENT_COMM_EST, est);
	sync_byte(fd, first_out);
}

int main(int argc, char **argv)
{
	const char *dev_name = NULL, *host = NULL;
	int gid_index = 1, tcp_port = 18701, server;
	if (argc < 2)
		FATAL("usage: mrc_check server|client [HOST] [-d DEV] [-x GID] [-p PORT]");
	server = !strcmp(argv[1], "server");
	role = server ? "server" : "client";
	int a = 2;
	if (!server) {
		if (argc < 3)
			FATAL("client needs HOST");
		host = argv[2];
		a = 3;
	}
	for (; a + 1 < argc; a += 2) {
		if (!strcmp(argv[a], "-d"))
			dev_name = argv[a + 1];
		else if (!strcmp(argv[a], "-x"))
			gid_index = atoi(argv[a + 1]);
		else if (!strcmp(argv[a], "-p"))
			tcp_port = atoi(argv[a + 1]);
	}

	/* --- version and device --- */
	uint32_t cur = 0, last = 1, vend = 0, vlast = 1;
	mrc_query_version(&cur, &last, &vend, &vlast);
	CHECK(cur == MRC_API_VER(1, 0, 1) && last == 0 && vend == MRC_API_VER(1, 0, 0) && vlast == 0,
	      "versions %#x %#x %#x %#x", cur, last, vend, vlast);
	int ndev = 0;
	struct ibv_device **list = ibv_get_device_list(&ndev), *dev = NULL;
	for (int i = 0; list && i < ndev; i++)
		if (!dev_name || !strcmp(ibv_get_device_name(list[i]), dev_name))
			dev = list[i];
	if (!dev)
		FATAL("no RDMA device %s", dev_name ? dev_name : "");
	struct ibv_context *vctx = ibv_open_device(dev);
	if (!vctx)
		FATAL("ibv_open_device");
	struct mrc_device_attr da;
	memset(&da, 0xff, sizeof(da));
	int supported = 0;
	CHECK(mrc_query_device(vctx, &da, &supported) == 0 && supported == 1, "mrc_query_device");
	CHECK(da.mrc_protocol_version == MRC_PROTOCOL_VERSION_1 && da.wimm_attr.max_wimm == 1024 &&
		      da.wimm_attr.max_wimm_dest == 1024 && da.mpr_attr.max_mpr == 32 &&
		      da.mpr_attr.mpr_resolution == 1 && da.qp_attr.max_qp_hint == 1024 &&
		      da.cap == MRC_DEVICE_CAP_TRIM_NACK,
	      "device attr %u %u %u %u %u %u %u", da.mrc_protocol_version, da.wimm_attr.max_wimm,
	      da.wimm_attr.max_wimm_dest, da.mpr_attr.max_mpr, da.mpr_attr.mpr_resolution,
	      da.qp_attr.max_qp_hint, da.cap);
	errno = 0;
	CHECK(mrc_query_device(NULL, &da, &supported) == -1 && errno == EINVAL, "null context");

	/* --- context, channel, CQs, hint --- */
	struct mrc_context_attr too_new = {.mrc_api_version_used = MRC_API_VER(2, 0, 0)};
	errno = 0;
	CHECK(mrc_create_context(vctx, &too_new) == NULL && errno == EINVAL, "context of API 2.0");
	struct mrc_context_attr ca = {.mrc_api_version_used = MRC_API_CURRENT_VERSION};
	/* MRC_PLANE_DEVICES (the context's further plane devices): an unknown device is
	 * ENODEV, an empty entry EINVAL; the value in force, if any, is restored after. */
	const char *planes_env = getenv("MRC_PLANE_DEVICES");
	char *planes_saved = planes_env ? strdup(planes_env) : NULL;
	setenv("MRC_PLANE_DEVICES", "mrc_check_no_such_device", 1);
	errno = 0;
	CHECK(mrc_create_context(vctx, &ca) == NULL && errno == ENODEV,
	      "MRC_PLANE_DEVICES naming no device");
	setenv("MRC_PLANE_DEVICES", ",", 1);
	errno = 0;
	CHECK(mrc_create_context(vctx, &ca) == NULL && errno == EINVAL,
	      "MRC_PLANE_DEVICES with an empty entry");
	if (planes_saved) {
		setenv("MRC_PLANE_DEVICES", planes_saved, 1);
		free(planes_saved);
	} else {
		unsetenv("MRC_PLANE_DEVICES");
	}
	struct mrc_context *ctx = mrc_create_context(vctx, &ca);
	if (!ctx)
		FATAL("mrc_create_context: %s", strerror(errno));
	struct mrc_device_attr da2 = {0};
	CHECK(mrc_query_device_ex(vctx, ctx, &da2, &supported) == 0 && !memcmp(&da, &da2, sizeof(da)),
	      "mrc_query_device_ex");
	struct mrc_comp_channel *ch = NULL;
	CHECK(mrc_create_comp_channel(ctx, &ch) == 0 && ch, "mrc_create_comp_channel");
	int chfd = -1;
	CHECK(mrc_get_comp_channel_fd(ch, &chfd) == 0 && chfd >= 0, "mrc_get_comp_channel_fd");
	struct mrc_cq *scq = mrc_create_cq(ctx, 64, NULL, NULL, 0);
	struct mrc_cq *rcq = mrc_create_cq(ctx, 64, (void *)0xc0ffee, ch, 0);
	if (!scq || !rcq)
		FATAL("mrc_create_cq");
	errno = 0;
	CHECK(mrc_destroy_context(ctx) == -1 && errno == EBUSY, "destroy of a busy context");
	CHECK(mrc_destroy_comp_channel(ch) == EBUSY, "destroy of a channel in use");
	struct mrc_qp_hint_init_attr hi = {.attr = {.num_qps_per_peer = 1, .num_send_peers = 1,
						    .num_remote_recv_peers = 1}};
	struct mrc_qp_hint *hint = mrc_create_qp_hint(ctx, &hi);
	CHECK(hint != NULL, "mrc_create_qp_hint");
	struct mrc_qp_hint_attr ha = {.num_send_peers = 4};
	CHECK(mrc_modify_qp_hint(hint, &ha, MRC_QP_HINT_NUM_SEND_PEERS) == 0, "mrc_modify_qp_hint");
	memset(&ha, 0, sizeof(ha));
	CHECK(mrc_query_qp_hint(hint, &ha, MRC_QP_HINT_NUM_QPS_PER_PEER | MRC_QP_HINT_NUM_SEND_PEERS) == 0 &&
		      ha.num_qps_per_peer == 1 && ha.num_send_peers == 4 && ha.num_remote_recv_peers == 0,
	      "mrc_query_qp_hint %d %d %d", ha.num_qps_per_peer, ha.num_send_peers,
	      ha.num_remote_recv_peers);

	/* --- memory: the data MR (remote-writable) and a read-only one --- */
	struct ibv_pd *pd = ibv_alloc_pd(vctx);
	uint8_t *data = aligned_alloc(4096, DATA_BYTES), *ro = aligned_alloc(4096, 4096);
	uint8_t *src = aligned_alloc(4096, DATA_BYTES);
	if (!pd || !data || !ro || !src)
		FATAL("pd or memory");
	memset(data, 0, DATA_BYTES);
	memset(ro, 0, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, data, DATA_BYTES, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *mr_ro = ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr_src = ibv_reg_mr(pd, src, DATA_BYTES, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !mr_ro || !mr_src)
		FATAL("ibv_reg_mr");

	/* --- QP --- */
	struct mrc_qp_init_attr qa = {.qp_context = (void *)0x1234, .send_cq = scq, .recv_cq = rcq,
				      .cap = {.max_send_wr = 64, .max_recv_wr = 16, .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .pd = pd,
				      .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM};
	struct mrc_qp_init_attr bad_qa = qa;
	bad_qa.cap.max_send_sge = 2;
	errno = 0;
	CHECK(mrc_create_qp(ctx, &bad_qa) == NULL && errno == EINVAL, "QP with 2 SGEs");
	bad_qa = qa;
	bad_qa.send_ops_flags |= IBV_QP_EX_WITH_SEND;
	errno = 0;
	CHECK(mrc_create_qp(ctx, &bad_qa) == NULL && errno == EINVAL, "QP with SEND ops");
	struct mrc_qp *qp = mrc_create_qp(ctx, &qa);
	if (!qp)
		FATAL("mrc_create_qp: %s", strerror(errno));
	uint32_t qpn = 0;
	CHECK(mrc_get_qpn(qp, &qpn) == 0 && qpn != 0 && qpn <= 0xffffff, "mrc_get_qpn %#x", qpn);
	struct ibv_qp_attr qv;
	struct mrc_qp_attr qm;
	struct mrc_qp_init_attr qi;
	CHECK(mrc_query_qp(qp, &qv, IBV_QP_STATE, &qm, 0, &qi) == 0 && qv.qp_state == IBV_QPS_RESET &&
		      qi.qp_context == (void *)0x1234 && qi.send_cq == scq && qi.recv_cq == rcq &&
		      qi.pd == pd && qi.cap.max_send_wr == 64 && qi.protocol_version == MRC_PROTOCOL_VERSION_1,
	      "query at RESET");
	CHECK(qm.mpr.mpr == 8 && qm.mpr.mpr_dest == 8 && qm.wimm.max_wimm == 256 && qm.timeout == 14 &&
		      qm.retry.linear_cnt == 7 && qm.retry.exp_cnt == 8,
	      "default MRC attributes %u %u %u %u %u %u", qm.mpr.mpr, qm.mpr.mpr_dest, qm.wimm.max_wimm,
	      qm.timeout, qm.retry.linear_cnt, qm.retry.exp_cnt);

	/* refused transitions and attributes */
	struct ibv_qp_attr v = {0};
	struct mrc_qp_attr m = {0};
	v.qp_state = IBV_QPS_RTR;
	CHECK(modify(qp, &v, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN, &m, 0) == EINVAL, "RESET->RTR");
	v.qp_state = IBV_QPS_INIT;
	m.profile.ev_profile_id = 5;
	CHECK(modify(qp, &v, IBV_QP_STATE, &m, MRC_QP_EV_PROFILE_ID) == EINVAL, "unknown EV profile");
	m.profile.ev_profile_id = 0;
	m.mpr.mpr = 4;
	CHECK(modify(qp, &v, IBV_QP_STATE, &m, MRC_QP_MPR) == EINVAL, "MPR at INIT");
	CHECK(modify(qp, &v, IBV_QP_STATE | IBV_QP_ALT_PATH, &m, 0) == EINVAL, "alternate path");

	/* INIT, as the published benchmark does it (IBV_QP_PORT accepted), with a hint */
	memset(&v, 0, sizeof(v));
	memset(&m, 0, sizeof(m));
	v.qp_state = IBV_QPS_INIT;
	v.port_num = 1;
	v.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	m.qp_hint = hint;
	CHECK(modify(qp, &v, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, &m,
		     MRC_QP_HINT | MRC_QP_EV_PROFILE_ID | MRC_QP_CC_PROFILE_ID) == 0,
	      "RESET->INIT");
	errno = 0;
	CHECK(mrc_destroy_qp_hint(hint) == -1 && errno == EBUSY, "destroy of a hint in use");
	CHECK(post_write(qp, src, 1, mr_src->lkey, 0, 0, 1, 0, 0, 1) == EINVAL, "post_send at INIT");

	/* receives before any traffic */
	for (int i = 0; i < 8; i++) {
		struct ibv_recv_wr rw = {.wr_id = 100 + i}, *bad = NULL;
		CHECK(mrc_post_recv(qp, &rw, &bad) == 0, "mrc_post_recv %d", i);
	}
	{
		struct ibv_sge two[2] = {{0}};
		struct ibv_recv_wr rw = {.wr_id = 99, .sg_list = two, .num_sge = 2}, *bad = NULL;
		CHECK(mrc_post_recv(qp, &rw, &bad) == EINVAL && bad == &rw, "recv with 2 SGEs");
	}

	/* --- exchange over TCP --- */
	struct wire me = {.qpn = qpn, .rkey = mr->rkey, .rkey_ro = mr_ro->rkey,
			  .addr = (uintptr_t)data, .addr_ro = (uintptr_t)ro, .len = DATA_BYTES},
		    peer;
	union ibv_gid gid;
	if (ibv_query_gid(vctx, 1, gid_index, &gid))
		FATAL("ibv_query_gid %d", gid_index);
	memcpy(me.gid, gid.raw, 16);
	int fd;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(tcp_port)};
	if (server) {
		int ls = socket(AF_INET, SOCK_STREAM, 0), on = 1;
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		sa.sin_addr.s_addr = htonl(INADDR_ANY);
		if (bind(ls, (void *)&sa, sizeof(sa)) || listen(ls, 1))
			FATAL("listen: %s", strerror(errno));
		fprintf(stderr, "mrc_check server: listening on %d\n", tcp_port);
		fd = accept(ls, NULL, NULL);
		close(ls);
	} else {
		inet_pton(AF_INET, host, &sa.sin_addr);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		double t0 = now_s();
		while (connect(fd, (void *)&sa, sizeof(sa))) {
			close(fd);
			if (now_s() - t0 > 30)
				FATAL("connect: %s", strerror(errno));
			usleep(100000);
			fd = socket(AF_INET, SOCK_STREAM, 0);
		}
	}
	if (fd < 0)
		FATAL("tcp");
	if (server) {
		xfer(fd, &peer, sizeof(peer), 0);
		xfer(fd, &me, sizeof(me), 1);
	} else {
		xfer(fd, &me, sizeof(me), 1);
		xfer(fd, &peer, sizeof(peer), 0);
	}

	/* --- RTR and RTS with MRC attributes --- */
	memset(&v, 0, sizeof(v));
	memset(&m, 0, sizeof(m));
	v.qp_state = IBV_QPS_RTR;
	v.path_mtu = IBV_MTU_4096;
	v.dest_qp_num = peer.qpn;
	v.ah_attr.is_global = 1;
	memcpy(v.ah_attr.grh.dgid.raw, peer.gid, 16);
	v.ah_attr.grh.sgid_index = gid_index;
	v.ah_attr.port_num = 1;
	m.mpr.mpr_dest = 16;
	m.wimm.max_wimm_dest = 512;
	m.cap = MRC_QP_CAP_DYNAMIC_MPR;
	CHECK(modify(qp, &v, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU,
		     &m, MRC_QP_CAP) == EOPNOTSUPP,
	      "dynamic MPR");
	m.cap = 0;
	CHECK(modify(qp, &v, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU,
		     &m, MRC_QP_MPR_DEST | MRC_QP_MAX_WIMM_DEST) == 0,
	      "INIT->RTR");
	memset(&v, 0, sizeof(v));
	v.qp_state = IBV_QPS_RTS;
	v.timeout = 7;
	v.retry_cnt = 7;
	v.rnr_retry = 7;
	m.mpr.mpr = 2;           /* a window of 256 packets */
	m.wimm.max_wimm = 2;     /* at most 2 WRITE_WITH_IMM in flight */
	m.timeout = 16;          /* 67 ms */
	m.retry.linear_cnt = 3;
	m.retry.exp_cnt = 6;     /* give up after 4 x 67 ms + 126 x 67 ms = 8.7 s of silence */
	m.timeout = 26;
	CHECK(modify(qp, &v, IBV_QP_STATE | IBV_QP_SQ_PSN, &m, MRC_QP_TIMEOUT) == EINVAL, "timeout 26");
	m.timeout = 16;
	CHECK(modify(qp, &v, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY,
		     &m, MRC_QP_MPR | MRC_QP_MAX_WIMM | MRC_QP_TIMEOUT | MRC_QP_RETRY_CNT) == 0,
	      "RTR->RTS");
	memset(&qm, 0, sizeof(qm));
	CHECK(mrc_query_qp(qp, &qv, IBV_QP_STATE | IBV_QP_DEST_QPN, &qm, MRC_QP_MPR, NULL) == 0 &&
		      qv.qp_state == IBV_QPS_RTS && qv.dest_qp_num == peer.qpn && qm.mpr.mpr == 2 &&
		      qm.mpr.mpr_dest == 16 && qm.wimm.max_wimm == 2 && qm.wimm.max_wimm_dest == 512 &&
		      qm.timeout == 16 && qm.retry.linear_cnt == 3 && qm.retry.exp_cnt == 6 && qm.qp_hint == hint,
	      "query at RTS");
	/* RTS -> RTS: the window may change, the give-up budget not */
	m.mpr.mpr = 4;
	CHECK(modify(qp, NULL, 0, &m, MRC_QP_MPR) == 0, "RTS->RTS MPR");
	CHECK(modify(qp, NULL, 0, &m, MRC_QP_TIMEOUT) == EINVAL, "RTS->RTS timeout");

	/* refused operations */
	{
		struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 8, .lkey = mr_src->lkey};
		struct ibv_send_wr w = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND},
				   *bad = NULL;
		CHECK(mrc_post_send(qp, &w, &bad) == EINVAL && bad == &w, "SEND refused");
		w.opcode = IBV_WR_RDMA_READ;
		bad = NULL;
		CHECK(mrc_post_send(qp, &w, &bad) == EINVAL && bad == &w, "RDMA READ refused");
		w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		CHECK(mrc_post_send(qp, &w, &bad) == EINVAL, "atomic refused");
		w.opcode = IBV_WR_RDMA_WRITE;
		w.num_sge = 2;
		CHECK(mrc_post_send(qp, &w, &bad) == EINVAL, "2 SGEs refused");
	}

	struct ibv_wc wc[64];
	int est = 0, access = 0;
	if (!server) {
		/* --- client: the messages --- */
		sync_byte(fd, 0); /* the server has its receives posted */
		expect_event(ctx, qp, IBV_EVENT_COMM_EST, &est);
		for (uint32_t k = 0; k < NMSGS; k++) {
			uint8_t *s = src + MSGS[k].off;
			for (uint32_t i = 0; i < MSGS[k].len; i++)
				s[i] = pattern(k, i);
			int rc = post_write(qp, s, MSGS[k].len, mr_src->lkey, peer.addr + MSGS[k].off, peer.rkey,
					    MSGS[k].signaled, MSGS[k].imm, IMM_BASE + k, 1000 + k);
			CHECK(rc == 0, "post WRITE %u: %d", k, rc);
		}
		uint64_t msg_ids[NMSGS];
		uint32_t nsig = 0;
		for (uint32_t k = 0; k < NMSGS; k++)
			if (MSGS[k].signaled)
				msg_ids[nsig++] = 1000 + k;
		int sends = expect_sends(scq, qpn, msg_ids, NULL, nsig, "messages");
		/* Three WRITEs the verbs contract forbids, one per round. Each must not land; it
		 * completes IBV_WC_REM_ACCESS_ERR (the responder's placement verdict, see
		 * docs/OCP_MRC.md) and moves the QP to ERR, as an RC requestor's does: the WRITE
		 * posted behind it and one posted in ERR complete IBV_WC_WR_FLUSH_ERR, the 8
		 * receives are flushed. Then both sides reset their QPs (RESET, INIT, RTR, RTS) and
		 * the flushed WRITE is posted again. */
		memset(src + 900000, 0xEE, 4096);
		for (uint32_t r = 0; r < NFORBIDDEN; r++) {
			uint64_t raddr = r == 0 ? peer.addr + 900000 : r == 1 ? peer.addr + DATA_BYTES - 32 : peer.addr_ro;
			uint32_t rkey = r == 0 ? peer.rkey ^ 0x5a5a00 : r == 1 ? peer.rkey : peer.rkey_ro;
			uint8_t *t = src + TRAIL_OFF(r);
			for (uint32_t i = 0; i < TRAIL_BYTES; i++)
				t[i] = trail_pattern(r, i);
			CHECK(post_write(qp, src + 900000, 64, mr_src->lkey, raddr, rkey, 1, 0, 0, 2001 + r) == 0,
			      "post forbidden %u", r);
			CHECK(post_write(qp, t, TRAIL_BYTES, mr_src->lkey, peer.addr + TRAIL_OFF(r), peer.rkey, 1, 0, 0,
					 2101 + r) == 0,
			      "post behind forbidden %u", r);
			uint64_t ids[2] = {2001 + r, 2101 + r};
			int st[2] = {IBV_WC_REM_ACCESS_ERR, IBV_WC_WR_FLUSH_ERR};
			sends += expect_sends(scq, qpn, ids, st, 2, "forbidden round");
			CHECK(mrc_query_qp(qp, &qv, IBV_QP_STATE, &qm, 0, NULL) == 0 && qv.qp_state == IBV_QPS_ERR,
			      "round %u: state %d, want ERR", r, qv.qp_state);
			/* every receive flushed, in order */
			int n = poll_n(rcq, wc, 8);
			CHECK(n == 8, "round %u: %d flushed receives of 8", r, n);
			for (int i = 0; i < n; i++)
				CHECK(wc[i].wr_id == (uint64_t)(100 + i) && wc[i].status == IBV_WC_WR_FLUSH_ERR,
				      "round %u: receive %d: wr_id %llu status %d", r, i,
				      (unsigned long long)wc[i].wr_id, wc[i].status);
			/* a WRITE posted in ERR is accepted and flushed */
			CHECK(post_write(qp, t, TRAIL_BYTES, mr_src->lkey, peer.addr + TRAIL_OFF(r), peer.rkey, 0, 0, 0,
					 2201 + r) == 0,
			      "post in ERR");
			uint64_t in_err = 2201 + r;
			int flushed = IBV_WC_WR_FLUSH_ERR;
			sends += expect_sends(scq, qpn, &in_err, &flushed, 1, "posted in ERR");
			sync_byte(fd, 0); /* the server saw its QP_ACCESS_ERR */
			reconnect(qp, fd, 0, &peer, gid_index, &est, ctx);
			CHECK(post_write(qp, t, TRAIL_BYTES, mr_src->lkey, peer.addr + TRAIL_OFF(r), peer.rkey, 1, 0, 0,
					 2301 + r) == 0,
			      "post again after the reset");
			uint64_t again = 2301 + r;
			sends += expect_sends(scq, qpn, &again, NULL, 1, "after the reset");
		}
		/* The last one, with immediate. */
		uint8_t *l = src + 950000;
		for (int i = 0; i < 8; i++)
			l[i] = (uint8_t)(0xA0 + i);
		CHECK(post_write(qp, l, 8, mr_src->lkey, peer.addr + 950000, peer.rkey, 1, 1, IMM_LAST, 3000) == 0,
		      "post last");
		uint64_t last_id = 3000;
		sends += expect_sends(scq, qpn, &last_id, NULL, 1, "last");
		usleep(200000);
		CHECK(mrc_poll_cq(scq, 64, wc) == 0, "no extra send completion");
		/* The reply: a WRITE_WITH_IMM from the server into our data MR. */
		CHECK(poll_n(rcq, wc, 1) == 1, "reply immediate");
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
			      wc[0].wr_id == 100 && ntohl(wc[0].imm_data) == IMM_REPLY &&
			      wc[0].byte_len == REPLY_BYTES && (wc[0].wc_flags & IBV_WC_WITH_IMM),
		      "reply wc: status %d opcode %d wr_id %llu imm %#x len %u", wc[0].status, wc[0].opcode,
		      (unsigned long long)wc[0].wr_id, ntohl(wc[0].imm_data), wc[0].byte_len);
		int bad = 0;
		for (int i = 0; i < REPLY_BYTES; i++)
			bad += data[i] != (uint8_t)(i * 13 + 5);
		for (int i = REPLY_BYTES; i < DATA_BYTES; i++)
			bad += data[i] != 0;
		CHECK(bad == 0, "reply: %d bad bytes", bad);
		printf("mrc_check client: %zu messages + %d forbidden (each REM_ACCESS_ERR, ERR, reset) + 1 last "
		       "WRITE, %d send completions, %d COMM_EST, reply of %d bytes verified\n",
		       NMSGS, NFORBIDDEN, sends, est, REPLY_BYTES);
		sync_byte(fd, 0);
	} else {
		/* --- server: immediates through the completion channel --- */
		CHECK(mrc_req_notify_cq(rcq, 0) == 0, "mrc_req_notify_cq");
		CHECK(mrc_req_notify_cq(scq, 0) == EINVAL, "notify on a CQ without channel");
		sync_byte(fd, 1);
		expect_event(ctx, qp, IBV_EVENT_COMM_EST, &est);
		int want = 0;
		for (uint32_t k = 0; k < NMSGS; k++)
			want += MSGS[k].imm;
		int events = 0;
		int got = recv_imms(rcq, ch, wc, 0, want, &events);
		/* one forbidden WRITE per round: the device refused it (QP_ACCESS_ERR), and the
		 * client resets; so do we */
		for (int r = 0; r < NFORBIDDEN; r++) {
			expect_event(ctx, qp, IBV_EVENT_QP_ACCESS_ERR, &access);
			sync_byte(fd, 1);
			reconnect(qp, fd, 1, &peer, gid_index, &est, ctx);
		}
		/* the last immediate lands in the first receive posted after the last reset */
		int last = recv_imms(rcq, ch, wc, got, 1, &events);
		mrc_ack_cq_events(rcq, events);
		CHECK(got == want && last == 1, "receive completions %d of %d, last %d", got, want, last);
		int k = 0;
		for (int i = 0; i < got + last; i++) {
			while (k < (int)NMSGS && !MSGS[k].imm)
				k++;
			uint32_t imm = k < (int)NMSGS ? IMM_BASE + k : IMM_LAST;
			uint32_t len = k < (int)NMSGS ? MSGS[k].len : 8;
			uint64_t wr_id = i < got ? (uint64_t)(100 + i) : 100;
			CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
				      wc[i].wr_id == wr_id && ntohl(wc[i].imm_data) == imm &&
				      wc[i].byte_len == len && wc[i].qp_num == qpn && wc[i].src_qp == peer.qpn,
			      "recv wc %d: status %d opcode %d wr_id %llu imm %#x (want %#x) len %u (want %u)", i,
			      wc[i].status, wc[i].opcode, (unsigned long long)wc[i].wr_id, ntohl(wc[i].imm_data),
			      imm, wc[i].byte_len, len);
			k++;
		}
		got += last;
		/* every byte of both MRs */
		long bad = 0, written = 0;
		uint8_t *expect = calloc(1, DATA_BYTES);
		for (uint32_t j = 0; j < NMSGS; j++) {
			for (uint32_t i = 0; i < MSGS[j].len; i++)
				expect[MSGS[j].off + i] = pattern(j, i);
			written += MSGS[j].len;
		}
		for (uint32_t r = 0; r < NFORBIDDEN; r++) {
			for (uint32_t i = 0; i < TRAIL_BYTES; i++)
				expect[TRAIL_OFF(r) + i] = trail_pattern(r, i);
			written += TRAIL_BYTES;
		}
		for (int i = 0; i < 8; i++)
			expect[950000 + i] = (uint8_t)(0xA0 + i);
		written += 8;
		for (long i = 0; i < DATA_BYTES; i++)
			bad += data[i] != expect[i];
		for (int i = 0; i < 4096; i++)
			bad += ro[i] != 0;
		CHECK(bad == 0, "%ld bad bytes", bad);
		CHECK(est == 1 + NFORBIDDEN && access == NFORBIDDEN, "events: %d COMM_EST, %d QP_ACCESS_ERR", est,
		      access);
		/* the reply */
		for (int i = 0; i < REPLY_BYTES; i++)
			src[i] = (uint8_t)(i * 13 + 5);
		CHECK(post_write(qp, src, REPLY_BYTES, mr_src->lkey, peer.addr, peer.rkey, 1, 1, IMM_REPLY, 77) == 0,
		      "post reply");
		CHECK(poll_n(scq, wc, 1) == 1 && wc[0].wr_id == 77 && wc[0].status == IBV_WC_SUCCESS,
		      "reply completion");
		printf("mrc_check server: %d immediates in order, %ld bytes verified (%ld written), 0 bad; "
		       "%d COMM_EST + %d QP_ACCESS_ERR events\n",
		       got, (long)DATA_BYTES + 4096, written, est, access);
		sync_byte(fd, 1);
		free(expect);
	}

	/* --- teardown, in the order the checks need --- */
	CHECK(mrc_destroy_cq(scq) == EBUSY, "destroy of a CQ in use");
	memset(&v, 0, sizeof(v));
	v.qp_state = IBV_QPS_ERR;
	CHECK(modify(qp, &v, IBV_QP_STATE, NULL, 0) == 0, "->ERR");
	{
		struct ibv_recv_wr rw = {.wr_id = 555}, *bad = NULL;
		CHECK(mrc_post_recv(qp, &rw, &bad) == 0, "recv in ERR");
		int n = 0;
		double t0 = now_s();
		while (now_s() - t0 < 5) {
			n = mrc_poll_cq(rcq, 64, wc);
			if (n)
				break;
		}
		CHECK(n >= 1 && wc[n - 1].wr_id == 555 && wc[n - 1].status == IBV_WC_WR_FLUSH_ERR,
		      "flushed receive (%d)", n);
	}
	if (server) {
		/* The armed CQ signalled the flushes: drain the channel without blocking, ack. */
		fcntl(chfd, F_SETFL, O_NONBLOCK);
		int extra = 0;
		struct mrc_cq *ecq;
		void *ectx;
		usleep(100000);
		while (mrc_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == rcq)
			extra++;
		CHECK(errno == EAGAIN && extra == 1, "drained channel: %d events, errno %d", extra, errno);
		mrc_ack_cq_events(rcq, extra);
	}
	CHECK(mrc_destroy_qp(qp) == 0, "mrc_destroy_qp");
	CHECK(mrc_destroy_qp_hint(hint) == 0, "mrc_destroy_qp_hint");
	CHECK(mrc_destroy_cq(scq) == 0 && mrc_destroy_cq(rcq) == 0, "mrc_destroy_cq");
	CHECK(mrc_destroy_comp_channel(ch) == 0, "mrc_destroy_comp_channel");
	CHECK(mrc_destroy_context(ctx) == 0, "mrc_destroy_context");
	ibv_dereg_mr(mr);
	ibv_dereg_mr(mr_ro);
	ibv_dereg_mr(mr_src);
	ibv_dealloc_pd(pd);
	ibv_close_device(vctx);
	ibv_free_device_list(list);
	close(fd);
	if (failures) {
		fprintf(stderr, "mrc_check %s: %d checks failed\n", role, failures);
		return 1;
	}
	printf("mrc_check %s: all checks passed\n", role);
	return 0;
}
