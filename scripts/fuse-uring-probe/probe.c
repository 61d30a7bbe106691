/*
 * probe: a tiny read-only FUSE filesystem served over /dev/fuse or over
 * io_uring (FUSE_OVER_IO_URING, Linux 6.14+), to time one request round trip
 * on each transport. Not part of cutf8fs; built and run by
 * scripts/bench-fuse-uring.sh (docs/performance.md, "FUSE over io_uring").
 *
 * The tree: /d and /u, each holding N small files f00000..; entries and
 * attributes under /d are cached for an hour (a warm tree, like cutf8fs's
 * default), under /u never (every stat asks LOOKUP). Opens answer
 * FOPEN_KEEP_CACHE, so a warm open-read-close sends OPEN, FLUSH and RELEASE
 * and no READ, as cutf8fs's warm grep does.
 *
 *   probe serve devfuse|uring MNT STATS N THREADS [DEPTH]
 *   probe loop stat|open|read DIR N ROUNDS STATS
 *   probe measure STATS LABEL OPS -- CMD ARGS...
 *
 * STATS is a file the server maps shared and counts requests in (one
 * counter per opcode), so the timing tools divide by the requests the
 * server really answered. The same handler answers both transports; only
 * how a request arrives and how its reply leaves differ.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* FUSE-over-io_uring UAPI (include/uapi/linux/fuse.h, ABI 7.42), absent
 * from this system's older <linux/fuse.h>. */
#define PROBE_FUSE_OVER_IO_URING (1ULL << 41)
#define URING_IN_OUT_HEADER_SZ 128
#define URING_OP_IN_OUT_SZ 128
struct uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;
	uint32_t payload_sz;
	uint32_t padding;
	uint64_t reserved;
};
struct uring_req_header {
	char in_out[URING_IN_OUT_HEADER_SZ];
	char op_in[URING_OP_IN_OUT_SZ];
	struct uring_ent_in_out ent;
};
enum { URING_CMD_REGISTER = 1, URING_CMD_COMMIT_AND_FETCH = 2 };
struct uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

#define MAX_WRITE (128 * 1024)
#define PAYLOAD_SZ MAX_WRITE /* >= the kernel's max(8 KiB, max_write, max_pages * 4 KiB) */
#define DEVBUF_SZ (MAX_WRITE + 4096)
#define NOPS 64

#define INO_D 2
#define INO_U 3
#define INO_FILE_D 1000000ULL
#define INO_FILE_U 2000000ULL

static unsigned nfiles;
static _Atomic uint64_t *counts; /* [NOPS]: requests by opcode; [0]: all */
#define COUNT_RING (NOPS - 2)      /* requests that came over the ring */
#define SERVER_PID (NOPS - 3)      /* for its CPU time, /proc/PID/task/ * /schedstat */
static __thread int on_ring;
static int fuse_fd;
static int uring_mode;

static void die(const char *what, int err)
{
	fprintf(stderr, "probe: %s: %s\n", what, strerror(err));
	exit(1);
}

static _Atomic uint64_t *map_stats(const char *path, int create)
{
	int fd = open(path, create ? O_RDWR | O_CREAT | O_TRUNC : O_RDONLY, 0644);
	if (fd < 0)
		die(path, errno);
	if (create && ftruncate(fd, NOPS * 8) != 0)
		die("ftruncate", errno);
	void *p = mmap(NULL, NOPS * 8, create ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap", errno);
	close(fd);
	return p;
}

/* ---- the filesystem: one handler for both transports ---------------- */

/* Size of the per-opcode header (the kernel's in_args[0]); io_uring puts it
 * in op_in, the rest of the arguments in the payload. */
static size_t op_header_size(uint32_t op)
{
	switch (op) {
	case FUSE_INIT: return sizeof(struct fuse_init_in);
	case FUSE_GETATTR: return sizeof(struct fuse_getattr_in);
	case FUSE_OPEN: case FUSE_OPENDIR: return sizeof(struct fuse_open_in);
	case FUSE_READ: case FUSE_READDIR: return sizeof(struct fuse_read_in);
	case FUSE_FLUSH: return sizeof(struct fuse_flush_in);
	case FUSE_RELEASE: case FUSE_RELEASEDIR: return sizeof(struct fuse_release_in);
	case FUSE_ACCESS: return sizeof(struct fuse_access_in);
	case FUSE_GETXATTR: case FUSE_LISTXATTR: return sizeof(struct fuse_getxattr_in);
	case FUSE_FORGET: return sizeof(struct fuse_forget_in);
	case FUSE_BATCH_FORGET: return sizeof(struct fuse_batch_forget_in);
	case FUSE_INTERRUPT: return sizeof(struct fuse_interrupt_in);
	default: return 0;
	}
}

static int file_content(uint64_t ino, char *buf)
{
	return sprintf(buf, "file %llu of the probe\n", (unsigned long long)ino);
}

static int valid_ino(uint64_t ino)
{
	if (ino == FUSE_ROOT_ID || ino == INO_D || ino == INO_U)
		return 1;
	if (ino >= INO_FILE_D && ino < INO_FILE_D + nfiles)
		return 1;
	return ino >= INO_FILE_U && ino < INO_FILE_U + nfiles;
}

static unsigned timeout_of(uint64_t ino)
{
	return ino == INO_U || (ino >= INO_FILE_U && ino < INO_FILE_U + nfiles) ? 0 : 3600;
}

static void fill_attr(uint64_t ino, struct fuse_attr *a)
{
	char tmp[64];
	memset(a, 0, sizeof(*a));
	a->ino = ino;
	if (ino < INO_FILE_D) {
		a->mode = S_IFDIR | 0755;
		a->nlink = 2;
		a->size = 4096;
	} else {
		a->mode = S_IFREG | 0644;
		a->nlink = 1;
		a->size = file_content(ino, tmp);
	}
	a->blocks = (a->size + 511) / 512;
	a->blksize = 4096;
	a->mtime = a->ctime = a->atime = 1700000000;
}

static uint64_t lookup(uint64_t parent, const char *name)
{
	if (parent == FUSE_ROOT_ID)
		return strcmp(name, "d") == 0 ? INO_D : strcmp(name, "u") == 0 ? INO_U : 0;
	if (parent != INO_D && parent != INO_U)
		return 0;
	char *end;
	if (name[0] != 'f' || name[1] < '0' || name[1] > '9')
		return 0;
	unsigned long i = strtoul(name + 1, &end, 10);
	if (*end || i >= nfiles || strlen(name) != 6)
		return 0;
	return (parent == INO_D ? INO_FILE_D : INO_FILE_U) + i;
}

static size_t add_dirent(char *out, size_t room, uint64_t ino, uint64_t off, uint32_t type, const char *name)
{
	size_t namelen = strlen(name);
	size_t len = FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + namelen);
	if (len > room)
		return 0;
	struct fuse_dirent *d = (struct fuse_dirent *)out;
	d->ino = ino;
	d->off = off;
	d->namelen = namelen;
	d->type = type;
	memcpy(d->name, name, namelen);
	memset(d->name + namelen, 0, len - FUSE_NAME_OFFSET - namelen);
	return len;
}

static int readdir_fill(uint64_t dir, uint64_t off, size_t size, char *out, size_t *outlen)
{
	size_t n = 0;
	uint64_t count = dir == FUSE_ROOT_ID ? 4 : 2 + nfiles;
	for (uint64_t i = off; i < count; i++) {
		char name[16];
		uint64_t ino;
		uint32_t type = DT_REG;
		if (i == 0) {
			strcpy(name, ".");
			ino = dir;
			type = DT_DIR;
		} else if (i == 1) {
			strcpy(name, "..");
			ino = FUSE_ROOT_ID;
			type = DT_DIR;
		} else if (dir == FUSE_ROOT_ID) {
			strcpy(name, i == 2 ? "d" : "u");
			ino = i == 2 ? INO_D : INO_U;
			type = DT_DIR;
		} else {
			snprintf(name, sizeof(name), "f%05llu", (unsigned long long)(i - 2));
			ino = (dir == INO_D ? INO_FILE_D : INO_FILE_U) + i - 2;
		}
		size_t len = add_dirent(out + n, size - n, ino, i + 1, type, name);
		if (!len)
			break;
		n += len;
	}
	*outlen = n;
	return 0;
}

/* Answers one request: returns 0 or -errno, puts the reply payload in out
 * and its length in *outlen; returns 1 when no reply is due (FORGET). */
static int handle(const struct fuse_in_header *in, const void *op_in, const char *payload, char *out, size_t *outlen)
{
	*outlen = 0;
	atomic_fetch_add_explicit(&counts[0], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&counts[in->opcode < COUNT_RING ? in->opcode : NOPS - 1], 1, memory_order_relaxed);
	if (on_ring)
		atomic_fetch_add_explicit(&counts[COUNT_RING], 1, memory_order_relaxed);
	switch (in->opcode) {
	case FUSE_INIT: {
		const struct fuse_init_in *ii = op_in;
		struct fuse_init_out *o = (struct fuse_init_out *)out;
		uint64_t kflags = ii->flags | ((uint64_t)ii->flags2 << 32);
		memset(o, 0, sizeof(*o));
		o->major = FUSE_KERNEL_VERSION;
		o->minor = 42;
		o->max_readahead = ii->max_readahead;
		o->flags = FUSE_INIT_EXT | FUSE_ASYNC_READ;
		if (uring_mode) {
			if (!(kflags & PROBE_FUSE_OVER_IO_URING)) {
				fprintf(stderr, "probe: the kernel did not offer FUSE_OVER_IO_URING in INIT "
						"(/sys/module/fuse/parameters/enable_uring is N, or the kernel has no "
						"CONFIG_FUSE_IO_URING)\n");
				exit(3);
			}
			o->flags2 = PROBE_FUSE_OVER_IO_URING >> 32;
		}
		o->max_background = 16;
		o->congestion_threshold = 12;
		o->max_write = MAX_WRITE;
		o->time_gran = 1;
		*outlen = sizeof(*o);
		return 0;
	}
	case FUSE_LOOKUP: {
		uint64_t ino = lookup(in->nodeid, payload);
		if (!ino)
			return -ENOENT;
		struct fuse_entry_out *e = (struct fuse_entry_out *)out;
		memset(e, 0, sizeof(*e));
		e->nodeid = ino;
		e->entry_valid = e->attr_valid = timeout_of(ino);
		fill_attr(ino, &e->attr);
		*outlen = sizeof(*e);
		return 0;
	}
	case FUSE_GETATTR: {
		if (!valid_ino(in->nodeid))
			return -ENOENT;
		struct fuse_attr_out *a = (struct fuse_attr_out *)out;
		memset(a, 0, sizeof(*a));
		a->attr_valid = timeout_of(in->nodeid);
		fill_attr(in->nodeid, &a->attr);
		*outlen = sizeof(*a);
		return 0;
	}
	case FUSE_OPEN:
	case FUSE_OPENDIR: {
		const struct fuse_open_in *oi = op_in;
		if ((oi->flags & O_ACCMODE) != O_RDONLY)
			return -EROFS;
		struct fuse_open_out *o = (struct fuse_open_out *)out;
		memset(o, 0, sizeof(*o));
		o->fh = in->nodeid;
		o->open_flags = in->opcode == FUSE_OPEN ? FOPEN_KEEP_CACHE : FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE;
		*outlen = sizeof(*o);
		return 0;
	}
	case FUSE_READ: {
		const struct fuse_read_in *ri = op_in;
		char tmp[64];
		int len = file_content(in->nodeid, tmp);
		if (ri->offset >= (uint64_t)len)
			return 0;
		size_t n = len - ri->offset < ri->size ? len - ri->offset : ri->size;
		memcpy(out, tmp + ri->offset, n);
		*outlen = n;
		return 0;
	}
	case FUSE_READDIR: {
		const struct fuse_read_in *ri = op_in;
		size_t size = ri->size < PAYLOAD_SZ ? ri->size : PAYLOAD_SZ;
		return readdir_fill(in->nodeid, ri->offset, size, out, outlen);
	}
	case FUSE_STATFS: {
		struct fuse_statfs_out *s = (struct fuse_statfs_out *)out;
		memset(s, 0, sizeof(*s));
		s->st.bsize = s->st.frsize = 4096;
		s->st.namelen = 255;
		s->st.files = 2 * nfiles + 3;
		*outlen = sizeof(*s);
		return 0;
	}
	case FUSE_FLUSH:
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
		return 0;
	case FUSE_ACCESS:
		return 0;
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
		return 1;
	case FUSE_DESTROY:
		return 0;
	default:
		return -ENOSYS;
	}
}

/* ---- transport (a): read(2) and writev(2) on /dev/fuse -------------- */

static void *devfuse_thread(void *arg)
{
	(void)arg;
	char *buf = malloc(DEVBUF_SZ), *out = malloc(DEVBUF_SZ);
	for (;;) {
		ssize_t n = read(fuse_fd, buf, DEVBUF_SZ);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ENOENT)
				continue;
			if (errno == ENODEV)
				exit(0); /* unmounted */
			die("read /dev/fuse", errno);
		}
		struct fuse_in_header *in = (struct fuse_in_header *)buf;
		const char *op_in = buf + sizeof(*in);
		size_t outlen;
		int err = handle(in, op_in, op_in + op_header_size(in->opcode), out, &outlen);
		if (err == 1)
			continue;
		struct fuse_out_header oh = {.len = sizeof(oh) + outlen, .error = err, .unique = in->unique};
		struct iovec iov[2] = {{&oh, sizeof(oh)}, {out, outlen}};
		if (writev(fuse_fd, iov, outlen ? 2 : 1) < 0 && errno != ENOENT)
			die("write /dev/fuse", errno);
	}
	return NULL;
}

/* ---- transport (b): FUSE_IO_URING_CMD_* on per-queue ring entries --- */

struct ring_ent {
	struct uring_req_header *hdr;
	char *payload;
	struct iovec iov[2];
	uint16_t qid;
};

struct uring_thread {
	int index, nthreads, ncpus, depth;
	struct io_uring ring;
	struct ring_ent *ents;
	int nents;
};

static void prep_cmd(struct io_uring *ring, struct ring_ent *e, uint32_t op)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe)
		die("io_uring_get_sqe", EBUSY);
	memset(sqe, 0, 128); /* an SQE128 */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->flags = IOSQE_FIXED_FILE;
	sqe->fd = 0;
	sqe->cmd_op = op;
	sqe->user_data = (uint64_t)(uintptr_t)e;
	struct uring_cmd_req *c = (struct uring_cmd_req *)sqe->cmd;
	c->qid = e->qid;
	if (op == URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	} else {
		c->commit_id = e->hdr->ent.commit_id;
	}
}

static pthread_barrier_t registered;

static void *uring_thread_main(void *arg)
{
	struct uring_thread *t = arg;
	if (t->nthreads == t->ncpus) { /* one thread per queue: sit on its CPU, as libfuse does */
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(t->index, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	on_ring = 1;
	/* This thread serves queues index, index + nthreads, ... */
	int nq = 0;
	for (int q = t->index; q < t->ncpus; q += t->nthreads)
		nq++;
	t->nents = nq * t->depth;
	t->ents = calloc(t->nents, sizeof(*t->ents));
	struct io_uring_params p = {0};
	p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
	if (getenv("PROBE_DEFER_TASKRUN")) /* completions run only when this thread waits */
		p.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	p.cq_entries = 2 * t->nents;
	int rc = io_uring_queue_init_params(t->nents, &t->ring, &p);
	if (rc)
		die("io_uring_queue_init_params (SQE128)", -rc);
	rc = io_uring_register_files(&t->ring, &fuse_fd, 1);
	if (rc)
		die("io_uring_register_files", -rc);
	int k = 0;
	for (int q = t->index; q < t->ncpus; q += t->nthreads)
		for (int d = 0; d < t->depth; d++, k++) {
			struct ring_ent *e = &t->ents[k];
			e->qid = q;
			e->hdr = aligned_alloc(64, sizeof(*e->hdr));
			e->payload = aligned_alloc(4096, PAYLOAD_SZ);
			memset(e->hdr, 0, sizeof(*e->hdr));
			e->iov[0] = (struct iovec){e->hdr, sizeof(*e->hdr)};
			e->iov[1] = (struct iovec){e->payload, PAYLOAD_SZ};
			prep_cmd(&t->ring, e, URING_CMD_REGISTER);
		}
	rc = io_uring_submit(&t->ring);
	if (rc < 0)
		die("io_uring_submit (REGISTER)", -rc);
	pthread_barrier_wait(&registered);
	for (;;) {
		rc = io_uring_submit_and_wait(&t->ring, 1);
		if (rc < 0) {
			if (rc == -EINTR)
				continue;
			die("io_uring_submit_and_wait", -rc);
		}
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&t->ring, head, cqe) {
			seen++;
			struct ring_ent *e = (struct ring_ent *)(uintptr_t)cqe->user_data;
			if (cqe->res < 0) {
				if (cqe->res == -ENOTCONN || cqe->res == -ECANCELED)
					exit(0); /* unmounted: the kernel tears the queues down */
				fprintf(stderr, "probe: ring entry qid %u failed: %s%s\n", e->qid, strerror(-cqe->res),
					cqe->res == -EOPNOTSUPP ? " (enable_uring is N?)" : "");
				exit(3);
			}
			struct fuse_in_header *in = (struct fuse_in_header *)e->hdr->in_out;
			size_t outlen;
			int err = handle(in, e->hdr->op_in, e->payload, e->payload, &outlen);
			if (err == 1)
				err = 0;
			struct fuse_out_header *oh = (struct fuse_out_header *)e->hdr->in_out;
			uint64_t unique = in->unique;
			oh->len = sizeof(*oh) + outlen;
			oh->error = err;
			oh->unique = unique;
			e->hdr->ent.payload_sz = outlen;
			prep_cmd(&t->ring, e, URING_CMD_COMMIT_AND_FETCH);
		}
		io_uring_cq_advance(&t->ring, seen);
	}
	return NULL;
}

static void serve(const char *mode, const char *mnt, const char *stats, unsigned n, int nthreads, int depth)
{
	nfiles = n;
	uring_mode = strcmp(mode, "uring") == 0;
	if (!uring_mode && strcmp(mode, "devfuse") != 0)
		die("mode must be devfuse or uring", EINVAL);
	counts = map_stats(stats, 1);
	fuse_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fuse_fd < 0)
		die("/dev/fuse", errno);
	char opts[128];
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fuse_fd);
	if (mount("probe", mnt, "fuse.probe", MS_NOSUID | MS_NODEV | MS_RDONLY, opts) != 0)
		die("mount", errno);

	/* FUSE_INIT arrives through /dev/fuse whatever the transport. */
	char *buf = malloc(DEVBUF_SZ), *out = malloc(DEVBUF_SZ);
	ssize_t got = read(fuse_fd, buf, DEVBUF_SZ);
	if (got < (ssize_t)sizeof(struct fuse_in_header))
		die("read INIT", errno);
	struct fuse_in_header *in = (struct fuse_in_header *)buf;
	size_t outlen;
	int err = handle(in, buf + sizeof(*in), NULL, out, &outlen);
	struct fuse_out_header oh = {.len = sizeof(oh) + outlen, .error = err, .unique = in->unique};
	struct iovec iov[2] = {{&oh, sizeof(oh)}, {out, outlen}};
	if (writev(fuse_fd, iov, 2) < 0)
		die("write INIT", errno);
	counts[0] = 0;
	counts[FUSE_INIT] = 0;
	counts[SERVER_PID] = getpid();

	pthread_t tid[64];
	if (!uring_mode) {
		for (int i = 1; i < nthreads; i++)
			pthread_create(&tid[i], NULL, devfuse_thread, NULL);
		devfuse_thread(NULL);
	}
	/* The kernel has one queue per possible CPU and routes a request to the
	 * queue of the CPU its caller runs on; it serves none over the ring
	 * until every queue has an entry registered. */
	int ncpus = get_nprocs_conf();
	if (nthreads > ncpus)
		nthreads = ncpus;
	pthread_barrier_init(&registered, NULL, nthreads + 1);
	struct uring_thread *ts = calloc(nthreads, sizeof(*ts));
	for (int i = 0; i < nthreads; i++) {
		ts[i] = (struct uring_thread){.index = i, .nthreads = nthreads, .ncpus = ncpus, .depth = depth};
		pthread_create(&tid[i], NULL, uring_thread_main, &ts[i]);
	}
	pthread_barrier_wait(&registered);
	fprintf(stderr, "probe: io_uring: %d queue(s) x %d entries, %d thread(s), %zu + %d bytes per entry\n", ncpus,
		depth, nthreads, sizeof(struct uring_req_header), PAYLOAD_SZ);
	/* FORGET and INTERRUPT still come through /dev/fuse. */
	devfuse_thread(NULL);
}

/* ---- clients --------------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* CPU time of all threads of a process, in ns (schedstat's first field). */
static uint64_t cpu_ns_of(pid_t pid)
{
	char path[64];
	uint64_t sum = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char p2[384];
		unsigned long long v;
		snprintf(p2, sizeof(p2), "%s/%s/schedstat", path, e->d_name);
		FILE *f = fopen(p2, "r");
		if (f && fscanf(f, "%llu", &v) == 1)
			sum += v;
		if (f)
			fclose(f);
	}
	closedir(d);
	return sum;
}

/* CPU time of the server and of the client (this process and its waited-for
 * children), to set beside wall time on a shared machine. */
static uint64_t cpu_before;
static void cpu_mark(_Atomic uint64_t *c)
{
	struct rusage self, kids;
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &kids);
	cpu_before = cpu_ns_of(c[SERVER_PID]) + (self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec +
						   kids.ru_stime.tv_sec) * 1000000000ULL +
		     (self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec + kids.ru_stime.tv_usec) * 1000ULL;
}
static uint64_t cpu_since(_Atomic uint64_t *c)
{
	uint64_t b = cpu_before;
	cpu_mark(c);
	return cpu_before - b;
}

static void report(const char *label, uint64_t ns, uint64_t ops, const uint64_t *before, _Atomic uint64_t *after)
{
	uint64_t cpu = cpu_since(after);
	static const struct {
		int op;
		const char *name;
	} names[] = {{FUSE_LOOKUP, "LOOKUP"}, {FUSE_GETATTR, "GETATTR"}, {FUSE_OPEN, "OPEN"},
		     {FUSE_READ, "READ"}, {FUSE_FLUSH, "FLUSH"}, {FUSE_RELEASE, "RELEASE"},
		     {FUSE_OPENDIR, "OPENDIR"}, {FUSE_READDIR, "READDIR"}, {FUSE_RELEASEDIR, "RELEASEDIR"},
		     {FUSE_GETXATTR, "GETXATTR"}, {FUSE_FORGET, "FORGET"}, {FUSE_BATCH_FORGET, "BATCH_FORGET"}};
	uint64_t reqs = after[0] - before[0];
	printf("%s ns=%llu ops=%llu requests=%llu us_per_request=%.2f cpu_us_per_request=%.2f on_ring=%llu", label,
	       (unsigned long long)ns, (unsigned long long)ops, (unsigned long long)reqs, reqs ? ns / 1000.0 / reqs : 0.0,
	       reqs ? cpu / 1000.0 / reqs : 0.0,
	       (unsigned long long)(after[COUNT_RING] - before[COUNT_RING]));
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		uint64_t d = after[names[i].op] - before[names[i].op];
		if (d)
			printf(" %s=%llu", names[i].name, (unsigned long long)d);
	}
	printf("\n");
}

static void snapshot(_Atomic uint64_t *c, uint64_t *to)
{
	for (int i = 0; i < NOPS; i++)
		to[i] = c[i];
}

static void loop(const char *what, const char *dir, unsigned n, unsigned rounds, const char *stats)
{
	_Atomic uint64_t *c = map_stats(stats, 0);
	uint64_t before[NOPS];
	char path[4096], buf[4096];
	snapshot(c, before);
	cpu_mark(c);
	uint64_t t0 = now_ns();
	for (unsigned r = 0; r < rounds; r++)
		for (unsigned i = 0; i < n; i++) {
			snprintf(path, sizeof(path), "%s/f%05u", dir, i);
			if (strcmp(what, "stat") == 0) {
				struct stat st;
				if (stat(path, &st) != 0)
					die(path, errno);
			} else {
				int fd = open(path, O_RDONLY);
				if (fd < 0)
					die(path, errno);
				if (strcmp(what, "read") == 0 && read(fd, buf, sizeof(buf)) < 0)
					die(path, errno);
				close(fd);
			}
		}
	uint64_t ns = now_ns() - t0;
	char label[64];
	snprintf(label, sizeof(label), "%s", what);
	report(label, ns, (uint64_t)n * rounds, before, c);
}

static void measure(const char *stats, const char *label, uint64_t ops, char **argv)
{
	_Atomic uint64_t *c = map_stats(stats, 0);
	uint64_t before[NOPS];
	snapshot(c, before);
	cpu_mark(c);
	uint64_t t0 = now_ns();
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	int status;
	waitpid(pid, &status, 0);
	report(label, now_ns() - t0, ops, before, c);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 7 && strcmp(argv[1], "serve") == 0) {
		serve(argv[2], argv[3], argv[4], atoi(argv[5]), atoi(argv[6]), argc > 7 ? atoi(argv[7]) : 8);
		return 0;
	}
	if (argc == 7 && strcmp(argv[1], "loop") == 0) {
		loop(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), argv[6]);
		return 0;
	}
	if (argc >= 7 && strcmp(argv[1], "measure") == 0 && strcmp(argv[5], "--") == 0) {
		measure(argv[2], argv[3], strtoull(argv[4], NULL, 10), argv + 6);
		return 0;
	}
	fprintf(stderr, "usage: probe serve devfuse|uring MNT STATS N THREADS [DEPTH]\n"
			"       probe loop stat|open|read DIR N ROUNDS STATS\n"
			"       probe measure STATS LABEL OPS -- CMD ARGS...\n");
	return 2;
}
