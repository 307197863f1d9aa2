package agentbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A program that embeds no agent (one that imports hostapi from the module
// cache) gets one built from the module's source into the cache at first
// use, and the same file after.
func TestLookupBuildsFromSource(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent (-short)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH")
	}
	cache := t.TempDir()
	b, err := fromSource(runtime.GOARCH, cache)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Path, filepath.Join(cache, "agent", "src-")) || !strings.Contains(b.Source, "built from") || b.Size == 0 {
		t.Fatalf("fromSource = %+v, want a file built into the cache", b)
	}
	data, err := os.ReadFile(b.Path)
	if err != nil || len(data) < 4 || string(data[1:4]) != "ELF" {
		t.Fatalf("built agent: %d bytes, %v; want an ELF executable", len(data), err)
	}
	fi, _ := os.Stat(b.Path)
	// A second use finds the built one and builds nothing.
	again, err := fromSource(runtime.GOARCH, cache)
	if err != nil || again.Path != b.Path {
		t.Fatalf("second fromSource = %+v, %v; want %s", again, err, b.Path)
	}
	if fi2, _ := os.Stat(b.Path); !fi2.ModTime().Equal(fi.ModTime()) {
		t.Error("the second use rebuilt the agent")
	}
}

// The cache key changes with the agent's source, so an edited replace
// folder gets a new agent, not a stale one.
func TestSourceKey(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum", "cmd/krunbox-agent/main.go", "guestagent/agent.go"} {
		p := filepath.Join(root, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k1, err := sourceKey(root, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := sourceKey(root, "arm64"); k == k1 {
		t.Error("the key does not depend on the architecture")
	}
	os.WriteFile(filepath.Join(root, "guestagent/agent.go"), []byte("changed"), 0o644)
	if k, _ := sourceKey(root, "amd64"); k == k1 {
		t.Error("the key does not change with the agent's source")
	}
	os.Remove(filepath.Join(root, "go.sum"))
	if _, err := sourceKey(root, "amd64"); err == nil {
		t.Error("a module without go.sum was hashed")
	}
}

// The module root is found from this package's own source path.
func TestModuleRoot(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "krunbox-agent")); err != nil {
		t.Errorf("moduleRoot = %s: %v", root, err)
	}
}
