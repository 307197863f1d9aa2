package hostapi

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

// cachedTree returns the cached tree of the only image in h's cache.
func cachedTree(t *testing.T, h *Host) string {
	t.Helper()
	store, err := h.images()
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := store.List(t.Context())
	if err != nil || len(imgs) != 1 {
		t.Fatalf("images: %v, %v", imgs, err)
	}
	return imgs[0].Rootfs
}

// exists reports whether path exists in the sandbox's directory.
func exists(t *testing.T, sb *Sandbox, name string) bool {
	t.Helper()
	_, err := os.Lstat(filepath.Join(sb.Dir(), name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// hostLike returns a new Host like h (library, timeouts) on dirs.
func hostLike(t *testing.T, h *Host, dirs Dirs) *Host {
	t.Helper()
	h2, err := NewHost(WithDirs(dirs), WithLibkrun(h.libkrun), WithStartTimeout(h.startTimeout), WithStopTimeout(h.stopTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return h2
}

// withoutBlock makes h a Host that cannot give block roots, as one whose
// libkrun has no disks, so that RootAuto chooses among the others.
func withoutBlock(h *Host) *Host {
	h.checkBlock = func() error { return errors.New("no disks here") }
	return h
}

// RootAuto chooses a block root where the host can give one, else an
// overlay, saying why it is not a block root.
func TestAutoRootIsBlock(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test double's disks are loop devices, which need root")
	}
	h, ref := testHost(t)
	sb := started(t, h, Config{Image: ref, DiskMiB: 1024})
	if r := sb.Root(); r.Kind != RootBlock || r.DiskSize != 1<<30 || r.Reason != "" {
		t.Errorf("auto root where block roots work: %+v", r)
	}
	if got := run(t, sb, "sh", "-c", "echo ok > /root/ok; cat /root/ok"); got != "ok" {
		t.Errorf("block root sandbox: %q", got)
	}
	ov := started(t, withoutBlock(hostLike(t, h, h.Dirs())), Config{Image: ref})
	if r := ov.Root(); r.Kind != RootOverlay || !strings.Contains(r.Reason, "block roots are unavailable on this host: no disks here") {
		t.Errorf("auto root where block roots do not work: %+v, want an overlay saying why", r)
	}
}

func TestCopyRootSandbox(t *testing.T) {
	var logs syncbuf.Buffer
	h, ref := testHost(t, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := t.Context()
	sb, err := h.Create(ctx, Config{Name: "copied", Image: ref, Root: RootCopy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	if r := sb.Root(); r.Kind != RootCopy || r.Reason == "" {
		t.Errorf("root %+v, want a copy with its reason", r)
	}
	if exists(t, sb, rootfsDir) {
		t.Error("the copy was made at create; it is made at the first start")
	}
	tree := cachedTree(t, h)
	before := testimage.ReadTree(t, tree)

	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(t, sb, rootfsDir) || exists(t, sb, upperDir) || exists(t, sb, partialDir) {
		t.Errorf("after start: rootfs %v, upper %v, partial %v; want the copy only",
			exists(t, sb, rootfsDir), exists(t, sb, upperDir), exists(t, sb, partialDir))
	}
	// The copy says how it was made: a warning for a plain copy, with
	// why the root is no overlay.
	log := logs.String()
	if !strings.Contains(log, "sandbox=copied") || !strings.Contains(log, `why="a copy was asked for"`) {
		t.Errorf("the copy was not logged with its reason:\n%s", log)
	}
	if strings.Contains(log, "method=copy") != strings.Contains(log, "level=WARN") {
		t.Errorf("a plain copy must warn, a clone must not:\n%s", log)
	}

	// The guest changes its root: a new file, a changed one, a removed one.
	run(t, sb, "sh", "-c", "echo kept > /root/x; echo more >> /etc/passwd; rm /bin/ls")
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, sb, "sh", "-c", "cat /root/x; tail -n 1 /etc/passwd; test -e /bin/ls || echo no-ls"); got != "kept\nmore\nno-ls" {
		t.Errorf("root after stop and start: %q", got)
	}
	// Neither the image cache nor another sandbox sees the changes.
	for _, d := range testimage.CompareTrees(before, testimage.ReadTree(t, tree), true, true) {
		t.Error("image cache changed: " + d)
	}
	other := started(t, h, Config{Image: ref, Root: RootCopy})
	if got := run(t, other, "sh", "-c", "cat /root/x 2>&1; tail -n 1 /etc/passwd; test -e /bin/ls && echo ls"); !strings.HasSuffix(got, "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\nls") || strings.Contains(got, "kept") {
		t.Errorf("another sandbox sees the first one's changes: %q", got)
	}

	if err := sb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sb.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the sandbox's directory, with its copy, is left: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(h.Dirs().State, "trash")); len(entries) != 0 {
		t.Errorf("trash left: %d entries", len(entries))
	}
}

// A sandbox keeps the root it was created with, whatever a later Host or
// configuration would choose; a record written before roots could be
// copies has an overlay root.
func TestRootKindIsKept(t *testing.T) {
	h, ref := testHost(t)
	withoutBlock(h)
	ctx := t.Context()
	ov, err := h.Create(ctx, Config{Name: "ov", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := h.Create(ctx, Config{Name: "cp", Image: ref, Root: RootCopy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ov.Remove(context.Background())
		cp.Remove(context.Background())
	})
	if ov.Root().Kind != RootOverlay {
		t.Fatalf("auto root where overlays work: %+v", ov.Root())
	}
	for _, sb := range []*Sandbox{ov, cp} {
		if err := sb.Start(ctx); err != nil {
			t.Fatal(err)
		}
		run(t, sb, "sh", "-c", "echo "+sb.Name()+" > /root/who")
		if err := sb.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Another Host, as another krunbox process would have.
	h2 := hostLike(t, h, h.Dirs())
	for _, tt := range []struct {
		name      string
		kind      RootKind
		has, lack string
	}{{"ov", RootOverlay, upperDir, rootfsDir}, {"cp", RootCopy, rootfsDir, upperDir}} {
		sb, err := h2.Get(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Root().Kind != tt.kind {
			t.Errorf("%s: root %+v after reopening, want %s", tt.name, sb.Root(), tt.kind)
		}
		if err := sb.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if got := run(t, sb, "cat", "/root/who"); got != tt.name {
			t.Errorf("%s: /root/who = %q after restart", tt.name, got)
		}
		if !exists(t, sb, tt.has) || exists(t, sb, tt.lack) {
			t.Errorf("%s: %s %v, %s %v", tt.name, tt.has, exists(t, sb, tt.has), tt.lack, exists(t, sb, tt.lack))
		}
		if err := sb.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A version 1 record has no root: it is an overlay.
	path := filepath.Join(ov.Dir(), recordFile)
	var rec map[string]any
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		t.Fatal(err)
	}
	delete(rec, "root")
	rec["version"] = 1
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := h2.Get("ov")
	if err != nil {
		t.Fatal(err)
	}
	if old.Root().Kind != RootOverlay {
		t.Errorf("a version 1 record: root %+v, want overlay", old.Root())
	}
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, old, "cat", "/root/who"); got != "ov" {
		t.Errorf("a version 1 record's sandbox lost its layer: %q", got)
	}
}

// Where the runner cannot mount an overlay, auto chooses a copy, which
// runs, and an overlay asked for is refused before anything is pulled.
func TestRootWhereOverlaysFail(t *testing.T) {
	h, ref := testHost(t)
	// overlayfs cannot take a ':' in a layer's path, so an overlay
	// cannot be mounted below this state directory.
	d := h.Dirs()
	d.State = filepath.Join(t.TempDir(), "st:ate")
	h = withoutBlock(hostLike(t, h, d))
	ctx := t.Context()

	_, err := h.Create(ctx, Config{Image: ref, Root: RootOverlay})
	var oe *OverlayUnavailableError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "mount overlay") || !strings.Contains(oe.Hint(), "copy") {
		t.Fatalf("an overlay asked for where none can be mounted: %v", err)
	}
	if store, _ := h.images(); store != nil {
		if imgs, _ := store.List(ctx); len(imgs) != 0 {
			t.Errorf("the image was pulled for a sandbox refused: %v", imgs)
		}
	}

	sb := started(t, h, Config{Image: ref})
	if r := sb.Root(); r.Kind != RootCopy || !strings.Contains(r.Reason, "mount overlay") {
		t.Errorf("auto root where overlays fail: %+v, want a copy saying why", r)
	}
	if got := run(t, sb, "sh", "-c", "echo ok > /root/ok; cat /root/ok"); got != "ok" {
		t.Errorf("copy root sandbox: %q", got)
	}
}

// A copy interrupted half way is never taken for a whole one: the next
// start removes it and copies again; a copy that fails leaves nothing.
func TestInterruptedCopyIsRedone(t *testing.T) {
	h, ref := testHost(t)
	ctx := t.Context()
	sb, err := h.Create(ctx, Config{Image: ref, Root: RootCopy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	// What a copy killed half way leaves: part of the tree.
	half := filepath.Join(sb.Dir(), partialDir)
	if err := os.MkdirAll(filepath.Join(half, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "junk"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := sb.copyImage(cancelled, cachedTree(t, h), sb.path(rootfsDir)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled copy: %v", err)
	}
	if exists(t, sb, rootfsDir) || exists(t, sb, partialDir) {
		t.Fatalf("a failed copy left rootfs %v, partial %v", exists(t, sb, rootfsDir), exists(t, sb, partialDir))
	}

	if err := os.MkdirAll(half, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "junk"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, sb, partialDir) || exists(t, sb, filepath.Join(rootfsDir, "junk")) {
		t.Error("the interrupted copy was used or left")
	}
	if got := run(t, sb, "sh", "-c", "ls /bin/busybox && test ! -e /junk && echo clean"); got != "/bin/busybox\nclean" {
		t.Errorf("root after an interrupted copy: %q", got)
	}
}

func TestRootKindValidation(t *testing.T) {
	for _, tt := range []struct {
		in   RootKind
		fail bool
	}{{"", false}, {RootAuto, false}, {RootBlock, false}, {RootOverlay, false}, {RootCopy, false}, {"clone", true}} {
		err := Config{Image: "x", Root: tt.in}.Validate()
		if (err != nil) != tt.fail {
			t.Errorf("root %q: %v, want failure %v", tt.in, err, tt.fail)
		}
		if tt.fail && !strings.Contains(err.Error(), "want auto, block, overlay or copy") {
			t.Errorf("root %q: %v does not say what is valid", tt.in, err)
		}
	}
	if c := (Config{}).withDefaults(); c.Root != RootAuto {
		t.Errorf("default root %q, want auto", c.Root)
	}
}
