// Package victim makes the host directory that hostile-input tests aim
// at: outside everything a sandbox shares or krunbox writes, holding what
// an attacker would want (a secret, an SSH key, files named like the ones
// krunbox writes), and checked byte for byte, modes and times included,
// after the attack.
package victim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

// Dir is a victim directory.
type Dir struct {
	// Path is the directory, absolute, with symlinks resolved.
	Path string
	want map[string]testimage.Node
}

// New makes a victim directory below the test's temporary directory and
// records it.
func New(t testing.TB) *Dir {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(dir, "victim")
	for name, body := range map[string]string{
		"secret":               "the victim's secret\n",
		".ssh/authorized_keys": "ssh-ed25519 AAAA victim\n",
		"sub/key":              "the victim's key\n",
		"agent.json":           `{"victim":true}` + "\n",
		"krunbox-agent":        "#!/bin/sh\necho victim\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("secret", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return &Dir{Path: dir, want: testimage.ReadTree(t, dir)}
}

// Changes lists, one line each, how the directory differs from when it
// was made.
func (d *Dir) Changes(t testing.TB) []string {
	t.Helper()
	return testimage.CompareTrees(d.want, testimage.ReadTree(t, d.Path), true, true)
}

// Check fails the test for each change, saying when it was seen.
func (d *Dir) Check(t testing.TB, when string) {
	t.Helper()
	for _, c := range d.Changes(t) {
		t.Errorf("%s: the victim directory changed: %s", when, c)
	}
}
