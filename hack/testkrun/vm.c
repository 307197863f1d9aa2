/*
 * testkrun: krun_start_enter. Instead of booting a VM it runs the
 * configured root in new mount, PID, UTS and IPC namespaces (and a new
 * network namespace holding only loopback when TSI is off), set up the way
 * libkrun's init sets up a guest, and exits with the workload's status.
 *
 * Process layout, from the caller's process (the "VMM"):
 *
 *   VMM (caller of krun_start_enter): vsock relays, waits, _exit(status)
 *    └─ guest init (PID 1 of the new PID namespace): mounts, chroot, waits
 *        └─ workload: exec_path with argv, env, workdir, rlimits
 *
 * The guest init and the workload are started with a raw clone() from a
 * multi-threaded process, so until exec they use only system calls and
 * memory prepared before the clone (no malloc, no stdio).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <arpa/inet.h>
#include <linux/loop.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testkrun.h"

extern char **environ;

/* Exit status of the guest init when it could not set up the guest, the
 * code libkrun's header documents for that case. */
#define EXIT_SETUP 125

/* ---- what is prepared before the clone ------------------------------- */

struct guest_rlimit {
	int resource;
	struct rlimit lim;
};

struct plan {
	struct tk_ctx *c;
	char root[PATH_MAX];
	bool new_user;  /* the double itself needs a user namespace */
	bool new_net;   /* TSI off: loopback only */
	int console_fd; /* -1: inherit stdio */
	char **argv;    /* argv[0] = exec_path */
	char **envp;
	struct guest_rlimit *rlimits;
	size_t nrlimits;
	const char *hostname;
	int sync_fd;    /* guest side of the socketpair */
	int tap_fd;     /* the guest's eth0 (has_net), or -1 */
	int uidmap_fd;  /* read end: the VMM wrote the id maps (new_user) */
	char **share_dirs; /* per share: the directory the VMM opened, or NULL */
	bool root_ro;      /* the root share is read-only (krun_add_virtiofs3) */
	char **disk_devs;  /* per disk: the loop device standing for it */
	bool fsnotify;     /* a stand-in for the guest kernel's /proc/fs/fsnotify_inject */
};

static int fail_fd = 2; /* where the guest init reports setup failures */

/* Formats into a stack buffer and writes: safe after a raw clone. */
static void say(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0)
		(void)!write(fail_fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

static void die_setup(const char *what, const char *path)
{
	say("testkrun init: %s %s: %s\n", what, path ? path : "", strerror(errno));
	_exit(EXIT_SETUP);
}

/* Formats a path of at most PATH_MAX bytes into out, or fails the setup. */
static void pathf(char *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, PATH_MAX, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= PATH_MAX) {
		errno = ENAMETOOLONG;
		die_setup("path too long:", out);
	}
}

static long raw_fork(unsigned long flags)
{
	return syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);
}

static char *join(const char *a, const char *b)
{
	char *s;
	if (asprintf(&s, "%s%s", a, b) < 0)
		abort();
	return s;
}

/* The workload's environment, as the guest kernel and libkrun's init build
 * it: HOME=/ and TERM=linux unless given, KRUN_INIT, KRUN_WORKDIR and
 * KRUN_RLIMITS as on the kernel command line, the configured entries, and
 * the double's stand-in directory. */
static char **build_env(const struct tk_ctx *c)
{
	size_t n = tk_strv_len(c->envp);
	char **e = calloc(n + 8, sizeof(char *));
	size_t k = 0;
	bool home = false, term = false;
	for (size_t i = 0; i < n; i++) {
		home |= strncmp(c->envp[i], "HOME=", 5) == 0;
		term |= strncmp(c->envp[i], "TERM=", 5) == 0;
	}
	if (!home)
		e[k++] = strdup("HOME=/");
	if (!term)
		e[k++] = strdup("TERM=linux");
	e[k++] = join("KRUN_INIT=", c->exec_path);
	if (c->workdir)
		e[k++] = join("KRUN_WORKDIR=", c->workdir);
	if (c->rlimits && c->rlimits[0]) {
		size_t len = 0;
		for (size_t i = 0; c->rlimits[i]; i++)
			len += strlen(c->rlimits[i]) + 1;
		char *r = calloc(1, len + sizeof("KRUN_RLIMITS="));
		strcpy(r, "KRUN_RLIMITS=");
		for (size_t i = 0; c->rlimits[i]; i++) {
			if (i)
				strcat(r, ",");
			strcat(r, c->rlimits[i]);
		}
		e[k++] = r;
	}
	for (size_t i = 0; i < n; i++)
		e[k++] = strdup(c->envp[i]);
	e[k++] = strdup("KRUNBOX_TESTKRUN_DIR=" TK_GUEST_DIR);
	return e;
}

/* Parses "id=cur:max" like libkrun's init (strtoull); bad entries are
 * reported on the console and skipped, as init does. */
static void build_rlimits(struct plan *p)
{
	size_t n = tk_strv_len(p->c->rlimits);
	p->rlimits = calloc(n + 1, sizeof(*p->rlimits));
	for (size_t i = 0; i < n; i++) {
		char *s = p->c->rlimits[i], *end;
		unsigned long long id = strtoull(s, &end, 10);
		if (*end != '=')
			goto bad;
		unsigned long long cur = strtoull(end + 1, &end, 10);
		if (*end != ':')
			goto bad;
		unsigned long long max = strtoull(end + 1, &end, 10);
		if (*end)
			goto bad;
		p->rlimits[p->nrlimits++] = (struct guest_rlimit){(int)id, {cur, max}};
		continue;
	bad:
		dprintf(p->console_fd >= 0 ? p->console_fd : 2, "Invalid rlimit specification: %s\n", s);
	}
}

/* ---- guest init ------------------------------------------------------ */

static void mkdir_in(const char *root, const char *rel, mode_t mode)
{
	char path[PATH_MAX];
	pathf(path, "%s%s", root, rel);
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		die_setup("mkdir", path);
}

static void mount_in(const char *root, const char *src, const char *rel, const char *fstype, unsigned long flags, const char *data)
{
	char path[PATH_MAX];
	pathf(path, "%s%s", root, rel);
	if (mount(src, path, fstype, flags, data) < 0)
		die_setup(fstype ? fstype : "bind mount", path);
}

/* Bind-mounts the host device node dev onto root/dev/<name>: mknod is not
 * allowed in a user namespace, and devtmpfs is the host's own. */
static void bind_dev(const char *root, const char *name)
{
	char src[64], dst[PATH_MAX];
	snprintf(src, sizeof(src), "/dev/%s", name);
	pathf(dst, "%s/dev/%s", root, name);
	int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
	if (fd < 0)
		die_setup("create", dst);
	close(fd);
	if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
		die_setup("bind mount", dst);
}

static void symlink_in(const char *root, const char *target, const char *rel)
{
	char path[PATH_MAX];
	pathf(path, "%s%s", root, rel);
	if (symlink(target, path) < 0 && errno != EEXIST)
		die_setup("symlink", path);
}

/* /dev: a tmpfs with the usual nodes bound from the host, devpts, shm. */
static void setup_dev(const char *root)
{
	mount_in(root, "devtmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755");
	static const char *nodes[] = {"null", "zero", "full", "random", "urandom", "tty", NULL};
	for (int i = 0; nodes[i]; i++)
		bind_dev(root, nodes[i]);
	mkdir_in(root, "/dev/pts", 0755);
	mount_in(root, "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620");
	symlink_in(root, "pts/ptmx", "/dev/ptmx");
	mkdir_in(root, "/dev/shm", 01777);
	mount_in(root, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	symlink_in(root, "/proc/self/fd", "/dev/fd");
}

/* /sys: sysfs when this namespace may mount it (as root, or with a network
 * namespace of our own), else the host's /sys bound read-only. */
static void setup_sys(const char *root)
{
	char path[PATH_MAX];
	pathf(path, "%s/sys", root);
	if (mount("sysfs", path, "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		if (mount("/sys", path, NULL, MS_BIND | MS_REC, NULL) < 0)
			die_setup("bind mount", path);
		mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL);
		return;
	}
	pathf(path, "%s/sys/fs/cgroup", root);
	mount("cgroup2", path, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL); /* as init: best effort */
}

static void write_all(int fd, const uint8_t *data, size_t len, const char *path)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die_setup("write", path);
		}
		data += n;
		len -= (size_t)n;
	}
}

/* The host-side view of where a virtio-fs tag appears in the guest. */
static void tag_base(const struct plan *p, const char *tag, char *out)
{
	if (strcmp(tag, TK_ROOT_TAG) == 0)
		pathf(out, "%s", p->root);
	else
		pathf(out, "%s" TK_GUEST_DIR "/virtiofs/%s", p->root, tag);
}

/* The directories libkrun's init mounts on. An overlay directory there
 * is only a mount point: init's mount covers it. */
static bool init_mount_point(const struct tk_overlay *o)
{
	return o->dir && strcmp(o->tag, TK_ROOT_TAG) == 0 &&
	       (strcmp(o->path, "dev") == 0 || strcmp(o->path, "proc") == 0 || strcmp(o->path, "sys") == 0);
}

/* Overlay directories become read-only tmpfs mounts, overlay files are
 * written into their overlay directory or, at a share's top level, into a
 * staging area and bound read-only over the path. */
static void setup_overlays(const struct plan *p)
{
	const struct tk_ctx *c = p->c;
	char base[PATH_MAX], path[PATH_MAX];
	if (c->noverlays == 0)
		return;
	mkdir_in(p->root, TK_GUEST_DIR "/overlay", 0700);
	for (size_t i = 0; i < c->noverlays; i++) {
		const struct tk_overlay *o = &c->overlays[i];
		tag_base(p, o->tag, base);
		pathf(path, "%s/%s", base, o->path);
		bool in_dir = strchr(o->path, '/') != NULL;
		if (init_mount_point(o))
			continue; /* made, and mounted on, by guest_init */
		if (o->dir) {
			char opts[32];
			struct stat st;
			/* libkrun's overlay entries shadow the directory's own
			 * names. A read-only root is an overlay here, so a link
			 * or file in the way is removed from it (a whiteout in
			 * its tmpfs), never followed; a directory is mounted
			 * over. */
			if (p->root_ro && !in_dir && lstat(path, &st) == 0 && !S_ISDIR(st.st_mode) && unlink(path) < 0)
				die_setup("unlink", path);
			if (!in_dir && mkdir(path, 0755) < 0 && errno != EEXIST)
				die_setup("mkdir", path);
			if (in_dir && mkdir(path, o->mode & 07777) < 0 && errno != EEXIST)
				die_setup("mkdir", path);
			snprintf(opts, sizeof(opts), "mode=%o", o->mode & 07777);
			if (!in_dir && mount("overlay", path, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
				die_setup("tmpfs", path);
			continue;
		}
		char staged[PATH_MAX];
		pathf(staged, "%s" TK_GUEST_DIR "/overlay/%zu", p->root, i);
		const char *dst = in_dir ? path : staged;
		int fd = open(dst, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, o->mode & 07777);
		if (fd < 0)
			die_setup("create", dst);
		write_all(fd, o->data, o->len, dst);
		fchmod(fd, o->mode & 07777);
		close(fd);
		if (!in_dir) {
			int t = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
			if (t < 0)
				die_setup("create", path);
			close(t);
			if (mount(staged, path, NULL, MS_BIND, NULL) < 0)
				die_setup("bind mount", path);
			mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL);
		}
	}
	/* Overlay directories are read-only once filled. */
	for (size_t i = 0; i < c->noverlays; i++) {
		const struct tk_overlay *o = &c->overlays[i];
		if (!o->dir || strchr(o->path, '/') || init_mount_point(o))
			continue;
		tag_base(p, o->tag, base);
		pathf(path, "%s/%s", base, o->path);
		mount(NULL, path, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
	}
}

static void loopback_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = {0};
	strcpy(ifr.ifr_name, "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		die_setup("get flags of", "lo");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		die_setup("bring up", "lo");
	close(s);
}

/* Creates the guest's eth0: a TAP device in the guest's network namespace
 * with the MAC the caller gave, left down (the guest sets it up, as it
 * would a virtio-net device). Its descriptor goes to the VMM, which
 * carries its frames to and from the caller's socket. */
static int tap_create(const uint8_t mac[6])
{
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die_setup("open", "/dev/net/tun");
	struct ifreq ifr = {0};
	strcpy(ifr.ifr_name, "eth0");
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	if (ioctl(fd, TUNSETIFF, &ifr) < 0)
		die_setup("create the TAP device", "eth0");
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, mac, 6);
	if (s < 0 || ioctl(s, SIOCSIFHWADDR, &ifr) < 0)
		die_setup("set the MAC address of", "eth0");
	close(s);
	return fd;
}

/* Sends the guest-side listeners (one per listen=false port, in order) and
 * an O_PATH descriptor of the vsock directory to the VMM. */
static void send_fds(int sock, const int *fds, size_t n)
{
	char data = 'k';
	struct iovec iov = {&data, 1};
	char cbuf[CMSG_SPACE(sizeof(int) * 256)];
	memset(cbuf, 0, sizeof(cbuf));
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
	if (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0)
		die_setup("send descriptors to the VMM", NULL);
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static void run_workload(const struct plan *p)
{
	const struct tk_ctx *c = p->c;
	setsid();
	if (p->console_fd >= 0) {
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null < 0 || dup2(null, 0) < 0 || dup2(p->console_fd, 1) < 0 || dup2(p->console_fd, 2) < 0)
			_exit(EXIT_SETUP);
	}
	environ = p->envp;
	execvp(c->exec_path, p->argv);
	int err = errno;
	/* libkrun's init prints this with printf, so it lands on the console. */
	fail_fd = 1;
	say("Couldn't execute '%s' inside the vm: %s\n", c->exec_path, strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

/* Closes every descriptor above stderr except the console, the socketpair
 * and the id-map pipe. */
static void close_other_fds(const struct plan *p)
{
	int keep[3] = {p->console_fd, p->sync_fd, p->uidmap_fd};
	for (int i = 0; i < 3; i++) /* sort the three */
		for (int j = i + 1; j < 3; j++)
			if (keep[j] < keep[i]) {
				int t = keep[i];
				keep[i] = keep[j];
				keep[j] = t;
			}
	unsigned int from = 3;
	for (int i = 0; i < 3; i++) {
		if (keep[i] < (int)from)
			continue;
		if ((unsigned int)keep[i] > from)
			syscall(SYS_close_range, from, (unsigned int)keep[i] - 1, 0);
		from = (unsigned int)keep[i] + 1;
	}
	syscall(SYS_close_range, from, ~0u, 0);
}

/* The VMM's signal handlers (a Go runtime's, for one) and mask are not the
 * guest's: start from the defaults, as a booted init does. */
static void reset_signals(void)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &dfl, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* A booted init has the environment the kernel gave it, not its VMM's.
 * This process, forked from the VMM, still holds the VMM's environment
 * where the kernel shows it (/proc/<pid>/environ, the area between
 * env_start and env_end, fields 50 and 51 of /proc/self/stat): blank it,
 * so that the guest cannot read the host environment there. The VMM's own
 * copy of it stays untouched. */
static void forget_vmm_environment(void)
{
	char buf[4096];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die_setup("open", "/proc/self/stat");
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		die_setup("read", "/proc/self/stat");
	buf[n] = 0;
	/* Fields from the third on follow the last ')' (the command may hold
	 * spaces and parentheses). */
	char *f = strrchr(buf, ')');
	unsigned long env_start = 0, env_end = 0;
	for (int field = 2; f && field < 51; field++) {
		f = strchr(f + 1, ' ');
		if (f && field == 49)
			env_start = strtoul(f + 1, NULL, 10);
		if (f && field == 50)
			env_end = strtoul(f + 1, NULL, 10);
	}
	if (env_start == 0 || env_end <= env_start) {
		errno = EINVAL;
		die_setup("find the environment in", "/proc/self/stat");
	}
	memset((void *)env_start, 0, env_end - env_start);
}

/* A read-only root (krun_add_virtiofs3 of "/dev/root", read_only): the
 * guest init still makes its mount points there, as libkrun's virtio-fs
 * serves its overlay entries without writing the directory. So the root
 * becomes, in the guest's mount namespace, an overlay of the directory
 * under a tmpfs, made read-only once set up (readonly_root_done). */
static void readonly_root(struct plan *p)
{
	/* libkrun's init makes /dev, /proc and /sys where missing (else it
	 * stops: "Couldn't mount filesystems, bailing out"): on a read-only
	 * root only an overlay directory can stand for one. */
	static const char *const init_dirs[] = {"dev", "proc", "sys"};
	for (size_t i = 0; i < 3; i++) {
		char path[PATH_MAX];
		struct stat st;
		pathf(path, "%s/%s", p->root, init_dirs[i]);
		if (lstat(path, &st) == 0)
			continue;
		bool overlay = false;
		for (size_t j = 0; j < p->c->noverlays; j++)
			overlay |= init_mount_point(&p->c->overlays[j]) && strcmp(p->c->overlays[j].path, init_dirs[i]) == 0;
		if (!overlay) {
			say("Error creating directory (/%s)\nCouldn't mount filesystems, bailing out\n", init_dirs[i]);
			_exit(EXIT_SETUP);
		}
	}
	char lower[64], opts[2 * PATH_MAX + 128];
	int fd = open(p->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		die_setup("open the root", p->root);
	snprintf(lower, sizeof(lower), "/proc/self/fd/%d", fd);
	mount_in(p->root, "testkrun-root", "", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	mkdir_in(p->root, "/upper", 0755);
	mkdir_in(p->root, "/work", 0755);
	mkdir_in(p->root, "/merged", 0755);
	int n = snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s/upper,workdir=%s/work", lower, p->root, p->root);
	if (n < 0 || (size_t)n >= sizeof(opts)) {
		errno = ENAMETOOLONG;
		die_setup("overlay options for", p->root);
	}
	mount_in(p->root, "testkrun-root", "/merged", "overlay", 0, opts);
	close(fd);
	char merged[PATH_MAX];
	pathf(merged, "%s/merged", p->root);
	memcpy(p->root, merged, sizeof(merged));
}

static void readonly_root_done(const struct plan *p)
{
	if (mount(NULL, p->root, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
		die_setup("remount read-only", p->root);
}

/* Each disk is $KRUNBOX_TESTKRUN_DIR/block/<id>: the loop device the VMM
 * attached to its image, bound there (as /dev's nodes are). */
static void setup_disks(const struct plan *p)
{
	const struct tk_ctx *c = p->c;
	if (c->ndisks == 0)
		return;
	mkdir_in(p->root, TK_GUEST_DIR "/block", 0755);
	for (size_t i = 0; i < c->ndisks; i++) {
		char dst[PATH_MAX];
		pathf(dst, "%s" TK_GUEST_DIR "/block/%s", p->root, c->disks[i].id);
		int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
		if (fd < 0)
			die_setup("create", dst);
		close(fd);
		if (mount(p->disk_devs[i], dst, NULL, MS_BIND, NULL) < 0)
			die_setup("bind mount", p->disk_devs[i]);
	}
}

static void guest_init(struct plan *p)
{
	const struct tk_ctx *c = p->c;
	const char *root = p->root;
	if (p->console_fd >= 0)
		fail_fd = p->console_fd;
	/* The guest keeps none of the VMM's descriptors (the runner's lock
	 * among them, and the VMM's end of the socketpair), only its own. */
	close_other_fds(p);
	/* libkrun's init has the console (/dev/console, hvc0) on its stdio,
	 * not the VMM's stdio: what the guest writes to /proc/1/fd/1 goes to
	 * the console. */
	if (p->console_fd >= 0) {
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null < 0 || dup2(null, 0) < 0 || dup2(p->console_fd, 1) < 0 || dup2(p->console_fd, 2) < 0)
			_exit(EXIT_SETUP);
		close(null);
	}
	/* The guest dies with the VMM, as a VM does. The VMM may have died
	 * between the clone and the prctl: its end of the socketpair is then
	 * closed. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct pollfd alive = {p->sync_fd, 0, 0};
	if (poll(&alive, 1, 0) > 0 && (alive.revents & (POLLHUP | POLLERR)))
		_exit(EXIT_SETUP);
	reset_signals();
	forget_vmm_environment();
	if (p->new_user) {
		char b;
		if (read(p->uidmap_fd, &b, 1) != 1) /* the VMM wrote our id maps */
			_exit(EXIT_SETUP);
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die_setup("make mounts private", "/");
	if (p->root_ro)
		readonly_root(p);

	mkdir_in(root, "/dev", 0755);
	mkdir_in(root, "/proc", 0555);
	mkdir_in(root, "/sys", 0555);
	mount_in(root, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	setup_sys(root);
	setup_dev(root);

	/* The stand-ins: vsock sockets and virtio-fs shares. */
	mkdir_in(root, TK_GUEST_DIR, 0755);
	mkdir_in(root, TK_GUEST_DIR "/vsock", 0777);
	mkdir_in(root, TK_GUEST_DIR "/virtiofs", 0755);
	if (p->fsnotify) {
		/* krunbox's libkrunfw's /proc/fs/fsnotify_inject, as a plain
		 * file recording what the agent writes (root-only, 0200 as
		 * there; the tests read it as root). */
		char inject[PATH_MAX];
		pathf(inject, "%s" TK_GUEST_DIR "/fsnotify_inject", root);
		int fd = open(inject, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0200);
		if (fd < 0)
			die_setup("create", inject);
		close(fd);
	}
	for (size_t i = 0; i < c->nshares; i++) {
		const struct tk_share *s = &c->shares[i];
		if (strcmp(s->tag, TK_ROOT_TAG) == 0 || !s->path)
			continue;
		char dst[PATH_MAX];
		pathf(dst, "%s" TK_GUEST_DIR "/virtiofs/%s", root, s->tag);
		if (mkdir(dst, 0755) < 0 && errno != EEXIST)
			die_setup("mkdir", dst);
		/* The directory the VMM opened, by the path it has in this
		 * mount namespace's copy of the VMM's mounts. */
		if (mount(p->share_dirs[i], dst, NULL, MS_BIND | MS_REC, NULL) < 0)
			die_setup("bind mount", p->share_dirs[i]);
		if (s->read_only && mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0)
			die_setup("remount read-only", dst);
	}
	setup_overlays(p);
	setup_disks(p);
	if (p->root_ro)
		readonly_root_done(p);

	if (sethostname(p->hostname, strlen(p->hostname)) < 0)
		die_setup("sethostname", p->hostname);
	if (p->new_net)
		loopback_up();
	p->tap_fd = c->has_net ? tap_create(c->net_mac) : -1;
	if (chroot(root) < 0 || chdir("/") < 0)
		die_setup("chroot", root);

	int fds[256];
	size_t nfds = 0;
	for (size_t i = 0; i < c->nvports && nfds < 255; i++) {
		if (c->vports[i].listen)
			continue;
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		snprintf(sa.sun_path, sizeof(sa.sun_path), TK_GUEST_DIR "/vsock/%u.sock", c->vports[i].port);
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 128) < 0)
			die_setup("listen on", sa.sun_path);
		chmod(sa.sun_path, 0777);
		fds[nfds++] = s;
	}
	fds[nfds] = open(TK_GUEST_DIR "/vsock", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fds[nfds] < 0)
		die_setup("open", TK_GUEST_DIR "/vsock");
	nfds++;
	if (p->tap_fd >= 0)
		fds[nfds++] = p->tap_fd; /* last, after the vsock directory */
	send_fds(p->sync_fd, fds, nfds);
	for (size_t i = 0; i < nfds; i++)
		close(fds[i]);
	close(p->sync_fd);

	for (size_t i = 0; i < p->nrlimits; i++)
		if (setrlimit(p->rlimits[i].resource, &p->rlimits[i].lim) < 0)
			say("Error setting rlimit for ID=%d\n", p->rlimits[i].resource);
	if (c->workdir)
		(void)!chdir(c->workdir); /* init ignores a missing workdir */

	long pid = raw_fork(0);
	if (pid < 0)
		die_setup("fork", NULL);
	if (pid == 0)
		run_workload(p);
	int status;
	for (;;) {
		long w = waitpid(-1, &status, 0);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			_exit(EXIT_SETUP);
	}
	_exit(exit_code(status));
}

/* ---- the VMM side: relays -------------------------------------------- */

/* The virtio-net stand-in: frames between the guest's TAP device and the
 * caller's stream socket, each preceded there by its length (32-bit
 * big-endian), as libkrun's unixstream backend (passt's framing) does. */
struct net_link {
	int tap, sock;
	size_t max_rx; /* the largest frame the guest's driver receives */
};

/* libkrun's MAX_BUFFER_SIZE (65562) less its 12-byte virtio_net_hdr: the
 * largest frame its unixstream backend carries. */
#define NET_MAX_FRAME 65550

/* The largest frame a Linux guest's virtio_net driver takes with these
 * features: with guest TSO (or UFO) it posts "big packets" buffers of
 * MAX_SKB_FRAGS+1 pages, more than libkrun carries; otherwise buffers of
 * GOOD_PACKET_LEN (1518), and libkrun drops a larger frame
 * (DescriptorChainTooSmall). */
static size_t net_max_rx(uint32_t features)
{
	const uint32_t guest_gso = 1u << 7 | 1u << 8 | 1u << 10; /* GUEST_TSO4, GUEST_TSO6, GUEST_UFO */
	return features & guest_gso ? NET_MAX_FRAME : 1518;
}

static bool full_io(int fd, char *buf, size_t n, bool rd)
{
	while (n > 0) {
		ssize_t r = rd ? read(fd, buf, n) : write(fd, buf, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		buf += r;
		n -= (size_t)r;
	}
	return true;
}

static void *net_to_sock(void *arg)
{
	struct net_link *l = arg;
	char buf[4 + 65536];
	for (;;) {
		ssize_t n = read(l->tap, buf + 4, sizeof(buf) - 4);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL;
		uint32_t len = htonl((uint32_t)n);
		memcpy(buf, &len, 4);
		if (!full_io(l->sock, buf, 4 + (size_t)n, false))
			return NULL;
	}
}

static void *net_to_tap(void *arg)
{
	struct net_link *l = arg;
	/* Read in large chunks and cut the frames out: one read for many
	 * frames, as a virtio queue carries many. */
	static char buf[1 << 20];
	size_t have = 0;
	for (;;) {
		ssize_t n = read(l->sock, buf + have, sizeof(buf) - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL;
		have += (size_t)n;
		size_t off = 0;
		while (have - off >= 4) {
			uint32_t len;
			memcpy(&len, buf + off, 4);
			len = ntohl(len);
			if (len > NET_MAX_FRAME)
				return NULL; /* libkrun's VMM would panic; the link ends */
			if (have - off - 4 < len)
				break;
			/* A frame the guest's buffers cannot hold, or the TAP
			 * refuses, is dropped. */
			if (len <= l->max_rx)
				(void)!write(l->tap, buf + off + 4, len);
			off += 4 + len;
		}
		memmove(buf, buf + off, have - off);
		have -= off;
	}
}

static void start_thread(void *(*fn)(void *), void *arg);

static void start_net(struct tk_ctx *c, int tap)
{
	struct net_link *l = calloc(1, sizeof(*l));
	l->tap = tap;
	l->sock = c->net_fd;
	l->max_rx = net_max_rx(c->net_features);
	start_thread(net_to_sock, l);
	start_thread(net_to_tap, l);
}

struct pair {
	int a, b;
	int guest; /* which of a and b is the guest's end */
};

/* Connections whose guest-to-host direction is not finished yet: the VMM
 * waits for them when the guest has exited, so what the guest wrote last
 * reaches the host. */
static pthread_mutex_t flush_mu = PTHREAD_MUTEX_INITIALIZER;
static int unflushed;

static void flushed(void)
{
	pthread_mutex_lock(&flush_mu);
	unflushed--;
	pthread_mutex_unlock(&flush_mu);
}

static void *relay(void *arg)
{
	struct pair pr = *(struct pair *)arg;
	free(arg);
	bool guest_open = true;
	struct pollfd pf[2] = {{pr.a, POLLIN, 0}, {pr.b, POLLIN, 0}};
	int open_dirs = 2;
	char buf[65536];
	while (open_dirs > 0) {
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (int i = 0; i < 2; i++) {
			if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			int from = pf[i].fd, to = i ? pr.a : pr.b;
			ssize_t n = read(from, buf, sizeof(buf));
			if (n <= 0) {
				/* As libkrun 1.19's vsock muxer: the host's end shutting
				 * down its writing half ends the whole connection; the
				 * guest's passes on as a half-close. */
				if (from != pr.guest)
					goto out;
				shutdown(to, SHUT_WR);
				pf[i].fd = -1;
				open_dirs--;
				if (from == pr.guest) {
					guest_open = false;
					flushed();
				}
				continue;
			}
			for (ssize_t off = 0; off < n;) {
				ssize_t w = send(to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
				if (w < 0) {
					if (errno == EINTR)
						continue;
					goto out;
				}
				off += w;
			}
		}
	}
out:
	if (guest_open)
		flushed();
	close(pr.a);
	close(pr.b);
	return NULL;
}

static void start_thread(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, fn, arg) != 0)
		abort();
	pthread_attr_destroy(&attr);
}

/* A stream socket and the address of path, or -1. */
static int unix_socket(const char *path, struct sockaddr_un *sa)
{
	*sa = (struct sockaddr_un){.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa->sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa->sun_path, path);
	return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

static int connect_unix(const char *path)
{
	struct sockaddr_un sa;
	int s = unix_socket(path, &sa);
	if (s < 0)
		return -1;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(s);
		return -1;
	}
	return s;
}

struct acceptor {
	int listen_fd;
	char target[128]; /* where each accepted connection is relayed to */
	bool from_guest;  /* listen_fd is the guest's side (listen=false ports) */
};

/* Accepts connections and relays each to target; a connection whose target
 * does not answer is closed, as a vsock connection would be reset. */
static void *accept_loop(void *arg)
{
	struct acceptor *ac = arg;
	for (;;) {
		int c = accept4(ac->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		pthread_mutex_lock(&flush_mu);
		unflushed++;
		pthread_mutex_unlock(&flush_mu);
		int t = connect_unix(ac->target);
		if (t < 0) {
			close(c);
			flushed();
			continue;
		}
		struct pair *pr = malloc(sizeof(*pr));
		*pr = (struct pair){c, t, ac->from_guest ? c : t};
		start_thread(relay, pr);
	}
}

static int listen_unix(const char *path)
{
	struct sockaddr_un sa;
	int s = unix_socket(path, &sa);
	if (s < 0)
		return -1;
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 128) < 0) {
		int e = errno;
		close(s);
		errno = e;
		return -1;
	}
	return s;
}

static int recv_fds(int sock, int *fds, size_t max)
{
	char data;
	struct iovec iov = {&data, 1};
	char cbuf[CMSG_SPACE(sizeof(int) * 256)];
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	ssize_t n;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -1;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	size_t got = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
	if (got > max)
		return -1;
	memcpy(fds, CMSG_DATA(cm), got * sizeof(int));
	return (int)got;
}

/* Waits, for at most FLUSH_MS, until the guest's pending connections
 * (listeners[0..n) are the guest-side listeners) have been accepted and
 * everything the guest wrote has been relayed to the host. */
#define FLUSH_MS 2000
static void flush_relays(const int *listeners, int n)
{
	for (int waited = 0; waited < FLUSH_MS; waited++) {
		bool pending = false;
		for (int i = 0; i < n; i++) {
			struct pollfd pf = {listeners[i], POLLIN, 0};
			pending |= poll(&pf, 1, 0) > 0;
		}
		pthread_mutex_lock(&flush_mu);
		pending |= unflushed > 0;
		pthread_mutex_unlock(&flush_mu);
		if (!pending)
			return;
		poll(NULL, 0, 1);
	}
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

/* Writes the id maps of a guest running in a user namespace of its own:
 * the caller's uid and gid become 0. */
static int map_ids(long pid)
{
	char path[64], map[64];
	snprintf(path, sizeof(path), "/proc/%ld/setgroups", pid);
	if (write_file(path, "deny") < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%ld/uid_map", pid);
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)geteuid());
	if (write_file(path, map) < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%ld/gid_map", pid);
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)getegid());
	return write_file(path, map);
}

static int32_t vm_error(const char *msg, const char *arg)
{
	fprintf(stderr, "testkrun: %s %s: %s\n", msg, arg ? arg : "", strerror(errno));
	return -EINVAL;
}

/* TESTKRUN_NO_BOOT simulates a guest that never boots, as libkrunfw's kernel
 * on a /dev/kvm that cannot run it (PVM): nothing on the console, no guest.
 * "hang": the VM runs until it is killed; "exit": it ends with code 1,
 * logging the error libkrun 1.19 logs on a PVM /dev/kvm. Returns when mode
 * is NULL or empty. */
static void no_boot(const char *mode)
{
	if (!mode || !*mode)
		return;
	if (strcmp(mode, "exit") == 0) {
		tk_log(1, "krun_vmm::linux::vstate", "Received KVM_EXIT_INTERNAL_ERROR signal");
		_exit(1);
	}
	for (;;)
		pause();
}

/* Attaches a loop device to the image path, as libkrun opens a disk's
 * image when the VM starts (following links, read-write unless read_only).
 * The device clears itself once the guest's mount and the VMM's
 * descriptor, kept until the VMM exits, are gone. Returns its path. */
static char *attach_loop(const struct tk_disk *d)
{
	if (d->format != 0) {
		errno = ENOTSUP;
		vm_error("disk (the double runs raw images only)", d->path);
		return NULL;
	}
	int img = open(d->path, (d->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (img < 0) {
		vm_error("disk", d->path);
		return NULL;
	}
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0) {
		vm_error("disk: the double makes each disk a loop device, which needs root; /dev/loop-control", NULL);
		close(img);
		return NULL;
	}
	char *dev = calloc(1, 32);
	for (int tries = 0; tries < 16; tries++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0)
			break;
		snprintf(dev, 32, "/dev/loop%d", n);
		int lo = open(dev, (d->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
		if (lo < 0)
			continue;
		struct loop_config cfg = {.fd = (uint32_t)img, .block_size = 0};
		cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | (d->read_only ? LO_FLAGS_READ_ONLY : 0);
		if (ioctl(lo, LOOP_CONFIGURE, &cfg) == 0) {
			/* lo stays open until the VMM exits. */
			close(img);
			close(ctl);
			return dev;
		}
		close(lo);
		if (errno != EBUSY)
			break;
	}
	vm_error("disk: attach a loop device to", d->path);
	close(img);
	close(ctl);
	free(dev);
	return NULL;
}

int32_t tk_run(struct tk_ctx *c)
{
	struct plan p = {.c = c, .console_fd = -1, .sync_fd = -1, .uidmap_fd = -1};
	const char *root_path = NULL;

	if (getenv("TESTKRUN_NO_KRUNFW")) {
		/* What libkrun prints when libkrunfw cannot be loaded. */
		fputs("Couldn't find or load libkrunfw.so.5\n", stderr);
		return -ENOENT;
	}
	for (size_t i = 0; i < c->nshares; i++) {
		if (strlen(c->shares[i].tag) > TK_MAX_TAG_LEN) {
			/* libkrun copies the tag into a 36-byte config field and
			 * panics; the panic aborts the process. */
			fprintf(stderr, "thread '<unnamed>' panicked: virtio-fs tag \"%s\" is longer than %d bytes\n"
					"fatal runtime error: failed to initiate panic, error 5, aborting\n",
				c->shares[i].tag, TK_MAX_TAG_LEN);
			abort();
		}
		if (strcmp(c->shares[i].tag, TK_ROOT_TAG) == 0) {
			root_path = c->shares[i].path;
			p.root_ro = c->shares[i].read_only;
		}
	}
	if (!root_path) {
		fputs("testkrun: no root filesystem (krun_set_root)\n", stderr);
		return -EINVAL;
	}
	if (!c->exec_path) {
		/* libkrun's init would run /bin/sh. */
		c->exec_path = strdup("/bin/sh");
		c->argv = calloc(1, sizeof(char *));
	}
	if (!realpath(root_path, p.root))
		return vm_error("root", root_path);
	/* libkrun's virtio-fs opens a share's directory in the VMM with
	 * O_PATH | O_NOFOLLOW and serves that descriptor: a path whose last
	 * component is a symlink (a /proc/self/fd magic link included) opens
	 * the link, which it cannot serve as a directory. */
	p.share_dirs = calloc(c->nshares + 1, sizeof(char *));
	for (size_t i = 0; i < c->nshares; i++) {
		const struct tk_share *s = &c->shares[i];
		if (strcmp(s->tag, TK_ROOT_TAG) == 0 || !s->path)
			continue;
		struct stat st;
		char link[64];
		int fd = open(s->path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0)
			return vm_error("virtio-fs share", s->path);
		if (!S_ISDIR(st.st_mode)) {
			errno = ENOTDIR;
			return vm_error("virtio-fs share", s->path);
		}
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		p.share_dirs[i] = calloc(1, PATH_MAX);
		if (readlink(link, p.share_dirs[i], PATH_MAX - 1) < 0)
			return vm_error("virtio-fs share", s->path);
		close(fd);
	}
	p.disk_devs = calloc(c->ndisks + 1, sizeof(char *));
	for (size_t i = 0; i < c->ndisks; i++)
		if (!(p.disk_devs[i] = attach_loop(&c->disks[i])))
			return -EINVAL;
	p.new_user = geteuid() != 0;
	p.new_net = !tk_tsi_enabled(c);

	if (c->console) {
		/* As libkrun's File::create: a path of a pipe (/proc/self/fd/N)
		 * opens the pipe, where O_TRUNC does nothing. */
		p.console_fd = open(c->console, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
		if (p.console_fd < 0)
			return vm_error("console output", c->console);
	}
	size_t argc = tk_strv_len(c->argv);
	p.argv = calloc(argc + 2, sizeof(char *));
	p.argv[0] = c->exec_path;
	memcpy(p.argv + 1, c->argv, argc * sizeof(char *));
	p.envp = build_env(c);
	build_rlimits(&p);
	p.hostname = "localhost";
	for (size_t i = 0; p.envp[i]; i++)
		if (strncmp(p.envp[i], "HOSTNAME=", 9) == 0)
			p.hostname = p.envp[i] + 9;

	/* Host-side listeners (listen=true ports) exist when the VM starts. */
	struct acceptor *acc = calloc(c->nvports + 1, sizeof(*acc));
	size_t nacc = 0;
	for (size_t i = 0; i < c->nvports; i++) {
		if (!c->vports[i].listen)
			continue;
		acc[nacc].listen_fd = listen_unix(c->vports[i].path);
		if (acc[nacc].listen_fd < 0)
			return vm_error("listen on", c->vports[i].path);
		nacc++;
	}
	if (c->net_path) { /* libkrun connects to a path when the VM starts */
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", c->net_path);
		c->net_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->net_fd < 0 || connect(c->net_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			return vm_error("connect the net socket", c->net_path);
	}
	no_boot(getenv("TESTKRUN_NO_BOOT"));
	/* TESTKRUN_NO_FSNOTIFY stands for a stock libkrunfw, whose kernel has
	 * no fsnotify injection. */
	p.fsnotify = !getenv("TESTKRUN_NO_FSNOTIFY");

	int sp[2], um[2] = {-1, -1};
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return vm_error("socketpair", NULL);
	if (p.new_user && pipe2(um, O_CLOEXEC) < 0)
		return vm_error("pipe", NULL);
	p.sync_fd = sp[1];
	p.uidmap_fd = um[0];

	unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC;
	if (p.new_net)
		flags |= CLONE_NEWNET;
	if (p.new_user)
		flags |= CLONE_NEWUSER;
	fflush(NULL);
	long pid = raw_fork(flags);
	if (pid < 0)
		return vm_error("create the guest namespaces", NULL);
	if (pid == 0)
		guest_init(&p); /* never returns */
	close(sp[1]);
	if (p.new_user) {
		close(um[0]);
		if (map_ids(pid) < 0 || write(um[1], "x", 1) != 1)
			vm_error("map user ids of the guest", NULL);
		close(um[1]);
	}

	/* Guest-side listeners, the guest's vsock directory, and its eth0. */
	int fds[256];
	int n = recv_fds(sp[0], fds, 256);
	close(sp[0]);
	if (n > 0 && c->has_net)
		start_net(c, fds[--n]);
	if (n > 0) {
		char vsock_dir[64];
		snprintf(vsock_dir, sizeof(vsock_dir), "/proc/self/fd/%d", fds[n - 1]);
		size_t k = 0, j = 0;
		for (size_t i = 0; i < c->nvports; i++) {
			struct acceptor *a;
			if (c->vports[i].listen) {
				a = &acc[k++];
				snprintf(a->target, sizeof(a->target), "%s/%u.sock", vsock_dir, c->vports[i].port);
			} else {
				a = calloc(1, sizeof(*a));
				a->listen_fd = fds[j++];
				a->from_guest = true;
				if (strlen(c->vports[i].path) >= sizeof(a->target)) {
					errno = ENAMETOOLONG;
					vm_error("vsock port path", c->vports[i].path);
				}
				snprintf(a->target, sizeof(a->target), "%s", c->vports[i].path);
			}
			start_thread(accept_loop, a);
		}
	}

	int status;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = 1 << 8;
			break;
		}
	}
	if (n > 0)
		flush_relays(fds, n - 1);
	/* Like libkrun: the process ends with the guest's code, without
	 * atexit handlers or flushing stdio. */
	_exit(exit_code(status));
}
