//go:build cgo && (linux || darwin)

package vmm

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// Keep in step with runner.go.
#define KB_ROLE_ENV "_KRUNBOX_VMM_ROLE"
#define KB_ROLE_VM "vm"
#define KB_NO_NAMESPACES_ENV "_KRUNBOX_VMM_NO_NAMESPACES"
#define KB_FD_READY 4
#define KB_EXIT_RUNNER_FAILED 125

static void kb_say(const char *fmt, const char *a, int err)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "krunbox runner: ");
	n += snprintf(buf + n, sizeof(buf) - n, fmt, a, strerror(err));
	(void)!write(2, buf, n < (int)sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
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
	pid_t pid = fork();
	if (pid < 0) {
		kb_say("%s: %s\n", "fork the monitor", errno);
		_exit(KB_EXIT_RUNNER_FAILED);
	}
	if (pid == 0) {
#ifdef __linux__
		if (!getenv(KB_NO_NAMESPACES_ENV) && kb_enter_namespaces() < 0)
			_exit(KB_EXIT_RUNNER_FAILED);
#endif
		return; // on to the Go runtime and runnerMain
	}
	close(KB_FD_READY); // only the runner may say it is ready
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	int status;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = KB_EXIT_RUNNER_FAILED << 8;
			break;
		}
	}
	_exit(kb_record(dir, status)); // the VM's exit code
}
*/
import "C"

// haveMonitor is true where the C monitor above exists.
const haveMonitor = true
