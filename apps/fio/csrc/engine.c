/*
 * The C side of bdevkit's fio engine: fio's structures stay here.
 *
 * Compiled by build.rs against the headers (and config-host.h) of the
 * fio that will load the engine. It fills fio's `struct ioengine_ops`
 * with callbacks that read the few fields the engine needs from fio's
 * structures (an io_u's direction, offset, buffer and length, a file's
 * name, a job's options) and forward them, as plain integers and
 * pointers, to the Rust functions `bdevkit_fio_*` (src/ffi.rs). The Rust
 * side never sees a fio structure; the `void *` it returns from init lives
 * in td->io_ops_data (in a struct bk_td), and each io_u travels as an
 * opaque pointer. fio's `event` is answered here, from the events the last
 * `getevents` pointed to: no call into Rust per completion.
 *
 * Every io_u field read here (file, ddir, offset, xfer_buf, xfer_buflen,
 * error, resid) comes before the io_u's only configuration-dependent
 * member (the engine union at its end), and the thread_data and
 * thread_options fields come before thread_data's only one (CUDA), so the
 * configure run of scripts/fetch-fio-src.sh, whose optional libraries
 * differ from Debian's build, gives the same offsets as the installed fio.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "ioengines.h"
#include "optgroup.h"

#ifndef BK_FIO_BUILT_FOR
#error "build.rs defines BK_FIO_BUILT_FOR (the fio version of these headers)"
#endif

/* fio's own symbols, weak: the library also loads outside fio (unit tests
 * link this file; `ldd` and friends), where they are NULL. */
#pragma weak fio_version_string
#pragma weak register_ioengine
#pragma weak unregister_ioengine
#pragma weak log_err

/* What the shim hands Rust (src/ffi.rs mirrors these two). */
enum bk_op { BK_READ = 0, BK_WRITE = 1, BK_TRIM = 2, BK_FLUSH = 3, BK_UNSUPPORTED = -1 };

struct bk_job_args {
	const char *job;           /* the job's name */
	const char *conf;          /* bdevkit_conf / spdk_json_conf, or NULL */
	const char *reactor_mask;  /* bdevkit_reactor_mask, or NULL */
	const char *const *files;  /* the job's file names (bdev names) */
	unsigned int nr_files;
	unsigned int iodepth;
	int use_thread;            /* thread=1 */
	int zbd;                   /* zonemode=zbd */
	int create_serialize;      /* setup runs before init (fio's default) */
	int writes;                /* the job writes or trims */
	/* every I/O size the job may use: {op, bytes} pairs */
	const unsigned long long (*sizes)[2];
	unsigned int nr_sizes;
};

int bdevkit_fio_setup(const struct bk_job_args *args, void *job, unsigned long long *file_sizes);
void *bdevkit_fio_init(const struct bk_job_args *args);
void bdevkit_fio_cleanup(void *job, int create_serialize);
void *bdevkit_fio_iomem_alloc(void *job, size_t len);
void bdevkit_fio_iomem_free(void *job);
int bdevkit_fio_queue(void *job, void *io_u, int op, unsigned int file, unsigned long long offset,
		      void *buf, unsigned long long len, int *err);
/* A completion (job.rs's Event): the io_u, and 0 or a positive errno. */
struct bk_event {
	uint64_t io_u;
	int err;
};

int bdevkit_fio_getevents(void *job, unsigned int min, unsigned int max, long long timeout_ns,
			  const struct bk_event **events);
void bdevkit_fio_exit(void);

/* A zone as src/zbd.rs's FioZone: bytes, fio's type and condition codes. */
struct bk_zone {
	uint64_t start, wp, len, capacity;
	int type, cond;
};

int bdevkit_fio_zoned_model(const char *name, int *model);
int bdevkit_fio_max_open_zones(const char *name, unsigned int *max);
int bdevkit_fio_report_zones(void *job, const char *name, uint64_t offset, struct bk_zone *zones,
			     unsigned int nr);
int bdevkit_fio_reset_wp(void *job, const char *name, uint64_t offset, uint64_t len);

/* fio's engine options: the first member must be a pointer (fio's rule). */
struct bk_options {
	void *pad;
	char *conf;
	char *reactor_mask;
};

static struct fio_option bk_options[] = {
	{
		.name = "bdevkit_conf",
		.lname = "bdevkit JSON config",
		.alias = "spdk_json_conf",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct bk_options, conf),
		.help = "SPDK-format JSON config that creates the bdevs (filename= names them)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "bdevkit_reactor_mask",
		.lname = "bdevkit reactor core mask",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct bk_options, reactor_mask),
		.help = "Cores of bdevkit's control reactor (0x1, [0-3]); default: the first allowed CPU",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{ .name = NULL },
};

void bk_log(const char *msg)
{
	if (log_err)
		log_err("%s\n", msg);
	else
		fprintf(stderr, "%s\n", msg);
}

#define BK_MAX_SIZES (DDIR_RWDIR_CNT * (BSSPLIT_MAX + 3))

/* Fills *a from td; names and sizes point into td, and into the arrays
 * given, which must outlive *a. */
static void bk_job_args(struct thread_data *td, struct bk_job_args *a, const char **names,
			unsigned long long (*sizes)[2])
{
	struct bk_options *o = td->eo;
	struct fio_file *f;
	unsigned int i, n = 0;

	memset(a, 0, sizeof(*a));
	a->job = td->o.name ? td->o.name : "";
	a->conf = o ? o->conf : NULL;
	a->reactor_mask = o ? o->reactor_mask : NULL;
	for_each_file(td, f, i)
		names[i] = f->file_name;
	a->files = names;
	a->nr_files = td->o.nr_files;
	a->iodepth = td->o.iodepth;
	a->use_thread = td->o.use_thread != 0;
	a->zbd = td->o.zone_mode == ZONE_MODE_ZBD;
	a->create_serialize = td->o.create_serialize != 0;
	a->writes = td_write(td) || td_trim(td);
	for (int d = 0; d < DDIR_RWDIR_CNT; d++) {
		if ((d == DDIR_READ && !td_read(td)) || (d == DDIR_WRITE && !td_write(td)) ||
		    (d == DDIR_TRIM && !td_trim(td)))
			continue;
		unsigned long long v[3] = { td->o.bs[d], td->o.min_bs[d], td->o.max_bs[d] };
		for (int k = 0; k < 3; k++) {
			sizes[n][0] = d;
			sizes[n][1] = v[k];
			n++;
		}
		for (unsigned int k = 0; k < td->o.bssplit_nr[d] && k < BSSPLIT_MAX; k++) {
			sizes[n][0] = d;
			sizes[n][1] = td->o.bssplit[d][k].bs;
			n++;
		}
	}
	a->sizes = (const unsigned long long (*)[2])sizes;
	a->nr_sizes = n;
}

/* td->io_ops_data: the Rust job, and where the events of its last
 * getevents are (contiguous, valid until its next getevents). */
struct bk_td {
	void *job;
	const struct bk_event *events;
	int nr_events;
};

static void *bk_job(struct thread_data *td)
{
	struct bk_td *t = td->io_ops_data;

	return t ? t->job : NULL;
}

static int bk_setup(struct thread_data *td)
{
	struct bk_job_args a;
	unsigned long long sizes[BK_MAX_SIZES][2];
	const char *names[td->o.nr_files ? td->o.nr_files : 1];
	unsigned long long file_sizes[td->o.nr_files ? td->o.nr_files : 1];
	struct fio_file *f;
	unsigned int i;

	bk_job_args(td, &a, names, sizes);
	if (bdevkit_fio_setup(&a, bk_job(td), file_sizes))
		return 1;
	for_each_file(td, f, i) {
		f->real_file_size = file_sizes[i];
		f->filetype = FIO_TYPE_BLOCK;
		fio_file_set_size_known(f);
	}
	return 0;
}

static int bk_init(struct thread_data *td)
{
	struct bk_job_args a;
	unsigned long long sizes[BK_MAX_SIZES][2];
	const char *names[td->o.nr_files ? td->o.nr_files : 1];
	struct bk_td *t;

	if (td->io_ops_data)
		return 0;
	t = calloc(1, sizeof(*t));
	if (!t) {
		bk_log("bdevkit: error: out of memory");
		return 1;
	}
	bk_job_args(td, &a, names, sizes);
	t->job = bdevkit_fio_init(&a);
	if (!t->job) {
		free(t);
		return 1;
	}
	td->io_ops_data = t;
	return 0;
}

static void bk_cleanup(struct thread_data *td)
{
	bdevkit_fio_cleanup(bk_job(td), td->o.create_serialize != 0);
	free(td->io_ops_data);
	td->io_ops_data = NULL;
}

static int bk_iomem_alloc(struct thread_data *td, size_t len)
{
	td->orig_buffer = bdevkit_fio_iomem_alloc(bk_job(td), len);
	return td->orig_buffer == NULL;
}

static void bk_iomem_free(struct thread_data *td)
{
	bdevkit_fio_iomem_free(bk_job(td));
	td->orig_buffer = NULL;
}

static enum fio_q_status bk_queue(struct thread_data *td, struct io_u *io_u)
{
	int op, err = 0, r;

	switch (io_u->ddir) {
	case DDIR_READ: op = BK_READ; break;
	case DDIR_WRITE: op = BK_WRITE; break;
	case DDIR_TRIM: op = BK_TRIM; break;
	case DDIR_SYNC:
	case DDIR_DATASYNC: op = BK_FLUSH; break;
	case DDIR_SYNC_FILE_RANGE: op = BK_FLUSH; break;
	default: op = BK_UNSUPPORTED; break;
	}
	/* fsync/fdatasync flush the whole bdev (offset 0, length 0). */
	int whole = io_u->ddir == DDIR_SYNC || io_u->ddir == DDIR_DATASYNC;
	r = bdevkit_fio_queue(bk_job(td), io_u, op, (unsigned int)io_u->file->fileno,
			      whole ? 0 : io_u->offset, io_u->xfer_buf,
			      whole ? 0 : io_u->xfer_buflen, &err);
	if (r == 0)
		io_u->error = err;
	return r == 1 ? FIO_Q_QUEUED : r == 2 ? FIO_Q_BUSY : FIO_Q_COMPLETED;
}

static int bk_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			const struct timespec *t)
{
	long long ns = t ? (long long)t->tv_sec * 1000000000LL + t->tv_nsec : -1;
	struct bk_td *b = td->io_ops_data;
	int r;

	if (!b)
		return -ENODEV;
	r = bdevkit_fio_getevents(b->job, min, max, ns, &b->events);
	b->nr_events = r > 0 ? r : 0;
	return r;
}

static struct io_u *bk_event(struct thread_data *td, int i)
{
	struct bk_td *b = td->io_ops_data;
	struct io_u *io_u;

	if (!b || i < 0 || i >= b->nr_events)
		return NULL;
	io_u = (struct io_u *)(uintptr_t)b->events[i].io_u;
	io_u->error = b->events[i].err;
	io_u->resid = io_u->error ? io_u->xfer_buflen : 0;
	return io_u;
}

/* Bdevs open in init; a "file" needs no opening, and has no page cache. */
static int bk_open_file(struct thread_data *td, struct fio_file *f)
{
	(void)td;
	(void)f;
	return 0;
}

static int bk_get_file_size(struct thread_data *td, struct fio_file *f)
{
	(void)td;
	return fio_file_size_known(f) ? 0 : EINVAL;
}

/* zonemode=zbd: fio's zone hooks, on the control path. */
static int bk_get_zoned_model(struct thread_data *td, struct fio_file *f,
			      enum zbd_zoned_model *model)
{
	int m = ZBD_NONE, r;

	(void)td;
	r = bdevkit_fio_zoned_model(f->file_name, &m);
	*model = (enum zbd_zoned_model)m;
	return r;
}

static int bk_get_max_open_zones(struct thread_data *td, struct fio_file *f, unsigned int *max)
{
	(void)td;
	return bdevkit_fio_max_open_zones(f->file_name, max);
}

static int bk_report_zones(struct thread_data *td, struct fio_file *f, uint64_t offset,
			   struct zbd_zone *zones, unsigned int nr_zones)
{
	struct bk_zone *z = calloc(nr_zones ? nr_zones : 1, sizeof(*z));
	int n;

	if (!z)
		return -ENOMEM;
	n = bdevkit_fio_report_zones(bk_job(td), f->file_name, offset, z, nr_zones);
	for (int i = 0; i < n; i++) {
		zones[i].start = z[i].start;
		zones[i].wp = z[i].wp;
		zones[i].len = z[i].len;
		zones[i].capacity = z[i].capacity;
		zones[i].type = (enum zbd_zone_type)z[i].type;
		zones[i].cond = (enum zbd_zone_cond)z[i].cond;
	}
	free(z);
	return n;
}

static int bk_reset_wp(struct thread_data *td, struct fio_file *f, uint64_t offset,
		       uint64_t length)
{
	return bdevkit_fio_reset_wp(bk_job(td), f->file_name, offset, length);
}

static struct ioengine_ops ioengine = {
	.name = "bdevkit",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_RAWIO | FIO_NOEXTEND | FIO_NODISKUTIL | FIO_MEMALIGN | FIO_DISKLESSIO,
	.setup = bk_setup,
	.init = bk_init,
	.queue = bk_queue,
	/* No .commit: queue submits each I/O (as SPDK's engine does), and fio
	 * counts it in its submit histogram itself. */
	.getevents = bk_getevents,
	.event = bk_event,
	.cleanup = bk_cleanup,
	.open_file = bk_open_file,
	.close_file = bk_open_file,
	.invalidate = bk_open_file,
	.get_file_size = bk_get_file_size,
	.iomem_alloc = bk_iomem_alloc,
	.iomem_free = bk_iomem_free,
	.get_zoned_model = bk_get_zoned_model,
	.report_zones = bk_report_zones,
	.reset_wp = bk_reset_wp,
	.get_max_open_zones = bk_get_max_open_zones,
	.option_struct_size = sizeof(struct bk_options),
	.options = bk_options,
};

static int bk_registered;

/* fio's external-engine entry point (`ioengine=external:PATH`): fio
 * dlsyms "get_ioengine" when the library exports no `ioengine` object
 * (a Rust cdylib exports only Rust's symbols; src/ffi.rs forwards here). */
void bk_get_ioengine(struct ioengine_ops **ops)
{
	*ops = &ioengine;
}

/* At load (dlopen, or LD_PRELOAD before fio's main): refuse a fio whose
 * version is not the one these headers come from, in words that name
 * both; otherwise register "bdevkit" (ioengine=bdevkit with LD_PRELOAD). */
__attribute__((constructor)) static void bk_load(void)
{
	const char *running = fio_version_string;
	char msg[512];

	if (!running)
		return; /* not inside fio */
	if (strcmp(running, BK_FIO_BUILT_FOR) != 0) {
		snprintf(msg, sizeof(msg),
			 "bdevkit fio engine: built for %s (ioengine ops version %d), but this fio is %s: "
			 "rebuild it against this fio's source (scripts/fetch-fio-src.sh; see doc/fio.md)",
			 BK_FIO_BUILT_FOR, FIO_IOOPS_VERSION, running);
		bk_log(msg);
		/* fio refuses an engine of another ops version before calling it. */
		ioengine.version = 0;
		return;
	}
	if (register_ioengine) {
		register_ioengine(&ioengine);
		bk_registered = 1;
	}
}

/* At unload or exit: out of fio's engine list before the code goes, and
 * the bdevkit runtime stopped if a job left it running. */
__attribute__((destructor)) static void bk_unload(void)
{
	if (bk_registered && unregister_ioengine)
		unregister_ioengine(&ioengine);
	bk_registered = 0;
	bdevkit_fio_exit();
}
