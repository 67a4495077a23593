#include "xprt/mbox.h"
#include "core/log.h"
#include "xprt/futex.h"
#include "core/xtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *side_name(int side)
{
	return side == MBOX_SIDE_A ? "a" : "b";
}

int mbox_check_name(const char *name, char *err, size_t errlen)
{
	size_t n = strlen(name);

	if (n == 0 || n > MBOX_NAME_MAX) {
		xerr(err, errlen,
		     "invalid connection name '%s': 1 to %d characters", name, MBOX_NAME_MAX);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
		if (!ok || (i == 0 && (c == '.' || c == '-'))) {
			xerr(err, errlen,
			     "invalid connection name '%s': use letters, digits, '.', '_', '-'", name);
			return -EINVAL;
		}
	}
	return 0;
}

int mbox_check_cfg(const struct mbox_cfg *c, char *err, size_t errlen)
{
	if (c->nslots < MBOX_SLOTS_MIN || c->nslots > MBOX_SLOTS_MAX ||
	    (c->nslots & (c->nslots - 1))) {
		xerr(err, errlen,
		     "slot count %" PRIu32 " out of range: a power of two from %u to %u",
		     c->nslots, MBOX_SLOTS_MIN, MBOX_SLOTS_MAX);
		return -EINVAL;
	}
	if (c->mtu < 36 || c->mtu > (16u << 20)) {
		xerr(err, errlen, "MTU %" PRIu32 " out of range: 36 to 16777216 bytes", c->mtu);
		return -EINVAL;
	}
	if (c->con_tmo_ms < 100 || c->con_tmo_ms > 3600000) {
		xerr(err, errlen,
		     "connection timeout %" PRIu32 " ms out of range: 100 ms to 1 hour", c->con_tmo_ms);
		return -EINVAL;
	}
	if (c->defq_max > 1000000) {
		xerr(err, errlen,
		     "deferred queue limit %" PRIu32 " out of range: 0 to 1000000 packets", c->defq_max);
		return -EINVAL;
	}
	uint64_t slot = ((uint64_t)c->mtu + MBOX_SLOT_HDR + MBOX_CL - 1) & ~(uint64_t)(MBOX_CL - 1);
	if (slot * c->nslots * 2 > MBOX_SEG_MAX) {
		xerr(err, errlen,
		     "mailbox too large: %" PRIu32 " slots of %" PRIu32 " bytes in each direction, "
		     "both together over 4 GiB", c->nslots, c->mtu);
		return -EINVAL;
	}
	return 0;
}

static void layout(const struct mbox_cfg *c, uint32_t *slot_size, uint64_t off[2],
		   uint64_t *total)
{
	uint64_t page = 4096, hdr = (sizeof(struct mbox_hdr) + page - 1) & ~(page - 1);

	*slot_size = (c->mtu + MBOX_SLOT_HDR + MBOX_CL - 1) & ~(uint32_t)(MBOX_CL - 1);
	off[0] = hdr;
	off[1] = hdr + (uint64_t)*slot_size * c->nslots;
	*total = off[1] + (uint64_t)*slot_size * c->nslots;
}

static void shm_path(const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "/" MBOX_PREFIX "%s", name);
}

/* Start time of a process in clock ticks since boot (field 22 of
 * /proc/PID/stat), the part of the owner word that tells a recycled pid
 * from the original owner.  0 when the process does not exist. */
static uint32_t proc_start(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long start = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: skip to the last ')' */
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* fields after comm start at 3 (state); starttime is 22 */
	for (int field = 2; field < 21 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &start) != 1)
		return 0;
	/* never 0, so 0 stays "free" */
	return (uint32_t)start | 1u;
}

static bool owner_alive(uint64_t owner)
{
	pid_t pid = (pid_t)(owner >> 32);

	if (owner == 0 || pid <= 0)
		return false;
	return proc_start(pid) == (uint32_t)owner;
}

pid_t mbox_side_pid(const struct mbox_hdr *h, int side)
{
	uint64_t owner = atomic_load(&((struct mbox_hdr *)h)->side[side].owner);

	return owner_alive(owner) ? (pid_t)(owner >> 32) : 0;
}

int mbox_side_pidfd(const struct mbox_hdr *h, int side, pid_t *pidp)
{
	uint64_t owner = atomic_load(&((struct mbox_hdr *)h)->side[side].owner);
	pid_t pid = (pid_t)(owner >> 32);
	int fd;

	if (owner == 0 || pid <= 0)
		return -ESRCH;
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -errno;
	/* Checked after opening: the pidfd now pins this very process. */
	if (!owner_alive(owner)) {
		close(fd);
		return -ESRCH;
	}
	*pidp = pid;
	return fd;
}

static int validate(const struct mbox_hdr *h, uint64_t st_size, const char *name,
		    char *err, size_t errlen)
{
	struct mbox_cfg c;
	uint32_t slot_size;
	uint64_t off[2], total;

	if (h->magic != MBOX_MAGIC) {
		xerr(err, errlen,
		     "connection '%s': not an xprt mailbox (bad magic 0x%08" PRIx32 ")", name, h->magic);
		return -EPROTO;
	}
	if (h->version != MBOX_VERSION || h->hdr_size != sizeof(*h)) {
		xerr(err, errlen,
		     "connection '%s': mailbox version %u (header %u bytes), this mkshmcon speaks version %u",
		     name, h->version, h->hdr_size, MBOX_VERSION);
		return -EPROTO;
	}
	c = (struct mbox_cfg){ h->nslots, h->mtu, h->con_tmo_ms, h->defq_max };
	char why[160];
	if (mbox_check_cfg(&c, why, sizeof(why)) < 0) {
		xerr(err, errlen, "connection '%s': corrupted header: %s", name, why);
		return -EPROTO;
	}
	layout(&c, &slot_size, off, &total);
	if (h->slot_size != slot_size || h->ring_off[0] != off[0] ||
	    h->ring_off[1] != off[1] || h->seg_size != total || st_size != total) {
		xerr(err, errlen,
		     "connection '%s': corrupted header: layout does not match its size", name);
		return -EPROTO;
	}
	return 0;
}

/* A mailbox is its owner's alone (mode 0600): an object open to others, or
 * one another user made -- perhaps first, under the name we were about to
 * create -- could be read or written by them.  Root may use another user's
 * mailbox, but not re-create one (`mine`: it must be ours).  0, or -EACCES
 * with err set. */
static int check_owner(int fd, const char *name, bool mine, char *err, size_t errlen)
{
	struct stat st;
	uid_t me = geteuid();

	if (fstat(fd, &st) < 0) {
		int rc = -errno;

		xerr(err, errlen, "connection '%s': %s", name, strerror(-rc));
		return rc;
	}
	if (!(st.st_mode & 077) && (st.st_uid == me || (!mine && me == 0)))
		return 0;
	xerr(err, errlen, "connection '%s': its mailbox belongs to uid %u with mode %04o, "
	     "not to us alone: not used (its owner or root can remove it: mkshmcon rm %s)",
	     name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), name);
	return -EACCES;
}

/* flock(2), restarted after a signal. */
static int lock_fd(int fd, int how)
{
	int rc;

	while ((rc = flock(fd, how)) < 0 && errno == EINTR)
		;
	return rc < 0 ? -errno : 0;
}

/* Maps an existing mailbox; -ENOENT when there is none.  check: one to
 * use (validated, and ours: check_owner).
 *
 * A mailbox open here holds a shared flock(2) on it until mbox_close(),
 * and mbox_create() formats one only under an exclusive lock: so nobody
 * has a mailbox mapped while it is truncated and sized again (a SIGBUS to
 * whoever touched it), and an open sees it whole.  A new one is empty for
 * the moment between its creation and its creator's lock: looked at again
 * for up to 100 ms. */
static int map_existing(const char *name, struct mbox **out, bool check,
			char *err, size_t errlen)
{
	char path[MBOX_NAME_MAX + 32];
	struct stat st;
	struct mbox *m;
	void *p;
	int fd, rc;

	shm_path(name, path, sizeof(path));
	for (int tries = 0;; tries++) {
		fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
		if (fd < 0) {
			char dev[MBOX_NAME_MAX + 48];
			struct stat ps;

			rc = -errno;
			snprintf(dev, sizeof(dev), "/dev/shm%s", path);
			if (rc == -ENOENT)
				xerr(err, errlen, "no such connection '%s'", name);
			else if (rc == -EACCES && stat(dev, &ps) == 0)
				xerr(err, errlen, "connection '%s': its mailbox belongs to uid %u with "
				     "mode %04o: not ours to open (its owner or root can remove it: "
				     "mkshmcon rm %s)", name, (unsigned)ps.st_uid,
				     (unsigned)(ps.st_mode & 07777), name);
			else
				xerr(err, errlen, "connection '%s': %s", name, strerror(-rc));
			return rc;
		}
		if ((rc = lock_fd(fd, LOCK_SH)) < 0) {
			xerr(err, errlen, "connection '%s': flock: %s", name, strerror(-rc));
			goto out_close;
		}
		if (fstat(fd, &st) < 0) {
			rc = -errno;
			xerr(err, errlen, "connection '%s': %s", name, strerror(-rc));
			goto out_close;
		}
		if ((uint64_t)st.st_size >= sizeof(struct mbox_hdr) || tries == 10)
			break;
		close(fd);
		usleep(10000);
	}
	if (check && (rc = check_owner(fd, name, false, err, errlen)) < 0)
		goto out_close;
	if ((uint64_t)st.st_size < sizeof(struct mbox_hdr)) {
		xerr(err, errlen, "connection '%s': corrupted mailbox (%lld bytes, too small)",
		     name, (long long)st.st_size);
		rc = -EPROTO;
		goto out_close;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = -errno;
		xerr(err, errlen, "connection '%s': mmap: %s", name, strerror(-rc));
		goto out_close;
	}
	struct mbox_hdr snap;
	memcpy(&snap, p, sizeof(snap));	/* validated and used as one */
	if (check) {
		rc = validate(&snap, (uint64_t)st.st_size, name, err, errlen);
		if (rc < 0)
			goto out_unmap;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		rc = -ENOMEM;
		xerr(err, errlen, "out of memory");
		goto out_unmap;
	}
	if (check) {
		uint32_t slot_size;
		uint64_t total;

		m->cfg = (struct mbox_cfg){ snap.nslots, snap.mtu, snap.con_tmo_ms, snap.defq_max };
		layout(&m->cfg, &slot_size, m->ring_off, &total);
		m->slot_size = slot_size;
		m->mask = m->cfg.nslots - 1;
	}
	m->h = p;
	m->size = (size_t)st.st_size;
	m->fd = fd;
	m->side = -1;
	snprintf(m->name, sizeof(m->name), "%s", name);
	*out = m;
	return 0;

out_unmap:
	munmap(p, (size_t)st.st_size);
out_close:
	close(fd);
	return rc;
}

int mbox_open(const char *name, struct mbox **out, char *err, size_t errlen)
{
	int rc = mbox_check_name(name, err, errlen);

	if (rc < 0)
		return rc;
	return map_existing(name, out, true, err, errlen);
}

static void init_header(struct mbox_hdr *h, const struct mbox_cfg *c)
{
	uint32_t slot_size;
	uint64_t off[2], total;

	layout(c, &slot_size, off, &total);
	memset(h, 0, sizeof(*h));
	h->version = MBOX_VERSION;
	h->hdr_size = sizeof(*h);
	h->nslots = c->nslots;
	h->slot_size = slot_size;
	h->mtu = c->mtu;
	h->con_tmo_ms = c->con_tmo_ms;
	h->defq_max = c->defq_max;
	h->creator_pid = (uint32_t)getpid();
	h->seg_size = total;
	h->created_ns = xtime_real_ns();
	h->ring_off[0] = off[0];
	h->ring_off[1] = off[1];
	atomic_store_explicit((_Atomic uint32_t *)&h->magic, MBOX_MAGIC, memory_order_release);
}

/* (Re-)initialises the object behind fd to the configured size. */
static int format_fd(int fd, const struct mbox_cfg *c, const char *name,
		     char *err, size_t errlen)
{
	uint32_t slot_size;
	uint64_t off[2], total;
	void *p;
	int rc;

	layout(c, &slot_size, off, &total);
	/* shrink to zero first so no stale slot content survives */
	if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)total) < 0) {
		rc = -errno;
		xerr(err, errlen, "connection '%s': cannot size mailbox to %" PRIu64 " bytes: %s",
		     name, total, strerror(-rc));
		return rc;
	}
	/* Its pages now: a /dev/shm too small for it is told here, not by a
	 * SIGBUS to both ends when the rings first reach the missing pages.
	 * Where the file system cannot reserve (EOPNOTSUPP), it stays sparse. */
	while ((rc = posix_fallocate(fd, 0, (off_t)total)) == EINTR)
		;
	if (rc && rc != EOPNOTSUPP && rc != ENOSYS) {
		xerr(err, errlen, "connection '%s': cannot reserve %" PRIu64 " bytes for the mailbox "
		     "in /dev/shm: %s", name, total, strerror(rc));
		/* empty, as a creator that died before sizing it leaves it */
		(void)ftruncate(fd, 0);
		return -rc;
	}
	p = mmap(NULL, sizeof(struct mbox_hdr), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = -errno;
		xerr(err, errlen, "connection '%s': mmap: %s", name, strerror(-rc));
		return rc;
	}
	init_header(p, c);
	munmap(p, sizeof(struct mbox_hdr));
	return 0;
}

/* The exclusive lock on an existing mailbox, to format it: -EBUSY when
 * another process has it open (map_existing's shared lock) for 100 ms --
 * it is being opened, used, or created by another mbox_create(). */
static int lock_excl(int fd, const char *name, char *err, size_t errlen)
{
	int rc;

	for (int tries = 0; tries < 20; tries++) {
		if ((rc = lock_fd(fd, LOCK_EX | LOCK_NB)) == 0)
			return 0;
		if (rc != -EWOULDBLOCK) {
			xerr(err, errlen, "connection '%s': flock: %s", name, strerror(-rc));
			return rc;
		}
		usleep(5000);
	}
	xerr(err, errlen, "connection '%s' is open in another process (in use, or being "
	     "created or opened): not re-created", name);
	return -EBUSY;
}

int mbox_create(const char *name, const struct mbox_cfg *c, bool *replaced,
		char *err, size_t errlen)
{
	char path[MBOX_NAME_MAX + 32];
	struct mbox *old = NULL;
	int fd, rc;

	*replaced = false;
	if ((rc = mbox_check_name(name, err, errlen)) < 0 ||
	    (rc = mbox_check_cfg(c, err, errlen)) < 0)
		return rc;
	shm_path(name, path, sizeof(path));
	fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0) {
		/* one that opened it at once holds a shared lock a moment; one
		 * that took it over meanwhile (we were slow) keeps it */
		if ((rc = lock_excl(fd, name, err, errlen)) < 0) {
			close(fd);
			return rc;
		}
		rc = format_fd(fd, c, name, err, errlen);
		close(fd);
		if (rc < 0)
			shm_unlink(path);
		return rc;
	}
	if (errno != EEXIST) {
		rc = -errno;
		xerr(err, errlen, "cannot create connection '%s': %s", name, strerror(-rc));
		return rc;
	}

	/* It exists.  A mailbox nobody alive owns is stale (both ends gone,
	 * perhaps by SIGKILL) and is re-created; so is one whose creator died
	 * before writing the magic.  A mailbox of another version, or one in
	 * use, is left alone. */
	rc = map_existing(name, &old, false, err, errlen);
	if (rc == -EPROTO) {
		/* smaller than a header: a creator died before sizing it */
		fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
		if (fd < 0) {
			rc = -errno;
			xerr(err, errlen,
			     "cannot re-create connection '%s': %s", name, strerror(-rc));
			return rc;
		}
		rc = check_owner(fd, name, true, err, errlen);
		if (rc == 0)
			rc = lock_excl(fd, name, err, errlen);
		if (rc == 0)
			rc = format_fd(fd, c, name, err, errlen);
		close(fd);
		if (rc == 0)
			*replaced = true;
		return rc;
	}
	if (rc < 0)
		return rc;
	if ((rc = check_owner(old->fd, name, true, err, errlen)) < 0)
		goto out;
	if (old->size >= sizeof(struct mbox_hdr) &&
	    atomic_load((_Atomic uint32_t *)&old->h->magic) == MBOX_MAGIC) {
		rc = validate(old->h, old->size, name, err, errlen);
		if (rc < 0) {
			size_t l = strlen(err);
			snprintf(err + l, errlen - l, "; remove it with 'mkshmcon rm %s'", name);
			goto out;
		}
		for (int s = 0; s < 2; s++) {
			pid_t pid = mbox_side_pid(old->h, s);
			if (pid) {
				xerr(err, errlen,
				     "connection '%s' exists and side %s is in use by pid %d",
				     name, side_name(s), (int)pid);
				rc = -EBUSY;
				goto out;
			}
		}
	}
	/* our shared lock becomes the exclusive one, or another has it open */
	if ((rc = lock_excl(old->fd, name, err, errlen)) < 0)
		goto out;
	rc = format_fd(old->fd, c, name, err, errlen);
	if (rc == 0)
		*replaced = true;
out:
	mbox_close(old);
	return rc;
}

int mbox_claim(struct mbox *m, int side, char *err, size_t errlen)
{
	struct mbox_side *s = &m->h->side[side];
	pid_t me = getpid();
	uint64_t mine = (uint64_t)(uint32_t)me << 32 | proc_start(me);
	uint64_t cur = atomic_load(&s->owner);

	for (;;) {
		if (cur == mine)
			break;
		if (owner_alive(cur)) {
			xerr(err, errlen, "side %s of connection '%s' is in use by pid %d",
			     side_name(side), m->name, (int)(cur >> 32));
			return -EBUSY;
		}
		/* free, or its owner is dead: take it over in one step */
		if (atomic_compare_exchange_strong(&s->owner, &cur, mine))
			break;
	}
	m->side = side;
	m->owner = mine;
	m->tx = &m->h->ring[side];
	m->rx = &m->h->ring[mbox_peer(side)];
	m->tx_slots = (uint8_t *)m->h + m->ring_off[side];
	m->rx_slots = (uint8_t *)m->h + m->ring_off[mbox_peer(side)];
	/* Our tx ring continues where the last owner of this side stopped;
	 * what its peer has not read yet stays, and SHMCM's generation number
	 * tells the peer it is old.  Our rx ring held packets for the last
	 * owner: they are not ours to read. */
	m->tx_head = atomic_load(&m->tx->head);
	m->tx_tail_cache = atomic_load(&m->tx->tail);
	if (m->tx_head - m->tx_tail_cache > m->mask + 1) {
		/* indices that cannot be: start the ring over */
		m->tx_tail_cache = m->tx_head;
	}
	m->rx_tail = atomic_load(&m->rx->head);
	atomic_store(&m->rx->tail, m->rx_tail);
	atomic_store(&m->rx->cons_sleep, 0);
	atomic_store(&m->tx->prod_sleep, 0);
	atomic_fetch_add(&s->attaches, 1);
	return 0;
}

void mbox_close(struct mbox *m)
{
	if (!m)
		return;
	if (m->side >= 0) {
		uint64_t mine = m->owner;
		atomic_compare_exchange_strong(&m->h->side[m->side].owner, &mine, 0);
	}
	munmap(m->h, m->size);
	close(m->fd);
	free(m);
}

int mbox_unlink(const char *name, bool force, char *err, size_t errlen)
{
	char path[MBOX_NAME_MAX + 32];
	struct mbox *m = NULL;
	int rc;

	if ((rc = mbox_check_name(name, err, errlen)) < 0)
		return rc;
	rc = map_existing(name, &m, false, err, errlen);
	if (rc == -EPROTO)
		goto unlink;	/* too small to be used by anyone */
	if (rc < 0)
		return rc;
	if (!force && m->size >= sizeof(struct mbox_hdr) &&
	    atomic_load((_Atomic uint32_t *)&m->h->magic) == MBOX_MAGIC &&
	    validate(m->h, m->size, name, err, errlen) == 0) {
		for (int s = 0; s < 2; s++) {
			pid_t pid = mbox_side_pid(m->h, s);
			if (pid) {
				xerr(err, errlen,
				     "connection '%s' is in use: side %s by pid %d (use -f to remove anyway)",
				     name, side_name(s), (int)pid);
				mbox_close(m);
				return -EBUSY;
			}
		}
	}
	mbox_close(m);
unlink:
	shm_path(name, path, sizeof(path));
	if (shm_unlink(path) < 0) {
		rc = -errno;
		xerr(err, errlen, "cannot remove connection '%s': %s", name, strerror(-rc));
		return rc;
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int mbox_list(char ***names, size_t *n)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	char **v = NULL;
	size_t cnt = 0, cap = 0;
	size_t plen = strlen(MBOX_PREFIX);

	*names = NULL;
	*n = 0;
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, MBOX_PREFIX, plen) != 0 || !e->d_name[plen])
			continue;
		if (cnt == cap) {
			cap = cap ? cap * 2 : 16;
			char **nv = realloc(v, cap * sizeof(*v));
			if (!nv)
				goto nomem;
			v = nv;
		}
		if (!(v[cnt] = strdup(e->d_name + plen)))
			goto nomem;
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(v, cnt, sizeof(*v), cmp_str);
	*names = v;
	*n = cnt;
	return 0;
nomem:
	closedir(d);
	mbox_names_free(v, cnt);
	return -ENOMEM;
}

void mbox_names_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* ---- wake-ups ---- */

void mbox_wake_consumer(struct mbox_ring_ctl *r)
{
	atomic_store_explicit(&r->cons_sleep, 0, memory_order_relaxed);
	xfutex_wake(&r->head, 1, true);
}

void mbox_wake_producer(struct mbox_ring_ctl *r)
{
	atomic_store_explicit(&r->prod_sleep, 0, memory_order_relaxed);
	xfutex_wake(&r->tail, 1, true);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static bool rx_ready(struct mbox *m)
{
	return mbox_rx_peek(m, 0) != NULL;
}

int mbox_rx_wait(struct mbox *m, uint64_t spin_ns, uint64_t timeout_ns)
{
	uint64_t now, end;
	uint32_t head;
	int rc;

	if (rx_ready(m))
		return 0;
	now = xtime_ns();
	end = now + spin_ns;
	while (now < end) {
		for (int i = 0; i < 64; i++) {
			cpu_relax();
			if (rx_ready(m))
				return 0;
		}
		now = xtime_ns();
	}
	/* Arm, then watch for the arm window (see mbox.h) before sleeping. */
	atomic_exchange_explicit(&m->rx->cons_sleep, 1, memory_order_seq_cst);
	end = xtime_ns() + MBOX_ARM_WINDOW_NS;
	do {
		for (int i = 0; i < 32; i++) {
			if (rx_ready(m)) {
				atomic_store_explicit(&m->rx->cons_sleep, 0, memory_order_relaxed);
				return 0;
			}
			cpu_relax();
		}
	} while (xtime_ns() < end);
	/* Sleep until head moves from what it is now: a producer publishing
	 * after this load changes it (and the futex returns at once); a head
	 * that stands ahead of any ready slot (a broken peer) only lets us
	 * sleep, never spin. */
	head = atomic_load_explicit(&m->rx->head, memory_order_acquire);
	if (!timeout_ns || timeout_ns > MBOX_BACKSTOP_NS)
		timeout_ns = MBOX_BACKSTOP_NS;
	rc = xfutex_wait(&m->rx->head, head, timeout_ns, true);
	atomic_store_explicit(&m->rx->cons_sleep, 0, memory_order_relaxed);
	if (rx_ready(m))
		return 0;
	return rc;	/* 0: woken with nothing there (a kick): look again */
}

void mbox_rx_kick(struct mbox *m)
{
	xfutex_wake(&m->rx->head, 1, true);
}

int mbox_wait_word(_Atomic uint32_t *word, uint32_t seen, _Atomic uint32_t *sleep_flag,
		   uint64_t spin_ns, uint64_t timeout_ns)
{
	uint64_t end;
	int rc;

	end = xtime_ns() + spin_ns;
	do {
		for (int i = 0; i < 64; i++) {
			if (atomic_load_explicit(word, memory_order_acquire) != seen)
				return 0;
			cpu_relax();
		}
	} while (xtime_ns() < end);
	/* Arm, then the arm window, as in mbox_rx_wait. */
	atomic_exchange_explicit(sleep_flag, 1, memory_order_seq_cst);
	end = xtime_ns() + MBOX_ARM_WINDOW_NS;
	do {
		for (int i = 0; i < 32; i++) {
			if (atomic_load_explicit(word, memory_order_acquire) != seen) {
				atomic_store_explicit(sleep_flag, 0, memory_order_relaxed);
				return 0;
			}
			cpu_relax();
		}
	} while (xtime_ns() < end);
	if (!timeout_ns || timeout_ns > MBOX_BACKSTOP_NS)
		timeout_ns = MBOX_BACKSTOP_NS;
	rc = xfutex_wait(word, seen, timeout_ns, true);
	atomic_store_explicit(sleep_flag, 0, memory_order_relaxed);
	if (atomic_load_explicit(word, memory_order_acquire) != seen)
		return 0;
	return rc;	/* 0: woken with the word unchanged (look again) */
}

int mbox_tx_wait(struct mbox_ring_ctl *r, uint32_t seen, uint64_t timeout_ns)
{
	return mbox_wait_word(&r->tail, seen, &r->prod_sleep, 5000, timeout_ns);
}

void mbox_wake_word(_Atomic uint32_t *word, _Atomic uint32_t *sleep_flag)
{
	if (atomic_load_explicit(sleep_flag, memory_order_relaxed)) {
		atomic_store_explicit(sleep_flag, 0, memory_order_relaxed);
		xfutex_wake(word, 1, true);
	}
}

void mbox_tx_kick(struct mbox *m)
{
	xfutex_wake(&m->tx->tail, 1, true);
}
