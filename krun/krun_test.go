//go:build cgo && linux

package krun

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// helperEnv makes the test binary run one helper instead of the tests, for
// scenarios that end the process (krun_start_enter, aborts).
const helperEnv = "KRUN_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		runHelper(h)
		os.Exit(3) // helpers end the process themselves
	}
	os.Exit(m.Run())
}

func runHelper(name string) {
	if name == "search" {
		// The default search, as krunbox's runner does it, then libkrunfw
		// by name, as libkrun loads it.
		lib, err := Open("")
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(0)
		}
		file, _, err := KrunfwVersion()
		fmt.Printf("%s|%s|%s|%v\n", lib.Path(), lib.Why(), file, err)
		os.Exit(0)
	}
	if name == "krunfw-version" {
		// libkrunfw by name, as found through this process's LD_LIBRARY_PATH.
		file, version, err := KrunfwVersion()
		fmt.Println(file, version, err)
		os.Exit(0)
	}
	lib, err := Open(os.Getenv("KRUN_TEST_LIB"))
	if err != nil {
		panic(err)
	}
	switch name {
	case "logger-once":
		if err := loggerOnce(lib); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("ok")
		os.Exit(0)
	case "second-log-init":
		// Past the binding's guard: the double must abort like libkrun.
		if err := lib.SetLogLevel(LogWarn); err != nil {
			panic(err)
		}
		logInit.Store(false)
		lib.SetLogLevel(LogWarn)
	case "long-tag-start":
		// Past the binding's tag check: libkrun panics when the VM starts.
		c, _ := lib.NewContext()
		c.SetRoot(os.Getenv("KRUN_TEST_ROOT"))
		c.lib.b.virtiofs3(c.id, strings.Repeat("t", MaxTagLen+1), "/", 0, false)
		c.StartEnter()
	}
}

// dump is what the test double received, from its TESTKRUN_DUMP file.
type dump struct {
	Event    string   `json:"event"`
	LogLevel int      `json:"log_level"`
	VCPUs    int      `json:"vcpus"`
	RAMMiB   int      `json:"ram_mib"`
	ExecPath string   `json:"exec_path"`
	Argv     []string `json:"argv"`
	Envp     []string `json:"envp"`
	EnvHost  bool     `json:"env_from_host"`
	Workdir  string   `json:"workdir"`
	Rlimits  []string `json:"rlimits"`
	Console  string   `json:"console"`
	PortMap  []string `json:"port_map"`
	Vsock    string   `json:"vsock"`
	TSI      uint32   `json:"tsi_features"`
	Net      bool     `json:"net"`
	NetFeats uint32   `json:"net_features"`
	Shares   []struct {
		Tag      string `json:"tag"`
		Path     string `json:"path"`
		ReadOnly bool   `json:"read_only"`
		Cache    *struct {
			EntryMs uint32 `json:"entry_timeout_ms"`
			AttrMs  uint32 `json:"attr_timeout_ms"`
			Policy  uint32 `json:"policy"`
		} `json:"cache"`
	} `json:"shares"`
	VsockPorts []struct {
		Port   uint32 `json:"port"`
		Path   string `json:"path"`
		Listen bool   `json:"listen"`
	} `json:"vsock_ports"`
	Overlays []struct {
		Tag  string `json:"tag"`
		Path string `json:"path"`
		Dir  bool   `json:"dir"`
		Mode uint32 `json:"mode"`
		Len  int    `json:"len"`
	} `json:"overlays"`
	Disks []struct {
		ID       string `json:"id"`
		Path     string `json:"path"`
		Format   uint32 `json:"format"`
		ReadOnly bool   `json:"read_only"`
	} `json:"disks"`
}

func openDouble(t *testing.T) *Library {
	t.Helper()
	lib, err := Open(testkrun.Library(t))
	if err != nil {
		t.Fatal(err)
	}
	if !lib.IsTestDouble() {
		t.Fatalf("%s is not the test double", lib.Path())
	}
	return lib
}

// freeAndDump frees c and returns what the double had been given.
func freeAndDump(t *testing.T, c *Context) dump {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dump.json")
	t.Setenv("TESTKRUN_DUMP", p)
	if err := c.Free(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("no dump from the double: %v", err)
	}
	var d dump
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dump %s: %v", data, err)
	}
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestMarshalling(t *testing.T) {
	lib := openDouble(t)
	c, err := lib.NewContext()
	must(t, err)
	dir := t.TempDir()
	args := []string{"-c", "echo \"$X\"", "", "ünï cødé", "a b  c"}
	env := []string{"PATH=/usr/bin:/bin", "X=with spaces", "EMPTY="}
	must(t, c.SetVMConfig(4, 2048))
	must(t, c.SetRoot(dir))
	must(t, c.AddVirtiofs("work", "/home/u/p", false))
	must(t, c.AddVirtiofs("ro", "/etc", true))
	must(t, c.SetExec("/bin/sh", args, env))
	must(t, c.SetWorkdir("/home/u/p"))
	must(t, c.SetRlimits([]Rlimit{{Resource: 7, Cur: 1024, Max: 4096}, {Resource: 6, Cur: 10, Max: 20}}))
	must(t, c.DisableImplicitVsock())
	must(t, c.AddVsock(0))
	must(t, c.AddVsockPort(1024, filepath.Join(dir, "agent.sock"), true))
	must(t, c.AddVsockPort(1025, "/run/host.sock", false))
	must(t, c.SetConsoleOutput(filepath.Join(dir, "console.log")))
	must(t, c.AddOverlayDir(RootTag, ".krunbox", 0o40755))
	must(t, c.AddOverlayFile(RootTag, ".krunbox/agent.json", []byte("{}\n"), 0o100644, false))

	d := freeAndDump(t, c)
	if d.Event != "free" || d.VCPUs != 4 || d.RAMMiB != 2048 || d.ExecPath != "/bin/sh" || d.Workdir != "/home/u/p" {
		t.Errorf("scalars: %+v", d)
	}
	if strings.Join(d.Argv, "|") != strings.Join(args, "|") || len(d.Argv) != len(args) {
		t.Errorf("argv = %q, want %q", d.Argv, args)
	}
	if d.EnvHost || strings.Join(d.Envp, "|") != strings.Join(env, "|") {
		t.Errorf("envp = %q (from host %v), want %q", d.Envp, d.EnvHost, env)
	}
	if strings.Join(d.Rlimits, ",") != "7=1024:4096,6=10:20" {
		t.Errorf("rlimits = %q", d.Rlimits)
	}
	if len(d.Shares) != 3 || d.Shares[0].Tag != RootTag || d.Shares[0].Path != dir ||
		d.Shares[1].Tag != "work" || d.Shares[1].ReadOnly || d.Shares[2].Tag != "ro" || !d.Shares[2].ReadOnly {
		t.Errorf("shares = %+v", d.Shares)
	}
	if d.Vsock != "explicit" || d.TSI != 0 {
		t.Errorf("vsock %q tsi %d, want explicit without TSI", d.Vsock, d.TSI)
	}
	if len(d.VsockPorts) != 2 || !d.VsockPorts[0].Listen || d.VsockPorts[1].Listen || d.VsockPorts[1].Port != 1025 {
		t.Errorf("vsock ports = %+v", d.VsockPorts)
	}
	if len(d.Overlays) != 2 || !d.Overlays[0].Dir || d.Overlays[1].Path != ".krunbox/agent.json" || d.Overlays[1].Len != 3 || d.Overlays[1].Mode != 0o100644 {
		t.Errorf("overlays = %+v", d.Overlays)
	}
}

// The port map reaches krun_set_port_map as given, in order, and an empty
// one as an empty array: libkrun dereferences a NULL.
func TestPortMapMarshalling(t *testing.T) {
	lib := openDouble(t)
	for _, ports := range [][]string{nil, {"8080:80"}, {"8080:80", "2222:22", "65535:1"}} {
		t.Run(fmt.Sprint(len(ports)), func(t *testing.T) {
			c, err := lib.NewContext()
			must(t, err)
			must(t, c.SetPortMap(ports))
			d := freeAndDump(t, c)
			if d.PortMap == nil || strings.Join(d.PortMap, ",") != strings.Join(ports, ",") || len(d.PortMap) != len(ports) {
				t.Errorf("port map = %q, want %q (never NULL)", d.PortMap, ports)
			}
		})
	}
}

func TestNilEnvIsEmptyNotHost(t *testing.T) {
	lib := openDouble(t)
	c, err := lib.NewContext()
	must(t, err)
	must(t, c.SetExec("/bin/true", nil, nil))
	d := freeAndDump(t, c)
	if d.EnvHost || len(d.Envp) != 0 || d.Argv == nil || len(d.Argv) != 0 {
		t.Errorf("nil args/env: argv %q envp %q from host %v; want empty arrays, never the host environment", d.Argv, d.Envp, d.EnvHost)
	}
}

func TestErrors(t *testing.T) {
	lib := openDouble(t)
	dir := t.TempDir()
	existing := filepath.Join(dir, "exists.sock")
	must(t, os.WriteFile(existing, nil, 0o600))

	tests := []struct {
		name  string
		call  func(c *Context) error
		fn    string
		errno syscall.Errno
	}{
		{"tag too long", func(c *Context) error { return c.AddVirtiofs(strings.Repeat("x", 37), dir, false) }, "krun_add_virtiofs3", syscall.EINVAL},
		{"empty tag", func(c *Context) error { return c.AddVirtiofs("", dir, true) }, "krun_add_virtiofs3", syscall.EINVAL},
		{"NUL in path", func(c *Context) error { return c.SetRoot("/a\x00b") }, "krun_set_root", syscall.EINVAL},
		{"invalid UTF-8 argv", func(c *Context) error { return c.SetExec("/bin/sh", []string{"\xff"}, nil) }, "krun_set_exec", syscall.EINVAL},
		{"invalid UTF-8 env", func(c *Context) error { return c.SetEnv([]string{"A=\xc3\x28"}) }, "krun_set_env", syscall.EINVAL},
		{"too many arguments", func(c *Context) error { return c.SetExec("/bin/sh", make([]string, MaxArrayLen+1), nil) }, "krun_set_exec", syscall.E2BIG},
		{"zero vcpus", func(c *Context) error { return c.SetVMConfig(0, 128) }, "krun_set_vm_config", syscall.EINVAL},
		{"add_vsock without disabling implicit vsock", func(c *Context) error { return c.AddVsock(0) }, "krun_add_vsock", syscall.EEXIST},
		{"bad TSI flags", func(c *Context) error { must(t, c.DisableImplicitVsock()); return c.AddVsock(8) }, "krun_add_vsock", syscall.EINVAL},
		{"port on disabled vsock", func(c *Context) error {
			must(t, c.DisableImplicitVsock())
			return c.AddVsockPort(1, filepath.Join(dir, "a.sock"), false)
		}, "krun_add_vsock_port2", syscall.ENODEV},
		{"port map on disabled vsock", func(c *Context) error { must(t, c.DisableImplicitVsock()); return c.SetPortMap(nil) }, "krun_set_port_map", syscall.ENODEV},
		{"listen path exists", func(c *Context) error { return c.AddVsockPort(2, existing, true) }, "krun_add_vsock_port2", syscall.EEXIST},
		{"duplicate guest port", func(c *Context) error { return c.SetPortMap([]string{"8080:80", "8081:80"}) }, "krun_set_port_map", syscall.EINVAL},
		{"duplicate host port", func(c *Context) error { return c.SetPortMap([]string{"8080:80", "8080:81"}) }, "krun_set_port_map", syscall.EINVAL},
		{"malformed port map", func(c *Context) error { return c.SetPortMap([]string{"80"}) }, "krun_set_port_map", syscall.EINVAL},
		{"console twice", func(c *Context) error {
			must(t, c.SetConsoleOutput("/tmp/a"))
			return c.SetConsoleOutput("/tmp/b")
		}, "krun_set_console_output", syscall.EINVAL},
		{"overlay on unknown fs", func(c *Context) error { return c.AddOverlayDir("nope", "d", 0o40755) }, "krun_fs_add_overlay_dir", syscall.ENOENT},
		{"overlay without parent", func(c *Context) error {
			must(t, c.SetRoot(dir))
			return c.AddOverlayFile(RootTag, "missing/f", []byte("x"), 0o100644, false)
		}, "krun_fs_add_overlay_file", syscall.ENOENT},
		{"overlay under a file", func(c *Context) error {
			must(t, c.SetRoot(dir))
			must(t, c.AddOverlayFile(RootTag, "f", []byte("x"), 0o100644, false))
			return c.AddOverlayFile(RootTag, "f/g", []byte("x"), 0o100644, false)
		}, "krun_fs_add_overlay_file", syscall.ENOTDIR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := lib.NewContext()
			must(t, err)
			defer c.Free()
			err = tt.call(c)
			var ke *Error
			if !errors.As(err, &ke) || ke.Func != tt.fn || ke.Errno != tt.errno {
				t.Fatalf("error = %v, want %s failing with %v", err, tt.fn, tt.errno)
			}
			if !errors.Is(err, tt.errno) || !strings.Contains(err.Error(), tt.fn) {
				t.Errorf("%q does not name %s and match %v", err, tt.fn, tt.errno)
			}
		})
	}
}

func TestRejectedCallsDoNotReachLibrary(t *testing.T) {
	lib := openDouble(t)
	c, err := lib.NewContext()
	must(t, err)
	if err := c.AddVirtiofs(strings.Repeat("x", 37), "/", false); err == nil {
		t.Fatal("long tag accepted")
	}
	if d := freeAndDump(t, c); len(d.Shares) != 0 {
		t.Errorf("the double received a share the binding refused: %+v", d.Shares)
	}
}

func TestUnknownAndConsumedContext(t *testing.T) {
	lib := openDouble(t)
	c, err := lib.NewContext()
	must(t, err)
	must(t, c.Free())
	for name, err := range map[string]error{
		"free twice":       c.Free(),
		"set after free":   c.SetWorkdir("/"),
		"start after free": c.StartEnter(),
	} {
		if !errors.Is(err, syscall.ENOENT) {
			t.Errorf("%s: %v, want ENOENT", name, err)
		}
	}
}

func TestContextIDsIncrease(t *testing.T) {
	lib := openDouble(t)
	a, err := lib.NewContext()
	must(t, err)
	b, err := lib.NewContext()
	must(t, err)
	defer a.Free()
	defer b.Free()
	if b.ID() <= a.ID() {
		t.Errorf("ids %d then %d: libkrun never reuses an id", a.ID(), b.ID())
	}
}

func TestStartEnterErrorsReturn(t *testing.T) {
	lib := openDouble(t)
	t.Run("no root", func(t *testing.T) {
		c, err := lib.NewContext()
		must(t, err)
		must(t, c.SetExec("/bin/true", nil, nil))
		if err := c.StartEnter(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("StartEnter without root: %v, want EINVAL", err)
		}
		if err := c.Free(); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("context not consumed by StartEnter: Free = %v", err)
		}
	})
	t.Run("no libkrunfw", func(t *testing.T) {
		t.Setenv("TESTKRUN_NO_KRUNFW", "1")
		c, err := lib.NewContext()
		must(t, err)
		must(t, c.SetRoot(t.TempDir()))
		err = c.StartEnter()
		var ke *Error
		if !errors.As(err, &ke) || ke.Func != "krun_start_enter" || ke.Errno != syscall.ENOENT {
			t.Errorf("StartEnter without libkrunfw: %v, want krun_start_enter ENOENT", err)
		}
	})
}

func TestFeatures(t *testing.T) {
	lib := openDouble(t)
	for _, f := range AllFeatures() {
		// The double has NET (krun_add_net_unixstream) and BLK
		// (krun_add_disk*), nothing else.
		if ok, err := lib.HasFeature(f); err != nil || ok != (f == FeatureNet || f == FeatureBlk) {
			t.Errorf("HasFeature(%s) = %v, %v; the double has NET and BLK only", f, ok, err)
		}
	}
	t.Setenv("TESTKRUN_NO_NET", "1")
	if ok, err := lib.HasFeature(FeatureNet); err != nil || ok {
		t.Errorf("HasFeature(net) with TESTKRUN_NO_NET = %v, %v; want false", ok, err)
	}
	if _, err := lib.HasFeature(Feature(12)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("unknown feature: %v, want EINVAL", err)
	}
}

func TestAddNetUnixstream(t *testing.T) {
	lib := openDouble(t)
	add := func(features uint32) (*Context, error) {
		c, err := lib.NewContext()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Free() })
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fds[0]); syscall.Close(fds[1]) })
		return c, c.AddNetUnixstream(fds[1], [6]byte{0x5a, 0x94, 0xef, 0xe4, 0x0c, 0xee}, features)
	}
	const features = NetFeatureGuestCSUM | NetFeatureGuestTSO4 | NetFeatureGuestTSO6
	c, err := add(features)
	if err != nil {
		t.Fatal(err)
	}
	// libkrun: a port map is TSI's; with a net device it is refused.
	var ke *Error
	if err := c.SetPortMap([]string{"8080:80"}); !errors.As(err, &ke) || ke.Errno != syscall.EINVAL {
		t.Errorf("SetPortMap after a net device: %v, want EINVAL", err)
	}
	if d := freeAndDump(t, c); !d.Net || d.NetFeats != features {
		t.Errorf("the double got net %v, features %#x; want a device with %#x", d.Net, d.NetFeats, features)
	}
	// libkrun 1.19 refuses a feature bit it does not know (NET_ALL_FEATURES).
	if _, err := add(1 << 3); !errors.As(err, &ke) || ke.Errno != syscall.EINVAL {
		t.Errorf("AddNetUnixstream with an unknown feature: %v, want EINVAL", err)
	}
	t.Setenv("TESTKRUN_NO_NET", "1")
	if _, err := add(0); !errors.Is(err, ErrNoNet) {
		t.Errorf("AddNetUnixstream on a libkrun without NET: %v, want ErrNoNet", err)
	}
}

func TestOptionalSymbolsMissing(t *testing.T) {
	lib, err := Open(testkrun.Build(t, "-DTESTKRUN_LEGACY"))
	must(t, err)
	c, err := lib.NewContext()
	must(t, err)
	defer c.Free()
	for name, err := range map[string]error{
		"krun_add_virtiofs3":          c.AddVirtiofs("ro", "/etc", true),
		"krun_disable_implicit_vsock": c.DisableImplicitVsock(),
		"krun_add_vsock":              c.AddVsock(0),
		"krun_fs_add_overlay_file":    c.AddOverlayFile(RootTag, "f", nil, 0o100644, false),
	} {
		var ue *UnsupportedError
		if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ue) || ue.Func != name || !strings.Contains(err.Error(), "needs libkrun 1.") {
			t.Errorf("%s: %v, want an UnsupportedError naming it and the version", name, err)
		}
	}
	// A read-write share falls back to krun_add_virtiofs.
	if err := c.AddVirtiofs("rw", "/tmp", false); err != nil {
		t.Errorf("read-write share on a pre-1.18 library: %v", err)
	}
}

// SetShareCache reaches libkrun as given, for the share it names and no
// other; what libkrun would refuse is refused.
func TestShareCache(t *testing.T) {
	lib := openDouble(t)
	c, err := lib.NewContext()
	must(t, err)
	must(t, c.SetRoot(t.TempDir()))
	must(t, c.AddVirtiofs("work", "/home/u/p", false))
	must(t, c.AddVirtiofs("deps", "/home/u/.cache", true))
	must(t, c.SetShareCache("deps", ShareCache{EntryTimeout: time.Hour, AttrTimeout: 1500 * time.Millisecond, Policy: CacheAlways}))
	must(t, c.SetShareCache("work", ShareCache{EntryTimeout: time.Second, Policy: CacheNever}))
	must(t, c.SetShareCache("work", Coherent)) // the last call wins
	for _, tc := range []struct {
		name string
		tag  string
		sc   ShareCache
		want syscall.Errno
	}{
		{"unknown tag", "nope", Coherent, syscall.ENOENT},
		{"empty tag", "", Coherent, syscall.EINVAL},
		{"unknown policy", "work", ShareCache{Policy: CacheAlways + 1}, syscall.EINVAL},
		{"negative timeout", "work", ShareCache{EntryTimeout: -time.Second}, syscall.EINVAL},
		{"timeout past 2^32 ms", "work", ShareCache{AttrTimeout: 50 * 24 * time.Hour}, syscall.EINVAL},
	} {
		if err := c.SetShareCache(tc.tag, tc.sc); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// The double checks what libkrun checks, past the binding.
	if r := c.lib.b.virtiofsCache(c.id, "work", 0, 0, 7); r != -int32(syscall.EINVAL) {
		t.Errorf("policy 7 past the binding: %d, want -EINVAL", r)
	}
	d := freeAndDump(t, c)
	if len(d.Shares) != 3 {
		t.Fatalf("shares = %+v", d.Shares)
	}
	if d.Shares[0].Cache != nil {
		t.Errorf("the root's cache was set: %+v", *d.Shares[0].Cache)
	}
	if w := d.Shares[1].Cache; w == nil || w.EntryMs != 0 || w.AttrMs != 0 || w.Policy != uint32(CacheAuto) {
		t.Errorf("work's cache = %+v, want timeouts 0 and the auto policy", w)
	}
	if dp := d.Shares[2].Cache; dp == nil || dp.EntryMs != 3600000 || dp.AttrMs != 1500 || dp.Policy != uint32(CacheAlways) {
		t.Errorf("deps's cache = %+v, want 3600000 ms, 1500 ms, always", dp)
	}
}

// An upstream libkrun lacks krun_set_virtiofs_cache: the error says so and
// where the function comes from.
func TestAddDisk(t *testing.T) {
	lib := openDouble(t)
	if !lib.HasDisks() {
		t.Fatalf("the double lacks %s", DiskFunc)
	}
	c, err := lib.NewContext()
	must(t, err)
	must(t, c.AddDisk("root", "/images/root.img", DiskRaw, false))
	must(t, c.AddDisk("data", "/images/data.qcow2", DiskQcow2, true))
	if err := c.AddDisk("x", "/a\x00b", DiskRaw, false); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a path with a NUL: %v, want EINVAL before the library", err)
	}
	var ke *Error
	if err := c.AddDisk("x", "/x.img", DiskFormat(7), false); !errors.As(err, &ke) || ke.Errno != syscall.EINVAL {
		t.Errorf("an unknown format: %v, want the library's EINVAL", err)
	}
	d := freeAndDump(t, c)
	if len(d.Disks) != 2 || d.Disks[0].ID != "root" || d.Disks[0].Path != "/images/root.img" || d.Disks[0].Format != 0 || d.Disks[0].ReadOnly ||
		d.Disks[1].ID != "data" || d.Disks[1].Format != 1 || !d.Disks[1].ReadOnly {
		t.Errorf("the double got disks %+v", d.Disks)
	}
}

// A libkrun built without BLK exports no disk function: AddDisk says so.
func TestAddDiskUnsupported(t *testing.T) {
	lib, err := Open(testkrun.Build(t, "-DTESTKRUN_NO_BLK"))
	must(t, err)
	if lib.HasDisks() {
		t.Fatalf("a double built without BLK exports %s", DiskFunc)
	}
	if ok, err := lib.HasFeature(FeatureBlk); err != nil || ok {
		t.Errorf("HasFeature(blk) = %v, %v; want false", ok, err)
	}
	c, err := lib.NewContext()
	must(t, err)
	defer c.Free()
	var ue *UnsupportedError
	if err := c.AddDisk("root", "/x.img", DiskRaw, false); !errors.As(err, &ue) || ue.Func != DiskFunc || !strings.Contains(err.Error(), "1.10 or later built with BLK") {
		t.Errorf("AddDisk without BLK: %v, want an UnsupportedError for %s", err, DiskFunc)
	}
}

func TestShareCacheUnsupported(t *testing.T) {
	lib, err := Open(testkrun.Build(t, "-DTESTKRUN_STOCK"))
	must(t, err)
	if lib.Has(ShareCacheFunc) {
		t.Fatalf("the stock double exports %s", ShareCacheFunc)
	}
	c, err := lib.NewContext()
	must(t, err)
	defer c.Free()
	must(t, c.AddVirtiofs("work", "/tmp", false))
	var ue *UnsupportedError
	if err := c.SetShareCache("work", Coherent); !errors.As(err, &ue) || ue.Func != ShareCacheFunc || !strings.Contains(err.Error(), "hack/libkrun") {
		t.Errorf("SetShareCache on a stock libkrun: %v, want an UnsupportedError pointing at hack/libkrun", err)
	}
}

func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open("/nonexistent/libkrun.so.1")
	var le *LoadError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "/nonexistent/libkrun.so.1") || le.Hint() == "" {
		t.Fatalf("Open(missing) = %v, want a LoadError naming the file, with a hint", err)
	}
	t.Setenv(LibraryEnv, "/also/missing.so")
	if _, err := Open(""); err == nil || !strings.Contains(err.Error(), "/also/missing.so") {
		t.Errorf("Open with %s set: %v, want it to try that file", LibraryEnv, err)
	}
}

func TestOpenMissingRequiredSymbol(t *testing.T) {
	lib := testkrun.CompileLibrary(t, "partial", "int krun_set_log_level(unsigned l) { return 0; }\n")
	_, err := Open(lib)
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Func != "krun_create_ctx" {
		t.Fatalf("Open(partial library) = %v, want krun_create_ctx reported missing", err)
	}
}

const (
	krunfwSource   = "int krunfw_get_version(void) { return 4; }\n"
	noKrunfwSource = "int krunfw_get_kernel(void) { return 0; }\n"
)

func TestKrunfwVersionOfAFile(t *testing.T) {
	good := testkrun.Krunfw(t, krunfwSource)
	tests := []struct {
		name, path string
		version    int
		err        string // "" for none
	}{
		{"libkrunfw", good, 4, ""},
		{"no krunfw_get_version", testkrun.Krunfw(t, noKrunfwSource), 0, "no krunfw_get_version"},
		{"missing", "/nonexistent/" + testkrun.KrunfwName, 0, "/nonexistent/" + testkrun.KrunfwName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file, version, err := krunfwVersion(tt.path)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("krunfwVersion(%s) = %q, %d, %v; want an error saying %q", tt.path, file, version, err, tt.err)
				}
				return
			}
			if err != nil || file != tt.path || version != tt.version {
				t.Fatalf("krunfwVersion(%s) = %q, %d, %v; want %q, %d", tt.path, file, version, err, tt.path, tt.version)
			}
		})
	}
}

// KrunfwVersion finds libkrunfw by name, as libkrun does, and reports the
// file it loaded. Run in a child process whose LD_LIBRARY_PATH leads to a
// stand-in.
func TestKrunfwVersionByName(t *testing.T) {
	good := testkrun.Krunfw(t, krunfwSource)
	bad := testkrun.Krunfw(t, noKrunfwSource)
	tests := []struct {
		name, dir, want string
	}{
		{"found", filepath.Dir(good), good + " 4 <nil>"},
		{"no krunfw_get_version", filepath.Dir(bad), " 0 load libkrunfw: " + testkrun.KrunfwName + ": no krunfw_get_version"},
		{"not found", t.TempDir(), " 0 load libkrunfw: " + testkrun.KrunfwName + ": cannot open shared object file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "not found" {
				if f, _, err := KrunfwVersion(); err == nil {
					t.Skipf("this host has a libkrunfw (%s)", f)
				}
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"=krunfw-version", "LD_LIBRARY_PATH="+tt.dir)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), tt.want) {
				t.Fatalf("KrunfwVersion with LD_LIBRARY_PATH=%s: %q, %v; want %q", tt.dir, out, err, tt.want)
			}
		})
	}
}

func TestLoggerOncePerProcess(t *testing.T) {
	// In a fresh process: the logger is initialised once per process.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=logger-once", "KRUN_TEST_LIB="+testkrun.Library(t))
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "ok\n" {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

// loggerOnce initialises the logger, then checks that further
// initialisations fail in Go instead of aborting in the library.
func loggerOnce(lib *Library) error {
	if err := lib.InitLog(-1, LogWarn); err != nil {
		return err
	}
	if err := lib.SetLogLevel(LogInfo); !errors.Is(err, ErrLoggerInitialized) || !strings.Contains(err.Error(), "krun_set_log_level") {
		return fmt.Errorf("second logger init: %v, want ErrLoggerInitialized naming the function", err)
	}
	if err := lib.InitLog(2, LogInfo); !errors.Is(err, ErrLoggerInitialized) {
		return fmt.Errorf("third logger init: %v, want ErrLoggerInitialized", err)
	}
	return nil
}

// The double aborts where libkrun aborts, so the binding's guards are
// tested against the real behaviour.
func TestDoubleAbortsLikeLibkrun(t *testing.T) {
	lib := testkrun.Library(t)
	for _, helper := range []string{"second-log-init", "long-tag-start"} {
		t.Run(helper, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+helper, "KRUN_TEST_LIB="+lib, "KRUN_TEST_ROOT="+t.TempDir())
			out, err := cmd.CombinedOutput()
			// The Go runtime turns a SIGABRT in C code into a crash report
			// and exit status 2.
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !strings.Contains(string(out), "SIGABRT: abort") {
				t.Fatalf("helper ended with %v, want an abort; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), "panicked") {
				t.Errorf("no panic message:\n%s", out)
			}
		})
	}
}

// Without cgo the package still builds and says so instead of loading.
func TestBuiltWithoutCgo(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go to build the package without cgo")
	}
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestNoCgo$", "-v", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNoCgo") {
		t.Fatalf("CGO_ENABLED=0 go test: %v\n%s", err, out)
	}
}
