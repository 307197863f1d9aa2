//go:build cgo && (linux || darwin)

package krun

/*
#cgo linux LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// krunbox's own declarations of the libkrun 1.19 prototypes it calls,
// grouped by shape. Each kb_* function calls the symbol f through the
// prototype of its shape.
typedef int32_t (*kb_noargs_fn)(void);
typedef int32_t (*kb_u32_fn)(uint32_t);
typedef int32_t (*kb_init_log_fn)(int, uint32_t, uint32_t, uint32_t);
typedef int (*kb_has_feature_fn)(uint64_t);
typedef int32_t (*kb_ctx_fn)(uint32_t);
typedef int32_t (*kb_ctx_u32_fn)(uint32_t, uint32_t);
typedef int32_t (*kb_vm_config_fn)(uint32_t, uint8_t, uint32_t);
typedef int32_t (*kb_ctx_str_fn)(uint32_t, const char *);
typedef int32_t (*kb_ctx_str_str_fn)(uint32_t, const char *, const char *);
typedef int32_t (*kb_virtiofs3_fn)(uint32_t, const char *, const char *, uint64_t, bool);
typedef int32_t (*kb_virtiofs_cache_fn)(uint32_t, const char *, uint32_t, uint32_t, uint32_t);
typedef int32_t (*kb_ctx_strs_fn)(uint32_t, const char *const[]);
typedef int32_t (*kb_exec_fn)(uint32_t, const char *, const char *const[], const char *const[]);
typedef int32_t (*kb_vsock_port_fn)(uint32_t, uint32_t, const char *);
typedef int32_t (*kb_vsock_port2_fn)(uint32_t, uint32_t, const char *, bool);
typedef int32_t (*kb_overlay_file_fn)(uint32_t, const char *, const char *, const uint8_t *, size_t, uint32_t, bool);
typedef int32_t (*kb_overlay_dir_fn)(uint32_t, const char *, const char *, uint32_t);
typedef int32_t (*kb_net_fn)(uint32_t, const char *, int, uint8_t *, uint32_t, uint32_t);
typedef int32_t (*kb_disk2_fn)(uint32_t, const char *, const char *, uint32_t, bool);
typedef int (*kb_krunfw_version_fn)(void);

static int32_t kb_noargs(void *f) { return ((kb_noargs_fn)f)(); }
static int32_t kb_u32(void *f, uint32_t v) { return ((kb_u32_fn)f)(v); }
static int32_t kb_init_log(void *f, int fd, uint32_t l, uint32_t s, uint32_t o) { return ((kb_init_log_fn)f)(fd, l, s, o); }
static int kb_has_feature(void *f, uint64_t v) { return ((kb_has_feature_fn)f)(v); }
static int32_t kb_ctx(void *f, uint32_t c) { return ((kb_ctx_fn)f)(c); }
static int32_t kb_ctx_u32(void *f, uint32_t c, uint32_t v) { return ((kb_ctx_u32_fn)f)(c, v); }
static int32_t kb_vm_config(void *f, uint32_t c, uint8_t n, uint32_t m) { return ((kb_vm_config_fn)f)(c, n, m); }
static int32_t kb_ctx_str(void *f, uint32_t c, const char *s) { return ((kb_ctx_str_fn)f)(c, s); }
static int32_t kb_ctx_str_str(void *f, uint32_t c, const char *a, const char *b) { return ((kb_ctx_str_str_fn)f)(c, a, b); }
static int32_t kb_virtiofs3(void *f, uint32_t c, const char *t, const char *p, uint64_t shm, bool ro) { return ((kb_virtiofs3_fn)f)(c, t, p, shm, ro); }
static int32_t kb_virtiofs_cache(void *f, uint32_t c, const char *t, uint32_t e, uint32_t a, uint32_t p) { return ((kb_virtiofs_cache_fn)f)(c, t, e, a, p); }
static int32_t kb_ctx_strs(void *f, uint32_t c, char **a) { return ((kb_ctx_strs_fn)f)(c, (const char *const *)a); }
static int32_t kb_exec(void *f, uint32_t c, const char *p, char **a, char **e) { return ((kb_exec_fn)f)(c, p, (const char *const *)a, (const char *const *)e); }
static int32_t kb_vsock_port(void *f, uint32_t c, uint32_t port, const char *p) { return ((kb_vsock_port_fn)f)(c, port, p); }
static int32_t kb_vsock_port2(void *f, uint32_t c, uint32_t port, const char *p, bool l) { return ((kb_vsock_port2_fn)f)(c, port, p, l); }
static int32_t kb_overlay_file(void *f, uint32_t c, const char *t, const char *p, void *d, size_t n, uint32_t m, bool o) { return ((kb_overlay_file_fn)f)(c, t, p, (const uint8_t *)d, n, m, o); }
static int32_t kb_net_fd(void *f, uint32_t c, int fd, uint8_t *mac, uint32_t feat, uint32_t flags) { return ((kb_net_fn)f)(c, NULL, fd, mac, feat, flags); }
static int32_t kb_overlay_dir(void *f, uint32_t c, const char *t, const char *p, uint32_t m) { return ((kb_overlay_dir_fn)f)(c, t, p, m); }
static int32_t kb_disk2(void *f, uint32_t c, const char *id, const char *p, uint32_t fmt, bool ro) { return ((kb_disk2_fn)f)(c, id, p, fmt, ro); }
static int kb_krunfw_version(void *f) { return ((kb_krunfw_version_fn)f)(); }

// kb_file returns the file the library holding symbol s was loaded from.
static const char *kb_file(void *s) {
	Dl_info info;
	if (s == NULL || dladdr(s, &info) == 0) return NULL;
	return info.dli_fname;
}
*/
import "C"

import (
	"errors"
	"sync"
	"unsafe"
)

type dlBackend struct {
	file   string
	handle unsafe.Pointer

	mu   sync.Mutex
	syms map[string]unsafe.Pointer
}

// dlopenMu serialises dlopen and dlerror, whose message is per thread but
// may be overwritten by another dl call on the same thread.
var dlopenMu sync.Mutex

func dlopen(path string) (unsafe.Pointer, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	dlopenMu.Lock()
	defer dlopenMu.Unlock()
	h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, errors.New(C.GoString(C.dlerror()))
	}
	return h, nil
}

func dlsym(h unsafe.Pointer, name string) unsafe.Pointer {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.dlsym(h, cname)
}

// preload loads the library at path for the rest of the process, so that a
// later dlopen of its soname (libkrun's of libkrunfw) gets this copy.
func preload(path string) error {
	_, err := dlopen(path)
	return err
}

func open(path string) (backend, error) {
	h, err := dlopen(path)
	if err != nil {
		return nil, err
	}
	b := &dlBackend{file: path, handle: h, syms: map[string]unsafe.Pointer{}}
	if f := C.kb_file(b.sym("krun_create_ctx")); f != nil {
		b.file = C.GoString(f)
	}
	return b, nil
}

func (b *dlBackend) path() string { return b.file }

// sym returns the address of name, or nil when the library lacks it.
func (b *dlBackend) sym(name string) unsafe.Pointer {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.syms[name]; ok {
		return p
	}
	p := dlsym(b.handle, name)
	b.syms[name] = p
	return p
}

func (b *dlBackend) has(name string) bool { return b.sym(name) != nil }

func (b *dlBackend) noArgs(name string) int32 { return int32(C.kb_noargs(b.sym(name))) }

func (b *dlBackend) u32(name string, v uint32) int32 {
	return int32(C.kb_u32(b.sym(name), C.uint32_t(v)))
}

func (b *dlBackend) initLog(fd int32, level, style, options uint32) int32 {
	return int32(C.kb_init_log(b.sym("krun_init_log"), C.int(fd), C.uint32_t(level), C.uint32_t(style), C.uint32_t(options)))
}

func (b *dlBackend) hasFeature(f uint64) int32 {
	return int32(C.kb_has_feature(b.sym("krun_has_feature"), C.uint64_t(f)))
}

func (b *dlBackend) ctx(name string, ctx uint32) int32 {
	return int32(C.kb_ctx(b.sym(name), C.uint32_t(ctx)))
}

func (b *dlBackend) ctxU32(name string, ctx, v uint32) int32 {
	return int32(C.kb_ctx_u32(b.sym(name), C.uint32_t(ctx), C.uint32_t(v)))
}

func (b *dlBackend) vmConfig(ctx uint32, vcpus uint8, ramMiB uint32) int32 {
	return int32(C.kb_vm_config(b.sym("krun_set_vm_config"), C.uint32_t(ctx), C.uint8_t(vcpus), C.uint32_t(ramMiB)))
}

func (b *dlBackend) ctxStr(name string, ctx uint32, s string) int32 {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	return int32(C.kb_ctx_str(b.sym(name), C.uint32_t(ctx), cs))
}

func (b *dlBackend) ctxStrStr(name string, ctx uint32, s1, s2 string) int32 {
	c1, c2 := C.CString(s1), C.CString(s2)
	defer C.free(unsafe.Pointer(c1))
	defer C.free(unsafe.Pointer(c2))
	return int32(C.kb_ctx_str_str(b.sym(name), C.uint32_t(ctx), c1, c2))
}

func (b *dlBackend) virtiofs3(ctx uint32, tag, path string, shmSize uint64, readOnly bool) int32 {
	ct, cp := C.CString(tag), C.CString(path)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cp))
	return int32(C.kb_virtiofs3(b.sym("krun_add_virtiofs3"), C.uint32_t(ctx), ct, cp, C.uint64_t(shmSize), C.bool(readOnly)))
}

func (b *dlBackend) virtiofsCache(ctx uint32, tag string, entryMs, attrMs, policy uint32) int32 {
	ct := C.CString(tag)
	defer C.free(unsafe.Pointer(ct))
	return int32(C.kb_virtiofs_cache(b.sym(ShareCacheFunc), C.uint32_t(ctx), ct, C.uint32_t(entryMs), C.uint32_t(attrMs), C.uint32_t(policy)))
}

// cArray is a NULL-terminated C array of C strings, never NULL itself.
type cArray struct {
	p **C.char
	n int
}

func newCArray(ss []string) cArray {
	n := len(ss) + 1
	p := (**C.char)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	arr := unsafe.Slice(p, n)
	for i, s := range ss {
		arr[i] = C.CString(s)
	}
	return cArray{p, len(ss)}
}

func (a cArray) free() {
	for _, s := range unsafe.Slice(a.p, a.n) {
		C.free(unsafe.Pointer(s))
	}
	C.free(unsafe.Pointer(a.p))
}

func (b *dlBackend) ctxStrs(name string, ctx uint32, ss []string) int32 {
	a := newCArray(ss)
	defer a.free()
	return int32(C.kb_ctx_strs(b.sym(name), C.uint32_t(ctx), a.p))
}

func (b *dlBackend) exec(ctx uint32, path string, argv, envp []string) int32 {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	a, e := newCArray(argv), newCArray(envp)
	defer a.free()
	defer e.free()
	return int32(C.kb_exec(b.sym("krun_set_exec"), C.uint32_t(ctx), cp, a.p, e.p))
}

func (b *dlBackend) vsockPort(name string, ctx, port uint32, path string, listen bool) int32 {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	if name == "krun_add_vsock_port" {
		return int32(C.kb_vsock_port(b.sym(name), C.uint32_t(ctx), C.uint32_t(port), cp))
	}
	return int32(C.kb_vsock_port2(b.sym(name), C.uint32_t(ctx), C.uint32_t(port), cp, C.bool(listen)))
}

func (b *dlBackend) netFd(name string, ctx uint32, fd int32, mac [6]byte, features, flags uint32) int32 {
	cm := (*C.uint8_t)(C.malloc(6))
	defer C.free(unsafe.Pointer(cm))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(cm)), 6), mac[:])
	return int32(C.kb_net_fd(b.sym(name), C.uint32_t(ctx), C.int(fd), cm, C.uint32_t(features), C.uint32_t(flags)))
}

func (b *dlBackend) disk2(ctx uint32, id, path string, format uint32, readOnly bool) int32 {
	ci, cp := C.CString(id), C.CString(path)
	defer C.free(unsafe.Pointer(ci))
	defer C.free(unsafe.Pointer(cp))
	return int32(C.kb_disk2(b.sym(DiskFunc), C.uint32_t(ctx), ci, cp, C.uint32_t(format), C.bool(readOnly)))
}

func (b *dlBackend) overlayFile(ctx uint32, tag, path string, data unsafe.Pointer, n uintptr, mode uint32, oneShot bool) int32 {
	ct, cp := C.CString(tag), C.CString(path)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cp))
	return int32(C.kb_overlay_file(b.sym("krun_fs_add_overlay_file"), C.uint32_t(ctx), ct, cp, data, C.size_t(n), C.uint32_t(mode), C.bool(oneShot)))
}

func (b *dlBackend) overlayDir(ctx uint32, tag, path string, mode uint32) int32 {
	ct, cp := C.CString(tag), C.CString(path)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cp))
	return int32(C.kb_overlay_dir(b.sym("krun_fs_add_overlay_dir"), C.uint32_t(ctx), ct, cp, C.uint32_t(mode)))
}

func (b *dlBackend) alloc(data []byte) unsafe.Pointer {
	if len(data) == 0 {
		return nil
	}
	return C.CBytes(data)
}

func (b *dlBackend) free(p unsafe.Pointer) { C.free(p) }

func krunfwVersion(path string) (string, int, error) {
	h, err := dlopen(path)
	if err != nil {
		return "", 0, err
	}
	f := dlsym(h, "krunfw_get_version")
	if f == nil {
		return path, 0, errors.New(path + ": no krunfw_get_version")
	}
	file := path
	if p := C.kb_file(f); p != nil {
		file = C.GoString(p)
	}
	return file, int(C.kb_krunfw_version(f)), nil
}
