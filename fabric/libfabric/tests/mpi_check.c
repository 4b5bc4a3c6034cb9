/* An MPI program over Open MPI's OFI MTL and the mrc provider (fabric/libfabric/tests/mpi.rs
 * builds it with mpicc and runs it with 4 ranks). Every check counts its errors; rank 0
 * prints one line per check, "<check> <errors>", then "ranks <n> errors <total>", and the
 * program exits 1 when any check failed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned char pattern(int i, int from, int salt)
{
    return (unsigned char)(i * 7 + from * 13 + salt);
}

/* MPI_Sendrecv around the ring at sizes from 0 B to 16 MiB (past 1 MiB the provider sends
 * fragments), every byte checked. */
static int ring(int rank, int size)
{
    static const int sizes[] = {0, 1, 100, 4096, 65536, 1 << 20, 4 << 20, 16 << 20};
    int bad = 0;
    for (int s = 0; s < (int)(sizeof(sizes) / sizeof(sizes[0])); s++) {
        int n = sizes[s];
        unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
        for (int i = 0; i < n; i++)
            a[i] = pattern(i, rank, s);
        int to = (rank + 1) % size, from = (rank + size - 1) % size;
        MPI_Status st;
        MPI_Sendrecv(a, n, MPI_BYTE, to, 100 + s, b, n, MPI_BYTE, from, 100 + s,
                     MPI_COMM_WORLD, &st);
        int got;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (got != n || st.MPI_SOURCE != from || st.MPI_TAG != 100 + s)
            bad++;
        for (int i = 0; i < n; i++)
            if (b[i] != pattern(i, from, s)) {
                bad++;
                break;
            }
        free(a);
        free(b);
    }
    return bad;
}

/* Every other rank sends rank * 10 ints to rank 0, which finds each with MPI_Probe from
 * MPI_ANY_SOURCE and receives it from the source the probe named. */
static int probe(int rank, int size)
{
    int bad = 0;
    if (rank == 0) {
        int seen = 0;
        for (int k = 1; k < size; k++) {
            MPI_Status st;
            int cnt;
            MPI_Probe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &cnt);
            int *v = malloc(cnt * sizeof(int));
            MPI_Recv(v, cnt, MPI_INT, st.MPI_SOURCE, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (cnt != st.MPI_SOURCE * 10 || (seen & (1 << st.MPI_SOURCE)))
                bad++;
            for (int i = 0; i < cnt; i++)
                if (v[i] != st.MPI_SOURCE * 1000 + i) {
                    bad++;
                    break;
                }
            seen |= 1 << st.MPI_SOURCE;
            free(v);
        }
    } else {
        int cnt = rank * 10;
        int *v = malloc(cnt * sizeof(int));
        for (int i = 0; i < cnt; i++)
            v[i] = rank * 1000 + i;
        MPI_Send(v, cnt, MPI_INT, 0, 77, MPI_COMM_WORLD);
        free(v);
    }
    return bad;
}

/* The same with a matched probe (MPI_Mprobe, then MPI_Mrecv of the message it claimed),
 * and MPI_ANY_TAG: each sender uses tag 200 + rank. */
static int mprobe(int rank, int size)
{
    int bad = 0;
    if (rank == 0) {
        for (int k = 1; k < size; k++) {
            MPI_Message m;
            MPI_Status st, st2;
            int cnt;
            MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &m, &st);
            MPI_Get_count(&st, MPI_INT, &cnt);
            int *v = malloc((cnt + 1) * sizeof(int));
            MPI_Mrecv(v, cnt, MPI_INT, &m, &st2);
            if (cnt != 3 || st.MPI_TAG != 200 + st.MPI_SOURCE || st2.MPI_SOURCE != st.MPI_SOURCE)
                bad++;
            for (int i = 0; i < cnt; i++)
                if (v[i] != st.MPI_SOURCE + i)
                    bad++;
            free(v);
        }
    } else {
        int v[3] = {rank, rank + 1, rank + 2};
        MPI_Send(v, 3, MPI_INT, 0, 200 + rank, MPI_COMM_WORLD);
    }
    return bad;
}

/* Receives for one source each, same tag, posted in the reverse of rank order: each takes
 * its own sender's message whatever the arrival order (FI_DIRECTED_RECV). */
static int directed(int rank, int size)
{
    int bad = 0;
    if (rank == 0) {
        int *v = calloc(size, sizeof(int));
        MPI_Request *r = malloc(size * sizeof(MPI_Request));
        for (int k = size - 1; k >= 1; k--)
            MPI_Irecv(&v[k], 1, MPI_INT, k, 300, MPI_COMM_WORLD, &r[k]);
        MPI_Waitall(size - 1, &r[1], MPI_STATUSES_IGNORE);
        for (int k = 1; k < size; k++)
            if (v[k] != k * 11)
                bad++;
        free(v);
        free(r);
    } else {
        int v = rank * 11;
        MPI_Send(&v, 1, MPI_INT, 0, 300, MPI_COMM_WORLD);
    }
    return bad;
}

static int collectives(int rank, int size)
{
    int bad = 0;
    long x = rank + 1, sum = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != (long)size * (size + 1) / 2)
        bad++;
    int n = 65536;
    unsigned char *b = malloc(n);
    for (int i = 0; i < n; i++)
        b[i] = rank == 2 ? pattern(i, 2, 9) : 0;
    MPI_Bcast(b, n, MPI_BYTE, 2, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++)
        if (b[i] != pattern(i, 2, 9)) {
            bad++;
            break;
        }
    free(b);
    int *out = malloc(size * sizeof(int)), *in = malloc(size * sizeof(int));
    for (int k = 0; k < size; k++)
        out[k] = rank * 100 + k;
    MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD);
    for (int k = 0; k < size; k++)
        if (in[k] != k * 100 + rank)
            bad++;
    free(out);
    free(in);
    MPI_Barrier(MPI_COMM_WORLD);
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *names[] = {"ring", "probe", "mprobe", "directed", "collectives"};
    int (*checks[5])(int, int) = {ring, probe, mprobe, directed, collectives};
    int bad[5];
    for (int c = 0; c < 5; c++) {
        bad[c] = checks[c](rank, size);
        /* No message of one check may meet a wildcard receive of the next. */
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int tot[5];
    MPI_Reduce(bad, tot, 5, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    int all = 0;
    if (rank == 0) {
        for (int c = 0; c < 5; c++) {
            printf("%s %d\n", names[c], tot[c]);
            all += tot[c];
        }
        printf("ranks %d errors %d\n", size, all);
    }
    MPI_Bcast(&all, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return all != 0;
}
