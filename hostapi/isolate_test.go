package hostapi

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/krunbox/krunbox/internal/confine"
	"github.com/krunbox/krunbox/internal/testutil/gittest"
)

// The guest sees its checkout at the project's path, with the base
// objects its alternates name; what it writes stays in the checkout,
// across a stop and a start.
func TestIsolatedGuest(t *testing.T) {
	repo, _ := gittest.Hostile(t)
	h, ref := testHost(t)
	sb := started(t, h, Config{Image: ref, Workspace: repo, Isolate: true})
	iso := sb.Isolation()
	out := run(t, sb, "sh", "-c", "cat "+repo+"/f && cat "+repo+"/.git/objects/info/alternates && test -d /.krunbox-base/objects/pack && echo y > "+repo+"/f && echo new > "+repo+"/new && ! test -e "+repo+"/.env && echo ok")
	if want := "x\n/.krunbox-base/objects\n"; !strings.HasPrefix(out, want) || !strings.HasSuffix(out, "ok") {
		t.Errorf("guest: %q", out)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "f")); string(b) != "x\n" {
		t.Errorf("the user's checkout changed: f = %q", b)
	}
	if _, err := os.Lstat(filepath.Join(repo, "new")); err == nil {
		t.Error("the guest's new file reached the user's checkout")
	}
	if out := run(t, sb, "sh", "-c", "touch /.krunbox-base/objects/pack/x || mkdir /.krunbox-base/objects/zz 2>/dev/null || echo ro"); out != "ro" {
		t.Errorf("the base objects are writable in the guest: %q", out)
	}
	if err := sb.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out := run(t, sb, "cat", repo+"/f", repo+"/new"); out != "y\nnew" {
		t.Errorf("after a restart: %q", out)
	}
	if b, _ := os.ReadFile(filepath.Join(iso.Checkout, "new")); string(b) != "new\n" {
		t.Errorf("checkout's new = %q", b)
	}
}

// createIsolated creates (not starts) an isolated sandbox of repo.
func createIsolated(t *testing.T, h *Host, ref, repo, name string) *Sandbox {
	t.Helper()
	sb, err := h.Create(t.Context(), Config{Name: name, Image: ref, Workspace: repo, Isolate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(context.Background()) })
	return sb
}

// The SDK's side of an isolated sandbox: Create makes the checkout,
// Isolation says where, and the sandbox's methods read its work, land it
// and export it; a bound crossed is a *GitLimitError. A sandbox that is
// not isolated says so.
func TestIsolatedSandbox(t *testing.T) {
	repo, marker := gittest.Hostile(t)
	h, ref := testHost(t)
	sb := createIsolated(t, h, ref, repo, "sdk")
	iso := sb.Isolation()
	if head := gittest.Out(t, repo, "rev-parse", "HEAD"); iso == nil || iso.Project != repo || iso.Base != head || iso.Branch != BranchPrefix+"sdk" {
		t.Fatalf("Isolation = %+v, want %s at %s on %ssdk", iso, repo, head, BranchPrefix)
	}
	if b, err := os.ReadFile(filepath.Join(iso.Checkout, "f")); err != nil || string(b) != "x\n" {
		t.Fatalf("the checkout's f = %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(iso.Checkout, "f"), []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ch, err := sb.Changes(t.Context())
	want := []Change{{Path: "f", From: gittest.Out(t, repo, "rev-parse", "HEAD:f"), To: plumbing.ComputeHash(plumbing.BlobObject, []byte("y\n")).String(), FromMode: 0o100644, ToMode: 0o100644}}
	if err != nil || !slices.Equal(ch, want) {
		t.Errorf("Changes = %+v, %v; want %+v", ch, err, want)
	}
	var b strings.Builder
	if err := sb.Diff(t.Context(), &b, DiffOptions{Paths: []string{repo + "/f"}, Stat: true}); err != nil || b.String() != " f | 2 +-\n 1 files changed, 1 insertions(+), 1 deletions(-)\n" {
		t.Errorf("Diff --stat f = %q, %v", b.String(), err)
	}
	if u, err := sb.Unlanded(t.Context()); err != nil || !u {
		t.Errorf("Unlanded with work = %v, %v", u, err)
	}
	l, err := sb.Land(t.Context(), LandOptions{Squash: true})
	if err != nil || l.Branch != iso.Branch || l.Commits != 1 || l.Unchanged || gittest.Out(t, repo, "rev-parse", iso.Branch) != l.Commit {
		t.Errorf("Land = %+v, %v", l, err)
	}
	if u, err := sb.Unlanded(t.Context()); err != nil || u {
		t.Errorf("Unlanded once landed = %v, %v", u, err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := sb.Export(t.Context(), dst, "f"); err != nil {
		t.Errorf("Export: %v", err)
	} else if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "y\n" {
		t.Errorf("exported f = %q, %v", b, err)
	}

	// A path of 4352 bytes in the checkout: over GitLimits.PathBytes.
	root, err := os.OpenRoot(iso.Checkout)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for p := strings.Repeat("d", 255); len(p) < 4400; p += "/" + strings.Repeat("d", 255) {
		if err := root.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, f := range map[string]func() error{
		"Changes":  func() error { _, err := sb.Changes(t.Context()); return err },
		"Diff":     func() error { return sb.Diff(t.Context(), io.Discard, DiffOptions{}) },
		"Land":     func() error { _, err := sb.Land(t.Context(), LandOptions{}); return err },
		"Unlanded": func() error { _, err := sb.Unlanded(t.Context()); return err },
	} {
		err := f()
		var le *GitLimitError
		var h interface{ Hint() string }
		if !errors.As(err, &le) || le.Limit != "PathBytes" || le.Max != int64(DefaultGitLimits().PathBytes) || !errors.Is(err, confine.ErrTooLarge) ||
			!strings.Contains(err.Error(), sb.Name()) || !strings.Contains(err.Error(), "over the bound GitLimits.PathBytes = 4096") ||
			!errors.As(err, &h) || h.Hint() != le.Hint() {
			t.Errorf("%s of a checkout with a path over the bound: %v, want a *GitLimitError of PathBytes", name, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("something ran on the host")
	}

	plain, err := h.Create(t.Context(), Config{Name: "plain", Image: ref, Workspace: repo})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Remove(context.Background())
	if plain.Isolation() != nil {
		t.Errorf("Isolation of a sandbox not isolated = %+v", plain.Isolation())
	}
	for name, f := range map[string]func() error{
		"Changes": func() error { _, err := plain.Changes(t.Context()); return err },
		"Diff":    func() error { return plain.Diff(t.Context(), io.Discard, DiffOptions{}) },
		"Land":    func() error { _, err := plain.Land(t.Context(), LandOptions{}); return err },
		"Export":  func() error { return plain.Export(t.Context(), filepath.Join(t.TempDir(), "x"), "f") },
	} {
		if err := f(); !errors.Is(err, ErrNotIsolated) || !strings.Contains(err.Error(), "plain") {
			t.Errorf("%s of a sandbox not isolated: %v, want ErrNotIsolated", name, err)
		}
	}
	if u, err := plain.Unlanded(t.Context()); err != nil || u {
		t.Errorf("Unlanded of a sandbox not isolated = %v, %v; want false", u, err)
	}
}

// Create refuses a user's repository whose HEAD names a path git refuses
// (.GIT, a case variant of .git) with a clear error, and leaves no
// sandbox behind.
func TestIsolatedCheckoutRefusesBadTree(t *testing.T) {
	repo := gittest.BadTree(t)
	h, ref := testHost(t)
	if _, err := h.Create(t.Context(), Config{Name: "bad", Image: ref, Workspace: repo, Isolate: true}); err == nil || !strings.Contains(err.Error(), ".GIT") {
		t.Errorf("Create of a HEAD naming .GIT: %v", err)
	}
	if _, err := h.Get("bad"); err == nil {
		t.Error("the sandbox exists")
	}
}
