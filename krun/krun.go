package krun

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// LibraryEnv names an environment variable that, when set, is the only
// libkrun file [Open] with an empty path loads.
const LibraryEnv = "KRUNBOX_LIBKRUN"

// RootTag is the virtio-fs tag of the guest root filesystem (KRUN_FS_ROOT_TAG).
const RootTag = "/dev/root"

// MaxTagLen is the longest virtio-fs tag libkrun accepts, in bytes. A longer
// tag makes libkrun panic (abort the process) when the VM starts.
const MaxTagLen = 36

// MaxArrayLen is the number of entries libkrun reads from a NULL-terminated
// string array; it silently ignores the rest.
const MaxArrayLen = 4096

// TestDoubleMarker is a symbol exported only by krunbox's libkrun test double
// (hack/testkrun). A library exporting it needs no /dev/kvm.
const TestDoubleMarker = "krunbox_testkrun"

// ErrNoCgo is returned by [Open] in a krunbox built without cgo.
var ErrNoCgo = errors.New("krunbox was built without cgo, so it cannot load libkrun: rebuild it with CGO_ENABLED=1 and a C compiler")

// ErrUnsupported is matched (errors.Is) by the error of a method whose C
// function the loaded library does not export.
var ErrUnsupported = errors.New("not supported by this libkrun")

// ErrLoggerInitialized is matched by the error of a second logger
// initialisation in one process: libkrun would abort the process.
var ErrLoggerInitialized = errors.New("libkrun's logger is already initialised in this process (a second initialisation would abort it)")

// Error is a failure reported by a libkrun function, or a call the binding
// refused because libkrun would have crashed or misread it.
type Error struct {
	// Func is the C function, such as "krun_set_exec".
	Func string
	// Errno is the negated return value, such as syscall.EINVAL.
	Errno syscall.Errno
	// Detail, when not empty, says why the binding refused the call
	// before reaching libkrun.
	Detail string
}

func (e *Error) Error() string {
	name := errnoName(e.Errno)
	if e.Detail != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Func, e.Detail, name)
	}
	return fmt.Sprintf("%s: %v (%s)", e.Func, e.Errno, name)
}

// Unwrap returns the errno, so errors.Is(err, syscall.EINVAL) works.
func (e *Error) Unwrap() error { return e.Errno }

// errnoName returns the symbolic name of an errno, such as "EINVAL".
func errnoName(e syscall.Errno) string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return "errno " + strconv.Itoa(int(e))
}

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EIO: "EIO",
	syscall.E2BIG: "E2BIG", syscall.EBADF: "EBADF", syscall.ENOMEM: "ENOMEM",
	syscall.EACCES: "EACCES", syscall.EBUSY: "EBUSY", syscall.EEXIST: "EEXIST",
	syscall.ENODEV: "ENODEV", syscall.ENOTDIR: "ENOTDIR", syscall.EINVAL: "EINVAL",
	syscall.ENOTTY: "ENOTTY", syscall.ENOSPC: "ENOSPC", syscall.ENOSYS: "ENOSYS",
	syscall.ENOTSUP: "ENOTSUP",
}

// UnsupportedError reports a C function missing from the loaded library.
type UnsupportedError struct {
	// Func is the missing C function.
	Func string
	// Library is the file that lacks it.
	Library string
}

func (e *UnsupportedError) Error() string {
	msg := fmt.Sprintf("%s: not exported by %s", e.Func, e.Library)
	if e.Func == ShareCacheFunc {
		return msg + " (no upstream release has it yet: krunbox's libkrun carries it, see hack/libkrun)"
	}
	if v := since[e.Func]; v != "" {
		msg += " (needs libkrun " + v + " or later"
		if strings.HasPrefix(e.Func, "krun_add_net") {
			msg += " built with NET"
		}
		if strings.HasPrefix(e.Func, "krun_add_disk") {
			msg += " built with BLK"
		}
		msg += ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// required are the functions every supported libkrun (1.8 and later)
// exports; [Open] fails when one is missing.
var required = []string{
	"krun_set_log_level", "krun_create_ctx", "krun_free_ctx", "krun_set_vm_config",
	"krun_set_root", "krun_add_virtiofs", "krun_set_exec", "krun_set_env",
	"krun_set_workdir", "krun_set_rlimits", "krun_add_vsock_port", "krun_set_port_map",
	"krun_set_console_output", "krun_start_enter",
}

// since gives the libkrun release that introduced each optional function.
var since = map[string]string{
	"krun_add_vsock_port2":        "1.10",
	"krun_init_log":               "1.13",
	"krun_has_feature":            "1.18",
	"krun_disable_implicit_vsock": "1.17",
	"krun_add_vsock":              "1.17",
	"krun_add_virtiofs3":          "1.18",
	"krun_fs_add_overlay_file":    "1.19",
	"krun_fs_add_overlay_dir":     "1.19",
	DiskFunc:                      "1.10",
}

// DiskFunc is the C function that adds a virtio-blk disk. Only libkrun
// builds with the BLK feature (make BLK=1) export it: a default build has
// no disk functions at all, so it is looked up at run time.
const DiskFunc = "krun_add_disk2"

// DiskFormat is the format of a disk image (KRUN_DISK_FORMAT_*).
type DiskFormat uint32

// Disk image formats of krun_add_disk2.
const (
	DiskRaw DiskFormat = iota
	DiskQcow2
)

// ShareCacheFunc is the C function that sets how the guest may cache a
// virtio-fs share. No libkrun release has it yet: krunbox's own libkrun
// (hack/libkrun) adds it to 1.19. Without it, the guest keeps each share's
// directory entries and attributes for [DefaultShareTimeout].
const ShareCacheFunc = "krun_set_virtiofs_cache"

// DefaultShareTimeout is how long libkrun's virtio-fs lets the guest keep a
// share's directory entries and attributes when nothing else is asked for
// (libkrun 1.19's passthrough defaults): a host change to a share can stay
// unseen that long.
const DefaultShareTimeout = 5 * time.Second

// CachePolicy says how the guest may keep a share's file data
// (KRUN_FS_CACHE_*).
type CachePolicy uint32

// Cache policies of krun_set_virtiofs_cache.
const (
	// CacheAuto is close-to-open: the guest keeps file data while a file
	// is open and drops it when the file is opened again.
	CacheAuto CachePolicy = iota
	// CacheNever keeps no file data in the guest: direct I/O.
	CacheNever
	// CacheAlways keeps file data across opens, for a directory nothing
	// else changes.
	CacheAlways
)

// ShareCache is how the guest may cache a virtio-fs share.
type ShareCache struct {
	// EntryTimeout is how long the guest may keep a directory entry (a
	// name's lookup, a failed one included) without asking the host.
	EntryTimeout time.Duration
	// AttrTimeout is how long it may keep a file's attributes.
	AttrTimeout time.Duration
	// Policy is how it may keep file data.
	Policy CachePolicy
}

// Coherent is the cache of a share the host changes too: the guest asks the
// host again at every access and keeps file data close-to-open, so it sees
// each host change at its next access.
var Coherent = ShareCache{Policy: CacheAuto}

// Feature is a build-time feature of libkrun (krun_has_feature).
type Feature uint64

// Features known to libkrun 1.19.
const (
	FeatureNet Feature = iota
	FeatureBlk
	FeatureGPU
	FeatureSnd
	FeatureInput
	FeatureEFI
	FeatureTEE
	FeatureAMDSEV
	FeatureIntelTDX
	FeatureAWSNitro
	FeatureVirglResourceMap2
	FeatureInitBlob
)

var featureNames = []string{"net", "blk", "gpu", "snd", "input", "efi", "tee", "amd-sev", "intel-tdx", "aws-nitro", "virgl-resource-map2", "init-blob"}

// AllFeatures lists every feature libkrun 1.19 knows.
func AllFeatures() []Feature {
	fs := make([]Feature, len(featureNames))
	for i := range fs {
		fs[i] = Feature(i)
	}
	return fs
}

func (f Feature) String() string {
	if int(f) < len(featureNames) {
		return featureNames[f]
	}
	return "feature-" + strconv.FormatUint(uint64(f), 10)
}

// TSIFeatures selects what Transparent Socket Impersonation hijacks in the
// guest (krun_add_vsock); 0 gives vsock without TSI.
type TSIFeatures uint32

// TSI flags of krun_add_vsock.
const (
	TSIHijackInet TSIFeatures = 1
	TSIHijackUnix TSIFeatures = 2
)

// LogLevel is libkrun's log level.
type LogLevel uint32

// Log levels of krun_set_log_level and krun_init_log.
const (
	LogOff LogLevel = iota
	LogError
	LogWarn
	LogInfo
	LogDebug
	LogTrace
)

// Rlimit is a resource limit libkrun's init applies in the guest.
type Rlimit struct {
	// Resource is the numeric Linux RLIMIT_* id of the guest (7 for
	// RLIMIT_NOFILE); libkrun's init accepts only numbers.
	Resource int
	Cur, Max uint64
}

// String formats the limit the way krun_set_rlimits wants it: "id=cur:max".
func (r Rlimit) String() string { return fmt.Sprintf("%d=%d:%d", r.Resource, r.Cur, r.Max) }

// KrunfwCandidates returns the files tried for libkrunfw, the guest kernel
// library libkrun loads by name.
func KrunfwCandidates() []string {
	return platformNames(krunfwLinux, krunfwMac)
}

func platformNames(linux, darwin string) []string {
	if runtime.GOOS == "darwin" {
		return []string{darwin, filepath.Join("/opt/homebrew/lib", darwin), filepath.Join("/usr/local/lib", darwin)}
	}
	return []string{linux}
}

// LoadError reports that no libkrun could be loaded.
type LoadError struct {
	// Tried lists the files tried, in order, and Errs the dynamic
	// loader's complaint about each.
	Tried []string
	Errs  []string
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString("load libkrun: ")
	for i := range e.Tried {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Errs[i])
	}
	return b.String()
}

// Hint says how to fix a missing library, on the platform krunbox runs on.
func (e *LoadError) Hint() string {
	return "install libkrun (1.19 recommended, 1.17 at least) and libkrunfw: " + InstallHint()
}

// Library is a loaded libkrun. It is never unloaded: libkrun keeps
// process-wide state (contexts, the logger) that dlclose would pull from
// under it.
type Library struct {
	b      backend
	why    string
	krunfw string
}

// backend is the C side: dlopen'ed symbols and one caller per C prototype.
// Only the cgo build implements it.
type backend interface {
	path() string
	has(name string) bool
	noArgs(name string) int32
	u32(name string, v uint32) int32
	initLog(fd int32, level, style, options uint32) int32
	hasFeature(f uint64) int32
	ctx(name string, ctx uint32) int32
	ctxU32(name string, ctx, v uint32) int32
	vmConfig(ctx uint32, vcpus uint8, ramMiB uint32) int32
	ctxStr(name string, ctx uint32, s string) int32
	ctxStrStr(name string, ctx uint32, a, b string) int32
	virtiofs3(ctx uint32, tag, path string, shmSize uint64, readOnly bool) int32
	virtiofsCache(ctx uint32, tag string, entryMs, attrMs, policy uint32) int32
	ctxStrs(name string, ctx uint32, arr []string) int32
	exec(ctx uint32, path string, argv, envp []string) int32
	vsockPort(name string, ctx, port uint32, path string, listen bool) int32
	overlayFile(ctx uint32, tag, path string, data unsafe.Pointer, n uintptr, mode uint32, oneShot bool) int32
	overlayDir(ctx uint32, tag, path string, mode uint32) int32
	netFd(name string, ctx uint32, fd int32, mac [6]byte, features, flags uint32) int32
	disk2(ctx uint32, id, path string, format uint32, readOnly bool) int32
	alloc(data []byte) unsafe.Pointer
	free(p unsafe.Pointer)
}

// Open loads libkrun from path, or from [Candidates] when path is empty,
// and checks that it exports the functions of libkrun 1.8. When the file
// has a libkrunfw beside it (libkrunfw.so.5 on Linux), that one is loaded
// first, so that libkrun, which loads libkrunfw by name only, gets it
// rather than none or the system's.
func Open(path string) (*Library, error) {
	cands := []Candidate{{path, WhyGiven}}
	if path == "" {
		cands = Candidates()
	}
	le := &LoadError{}
	for _, c := range cands {
		fw := besideKrunfw(c.Path)
		if fw != "" {
			if err := preload(fw); err != nil {
				if errors.Is(err, ErrNoCgo) {
					return nil, err
				}
				le.Tried = append(le.Tried, c.Path)
				le.Errs = append(le.Errs, fmt.Sprintf("%s: load the libkrunfw beside it: %v", c.Path, err))
				continue
			}
		}
		b, err := open(c.Path)
		if err != nil {
			if errors.Is(err, ErrNoCgo) {
				return nil, err
			}
			le.Tried = append(le.Tried, c.Path)
			le.Errs = append(le.Errs, err.Error())
			continue
		}
		for _, name := range required {
			if !b.has(name) {
				return nil, fmt.Errorf("load libkrun: %s: %w", b.path(), &UnsupportedError{Func: name, Library: b.path()})
			}
		}
		return &Library{b: b, why: c.Why, krunfw: fw}, nil
	}
	return nil, le
}

// Path is the file the library was loaded from.
func (l *Library) Path() string { return l.b.path() }

// Why says why this file was loaded: one of the Why constants, such as
// [WhyBundled].
func (l *Library) Why() string { return l.why }

// Krunfw is the libkrunfw file loaded from beside the library, or "" when
// there was none there and libkrun loads libkrunfw by name.
func (l *Library) Krunfw() string { return l.krunfw }

// Has reports whether the library exports the C function name.
func (l *Library) Has(name string) bool { return l.b.has(name) }

// IsTestDouble reports whether the library is krunbox's test double
// (hack/testkrun) rather than libkrun.
func (l *Library) IsTestDouble() bool { return l.b.has(TestDoubleMarker) }

func (l *Library) need(name string) error {
	if !l.b.has(name) {
		return &UnsupportedError{Func: name, Library: l.b.path()}
	}
	return nil
}

// check turns a libkrun return value into an error naming fn.
func check(fn string, ret int32) error {
	if ret >= 0 {
		return nil
	}
	return &Error{Func: fn, Errno: syscall.Errno(-ret)}
}

// logInit is set once libkrun's logger has been initialised in this process.
var logInit atomic.Bool

// SetLogLevel initialises libkrun's logger on stderr (krun_set_log_level).
// libkrun allows one logger initialisation per process; a second call
// returns an error matching [ErrLoggerInitialized] instead of aborting.
func (l *Library) SetLogLevel(level LogLevel) error {
	const fn = "krun_set_log_level"
	if !logInit.CompareAndSwap(false, true) {
		return fmt.Errorf("%s: %w", fn, ErrLoggerInitialized)
	}
	if err := check(fn, l.b.u32(fn, uint32(level))); err != nil {
		logInit.Store(false)
		return err
	}
	return nil
}

// InitLog initialises libkrun's logger writing to fd (-1 for stderr)
// without colours and ignoring RUST_LOG (krun_init_log). The same
// once-per-process rule as [Library.SetLogLevel] applies.
func (l *Library) InitLog(fd int, level LogLevel) error {
	const fn = "krun_init_log"
	if err := l.need(fn); err != nil {
		return err
	}
	if !logInit.CompareAndSwap(false, true) {
		return fmt.Errorf("%s: %w", fn, ErrLoggerInitialized)
	}
	const styleNever, optionNoEnv = 2, 1
	if err := check(fn, l.b.initLog(int32(fd), uint32(level), styleNever, optionNoEnv)); err != nil {
		logInit.Store(false)
		return err
	}
	return nil
}

// HasFeature reports whether libkrun was built with feature f.
func (l *Library) HasFeature(f Feature) (bool, error) {
	const fn = "krun_has_feature"
	if err := l.need(fn); err != nil {
		return false, err
	}
	ret := l.b.hasFeature(uint64(f))
	if err := check(fn, ret); err != nil {
		return false, err
	}
	return ret == 1, nil
}

// NewContext creates a VM configuration context (krun_create_ctx).
func (l *Library) NewContext() (*Context, error) {
	const fn = "krun_create_ctx"
	ret := l.b.noArgs(fn)
	if err := check(fn, ret); err != nil {
		return nil, err
	}
	return &Context{lib: l, id: uint32(ret)}, nil
}

// Context is one VM configuration of libkrun. Its methods are safe for
// concurrent use; libkrun serialises them.
type Context struct {
	lib *Library
	id  uint32

	mu     sync.Mutex
	pinned []unsafe.Pointer // C copies of overlay file contents, alive until Free
}

// ID is libkrun's id of the context.
func (c *Context) ID() uint32 { return c.id }

// Free releases the context (krun_free_ctx). A context that was started
// no longer exists, and freeing it reports ENOENT.
func (c *Context) Free() error {
	const fn = "krun_free_ctx"
	err := check(fn, c.lib.b.ctx(fn, c.id))
	if err == nil {
		c.mu.Lock()
		for _, p := range c.pinned {
			c.lib.b.free(p)
		}
		c.pinned = nil
		c.mu.Unlock()
	}
	return err
}

// SetVMConfig sets the number of vCPUs and the guest memory in MiB.
func (c *Context) SetVMConfig(vcpus uint8, ramMiB uint32) error {
	const fn = "krun_set_vm_config"
	return check(fn, c.lib.b.vmConfig(c.id, vcpus, ramMiB))
}

// SetRoot shares the host directory path as the guest's root filesystem,
// read-write (krun_set_root).
func (c *Context) SetRoot(path string) error {
	const fn = "krun_set_root"
	if err := noNUL(fn, path); err != nil {
		return err
	}
	return check(fn, c.lib.b.ctxStr(fn, c.id, path))
}

// AddVirtiofs shares the host directory hostPath with the guest under tag.
// A read-only share needs krun_add_virtiofs3 (libkrun 1.18); a read-write
// one uses krun_add_virtiofs where krun_add_virtiofs3 is missing. The guest
// mounts the tag itself.
func (c *Context) AddVirtiofs(tag, hostPath string, readOnly bool) error {
	fn := "krun_add_virtiofs3"
	if !c.lib.b.has(fn) && !readOnly {
		fn = "krun_add_virtiofs"
	}
	if err := c.lib.need(fn); err != nil {
		return err
	}
	if err := checkTag(fn, tag); err != nil {
		return err
	}
	if err := noNUL(fn, hostPath); err != nil {
		return err
	}
	if fn == "krun_add_virtiofs" {
		return check(fn, c.lib.b.ctxStrStr(fn, c.id, tag, hostPath))
	}
	return check(fn, c.lib.b.virtiofs3(c.id, tag, hostPath, 0, readOnly))
}

// SetShareCache sets how the guest may cache the virtio-fs device tag,
// added before (krun_set_virtiofs_cache, see [ShareCacheFunc]). Timeouts
// are rounded down to milliseconds and must lie within 0 and 2^32-1 ms.
func (c *Context) SetShareCache(tag string, sc ShareCache) error {
	const fn = ShareCacheFunc
	if err := c.lib.need(fn); err != nil {
		return err
	}
	if err := checkTag(fn, tag); err != nil {
		return err
	}
	entry, err := timeoutMs(fn, "entry", sc.EntryTimeout)
	if err != nil {
		return err
	}
	attr, err := timeoutMs(fn, "attribute", sc.AttrTimeout)
	if err != nil {
		return err
	}
	if sc.Policy > CacheAlways {
		return &Error{Func: fn, Errno: syscall.EINVAL, Detail: fmt.Sprintf("unknown cache policy %d", sc.Policy)}
	}
	return check(fn, c.lib.b.virtiofsCache(c.id, tag, entry, attr, uint32(sc.Policy)))
}

// timeoutMs converts a share's cache timeout to the milliseconds libkrun
// takes.
func timeoutMs(fn, what string, d time.Duration) (uint32, error) {
	ms := d.Milliseconds()
	if ms < 0 || ms > math.MaxUint32 {
		return 0, &Error{Func: fn, Errno: syscall.EINVAL, Detail: fmt.Sprintf("%s timeout %v out of range (0 to %d ms)", what, d, uint32(math.MaxUint32))}
	}
	return uint32(ms), nil
}

// AddOverlayDir adds an empty read-only virtual directory at path (relative
// to the share's root; parents must be overlay directories) to the
// virtio-fs device tag (krun_fs_add_overlay_dir, libkrun 1.19). mode is a
// full st_mode, e.g. 040755.
func (c *Context) AddOverlayDir(tag, path string, mode uint32) error {
	const fn = "krun_fs_add_overlay_dir"
	if err := c.lib.need(fn); err != nil {
		return err
	}
	if err := noNUL(fn, tag, path); err != nil {
		return err
	}
	return check(fn, c.lib.b.overlayDir(c.id, tag, path, mode))
}

// AddOverlayFile adds a virtual read-only file holding data at path of the
// virtio-fs device tag, without touching the shared directory
// (krun_fs_add_overlay_file, libkrun 1.19). mode is a full st_mode, e.g.
// 0100755. The binding keeps a C copy of data alive until [Context.Free]
// (libkrun does not copy it); oneShot files vanish after one open.
func (c *Context) AddOverlayFile(tag, path string, data []byte, mode uint32, oneShot bool) error {
	const fn = "krun_fs_add_overlay_file"
	if err := c.lib.need(fn); err != nil {
		return err
	}
	if err := noNUL(fn, tag, path); err != nil {
		return err
	}
	p := c.lib.b.alloc(data)
	ret := c.lib.b.overlayFile(c.id, tag, path, p, uintptr(len(data)), mode, oneShot)
	if err := check(fn, ret); err != nil {
		c.lib.b.free(p)
		return err
	}
	c.mu.Lock()
	c.pinned = append(c.pinned, p)
	c.mu.Unlock()
	return nil
}

// SetExec sets the program the guest runs: path inside the guest (looked
// up in the guest PATH when relative), its arguments without argv[0], and
// its whole environment. env is never passed as NULL (which would copy the
// host environment onto the guest kernel command line): a nil env means an
// empty one. Keep env short: libkrun passes it on the kernel command line,
// which holds about 32 entries and no '"'.
func (c *Context) SetExec(path string, args, env []string) error {
	const fn = "krun_set_exec"
	if err := noNUL(fn, path); err != nil {
		return err
	}
	if err := checkArray(fn, "argument", args); err != nil {
		return err
	}
	if err := checkArray(fn, "environment entry", env); err != nil {
		return err
	}
	return check(fn, c.lib.b.exec(c.id, path, args, env))
}

// SetEnv replaces the guest environment (krun_set_env). A nil env means an
// empty one, never the host's. Call it after [Context.SetExec], which
// overwrites it.
func (c *Context) SetEnv(env []string) error {
	const fn = "krun_set_env"
	return c.ctxStrs(fn, "environment entry", env)
}

// SetWorkdir sets the guest working directory of the program. libkrun
// ignores a directory that does not exist.
func (c *Context) SetWorkdir(path string) error {
	const fn = "krun_set_workdir"
	if err := noNUL(fn, path); err != nil {
		return err
	}
	return check(fn, c.lib.b.ctxStr(fn, c.id, path))
}

// SetRlimits sets resource limits the guest init applies before running
// the program.
func (c *Context) SetRlimits(limits []Rlimit) error {
	const fn = "krun_set_rlimits"
	arr := make([]string, len(limits))
	for i, l := range limits {
		arr[i] = l.String()
	}
	return c.ctxStrs(fn, "rlimit", arr)
}

// AddVsockPort maps guest vsock port to the host unix socket hostPath. With
// listen false the guest connects out and a host process must listen on
// hostPath; with listen true libkrun listens on hostPath (which must not
// exist yet) and each connection reaches the guest's listener on port
// (krun_add_vsock_port2, libkrun 1.10).
func (c *Context) AddVsockPort(port uint32, hostPath string, listen bool) error {
	fn := "krun_add_vsock_port2"
	if !listen && !c.lib.b.has(fn) {
		fn = "krun_add_vsock_port"
	}
	if err := c.lib.need(fn); err != nil {
		return err
	}
	if err := noNUL(fn, hostPath); err != nil {
		return err
	}
	return check(fn, c.lib.b.vsockPort(fn, c.id, port, hostPath, listen))
}

// DisableImplicitVsock removes the vsock device (and so TSI networking)
// libkrun adds by default (krun_disable_implicit_vsock, libkrun 1.17).
func (c *Context) DisableImplicitVsock() error {
	const fn = "krun_disable_implicit_vsock"
	if err := c.lib.need(fn); err != nil {
		return err
	}
	return check(fn, c.lib.b.ctx(fn, c.id))
}

// ErrNoNet is matched (errors.Is) by the error of [Context.AddNetUnixstream]
// on a libkrun built without its net feature.
var ErrNoNet = errors.New("this libkrun has no virtio-net (it was built without its NET feature), which networks public (the default), allow= and open need: install a libkrun built with NET=1 (the release bundle's is), or choose network tsi (the host's network, its loopback included) or none (--net, or network in the user config)")

// Virtio-net feature bits for [Context.AddNetUnixstream] (libkrun.h's
// NET_FEATURE_*: the device offers the guest these and nothing more).
const (
	// NetFeatureGuestCSUM: the guest accepts frames with partial checksums.
	NetFeatureGuestCSUM uint32 = 1 << 1
	// NetFeatureGuestTSO4: the guest accepts IPv4 TCP segments of up to
	// 64 KiB (its driver then posts 64 KiB receive buffers).
	NetFeatureGuestTSO4 uint32 = 1 << 7
	// NetFeatureGuestTSO6: the same for IPv6.
	NetFeatureGuestTSO6 uint32 = 1 << 8
)

// AddNetUnixstream adds a virtio-net device (the guest's eth0, eth1, ...
// in the order added) whose frames libkrun exchanges over the connected
// stream socket fd, each preceded by its length (32-bit big-endian), as
// passt does. mac is the guest interface's address; features are virtio-net
// feature bits (NetFeature*; 0: none, and the guest's driver then receives
// frames of 1518 bytes at most). Adding one turns libkrun's
// implicit TSI off. libkrun takes fd over.
func (c *Context) AddNetUnixstream(fd int, mac [6]byte, features uint32) error {
	const fn = "krun_add_net_unixstream"
	if ok, err := c.lib.HasFeature(FeatureNet); !c.lib.Has(fn) || err == nil && !ok {
		return fmt.Errorf("%s: %w", fn, ErrNoNet)
	}
	return check(fn, c.lib.b.netFd(fn, c.id, int32(fd), mac, features, 0))
}

// HasDisks reports whether the library can add virtio-blk disks (it was
// built with BLK=1 and exports [DiskFunc]).
func (l *Library) HasDisks() bool { return l.Has(DiskFunc) }

// AddDisk adds a virtio-blk disk: the guest sees the disks as /dev/vda,
// /dev/vdb, ... in the order added. id names the disk in libkrun's
// configuration (the guest does not see it); path is the host image,
// opened by libkrun when the VM starts.
func (c *Context) AddDisk(id, path string, format DiskFormat, readOnly bool) error {
	const fn = DiskFunc
	if err := c.lib.need(fn); err != nil {
		return err
	}
	if err := noNUL(fn, id); err != nil {
		return err
	}
	if err := noNUL(fn, path); err != nil {
		return err
	}
	return check(fn, c.lib.b.disk2(c.id, id, path, uint32(format), readOnly))
}

// AddVsock adds a vsock device with the given TSI features, 0 for vsock
// without any network hijacking; only after [Context.DisableImplicitVsock]
// (krun_add_vsock, libkrun 1.17).
func (c *Context) AddVsock(tsi TSIFeatures) error {
	const fn = "krun_add_vsock"
	if err := c.lib.need(fn); err != nil {
		return err
	}
	return check(fn, c.lib.b.ctxU32(fn, c.id, uint32(tsi)))
}

// SetPortMap maps host ports to guest ports for TSI, as "host:guest"
// entries. Note that libkrun 1.17 to 1.19 still expose guest ports missing
// from the map.
func (c *Context) SetPortMap(ports []string) error {
	const fn = "krun_set_port_map"
	return c.ctxStrs(fn, "port mapping", ports)
}

// SetConsoleOutput writes all console output of the VM (kernel, init and,
// with the implicit console, the program's stdout and stderr) to the file
// path, created or truncated. Only once per context.
func (c *Context) SetConsoleOutput(path string) error {
	const fn = "krun_set_console_output"
	if err := noNUL(fn, path); err != nil {
		return err
	}
	return check(fn, c.lib.b.ctxStr(fn, c.id, path))
}

// StartEnter boots the VM (krun_start_enter). On success it never returns:
// the calling process runs the VM and exits with the guest's exit code,
// without running deferred functions or flushing buffers. It returns only
// when the VM could not be built; the context is consumed either way.
// Without KVM, libkrun aborts the process instead of returning.
func (c *Context) StartEnter() error {
	const fn = "krun_start_enter"
	return check(fn, c.lib.b.ctx(fn, c.id))
}

func (c *Context) ctxStrs(fn, what string, arr []string) error {
	if err := checkArray(fn, what, arr); err != nil {
		return err
	}
	return check(fn, c.lib.b.ctxStrs(fn, c.id, arr))
}

func noNUL(fn string, ss ...string) error {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			return &Error{Func: fn, Errno: syscall.EINVAL, Detail: fmt.Sprintf("%q contains a NUL byte", s)}
		}
	}
	return nil
}

func checkArray(fn, what string, arr []string) error {
	if len(arr) > MaxArrayLen {
		return &Error{Func: fn, Errno: syscall.E2BIG, Detail: fmt.Sprintf("%d %ss, libkrun reads at most %d", len(arr), what, MaxArrayLen)}
	}
	return noNUL(fn, arr...)
}

func checkTag(fn, tag string) error {
	if tag == "" || len(tag) > MaxTagLen {
		return &Error{Func: fn, Errno: syscall.EINVAL, Detail: fmt.Sprintf("virtio-fs tag %q is %d bytes, want 1 to %d", tag, len(tag), MaxTagLen)}
	}
	return noNUL(fn, tag)
}

// KrunfwVersion loads libkrunfw, the library holding the guest kernel that
// libkrun loads by name, and returns the file it came from and its ABI
// version (krunfw_get_version).
func KrunfwVersion() (file string, version int, err error) {
	var errs []string
	for _, c := range KrunfwCandidates() {
		f, v, err := krunfwVersion(c)
		if errors.Is(err, ErrNoCgo) {
			return "", 0, err
		}
		if err == nil {
			return f, v, nil
		}
		errs = append(errs, err.Error())
	}
	return "", 0, fmt.Errorf("load libkrunfw: %s", strings.Join(errs, "; "))
}
