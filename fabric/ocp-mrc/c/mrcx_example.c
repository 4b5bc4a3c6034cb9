/*
 * mrcx_example: lib_mrc.so's extension (mrcx.h) from C, over UDP on loopback, without a
 * verbs device. Connection set-up through handles, WRITE_WITH_IMM from application
 * memory, completions polled by progress on this thread, every byte checked.
 *
 *   mrcx_example pair EV_FIRST           two contexts in one process
 *   mrcx_example server EV_FIRST         prints "handle <hex>", serves one client
 *   mrcx_example client EV_FIRST HEX     connects to the server of that handle
 *   mrcx_example sizes                   struct sizes and offsets, one "name value" a line
 *
 * Exit status 0 when every check held; each failed check prints "FAIL ..." and exits 1.
 * Built and run by fabric/ocp-mrc/tests/cface.rs.
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mrcx.h"

#define DST_BYTES (1u << 20)
#define MSGS 5
#define DEADLINE_S 20

static const char *who = "";

#define CHECK(cond, ...)                                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			char e_[256];                                            \
			mrc_x_last_error(e_, sizeof e_);                         \
			fprintf(stderr, "%s FAIL %s:%d: %s (last error: %s): ", who, \
				__FILE__, __LINE__, #cond, e_);                  \
			fprintf(stderr, __VA_ARGS__);                            \
			fprintf(stderr, "\n");                                   \
			exit(1);                                                 \
		}                                                                \
	} while (0)

/* The messages the client writes: offset in the server's region, length, immediate. */
static const struct {
	uint32_t off, len, imm;
	int with_imm;
} msg[MSGS] = {
	{0, 1, 0, 0},
	{64, 4095, 0x11, 1},
	{8192, 4097, 0, 0},
	{16384, 200000, 0x22222222, 1},
	{262144, 786432, 0x33, 1},
};
#define IMMS 3

static uint8_t pattern(size_t i) { return (uint8_t)(i * 131 + 7 + (i >> 12)); }

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct mrc_x_context *open_ctx(unsigned ev_first)
{
	/* MRCX_IP: the address, or one per plane comma-separated (mrcx.h) */
	const char *ip = getenv("MRCX_IP");
	struct mrc_x_context_attr a = {
		.ip = ip ? ip : "127.0.0.1",
		.udp_port = 0,
		.ev_port_first = (uint16_t)ev_first,
		.ev_port_last = (uint16_t)(ev_first + 49),
		.reserved = 0,
		.setup_timeout_ms = 10000,
	};
	struct mrc_x_context *c = NULL;
	int rc = mrc_x_open(&a, &c);
	CHECK(rc == 0 && c, "mrc_x_open: %d", rc);
	return c;
}

/* The server's side of the data: one region the client writes into, and the receives
 * the immediates consume. */
struct server {
	struct mrc_x_context *ctx;
	uint32_t qpn;
	uint8_t *dst;
	struct mrc_x_mr mr;
	int imms;
};

/* The client's side: the source region. */
struct client {
	struct mrc_x_context *ctx;
	uint32_t qpn;
	uint8_t *src;
	struct mrc_x_mr mr;
	int sends;
};

static void server_ready(struct server *s)
{
	s->dst = calloc(1, DST_BYTES);
	CHECK(s->dst, "calloc");
	int rc = mrc_x_reg_mr(s->ctx, s->qpn, s->dst, DST_BYTES,
			      MRC_X_ACCESS_LOCAL_WRITE | MRC_X_ACCESS_REMOTE_WRITE, &s->mr);
	CHECK(rc == 0, "reg_mr %d", rc);
	CHECK(s->mr.length == DST_BYTES, "mr length %llu", (unsigned long long)s->mr.length);
	for (int i = 0; i < IMMS; i++) {
		struct mrc_x_recv_wr r = {.wr_id = 100 + (uint64_t)i, .next = NULL,
					  .sg = {.addr = s->mr.addr, .length = 0, .lkey = s->mr.lkey}};
		const struct mrc_x_recv_wr *bad = NULL;
		rc = mrc_x_post_recv(s->ctx, s->qpn, &r, &bad);
		CHECK(rc == 0 && bad == NULL, "post_recv %d", rc);
	}
	/* A receive is posted in the region: deregistering it now is refused. */
	rc = mrc_x_dereg_mr(s->ctx, s->qpn, s->mr.lkey);
	CHECK(rc == EBUSY && errno == EBUSY, "dereg with receives posted: %d", rc);
}

static void client_ready(struct client *c)
{
	c->src = malloc(DST_BYTES);
	CHECK(c->src, "malloc");
	for (size_t i = 0; i < DST_BYTES; i++)
		c->src[i] = pattern(i);
	int rc = mrc_x_reg_mr(c->ctx, c->qpn, c->src, DST_BYTES, 0, &c->mr);
	CHECK(rc == 0, "reg_mr %d", rc);
}

/* Posts every message, linked in one call, from the client's region into the server's
 * region (raddr, rkey); the source of message i is the same offset as its target. */
static void client_post(struct client *c, uint64_t raddr, uint32_t rkey)
{
	struct mrc_x_send_wr wr[MSGS];
	for (int i = 0; i < MSGS; i++) {
		wr[i] = (struct mrc_x_send_wr){
			.wr_id = 1 + (uint64_t)i,
			.next = i + 1 < MSGS ? &wr[i + 1] : NULL,
			.sg = {.addr = c->mr.addr + msg[i].off, .length = msg[i].len, .lkey = c->mr.lkey},
			.opcode = msg[i].with_imm ? MRC_X_WR_RDMA_WRITE_WITH_IMM : MRC_X_WR_RDMA_WRITE,
			.imm_data = msg[i].imm,
			.remote_addr = raddr + msg[i].off,
			.rkey = rkey,
			.reserved = 0,
		};
	}
	/* Refused first: an SGE beyond the region, an unknown opcode (nothing is posted). */
	struct mrc_x_send_wr oob = wr[0];
	oob.next = NULL;
	oob.sg.addr = c->mr.addr + DST_BYTES - 1;
	oob.sg.length = 2;
	const struct mrc_x_send_wr *bad = NULL;
	int rc = mrc_x_post_send(c->ctx, c->qpn, &oob, &bad);
	CHECK(rc == EINVAL && bad == &oob, "out-of-region SGE: %d", rc);
	struct mrc_x_send_wr op = wr[0];
	op.next = NULL;
	op.opcode = 4; /* IBV_WR_RDMA_READ: not an mrc_x opcode */
	bad = NULL;
	rc = mrc_x_post_send(c->ctx, c->qpn, &op, &bad);
	CHECK(rc == EINVAL && bad == &op, "unknown opcode: %d", rc);
	bad = NULL;
	rc = mrc_x_post_send(c->ctx, c->qpn, &wr[0], &bad);
	CHECK(rc == 0 && bad == NULL, "post_send %d", rc);
}

/* Takes the client's send completions: in posting order, all successful. */
static void client_poll(struct client *c)
{
	struct mrc_x_wc wc[8];
	int n = mrc_x_poll_cq(c->ctx, c->qpn, 8, wc);
	CHECK(n >= 0, "poll_cq %d", n);
	for (int k = 0; k < n; k++, c->sends++) {
		int i = c->sends;
		CHECK(i < MSGS, "extra send completion wr_id %llu", (unsigned long long)wc[k].wr_id);
		CHECK(wc[k].wr_id == 1 + (uint64_t)i && wc[k].status == MRC_X_WC_SUCCESS &&
			      wc[k].opcode == (msg[i].with_imm ? MRC_X_WC_RDMA_WRITE_WITH_IMM
							       : MRC_X_WC_RDMA_WRITE) &&
			      wc[k].byte_len == msg[i].len && wc[k].qp_num == c->qpn,
		      "send completion %d: wr_id %llu status %u opcode %u len %u", i,
		      (unsigned long long)wc[k].wr_id, wc[k].status, wc[k].opcode, wc[k].byte_len);
	}
}

/* Takes the server's receive completions: one per WRITE_WITH_IMM, in message order. */
static void server_poll(struct server *s)
{
	static const int with_imm[IMMS] = {1, 3, 4};
	struct mrc_x_wc wc[8];
	int n = mrc_x_poll_cq(s->ctx, s->qpn, 8, wc);
	CHECK(n >= 0, "poll_cq %d", n);
	for (int k = 0; k < n; k++, s->imms++) {
		CHECK(s->imms < IMMS, "extra receive completion");
		int i = with_imm[s->imms];
		CHECK(wc[k].wr_id == 100 + (uint64_t)s->imms && wc[k].status == MRC_X_WC_SUCCESS &&
			      wc[k].opcode == MRC_X_WC_RECV_RDMA_WITH_IMM &&
			      wc[k].byte_len == msg[i].len && wc[k].imm_data == msg[i].imm &&
			      wc[k].wc_flags == MRC_X_WC_WITH_IMM && wc[k].qp_num == s->qpn,
		      "receive completion %d: wr_id %llu status %u opcode %u len %u imm %#x", s->imms,
		      (unsigned long long)wc[k].wr_id, wc[k].status, wc[k].opcode, wc[k].byte_len,
		      wc[k].imm_data);
	}
}

/* Every byte of the server's region: the messages' bytes, zero elsewhere. */
static void server_check(struct server *s)
{
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < DST_BYTES; i++) {
		uint8_t want = 0;
		for (int m = 0; m < MSGS; m++)
			if (i >= msg[m].off && i < (size_t)msg[m].off + msg[m].len)
				want = pattern(i);
		if (s->dst[i] != want && bad++ == 0)
			first = i;
	}
	CHECK(bad == 0, "%zu bytes differ, the first at %zu", bad, first);
	int rc = mrc_x_dereg_mr(s->ctx, s->qpn, s->mr.lkey);
	CHECK(rc == 0, "dereg once the receives are consumed: %d", rc);
	rc = mrc_x_dereg_mr(s->ctx, s->qpn, s->mr.lkey);
	CHECK(rc == ENOENT, "second dereg: %d", rc);
}

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static int unhex(const char *s, uint8_t *b, size_t n)
{
	if (strlen(s) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		b[i] = (uint8_t)v;
	}
	return 0;
}

/* Two contexts in one process: b connects to a's listener, connect and accept alternated
 * on this thread; a forged handle first. */
static int run_pair(unsigned ev_first)
{
	who = "pair:";
	struct server s = {.ctx = open_ctx(ev_first)};
	struct client c = {.ctx = open_ctx(ev_first + 50)};
	uint8_t h[MRC_X_HANDLE_BYTES];
	uint64_t lid = 0, cid = 0, forged = 0;
	int rc = mrc_x_listen(s.ctx, h, &lid);
	CHECK(rc == 0, "listen %d", rc);
	CHECK(memcmp(h, "MRCH", 4) == 0, "handle magic");

	/* A handle whose secret was changed: the attempt ends EACCES, the listener stays. */
	uint8_t fh[128];
	memset(fh, 0xAA, sizeof fh);
	memcpy(fh, h, sizeof h);
	fh[30] ^= 1;
	rc = mrc_x_connect(c.ctx, fh, sizeof fh, &forged);
	CHECK(rc == 0, "connect (forged) %d", rc);
	double end = now_s() + DEADLINE_S;
	uint32_t qpn = 0;
	for (;;) {
		rc = mrc_x_connect_poll(c.ctx, forged, &qpn);
		if (rc != EAGAIN)
			break;
		uint32_t none;
		int a = mrc_x_accept(s.ctx, lid, &none);
		CHECK(a == EAGAIN, "accept handed out a forged connection: %d", a);
		mrc_x_progress(s.ctx);
		mrc_x_progress(c.ctx);
		CHECK(now_s() < end, "forged attempt never ended");
	}
	CHECK(rc == EACCES && errno == EACCES, "forged handle: %d", rc);

	rc = mrc_x_connect(c.ctx, h, sizeof h, &cid);
	CHECK(rc == 0, "connect %d", rc);
	int cdone = 0, sdone = 0;
	while (!(cdone && sdone)) {
		if (!cdone) {
			rc = mrc_x_connect_poll(c.ctx, cid, &c.qpn);
			CHECK(rc == 0 || rc == EAGAIN, "connect_poll %d", rc);
			cdone = rc == 0;
		}
		if (!sdone) {
			rc = mrc_x_accept(s.ctx, lid, &s.qpn);
			CHECK(rc == 0 || rc == EAGAIN, "accept %d", rc);
			sdone = rc == 0;
		}
		CHECK(mrc_x_progress(s.ctx) >= 0 && mrc_x_progress(c.ctx) >= 0, "progress");
		CHECK(now_s() < end, "no connection within %d s", DEADLINE_S);
	}
	CHECK(mrc_x_close_listener(s.ctx, lid) == 0, "close_listener");
	server_ready(&s);
	client_ready(&c);
	client_post(&c, s.mr.addr, s.mr.rkey);
	while (c.sends < MSGS || s.imms < IMMS) {
		CHECK(mrc_x_progress(c.ctx) >= 0 && mrc_x_progress(s.ctx) >= 0, "progress");
		client_poll(&c);
		server_poll(&s);
		CHECK(now_s() < end, "%d of %d sends, %d of %d immediates", c.sends, MSGS, s.imms,
		      IMMS);
	}
	server_check(&s);
	CHECK(mrc_x_destroy_qp(c.ctx, c.qpn) == 0 && mrc_x_destroy_qp(s.ctx, s.qpn) == 0, "destroy");
	CHECK(mrc_x_destroy_qp(c.ctx, c.qpn) == ENOENT, "second destroy");
	CHECK(mrc_x_close_context(c.ctx) == 0 && mrc_x_close_context(s.ctx) == 0, "close");
	free(s.dst);
	free(c.src);
	printf("pair: %d writes, %d immediates, %u bytes checked\n", MSGS, IMMS, DST_BYTES);
	return 0;
}

/* The server process: prints its handle, accepts one client, sends it the region's
 * address and rkey (a SEND into the client's posted receive), takes its writes. */
static int run_server(unsigned ev_first)
{
	who = "server:";
	struct server s = {.ctx = open_ctx(ev_first)};
	uint8_t h[MRC_X_HANDLE_BYTES];
	char hx[2 * MRC_X_HANDLE_BYTES + 1];
	uint64_t lid = 0;
	CHECK(mrc_x_listen(s.ctx, h, &lid) == 0, "listen");
	hex(h, sizeof h, hx);
	printf("handle %s\n", hx);
	fflush(stdout);
	double end = now_s() + DEADLINE_S;
	int rc;
	while ((rc = mrc_x_accept(s.ctx, lid, &s.qpn)) == EAGAIN) {
		CHECK(mrc_x_wait(s.ctx, 1000) >= 0, "wait");
		CHECK(now_s() < end, "no client within %d s", DEADLINE_S);
	}
	CHECK(rc == 0, "accept %d", rc);
	server_ready(&s);
	/* The rendezvous: 12 bytes, addr and rkey, from a small region of their own. */
	uint8_t info[12];
	memcpy(info, &s.mr.addr, 8);
	memcpy(info + 8, &s.mr.rkey, 4);
	struct mrc_x_mr imr;
	CHECK(mrc_x_reg_mr(s.ctx, s.qpn, info, sizeof info, 0, &imr) == 0, "reg info");
	struct mrc_x_send_wr wr = {.wr_id = 9, .next = NULL,
				   .sg = {.addr = imr.addr, .length = sizeof info, .lkey = imr.lkey},
				   .opcode = MRC_X_WR_SEND};
	CHECK(mrc_x_post_send(s.ctx, s.qpn, &wr, NULL) == 0, "post the rendezvous");
	int info_done = 0;
	while (!info_done || s.imms < IMMS) {
		CHECK(mrc_x_wait(s.ctx, 1000) >= 0, "wait");
		struct mrc_x_wc wc;
		if (!info_done) {
			/* The send completion comes first: nothing else is sent from here. */
			int n = mrc_x_poll_cq(s.ctx, s.qpn, 1, &wc);
			CHECK(n >= 0, "poll");
			if (n == 1) {
				CHECK(wc.wr_id == 9 && wc.status == MRC_X_WC_SUCCESS &&
					      wc.opcode == MRC_X_WC_SEND && wc.byte_len == sizeof info,
				      "rendezvous completion: wr_id %llu status %u",
				      (unsigned long long)wc.wr_id, wc.status);
				info_done = 1;
			}
		} else {
			server_poll(&s);
		}
		CHECK(now_s() < end, "%d of %d immediates", s.imms, IMMS);
	}
	server_check(&s);
	CHECK(mrc_x_dereg_mr(s.ctx, s.qpn, imr.lkey) == 0, "dereg info");
	/* Stay a moment so the last acknowledgements reach the client. */
	double linger = now_s() + 0.2;
	while (now_s() < linger)
		mrc_x_wait(s.ctx, 10000);
	CHECK(mrc_x_close_context(s.ctx) == 0, "close");
	free(s.dst);
	printf("server: %d writes, %d immediates, %u bytes checked\n", MSGS, IMMS, DST_BYTES);
	return 0;
}

static int run_client(unsigned ev_first, const char *hx)
{
	who = "client:";
	struct client c = {.ctx = open_ctx(ev_first)};
	uint8_t h[MRC_X_HANDLE_BYTES];
	CHECK(unhex(hx, h, sizeof h) == 0, "bad handle text");
	uint64_t cid = 0;
	CHECK(mrc_x_connect(c.ctx, h, sizeof h, &cid) == 0, "connect");
	double end = now_s() + DEADLINE_S;
	int rc;
	while ((rc = mrc_x_connect_poll(c.ctx, cid, &c.qpn)) == EAGAIN) {
		CHECK(mrc_x_wait(c.ctx, 1000) >= 0, "wait");
		CHECK(now_s() < end, "not connected within %d s", DEADLINE_S);
	}
	CHECK(rc == 0, "connect_poll %d", rc);
	client_ready(&c);
	/* The server's rendezvous SEND lands in a receive posted in our own small region. */
	uint8_t info[16] = {0};
	struct mrc_x_mr imr;
	CHECK(mrc_x_reg_mr(c.ctx, c.qpn, info, sizeof info, MRC_X_ACCESS_LOCAL_WRITE, &imr) == 0,
	      "reg info");
	struct mrc_x_recv_wr r = {.wr_id = 77, .sg = {.addr = imr.addr, .length = sizeof info,
						      .lkey = imr.lkey}};
	CHECK(mrc_x_post_recv(c.ctx, c.qpn, &r, NULL) == 0, "post_recv");
	struct mrc_x_wc wc;
	int n;
	while ((n = mrc_x_poll_cq(c.ctx, c.qpn, 1, &wc)) == 0) {
		CHECK(mrc_x_wait(c.ctx, 1000) >= 0, "wait");
		CHECK(now_s() < end, "no rendezvous within %d s", DEADLINE_S);
	}
	CHECK(n == 1 && wc.wr_id == 77 && wc.status == MRC_X_WC_SUCCESS &&
		      wc.opcode == MRC_X_WC_RECV && wc.byte_len == 12 && wc.wc_flags == 0,
	      "rendezvous receive: n %d wr_id %llu status %u opcode %u len %u", n,
	      (unsigned long long)wc.wr_id, wc.status, wc.opcode, wc.byte_len);
	uint64_t raddr;
	uint32_t rkey;
	memcpy(&raddr, info, 8);
	memcpy(&rkey, info + 8, 4);
	client_post(&c, raddr, rkey);
	while (c.sends < MSGS) {
		CHECK(mrc_x_wait(c.ctx, 1000) >= 0, "wait");
		client_poll(&c);
		CHECK(now_s() < end, "%d of %d sends", c.sends, MSGS);
	}
	CHECK(mrc_x_close_context(c.ctx) == 0, "close");
	free(c.src);
	printf("client: %d writes completed\n", MSGS);
	return 0;
}

static int sizes(void)
{
#define P(name, v) printf("%s %zu\n", name, (size_t)(v))
	P("context_attr", sizeof(struct mrc_x_context_attr));
	P("context_attr.setup_timeout_ms", offsetof(struct mrc_x_context_attr, setup_timeout_ms));
	P("mr", sizeof(struct mrc_x_mr));
	P("mr.rkey", offsetof(struct mrc_x_mr, rkey));
	P("sge", sizeof(struct mrc_x_sge));
	P("sge.lkey", offsetof(struct mrc_x_sge, lkey));
	P("send_wr", sizeof(struct mrc_x_send_wr));
	P("send_wr.sg", offsetof(struct mrc_x_send_wr, sg));
	P("send_wr.remote_addr", offsetof(struct mrc_x_send_wr, remote_addr));
	P("send_wr.rkey", offsetof(struct mrc_x_send_wr, rkey));
	P("recv_wr", sizeof(struct mrc_x_recv_wr));
	P("wc", sizeof(struct mrc_x_wc));
	P("wc.imm_data", offsetof(struct mrc_x_wc, imm_data));
	P("wc.qp_num", offsetof(struct mrc_x_wc, qp_num));
	return 0;
#undef P
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "sizes") == 0)
		return sizes();
	if (argc >= 3 && strcmp(argv[1], "pair") == 0)
		return run_pair((unsigned)atoi(argv[2]));
	if (argc >= 3 && strcmp(argv[1], "server") == 0)
		return run_server((unsigned)atoi(argv[2]));
	if (argc >= 4 && strcmp(argv[1], "client") == 0)
		return run_client((unsigned)atoi(argv[2]), argv[3]);
	fprintf(stderr, "usage: %s pair|server|client EV_FIRST [HANDLE_HEX] | sizes\n", argv[0]);
	return 2;
}
