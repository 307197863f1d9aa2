package hostapi

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/proctree"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

// testHost returns a Host on fresh directories that runs VMs on the libkrun
// test double with the agent built by TestMain, and the reference of a
// busybox image served on 127.0.0.1.
func testHost(t testing.TB, opts ...HostOption) (*Host, string) {
	t.Helper()
	if err := vmm.CheckNamespaces(); err != nil {
		t.Skipf("the libkrun test double needs namespaces: %v", err)
	}
	lib := testkrun.Library(t)
	ref := testimage.Serve(t, testimage.Busybox(t))
	t.Setenv("KRUNBOX_AGENT", agenttest.Binary())
	base := t.TempDir()
	dirs := Dirs{State: filepath.Join(base, "state"), Cache: filepath.Join(base, "cache"), Config: filepath.Join(base, "config")}
	h, err := NewHost(append([]HostOption{WithDirs(dirs), WithLibkrun(lib), WithStartTimeout(30 * time.Second), WithStopTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return h, ref
}

// started creates and starts a sandbox, removed when the test ends.
func started(t testing.TB, h *Host, cfg Config, opts ...StartOption) *Sandbox {
	t.Helper()
	sb, err := h.Create(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	if err := sb.Start(t.Context(), opts...); err != nil {
		t.Fatal(err)
	}
	return sb
}

func run(t *testing.T, sb *Sandbox, args ...string) string {
	t.Helper()
	c := sb.Client()
	defer c.Close()
	out, err := c.Output(t.Context(), args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

func TestSandboxLifecycle(t *testing.T) {
	h, ref := testHost(t)
	ctx := t.Context()
	ws := t.TempDir()
	sb, err := h.Create(ctx, Config{Name: "life", Image: ref, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := sb.Status(ctx); err != nil || st.State != StateCreated {
		t.Fatalf("status after create: %+v, %v", st, err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := sb.Status(ctx)
	if err != nil || st.State != StateRunning || st.Agent == nil || st.Pid == 0 {
		t.Fatalf("status after start: %+v, %v", st, err)
	}
	if l := st.Libkrun; l == nil || l.Why != krun.WhyGiven || !strings.HasSuffix(l.Library, "libkrun.so.1") {
		t.Errorf("status after start says libkrun %+v, want the host's library, named by the caller", l)
	}
	if got := run(t, sb, "hostname"); got != "life" {
		t.Errorf("guest hostname %q, want the sandbox name", got)
	}
	if got := run(t, sb, "pwd"); got != ws {
		t.Errorf("default workdir %q, want the workspace %q", got, ws)
	}

	// The workspace is live, at the same path, both ways.
	run(t, sb, "sh", "-c", "echo from-guest > "+ws+"/g")
	if b, err := os.ReadFile(filepath.Join(ws, "g")); err != nil || string(b) != "from-guest\n" {
		t.Errorf("guest write seen on the host: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(ws, "h"), []byte("from-host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := run(t, sb, "cat", ws+"/h"); got != "from-host" {
		t.Errorf("host write seen in the guest: %q", got)
	}
	run(t, sb, "rm", ws+"/h")
	if _, err := os.Stat(filepath.Join(ws, "h")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("guest delete not seen on the host: %v", err)
	}
	os.Remove(filepath.Join(ws, "g"))
	if out := run(t, sb, "sh", "-c", "test -e "+ws+"/g && echo present || echo gone"); out != "gone" {
		t.Errorf("host delete seen in the guest as %q", out)
	}

	// Root file system changes persist across stop and start, in this
	// sandbox only, and never reach the image cache.
	run(t, sb, "sh", "-c", "echo kept > /root/x")
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := sb.Status(ctx); err != nil || st.State != StateStopped {
		t.Fatalf("status after stop: %+v, %v", st, err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, sb, "cat", "/root/x"); got != "kept" {
		t.Errorf("/root/x after restart: %q", got)
	}
	other := started(t, h, Config{Image: ref})
	if out := run(t, other, "sh", "-c", "cat /root/x 2>/dev/null || echo absent"); out != "absent" {
		t.Errorf("another sandbox sees /root/x: %q", out)
	}
	store, _ := h.images()
	imgs, _ := store.List(ctx)
	if len(imgs) != 1 {
		t.Fatalf("images: %v", imgs)
	}
	if _, err := os.Stat(filepath.Join(imgs[0].Rootfs, "root", "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a guest write reached the image cache: %v", err)
	}

	// Remove stops the VM and leaves nothing behind.
	if err := sb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sb.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox directory left after remove: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(h.Dirs().State, "trash")); len(entries) != 0 {
		t.Errorf("trash not emptied: %d entries", len(entries))
	}
	if _, err := h.Get("life"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after remove: %v, want ErrNotFound", err)
	}
	if sbs, _ := h.List(); len(sbs) != 1 || sbs[0].Name() != other.Name() {
		t.Errorf("List after remove: %v", sbs)
	}
}

func TestCreateRefusesTakenName(t *testing.T) {
	h, ref := testHost(t)
	if _, err := h.Create(t.Context(), Config{Name: "dup", Image: ref}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Create(t.Context(), Config{Name: "dup", Image: ref}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
}

// TestCreateRefusesExposingKrunbox refuses mounts and workspaces through
// which a guest would reach krunbox's own directories: the image trees all
// sandboxes share, the other sandboxes, the configuration.
func TestCreateRefusesExposingKrunbox(t *testing.T) {
	h, ref := testHost(t)
	d := h.Dirs()
	base := filepath.Dir(d.State)
	if _, err := h.Create(t.Context(), Config{Name: "first", Image: ref}); err != nil {
		t.Fatal(err) // creates the state and cache directories
	}
	elsewhere := t.TempDir()
	tests := []struct {
		name string
		cfg  Config
		what string
	}{
		{"workspace containing everything", Config{Workspace: base}, "state directory"},
		{"mount of the cache", Config{Mounts: []Mount{{HostPath: d.Cache, GuestPath: "/c"}}}, "image cache"},
		{"read-only mount inside the state", Config{Mounts: []Mount{{HostPath: d.Sandboxes(), GuestPath: "/s", ReadOnly: true}}}, "state directory"},
		{"mount of the configuration", Config{Mounts: []Mount{{HostPath: mkdir(t, d.Config), GuestPath: "/etc/kb"}}}, "configuration directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Image = ref
			_, err := h.Create(t.Context(), tt.cfg)
			var hint interface{ Hint() string }
			if !errors.Is(err, ErrInvalidMount) || !strings.Contains(err.Error(), tt.what) || !errors.As(err, &hint) {
				t.Fatalf("Create = %v; want an invalid-mount error naming the %s, with a hint", err, tt.what)
			}
		})
	}
	// A sibling sharing a prefix is not inside: "<base>/state2" is fine.
	sibling := mkdir(t, d.State+"2")
	if _, err := h.Create(t.Context(), Config{Image: ref, Workspace: sibling, Mounts: []Mount{{HostPath: elsewhere, GuestPath: "/x"}}}); err != nil {
		t.Fatalf("Create with a sibling of the state directory: %v", err)
	}
	if sbs, _ := h.List(); len(sbs) != 2 {
		t.Fatalf("%d sandboxes after the refusals, want 2 (nothing half-created)", len(sbs))
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAutoRemove removes auto-remove sandboxes whose VM ran and stopped
// when the program that started them could not (it was killed): the next
// List or Create does, but not one never started, nor one whose lock
// another process holds.
func TestAutoRemove(t *testing.T) {
	h, ref := testHost(t)
	fresh, err := h.Create(t.Context(), Config{Name: "fresh", Image: ref, AutoRemove: true})
	if err != nil {
		t.Fatal(err)
	}
	ended := started(t, h, Config{Name: "ended", Image: ref, AutoRemove: true})
	kept := started(t, h, Config{Name: "kept", Image: ref})
	busy := started(t, h, Config{Name: "busy", Image: ref, AutoRemove: true})
	for _, sb := range []*Sandbox{ended, kept, busy} {
		if err := sb.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// busy's lock is held, as by a krunbox starting it again.
	l := flock.New(busy.path(lockFile))
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	sbs, err := h.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sb := range sbs {
		names = append(names, sb.Name())
	}
	if want := []string{"busy", "fresh", "kept"}; !slices.Equal(names, want) {
		t.Fatalf("List = %v, want %v", names, want)
	}
	if _, err := os.Stat(ended.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the ended sandbox's directory: %v, want it gone", err)
	}
	l.Unlock()
	if _, err := h.Create(t.Context(), Config{Name: "next", Image: ref}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Get("busy"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(busy) after a Create = %v, want ErrNotFound: Create removes ended auto-remove sandboxes", err)
	}
	if _, err := h.Get(fresh.Name()); err != nil {
		t.Errorf("a never started auto-remove sandbox was removed: %v", err)
	}
}

func TestConcurrentStartsStartOneVM(t *testing.T) {
	h, ref := testHost(t)
	sb, err := h.Create(t.Context(), Config{Name: "twice", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			// Each start as another process would do it: its own Host.
			h2, _ := NewHost(WithDirs(h.Dirs()), WithLibkrun(h.libkrun))
			s2, err := h2.Get("twice")
			if err == nil {
				err = s2.Start(t.Context())
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// One VM: the guest agent has the same boot and counts no other VM.
	st, err := sb.Status(t.Context())
	if err != nil || st.State != StateRunning {
		t.Fatalf("status: %+v, %v", st, err)
	}
	out := run(t, sb, "sh", "-c", "ls /proc | grep -c '^[0-9]'")
	if out == "" {
		t.Fatal("no processes listed")
	}
	ri, err := vmm.Open(sb.Dir()).Runner()
	if err != nil {
		t.Fatal(err)
	}
	if ri.Pid != st.Pid {
		t.Errorf("runner pid changed between calls: %d and %d", ri.Pid, st.Pid)
	}
}

func TestKilledRunnerIsDead(t *testing.T) {
	h, ref := testHost(t)
	sb := started(t, h, Config{Name: "victim", Image: ref})
	vm := vmm.Open(sb.Dir())
	if err := vm.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := sb.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := sb.Status(t.Context())
	if err != nil || st.State != StateDead || !strings.Contains(st.Reason, "SIGKILL") {
		t.Fatalf("status after SIGKILL: %+v, %v; want dead, saying SIGKILL", st, err)
	}
	c := sb.Client()
	defer c.Close()
	if _, err := c.Output(t.Context(), "true"); err == nil {
		t.Fatal("exec in a dead sandbox succeeded")
	}
	// Start again works: the stale socket and pid are cleaned.
	if err := sb.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := run(t, sb, "echo", "back"); got != "back" {
		t.Errorf("after restart: %q", got)
	}
}

// A guest agent that stops answering: Status says the sandbox is
// unresponsive, and Stop, its shutdown through the agent getting no answer
// within the stop timeout, ends the VM itself (SIGTERM to the runner).
func TestStopUnresponsiveSandbox(t *testing.T) {
	const stopTimeout = time.Second
	h, ref := testHost(t, WithStopTimeout(stopTimeout))
	sb := started(t, h, Config{Name: "frozen", Image: ref})
	ri, err := vmm.Open(sb.Dir()).Runner()
	if err != nil {
		t.Fatal(err)
	}
	agent := proctree.DescendantNamed(ri.Pid, "krunbox-agent")
	if agent == 0 {
		t.Fatalf("no krunbox-agent process below the runner %d", ri.Pid)
	}
	if err := syscall.Kill(agent, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(agent, syscall.SIGCONT) })

	var st *Status
	poll.Until(t, "Status to say unresponsive", 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		st, err = sb.Status(ctx)
		return err == nil && st.State == StateUnresponsive
	})
	if st.Pid != ri.Pid || st.Reason == "" || st.Agent != nil {
		t.Errorf("status of the frozen sandbox: %+v; want its runner's pid and a reason", st)
	}

	start := time.Now()
	if err := sb.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// The agent had the stop timeout to answer; then SIGTERM ends the runner
	// at once, well before SIGKILL would (5 s later).
	if took := time.Since(start); took < stopTimeout || took > stopTimeout+5*time.Second {
		t.Errorf("Stop took %v, want the stop timeout (%v) and a prompt SIGTERM", took, stopTimeout)
	}
	st, err = sb.Status(t.Context())
	if err != nil || st.State != StateStopped || st.Exit == nil || st.Exit.Signal != "SIGTERM" {
		t.Fatalf("status after Stop: %+v, %v; want stopped, the runner ended by SIGTERM", st, err)
	}
	// The guest's processes die with the VM (the double kills its PID
	// namespace once the runner is gone, a real VM just ends).
	waitGone(t, agent)
}

func TestStartFailureSaysWhy(t *testing.T) {
	h, ref := testHost(t)
	gone := t.TempDir()
	sb, err := h.Create(t.Context(), Config{Name: "nomount", Image: ref, Mounts: []Mount{{HostPath: gone, GuestPath: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	err = sb.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), gone) {
		t.Fatalf("start with a vanished share: %v; want an error naming it", err)
	}
	if st, _ := sb.Status(t.Context()); st.State == StateRunning {
		t.Errorf("a failed start left the VM running")
	}

	missing, _ := NewHost(WithDirs(h.Dirs()), WithLibkrun(filepath.Join(t.TempDir(), "libkrun.so.1")))
	sb2, err := missing.Create(t.Context(), Config{Name: "nolib", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb2.Remove(context.Background()) })
	err = sb2.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "libkrun") {
		t.Fatalf("start without libkrun: %v; want an error about libkrun", err)
	}
}

func TestIdleTimeoutStopsTheVM(t *testing.T) {
	h, ref := testHost(t)
	sb := started(t, h, Config{Name: "idle", Image: ref, IdleTimeout: 500 * time.Millisecond})
	waitStoppedItself(t, sb)
	if st, err := sb.Status(t.Context()); err != nil || st.State != StateStopped {
		t.Errorf("status after the idle timeout: %+v, %v; want stopped", st, err)
	}
}

// A VM started for a main command that never comes (krunbox run killed
// after the start) stops on its own, and its console says why.
func TestForMainCommandStopsAVMWithoutOne(t *testing.T) {
	h, ref := testHost(t)
	sb := started(t, h, Config{Name: "main", Image: ref}, ForMainCommand(500*time.Millisecond))
	waitStoppedItself(t, sb)
	if console, _ := os.ReadFile(sb.ConsolePath()); !strings.Contains(string(console), "no main command started within 500ms") {
		t.Errorf("console %q, want it to say why the VM stopped", console)
	}
}

// waitStoppedItself waits for the VM of sb to stop on its own, with exit
// code 0.
func waitStoppedItself(t *testing.T, sb *Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	es, err := sb.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if es.Code != 0 {
		t.Errorf("exit status %v, want 0", es)
	}
}

// Config.Ports reach libkrun: in the VM spec the runner reads, and in the
// port map the runner gives krun_set_port_map (the test double records what
// it was given when the VM starts, TESTKRUN_DUMP).
func TestPublishedPortsReachLibkrun(t *testing.T) {
	h, ref := testHost(t)
	dump := filepath.Join(t.TempDir(), "krun.json")
	t.Setenv("TESTKRUN_DUMP", dump) // inherited by the runner
	ports := []PortMapping{{Host: 18080, Guest: 80}, {Host: 12222, Guest: 22}}
	sb := started(t, h, Config{Image: ref, Ports: ports, Network: NetworkTSI})

	spec, err := vmm.ReadSpec(sb.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.PortMap) != len(ports) || spec.PortMap[0] != vmm.PortMapping(ports[0]) || spec.PortMap[1] != vmm.PortMapping(ports[1]) {
		t.Errorf("VM spec port map %v, want %v", spec.PortMap, ports)
	}
	data, err := os.ReadFile(dump)
	if err != nil {
		t.Fatalf("the test double recorded no configuration: %v", err)
	}
	var got struct {
		Event   string   `json:"event"`
		PortMap []string `json:"port_map"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	if want := []string{"18080:80", "12222:22"}; got.Event != "start" || !slices.Equal(got.PortMap, want) {
		t.Errorf("libkrun got port map %q at %q, want %q at start", got.PortMap, got.Event, want)
	}
}

func TestImagesInUse(t *testing.T) {
	h, ref := testHost(t)
	sb, err := h.Create(t.Context(), Config{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	store, _ := h.images()
	imgs, _ := store.List(t.Context())
	inUse, err := h.ImagesInUse()
	if err != nil || !inUse(imgs[0].Digest.String()) {
		t.Fatalf("image of a sandbox not in use: %v", err)
	}
	if _, err := store.Prune(t.Context(), func(d v1.Hash) bool { return inUse(d.String()) }); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(t.Context()); err != nil {
		t.Fatalf("start after prune: %v", err)
	}
	defer sb.Remove(context.Background())
	if err := sb.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	inUse, _ = h.ImagesInUse()
	if inUse(imgs[0].Digest.String()) {
		t.Error("image still in use after its sandbox was removed")
	}
}

func TestCheckReadySaysWhy(t *testing.T) {
	h, ref := testHost(t)
	ctx := t.Context()
	sb, err := h.Create(ctx, Config{Name: "why", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	var nr *NotRunningError
	if err := sb.CheckReady(ctx); !errors.As(err, &nr) || nr.State != StateCreated || !errors.Is(err, ErrNotRunning) ||
		!strings.Contains(nr.Hint(), "krunbox start why") {
		t.Errorf("never started: %v", err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.CheckReady(ctx); err != nil {
		t.Errorf("running: %v", err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.CheckReady(ctx); !errors.As(err, &nr) || nr.State != StateStopped {
		t.Errorf("stopped: %v", err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := vmm.Open(sb.Dir()).Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sb.Wait(wctx)
	var de *DeadError
	if err := sb.CheckReady(ctx); !errors.As(err, &de) || !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "SIGKILL") {
		t.Errorf("killed: %v, want a DeadError saying SIGKILL", err)
	}
}

func TestHostRemoveCompletesDamagedSandboxes(t *testing.T) {
	h, ref := testHost(t)
	ctx := t.Context()
	sb := started(t, h, Config{Name: "broken", Image: ref})
	// A damaged record: Get fails, Host.Remove still stops and removes.
	if err := os.WriteFile(filepath.Join(sb.Dir(), "sandbox.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Get("broken"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a damaged sandbox: %v", err)
	}
	if err := h.Remove(ctx, "broken"); err != nil {
		t.Fatal(err)
	}
	if st, _ := vmm.Open(sb.Dir()).State(); st == vmm.StateRunning {
		t.Error("the damaged sandbox's VM still runs")
	}
	if _, err := os.Stat(sb.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory left: %v", err)
	}
	// What an interrupted removal left in the trash goes with the next.
	left := filepath.Join(h.Dirs().State, "trash", "x-1", "sandbox")
	os.MkdirAll(filepath.Join(left, "upper"), 0o700)
	os.Chmod(filepath.Join(left, "upper"), 0) // as overlayfs leaves its work directory
	if err := h.Remove(ctx, "broken"); !errors.Is(err, ErrNotFound) {
		t.Errorf("removing it again: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("trash left: %v", err)
	}
	if err := h.Remove(ctx, "../x"); err == nil {
		t.Error("Remove accepted a bad name")
	}
}

// A host without what VMs need: Start says what is missing, with its fix,
// and the errors of both the check and the boot can be told apart.
func TestStartOnAHostWithoutLibkrun(t *testing.T) {
	h, ref := testHost(t, WithLibkrun("/nonexistent/libkrun.so.1"))
	sb, err := h.Create(t.Context(), Config{Name: "nolib", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	err = sb.Start(t.Context())
	var pe *PreflightError
	var se *RunnerError
	var h2 interface{ Hint() string }
	if !errors.As(err, &pe) || !errors.As(err, &se) || !errors.As(err, &h2) {
		t.Fatalf("start without libkrun: %v (%T); want it to wrap a PreflightError and the runner's StartError", err, err)
	}
	if !strings.Contains(err.Error(), "cannot start VMs on this host") || !strings.Contains(h2.Hint(), "install libkrun") {
		t.Errorf("start without libkrun: %q, hint %q", err, h2.Hint())
	}
	if st, _ := sb.Status(t.Context()); st.State == StateRunning {
		t.Error("a VM runs after a failed start")
	}
}
