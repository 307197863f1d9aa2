/*
 * testkrun: the configuration half of the libkrun C API, with libkrun
 * 1.19's signatures, return values and argument checks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testkrun.h"

extern char **environ;

static pthread_mutex_t map_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tk_ctx *ctx_map;
static uint32_t next_id;
static int logger_initialised; /* guarded by map_mu */
static int log_level = -1;
static int log_fd = 2; /* where krun_init_log sends the log */

/* The marker krunbox looks for: this library is the test double, which
 * needs no /dev/kvm. Real libkrun has no such symbol. Compiled with
 * -DTESTKRUN_UNMARKED the double lacks it too and passes for libkrun, for
 * tests of what krunbox does only with a real libkrun (libkrunfw checks). */
#ifndef TESTKRUN_UNMARKED
KRUN_EXPORT const char *krunbox_testkrun(void) { return "testkrun 1.19"; }
#endif

/* ---- helpers ---------------------------------------------------------- */

static bool valid_utf8(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		int n;
		uint32_t cp;
		if (*p < 0x80) {
			p++;
			continue;
		} else if ((*p & 0xe0) == 0xc0) {
			n = 1;
			cp = *p & 0x1f;
		} else if ((*p & 0xf0) == 0xe0) {
			n = 2;
			cp = *p & 0x0f;
		} else if ((*p & 0xf8) == 0xf0) {
			n = 3;
			cp = *p & 0x07;
		} else {
			return false;
		}
		p++;
		for (int i = 0; i < n; i++, p++) {
			if ((*p & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (*p & 0x3f);
		}
		if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
	}
	return true;
}

size_t tk_strv_len(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	return n;
}

static void strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* Copies a NULL-terminated array the way libkrun reads it: at most
 * TK_MAX_ARGS entries, each valid UTF-8. Returns -EINVAL otherwise. */
static int strv_copy(const char *const *in, char ***out)
{
	size_t n = 0;
	while (n < TK_MAX_ARGS && in[n])
		n++;
	char **v = calloc(n + 1, sizeof(char *));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (!valid_utf8(in[i])) {
			strv_free(v);
			return -EINVAL;
		}
		v[i] = strdup(in[i]);
	}
	*out = v;
	return 0;
}

/* Like libkrun, a string argument that is not a C string crashes: it is
 * dereferenced without a NULL check. */
static int str_copy(const char *in, char **out)
{
	if (!valid_utf8(in))
		return -EINVAL;
	*out = strdup(in);
	return 0;
}

static struct tk_ctx *find(uint32_t id)
{
	for (struct tk_ctx *c = ctx_map; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

struct tk_ctx *tk_take_ctx(uint32_t id)
{
	pthread_mutex_lock(&map_mu);
	struct tk_ctx **pp = &ctx_map;
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	struct tk_ctx *c = *pp;
	if (c)
		*pp = c->next;
	pthread_mutex_unlock(&map_mu);
	return c;
}

void tk_free_ctx(struct tk_ctx *c)
{
	free(c->net_path);
	free(c->exec_path);
	strv_free(c->argv);
	strv_free(c->envp);
	free(c->workdir);
	strv_free(c->rlimits);
	free(c->console);
	for (size_t i = 0; i < c->nshares; i++) {
		free(c->shares[i].tag);
		free(c->shares[i].path);
	}
	free(c->shares);
	for (size_t i = 0; i < c->nvports; i++)
		free(c->vports[i].path);
	free(c->vports);
	for (size_t i = 0; i < c->noverlays; i++) {
		free(c->overlays[i].tag);
		free(c->overlays[i].path);
	}
	free(c->overlays);
	for (size_t i = 0; i < c->ndisks; i++) {
		free(c->disks[i].id);
		free(c->disks[i].path);
	}
	free(c->disks);
	strv_free(c->port_map);
	free(c);
}

bool tk_tsi_enabled(const struct tk_ctx *c)
{
	if (c->has_net) /* a net device turns implicit TSI off */
		return c->vsock == TK_VSOCK_EXPLICIT && c->tsi_features != 0;
	return c->vsock == TK_VSOCK_IMPLICIT || (c->vsock == TK_VSOCK_EXPLICIT && c->tsi_features != 0);
}

/* Runs body with the context locked, or returns -ENOENT. */
#define WITH_CTX(id, c, ...)                         \
	do {                                         \
		int32_t ret_ = 0;                    \
		pthread_mutex_lock(&map_mu);         \
		struct tk_ctx *c = find(id);         \
		if (!c)                              \
			ret_ = -ENOENT;              \
		else {                               \
			__VA_ARGS__                  \
		}                                    \
		pthread_mutex_unlock(&map_mu);       \
		return ret_;                         \
	} while (0)

/* ---- debug dump -------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
	if (!s) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static void json_strv(FILE *f, char *const *v)
{
	if (!v) {
		fputs("null", f);
		return;
	}
	fputc('[', f);
	for (size_t i = 0; v[i]; i++) {
		if (i)
			fputc(',', f);
		json_str(f, v[i]);
	}
	fputc(']', f);
}

/* When TESTKRUN_DUMP names a file, writes the context's configuration
 * there as one JSON object (replacing the file), for tests to check what
 * the library received. event is "free" or "start". */
void tk_dump(const struct tk_ctx *c, const char *event)
{
	const char *path = getenv("TESTKRUN_DUMP");
	if (!path || !*path)
		return;
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	FILE *f = fopen(tmp, "we");
	if (!f)
		return;
	fprintf(f, "{\"event\":\"%s\",\"ctx\":%" PRIu32 ",\"log_level\":%d,\"vcpus\":%u,\"ram_mib\":%" PRIu32 ",\n", event, c->id, log_level,
		c->vcpus, c->ram_mib);
	fputs("\"exec_path\":", f);
	json_str(f, c->exec_path);
	fputs(",\"argv\":", f);
	json_strv(f, c->argv);
	fputs(",\"envp\":", f);
	json_strv(f, c->env_from_host ? NULL : c->envp);
	fprintf(f, ",\"env_from_host\":%s,\"workdir\":", c->env_from_host ? "true" : "false");
	json_str(f, c->workdir);
	fputs(",\"rlimits\":", f);
	json_strv(f, c->rlimits);
	fputs(",\"console\":", f);
	json_str(f, c->console);
	fputs(",\"port_map\":", f);
	json_strv(f, c->port_map);
	static const char *vsock_names[] = {"implicit", "disabled", "explicit"};
	fprintf(f, ",\"vsock\":\"%s\",\"tsi_features\":%" PRIu32 ",\"net\":%s,\"net_features\":%" PRIu32 ",\n\"shares\":[",
		vsock_names[c->vsock], c->tsi_features, c->has_net ? "true" : "false", c->net_features);
	for (size_t i = 0; i < c->nshares; i++) {
		fputs(i ? ",{\"tag\":" : "{\"tag\":", f);
		json_str(f, c->shares[i].tag);
		fputs(",\"path\":", f);
		json_str(f, c->shares[i].path);
		fprintf(f, ",\"read_only\":%s", c->shares[i].read_only ? "true" : "false");
		if (c->shares[i].cache_set)
			fprintf(f, ",\"cache\":{\"entry_timeout_ms\":%" PRIu32 ",\"attr_timeout_ms\":%" PRIu32 ",\"policy\":%" PRIu32 "}",
				c->shares[i].entry_timeout_ms, c->shares[i].attr_timeout_ms, c->shares[i].cache_policy);
		fputc('}', f);
	}
	fputs("],\"vsock_ports\":[", f);
	for (size_t i = 0; i < c->nvports; i++) {
		fprintf(f, "%s{\"port\":%" PRIu32 ",\"path\":", i ? "," : "", c->vports[i].port);
		json_str(f, c->vports[i].path);
		fprintf(f, ",\"listen\":%s}", c->vports[i].listen ? "true" : "false");
	}
	fputs("],\"overlays\":[", f);
	for (size_t i = 0; i < c->noverlays; i++) {
		const struct tk_overlay *o = &c->overlays[i];
		fputs(i ? ",{\"tag\":" : "{\"tag\":", f);
		json_str(f, o->tag);
		fputs(",\"path\":", f);
		json_str(f, o->path);
		fprintf(f, ",\"dir\":%s,\"mode\":%" PRIu32 ",\"len\":%zu,\"one_shot\":%s}", o->dir ? "true" : "false", o->mode, o->len,
			o->one_shot ? "true" : "false");
	}
	fputs("],\"disks\":[", f);
	for (size_t i = 0; i < c->ndisks; i++) {
		const struct tk_disk *d = &c->disks[i];
		fputs(i ? ",{\"id\":" : "{\"id\":", f);
		json_str(f, d->id);
		fputs(",\"path\":", f);
		json_str(f, d->path);
		fprintf(f, ",\"format\":%" PRIu32 ",\"read_only\":%s}", d->format, d->read_only ? "true" : "false");
	}
	fputs("]}\n", f);
	fclose(f);
	rename(tmp, path);
}

/* ---- logging ----------------------------------------------------------- */

/* libkrun installs env_logger, which panics on a second initialisation; the
 * panic cannot unwind through the C ABI, so the process aborts. The double
 * does the same, so that callers are tested against it. */
static void logger_init(int level)
{
	pthread_mutex_lock(&map_mu);
	int again = logger_initialised++;
	log_level = level;
	pthread_mutex_unlock(&map_mu);
	if (again) {
		fputs("thread '<unnamed>' panicked: Builder::init should not be called after logger initialized: "
		      "SetLoggerError(())\nfatal runtime error: failed to initiate panic, error 5, aborting\n",
		      stderr);
		abort();
	}
}

KRUN_EXPORT int32_t krun_set_log_level(uint32_t level)
{
	logger_init((int)level);
	return 0;
}

KRUN_EXPORT int32_t krun_init_log(int target_fd, uint32_t level, uint32_t style, uint32_t options)
{
	if (target_fd < -1 || target_fd == 0 || style > 2 || options > 1)
		return -EINVAL;
	logger_init((int)level);
	if (target_fd > 0)
		log_fd = target_fd;
	return 0;
}

/* Writes one line to the log, in env_logger's format without colours, when
 * the logger was initialised at level or above (1 error ... 5 trace). */
void tk_log(int level, const char *module, const char *msg)
{
	static const char *const names[] = {"OFF", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
	pthread_mutex_lock(&map_mu);
	int on = log_level >= level, fd = log_fd;
	pthread_mutex_unlock(&map_mu);
	if (!on || level < 1 || level > 5)
		return;
	char ts[32];
	struct timespec now;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &now);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", gmtime_r(&now.tv_sec, &tm));
	dprintf(fd, "[%s.%06ldZ %s %s] %s\n", ts, now.tv_nsec / 1000, names[level], module, msg);
}

/* Built like a default `make` of libkrun: no optional feature. */
KRUN_EXPORT int krun_has_feature(uint64_t feature)
{
	if (feature > 11)
		return -EINVAL;
	/* NET (0): the double has krun_add_net_unixstream, unless
	 * TESTKRUN_NO_NET stands for a default libkrun build. */
	if (feature == 0) {
		const char *no = getenv("TESTKRUN_NO_NET");
		return no && *no ? 0 : 1;
	}
#ifndef TESTKRUN_NO_BLK
	if (feature == 1) /* BLK: krun_add_disk* */
		return 1;
#endif
	return 0;
}

/* ---- contexts ---------------------------------------------------------- */

KRUN_EXPORT int32_t krun_create_ctx(void)
{
	struct tk_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->vcpus = 1;
	c->ram_mib = 128;
	pthread_mutex_lock(&map_mu);
	c->id = next_id++;
	c->next = ctx_map;
	ctx_map = c;
	pthread_mutex_unlock(&map_mu);
	return (int32_t)c->id;
}

KRUN_EXPORT int32_t krun_free_ctx(uint32_t ctx_id)
{
	struct tk_ctx *c = tk_take_ctx(ctx_id);
	if (!c)
		return -ENOENT;
	tk_dump(c, "free");
	tk_free_ctx(c);
	return 0;
}

KRUN_EXPORT int32_t krun_set_vm_config(uint32_t ctx_id, uint8_t num_vcpus, uint32_t ram_mib)
{
	if (num_vcpus == 0 || ram_mib == 0)
		return -EINVAL;
	WITH_CTX(ctx_id, c, {
		c->vcpus = num_vcpus;
		c->ram_mib = ram_mib;
	});
}

static int32_t add_fs(uint32_t ctx_id, const char *tag, const char *path, bool read_only)
{
	char *t, *p = NULL;
	if (str_copy(tag, &t) < 0)
		return -EINVAL;
	if (path && str_copy(path, &p) < 0) {
		free(t);
		return -EINVAL;
	}
	WITH_CTX(ctx_id, c, {
		struct tk_share *s = realloc(c->shares, (c->nshares + 1) * sizeof(*s));
		if (!s) {
			ret_ = -ENOMEM;
		} else {
			c->shares = s;
			s[c->nshares++] = (struct tk_share){.tag = t, .path = p, .read_only = read_only};
			t = p = NULL;
		}
		free(t);
		free(p);
	});
}

KRUN_EXPORT int32_t krun_set_root(uint32_t ctx_id, const char *root_path)
{
	return add_fs(ctx_id, TK_ROOT_TAG, root_path, false);
}

KRUN_EXPORT int32_t krun_add_virtiofs(uint32_t ctx_id, const char *tag, const char *path)
{
	return add_fs(ctx_id, tag, path, false);
}

KRUN_EXPORT int32_t krun_add_virtiofs2(uint32_t ctx_id, const char *tag, const char *path, uint64_t shm_size)
{
	(void)shm_size;
	return add_fs(ctx_id, tag, path, false);
}

#ifndef TESTKRUN_LEGACY
/* libkrun 1.18 */
KRUN_EXPORT int32_t krun_add_virtiofs3(uint32_t ctx_id, const char *tag, const char *path, uint64_t shm_size, bool read_only)
{
	(void)shm_size;
	if (!tag)
		return -EINVAL;
	return add_fs(ctx_id, tag, path, read_only);
}

/* libkrun 1.19 */
static int32_t add_overlay(uint32_t ctx_id, const char *fs_tag, const char *path, struct tk_overlay o)
{
	if (!fs_tag || !path || !valid_utf8(fs_tag) || !valid_utf8(path))
		return -EINVAL;
	if (*path == '/')
		path++;
	const char *leaf = strrchr(path, '/');
	leaf = leaf ? leaf + 1 : path;
	if (!*leaf)
		return -EINVAL;
	WITH_CTX(ctx_id, c, {
		bool have_fs = false;
		for (size_t i = 0; i < c->nshares; i++)
			have_fs |= strcmp(c->shares[i].tag, fs_tag) == 0;
		if (!have_fs) {
			ret_ = -ENOENT;
		} else {
			/* Every parent component must be an overlay directory. */
			for (const char *sl = strchr(path, '/'); sl && !ret_; sl = strchr(sl + 1, '/')) {
				size_t n = (size_t)(sl - path);
				const struct tk_overlay *parent = NULL;
				for (size_t i = 0; i < c->noverlays; i++) {
					const struct tk_overlay *e = &c->overlays[i];
					if (strcmp(e->tag, fs_tag) == 0 && strlen(e->path) == n && strncmp(e->path, path, n) == 0)
						parent = e;
				}
				if (!parent)
					ret_ = -ENOENT;
				else if (!parent->dir)
					ret_ = -ENOTDIR;
			}
			struct tk_overlay *v = ret_ ? NULL : realloc(c->overlays, (c->noverlays + 1) * sizeof(*v));
			if (!ret_ && !v)
				ret_ = -ENOMEM;
			if (v) {
				c->overlays = v;
				o.tag = strdup(fs_tag);
				o.path = strdup(path);
				v[c->noverlays++] = o;
			}
		}
	});
}

KRUN_EXPORT int32_t krun_fs_add_overlay_file(uint32_t ctx_id, const char *fs_tag, const char *path, const uint8_t *data, size_t data_len,
					     uint32_t mode, bool one_shot)
{
	if (data_len > 0 && !data)
		return -EINVAL;
	return add_overlay(ctx_id, fs_tag, path, (struct tk_overlay){.data = data, .len = data_len, .mode = mode, .one_shot = one_shot});
}

KRUN_EXPORT int32_t krun_fs_add_overlay_dir(uint32_t ctx_id, const char *fs_tag, const char *path, uint32_t mode)
{
	return add_overlay(ctx_id, fs_tag, path, (struct tk_overlay){.mode = mode, .dir = true});
}
#endif

#if !defined(TESTKRUN_LEGACY) && !defined(TESTKRUN_STOCK)
/* krunbox's libkrun (hack/libkrun), in no upstream release yet: how the guest
 * may cache a share. TESTKRUN_STOCK builds the double without it, standing
 * for an upstream libkrun 1.19. The same checks as the patch's: a NULL or
 * non-UTF-8 tag or a policy above KRUN_FS_CACHE_ALWAYS (2) -EINVAL, an
 * unknown context or tag -ENOENT; the last call for a tag wins. */
KRUN_EXPORT int32_t krun_set_virtiofs_cache(uint32_t ctx_id, const char *tag, uint32_t entry_timeout_ms, uint32_t attr_timeout_ms,
					    uint32_t cache_policy)
{
	if (!tag || !valid_utf8(tag) || cache_policy > 2)
		return -EINVAL;
	WITH_CTX(ctx_id, c, {
		struct tk_share *s = NULL;
		for (size_t i = 0; i < c->nshares && !s; i++) /* the first, as libkrun */
			if (strcmp(c->shares[i].tag, tag) == 0)
				s = &c->shares[i];
		if (!s) {
			ret_ = -ENOENT;
		} else {
			s->cache_set = true;
			s->entry_timeout_ms = entry_timeout_ms;
			s->attr_timeout_ms = attr_timeout_ms;
			s->cache_policy = cache_policy;
		}
	});
}
#endif

static char **host_env(void)
{
	char **v;
	if (strv_copy((const char *const *)environ, &v) < 0)
		return NULL;
	return v;
}

KRUN_EXPORT int32_t krun_set_exec(uint32_t ctx_id, const char *exec_path, const char *const argv[], const char *const envp[])
{
	char *path, **a = NULL, **e = NULL;
	if (str_copy(exec_path, &path) < 0)
		return -EINVAL;
	if ((argv && strv_copy(argv, &a) < 0) || (envp && strv_copy(envp, &e) < 0)) {
		free(path);
		strv_free(a);
		return -EINVAL;
	}
	if (!a)
		a = calloc(1, sizeof(char *));
	if (!envp)
		e = host_env();
	WITH_CTX(ctx_id, c, {
		free(c->exec_path);
		strv_free(c->argv);
		strv_free(c->envp);
		c->exec_path = path;
		c->argv = a;
		c->envp = e;
		c->env_from_host = envp == NULL;
		path = NULL;
		a = e = NULL;
	});
}

KRUN_EXPORT int32_t krun_set_env(uint32_t ctx_id, const char *const envp[])
{
	char **e;
	if (envp) {
		if (strv_copy(envp, &e) < 0)
			return -EINVAL;
	} else {
		e = host_env();
	}
	WITH_CTX(ctx_id, c, {
		strv_free(c->envp);
		c->envp = e;
		c->env_from_host = envp == NULL;
		e = NULL;
	});
}

KRUN_EXPORT int32_t krun_set_workdir(uint32_t ctx_id, const char *workdir)
{
	char *w;
	if (str_copy(workdir, &w) < 0)
		return -EINVAL;
	WITH_CTX(ctx_id, c, {
		free(c->workdir);
		c->workdir = w;
		w = NULL;
	});
}

KRUN_EXPORT int32_t krun_set_rlimits(uint32_t ctx_id, const char *const rlimits[])
{
	char **r;
	if (!rlimits || strv_copy(rlimits, &r) < 0)
		return -EINVAL;
	WITH_CTX(ctx_id, c, {
		strv_free(c->rlimits);
		c->rlimits = r;
		r = NULL;
	});
}

KRUN_EXPORT int32_t krun_set_console_output(uint32_t ctx_id, const char *path)
{
	char *p;
	if (str_copy(path, &p) < 0)
		return -EINVAL;
	WITH_CTX(ctx_id, c, {
		if (c->console) {
			ret_ = -EINVAL;
		} else {
			c->console = p;
			p = NULL;
		}
		free(p);
	});
}

KRUN_EXPORT int32_t krun_add_vsock_port2(uint32_t ctx_id, uint32_t port, const char *path, bool listen)
{
	char *p;
	struct stat st;
	if (str_copy(path, &p) < 0)
		return -EINVAL;
	if (listen && lstat(p, &st) == 0) {
		free(p);
		return -EEXIST;
	}
	WITH_CTX(ctx_id, c, {
		if (c->vsock == TK_VSOCK_DISABLED) {
			ret_ = -ENODEV;
		} else {
			size_t i = 0;
			while (i < c->nvports && c->vports[i].port != port)
				i++;
			if (i == c->nvports) {
				struct tk_vport *v = realloc(c->vports, (c->nvports + 1) * sizeof(*v));
				if (v) {
					c->vports = v;
					c->nvports++;
				} else {
					ret_ = -ENOMEM;
				}
			} else {
				free(c->vports[i].path);
			}
			if (!ret_) {
				c->vports[i] = (struct tk_vport){.port = port, .path = p, .listen = listen};
				p = NULL;
			}
		}
		free(p);
	});
}

KRUN_EXPORT int32_t krun_add_vsock_port(uint32_t ctx_id, uint32_t port, const char *path)
{
	return krun_add_vsock_port2(ctx_id, port, path, false);
}

#ifndef TESTKRUN_LEGACY
/* libkrun 1.17 */
KRUN_EXPORT int32_t krun_disable_implicit_vsock(uint32_t ctx_id)
{
	WITH_CTX(ctx_id, c, { c->vsock = TK_VSOCK_DISABLED; });
}

KRUN_EXPORT int32_t krun_add_vsock(uint32_t ctx_id, uint32_t tsi_features)
{
	if (tsi_features & ~3u)
		return -EINVAL;
	WITH_CTX(ctx_id, c, {
		if (c->vsock != TK_VSOCK_DISABLED) {
			ret_ = -EEXIST;
		} else {
			c->vsock = TK_VSOCK_EXPLICIT;
			c->tsi_features = tsi_features;
		}
	});
}
#endif

static int parse_port(const char *s, size_t n, uint16_t *out)
{
	if (n == 0 || n > 5)
		return -1;
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

/* libkrun 1.19 dereferences a NULL port_map; so does the double. */
KRUN_EXPORT int32_t krun_set_port_map(uint32_t ctx_id, const char *const port_map[])
{
	char **m;
	if (strv_copy(port_map, &m) < 0)
		return -EINVAL;
	size_t n = tk_strv_len(m);
	uint16_t host[TK_MAX_ARGS], guest[TK_MAX_ARGS];
	for (size_t i = 0; i < n; i++) {
		const char *colon = strchr(m[i], ':');
		if (!colon || strchr(colon + 1, ':') || parse_port(m[i], (size_t)(colon - m[i]), &host[i]) < 0 ||
		    parse_port(colon + 1, strlen(colon + 1), &guest[i]) < 0)
			goto invalid;
		for (size_t j = 0; j < i; j++)
			if (host[j] == host[i] || guest[j] == guest[i])
				goto invalid;
	}
	WITH_CTX(ctx_id, c, {
		if (c->has_net) {
			ret_ = -EINVAL; /* libkrun: a port map is for TSI only */
			strv_free(m);
		} else if (c->vsock == TK_VSOCK_DISABLED) {
			ret_ = -ENODEV;
			strv_free(m);
		} else {
			strv_free(c->port_map);
			c->port_map = m;
		}
	});
invalid:
	strv_free(m);
	return -EINVAL;
}

/* libkrun 1.15 (NET builds): a virtio-net device on a unix stream socket,
 * frames preceded by their 32-bit big-endian length. The double supports
 * one such device; it becomes a TAP device eth0 in the guest's network
 * namespace (vm.c). */
KRUN_EXPORT int32_t krun_add_net_unixstream(uint32_t ctx_id, const char *path, int fd, uint8_t *const mac,
					    uint32_t features, uint32_t flags)
{
	/* NET_ALL_FEATURES: CSUM, GUEST_CSUM, GUEST_TSO4, GUEST_TSO6,
	 * GUEST_UFO, HOST_TSO4, HOST_TSO6, HOST_UFO; others are -EINVAL. */
	const uint32_t all = 1u << 0 | 1u << 1 | 1u << 7 | 1u << 8 | 1u << 10 | 1u << 11 | 1u << 12 | 1u << 14;
	if ((path == NULL) == (fd < 0) || flags & ~2u || features & ~all)
		return -EINVAL;
	if (path && !valid_utf8(path))
		return -EINVAL;
	WITH_CTX(ctx_id, c, {
		if (c->has_net) {
			ret_ = -ENOSPC;
		} else {
			c->has_net = true;
			c->net_fd = fd;
			c->net_path = path ? strdup(path) : NULL;
			memcpy(c->net_mac, mac, 6); /* libkrun reads 6 bytes, NULL crashes */
			c->net_features = features;
		}
	});
}

KRUN_EXPORT int32_t krun_start_enter(uint32_t ctx_id)
{
	struct tk_ctx *c = tk_take_ctx(ctx_id);
	if (!c)
		return -ENOENT;
	tk_dump(c, "start");
	int32_t ret = tk_run(c); /* returns only on errors before the "VM" runs */
	tk_free_ctx(c);
	return ret;
}

#ifndef TESTKRUN_NO_BLK
/* ---- disks (libkrun's BLK builds) ---------------------------------------- */

/* libkrun's ImageType: RAW=0, QCOW2=1, VMDK=2; the double runs raw images
 * only (a loop device), and refuses the others when the VM starts. */
static int32_t add_disk(uint32_t ctx_id, const char *id, const char *path, uint32_t format, bool read_only)
{
	char *i, *p;
	if (format > 2)
		return -EINVAL;
	if (str_copy(id, &i) < 0)
		return -EINVAL;
	if (str_copy(path, &p) < 0) {
		free(i);
		return -EINVAL;
	}
	WITH_CTX(ctx_id, c, {
		struct tk_disk *d = realloc(c->disks, (c->ndisks + 1) * sizeof(*d));
		if (!d) {
			ret_ = -ENOMEM;
		} else {
			c->disks = d;
			d[c->ndisks++] = (struct tk_disk){.id = i, .path = p, .format = format, .read_only = read_only};
			i = p = NULL;
		}
		free(i);
		free(p);
	});
}

KRUN_EXPORT int32_t krun_add_disk(uint32_t ctx_id, const char *block_id, const char *disk_path, bool read_only)
{
	return add_disk(ctx_id, block_id, disk_path, 0, read_only);
}

KRUN_EXPORT int32_t krun_add_disk2(uint32_t ctx_id, const char *block_id, const char *disk_path, uint32_t disk_format, bool read_only)
{
	return add_disk(ctx_id, block_id, disk_path, disk_format, read_only);
}

KRUN_EXPORT int32_t krun_add_disk3(uint32_t ctx_id, const char *block_id, const char *disk_path, uint32_t disk_format, bool read_only,
	bool direct_io, uint32_t sync_mode)
{
	(void)direct_io;
	if (sync_mode > 2)
		return -EINVAL;
	return add_disk(ctx_id, block_id, disk_path, disk_format, read_only);
}
#endif
