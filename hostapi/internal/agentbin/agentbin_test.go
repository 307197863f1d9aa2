package agentbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestLookupFromTheEnvironment(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(p, []byte("agent bytes"), 0o755)
	t.Setenv("KRUNBOX_AGENT", p)
	b, err := Lookup("amd64", "")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("agent bytes"))
	d, err := b.Digest()
	if b.Path != p || b.Size != 11 || err != nil || d != hex.EncodeToString(sum[:]) {
		t.Errorf("Lookup = %+v, digest %q, %v", b, d, err)
	}
	if data, err := b.Data(); err != nil || string(data) != "agent bytes" {
		t.Errorf("Data = %q, %v", data, err)
	}
	t.Setenv("KRUNBOX_AGENT", filepath.Join(t.TempDir(), "missing"))
	if _, err := Lookup("amd64", ""); err == nil {
		t.Error("a missing KRUNBOX_AGENT was accepted")
	}
}

// The digest embedded beside an agent ("make agent") is the agent's: a
// stale one would make sandboxes run another agent from the cache.
func TestEmbeddedDigestMatches(t *testing.T) {
	t.Setenv("KRUNBOX_AGENT", "")
	b, err := Lookup(runtime.GOARCH, "")
	if errors.Is(err, ErrNotFound) || err == nil && b.Source != "embedded" {
		t.Skip("no embedded agent (make agent)")
	}
	if err != nil {
		t.Fatal(err)
	}
	data, err := b.Data()
	if err != nil || int64(len(data)) != b.Size {
		t.Fatalf("Data: %d bytes, %v; Size %d", len(data), err, b.Size)
	}
	sum := sha256.Sum256(data)
	if d, _ := b.Digest(); d != hex.EncodeToString(sum[:]) {
		t.Errorf("embedded digest %q, the agent's is %x", d, sum)
	}
}
