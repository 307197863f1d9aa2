/*
 * testkrun: a libkrun test double for machines without KVM. See
 * hack/README.md for what it does and how it differs from a real VM.
 */
#ifndef TESTKRUN_H
#define TESTKRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KRUN_EXPORT __attribute__((visibility("default")))

/* What libkrun 1.19 enforces. */
#define TK_MAX_ARGS 4096     /* entries read from a NULL-terminated array */
#define TK_MAX_TAG_LEN 36    /* bytes of a virtio-fs tag */
#define TK_ROOT_TAG "/dev/root"

/* Where the guest finds the device stand-ins (KRUNBOX_TESTKRUN_DIR). */
#define TK_GUEST_DIR "/dev/.testkrun"

struct tk_share {
	char *tag;
	char *path; /* NULL: virtual-only (NullFs) */
	bool read_only;
	/* krun_set_virtiofs_cache: recorded only (the double has no guest
	 * cache to apply it to; see hack/README.md). */
	bool cache_set;
	uint32_t entry_timeout_ms, attr_timeout_ms, cache_policy;
};

struct tk_vport {
	uint32_t port;
	char *path;
	bool listen;
};

struct tk_overlay {
	char *tag;
	char *path; /* without the leading '/' */
	const uint8_t *data;
	size_t len;
	uint32_t mode;
	bool dir;
	bool one_shot;
};

/* krun_add_disk*: a raw image, made a loop device when the VM starts */
struct tk_disk {
	char *id;
	char *path;
	uint32_t format;
	bool read_only;
};

enum tk_vsock { TK_VSOCK_IMPLICIT, TK_VSOCK_DISABLED, TK_VSOCK_EXPLICIT };

struct tk_ctx {
	uint32_t id;
	struct tk_ctx *next;

	uint8_t vcpus;
	uint32_t ram_mib;
	char *exec_path;
	char **argv; /* arguments without argv[0], NULL-terminated */
	char **envp; /* NULL-terminated */
	bool env_from_host;
	char *workdir;
	char **rlimits;
	char *console;

	struct tk_share *shares;
	size_t nshares;
	struct tk_vport *vports;
	size_t nvports;
	struct tk_overlay *overlays;
	size_t noverlays;

	struct tk_disk *disks;
	size_t ndisks;

	enum tk_vsock vsock;
	uint32_t tsi_features;
	char **port_map;

	/* krun_add_net_unixstream: one device (the guest's eth0) */
	bool has_net;
	int net_fd;     /* the caller's socket, or -1 with net_path */
	char *net_path; /* a socket to connect to at start, or NULL */
	uint8_t net_mac[6];
	uint32_t net_features; /* NET_FEATURE_* bits */
};

/* config.c */
struct tk_ctx *tk_take_ctx(uint32_t id); /* removes it from the map */
void tk_free_ctx(struct tk_ctx *c);
void tk_dump(const struct tk_ctx *c, const char *event);
bool tk_tsi_enabled(const struct tk_ctx *c);
size_t tk_strv_len(char *const *v);
void tk_log(int level, const char *module, const char *msg);

/* vm.c */
int32_t tk_run(struct tk_ctx *c);

#endif
