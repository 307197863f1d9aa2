//go:build cgo && (linux || darwin)

package vmm

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// Keep in step with runner.go, start.go and spec.go.
#define KB_ROLE_ENV "_KRUNBOX_VMM_ROLE"
#define KB_ROLE_VM "vm"
#define KB_NO_NAMESPACES_ENV "_KRUNBOX_VMM_NO_NAMESPACES"
#define KB_CONSOLE_ENV "_KRUNBOX_VMM_CONSOLE"
#define KB_LOG_MAX_ENV "_KRUNBOX_VMM_LOG_MAX"
#define KB_FD_READY 4
#define KB_FD_CONSOLE 5
#define KB_EXIT_RUNNER_FAILED 125
#define KB_LOG_MAX_DEFAULT (4LL << 20)
#define KB_LOG_MAX_MIN (64LL << 10)
#define KB_RUNNER_LOG "runner.log"
// How long the monitor still copies the logs once the runner has exited
// and something else holds their pipes (the test double's guest
// processes, dying with it).
#define KB_DRAIN_MS 2000

// A log the runner writes into a pipe and the monitor copies into a file,
// kept under max bytes as package logfile does: a file that would pass it
// becomes path.1 (replacing the one before) and a new file starts.
struct kb_log {
	char path[4096];
	int in;	   // the pipe's read end; -1 once it ended
	int fd;	   // the file
	int stdio; // the file is also the monitor's stdout and stderr
	long long size, max;
	int failed; // a write failed: the data is dropped
};

static struct kb_log *kb_runner_log; // where kb_say writes, once copying

static void kb_log_write(struct kb_log *l, const char *buf, size_t n);

static void kb_say(const char *fmt, const char *a, int err)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "krunbox runner: ");
	n += snprintf(buf + n, sizeof(buf) - n, fmt, a, strerror(err));
	size_t len = n < (int)sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
	if (kb_runner_log)
		kb_log_write(kb_runner_log, buf, len);
	else
		(void)!write(2, buf, len);
}

static int kb_log_open(struct kb_log *l)
{
	int fd = open(l->path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (l->stdio) {
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		fd = 2;
	}
	l->fd = fd;
	l->size = 0;
	return 0;
}

// Makes the file the previous one and starts a new one. When that cannot
// be done, the file starts again empty: the bound holds whatever happens.
static void kb_log_rotate(struct kb_log *l)
{
	char prev[sizeof(l->path) + 2];
	snprintf(prev, sizeof(prev), "%s.1", l->path);
	if (rename(l->path, prev) == 0) {
		if (!l->stdio)
			close(l->fd);
		if (kb_log_open(l) == 0)
			return;
		l->failed = 1;
	}
	if (ftruncate(l->fd, 0) == 0 && lseek(l->fd, 0, SEEK_SET) == 0)
		l->size = 0;
	else
		l->failed = 1;
}

static void kb_log_write(struct kb_log *l, const char *buf, size_t n)
{
	while (n > 0 && !l->failed) {
		if (l->size >= l->max)
			kb_log_rotate(l);
		if (l->failed)
			return;
		size_t k = n;
		if ((long long)k > l->max - l->size)
			k = (size_t)(l->max - l->size);
		ssize_t w = write(l->fd, buf, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			l->failed = 1;
			return;
		}
		l->size += w;
		buf += w;
		n -= (size_t)w;
	}
}

static long long kb_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Copies the logs' pipes into their files until every pipe has ended, or
// KB_DRAIN_MS after the runner exited, and waits for the runner. It never
// stops reading while the runner lives, so the VM's console and stderr
// never stay blocked on a full pipe: they wait at most for a write to the
// file, and what cannot be written (a full disk) is dropped.
static int kb_pump(pid_t pid, struct kb_log *logs, int nlogs)
{
	static char buf[64 << 10];
	int status = 0, exited = 0;
	long long deadline = 0;
	for (;;) {
		struct pollfd pfd[2];
		struct kb_log *of[2];
		int n = 0;
		for (int i = 0; i < nlogs && n < 2; i++)
			if (logs[i].in >= 0) {
				pfd[n] = (struct pollfd){.fd = logs[i].in, .events = POLLIN};
				of[n++] = &logs[i];
			}
		if (n == 0)
			break;
		if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
			exited = 1;
			deadline = kb_now_ms() + KB_DRAIN_MS;
		}
		int timeout = 1000;
		if (exited) {
			long long left = deadline - kb_now_ms();
			if (left <= 0)
				break;
			timeout = left < timeout ? (int)left : timeout;
		}
		int r = poll(pfd, n, timeout);
		if (r < 0 && errno != EINTR)
			break;
		for (int i = 0; r > 0 && i < n; i++) {
			if (!pfd[i].revents)
				continue;
			ssize_t got = read(pfd[i].fd, buf, sizeof(buf));
			if (got > 0) {
				kb_log_write(of[i], buf, (size_t)got);
			} else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
				close(of[i]->in);
				of[i]->in = -1;
			}
		}
	}
	while (!exited && waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = KB_EXIT_RUNNER_FAILED << 8;
			break;
		}
	}
	return status;
}

static long long kb_log_max(void)
{
	const char *s = getenv(KB_LOG_MAX_ENV);
	long long max = s ? atoll(s) : 0;
	return max >= KB_LOG_MAX_MIN ? max : KB_LOG_MAX_DEFAULT;
}

#ifdef __linux__
static int kb_write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

// Gives the runner a mount namespace of its own and, unless it is root, a
// user namespace mapping the caller's uid and gid to 0.
static int kb_enter_namespaces(void)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	if (unshare(CLONE_NEWNS | (uid != 0 ? CLONE_NEWUSER : 0)) < 0) {
		kb_say("%s: unshare: %s\n", uid != 0 ? "enter a user and mount namespace" : "enter a mount namespace", errno);
		return -1;
	}
	if (uid == 0)
		return 0;
	char map[64];
	if (kb_write_file("/proc/self/setgroups", "deny") < 0)
		goto fail;
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
	if (kb_write_file("/proc/self/uid_map", map) < 0)
		goto fail;
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
	if (kb_write_file("/proc/self/gid_map", map) < 0)
		goto fail;
	return 0;
fail:
	kb_say("%s: %s\n", "map the caller to root in the user namespace", errno);
	return -1;
}
#endif

// Records how the runner ended in <dir>/exit.json, as ExitStatus, and
// returns its exit code (128+N for signal N).
static int kb_record(const char *dir, int status)
{
	char sig[32] = "", ts[64], body[256], path[4096], tmp[4096];
	int code = 1;
	if (WIFEXITED(status)) {
		code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		code = 128 + WTERMSIG(status);
#ifdef __linux__
		const char *abbrev = sigabbrev_np(WTERMSIG(status));
		if (abbrev)
			snprintf(sig, sizeof(sig), "SIG%s", abbrev);
		else
#endif
			snprintf(sig, sizeof(sig), "SIG%d", WTERMSIG(status));
	}
	struct timespec now;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	int n = snprintf(body, sizeof(body), "{\"code\":%d%s%s%s,\"time\":\"%s.%09ldZ\"}\n", code, *sig ? ",\"signal\":\"" : "",
			 sig, *sig ? "\"" : "", ts, (long)now.tv_nsec);
	snprintf(path, sizeof(path), "%s/exit.json", dir);
	snprintf(tmp, sizeof(tmp), "%s/.exit.json.%d", dir, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, body, n) != n || close(fd) < 0 || rename(tmp, path) < 0)
		kb_say("record the exit status in %s: %s\n", path, errno);
	return code;
}

// Runs before the Go runtime, in a process Start spawned as a VM runner:
// the process forks, the child goes on to become the runner (the Go code,
// in its own namespaces on Linux), and this parent stays behind in C as
// the monitor: it waits for the runner, records its exit status and exits
// with the same code.
// Forking here, single-threaded and before any Go code, costs a fork
// instead of starting a second Go program.
__attribute__((constructor)) static void kb_monitor(int argc, char **argv, char **envp)
{
	(void)argv;
	(void)envp;
	const char *role = getenv(KB_ROLE_ENV);
	if (!role || strcmp(role, KB_ROLE_VM) != 0 || argc != 2)
		return;
	const char *dir = argv[1];
	const char *console = getenv(KB_CONSOLE_ENV);
	if (console && !*console)
		console = NULL;
	// The runner's stdout and stderr, and the console libkrun writes
	// (through /proc/self/fd/KB_FD_CONSOLE), are pipes the monitor copies
	// into bounded files: the guest decides how much goes there.
	int lp[2], cp[2] = {-1, -1};
	if (pipe(lp) < 0 || (console && pipe(cp) < 0)) {
		kb_say("%s: %s\n", "make the log pipes", errno);
		_exit(KB_EXIT_RUNNER_FAILED);
	}
	pid_t pid = fork();
	if (pid < 0) {
		kb_say("%s: %s\n", "fork the monitor", errno);
		_exit(KB_EXIT_RUNNER_FAILED);
	}
	if (pid == 0) {
		close(lp[0]);
		if (dup2(lp[1], 1) < 0 || dup2(lp[1], 2) < 0)
			_exit(KB_EXIT_RUNNER_FAILED);
		close(lp[1]);
		if (console) {
			close(cp[0]);
			if (cp[1] != KB_FD_CONSOLE) {
				if (dup2(cp[1], KB_FD_CONSOLE) < 0)
					_exit(KB_EXIT_RUNNER_FAILED);
				close(cp[1]);
			}
			fcntl(KB_FD_CONSOLE, F_SETFD, FD_CLOEXEC);
		}
#ifdef __linux__
		if (!getenv(KB_NO_NAMESPACES_ENV) && kb_enter_namespaces() < 0)
			_exit(KB_EXIT_RUNNER_FAILED);
#endif
		return; // on to the Go runtime and runnerMain
	}
	close(KB_FD_READY); // only the runner may say it is ready
	close(lp[1]);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	long long max = kb_log_max();
	struct kb_log logs[2] = {{.in = lp[0], .fd = 2, .stdio = 1, .max = max}};
	int nlogs = 1;
	snprintf(logs[0].path, sizeof(logs[0].path), "%s/%s", dir, KB_RUNNER_LOG);
	struct stat st;
	if (fstat(2, &st) == 0)
		logs[0].size = st.st_size;
	kb_runner_log = &logs[0];
	if (console) {
		close(cp[1]);
		struct kb_log *c = &logs[nlogs++];
		*c = (struct kb_log){.in = cp[0], .max = max};
		snprintf(c->path, sizeof(c->path), "%s", console);
		if (kb_log_open(c) < 0) {
			c->failed = 1;
			kb_say("open the console log %s: %s\n", console, errno);
		}
	}
	int status = kb_pump(pid, logs, nlogs);
	_exit(kb_record(dir, status)); // the VM's exit code
}
*/
import "C"

// haveMonitor is true where the C monitor above exists.
const haveMonitor = true
