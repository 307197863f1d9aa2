//go:build linux

package vmdev

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestListenDialUnderTestDouble(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(TestDirEnv, dir)
	if !UnderTestDouble() {
		t.Fatal("UnderTestDouble() = false with the variable set")
	}
	l, err := Listen(1024)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := os.Stat(filepath.Join(dir, "vsock", "1024.sock")); err != nil {
		t.Fatalf("stand-in socket not where the double looks for it: %v", err)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("hello"))
		c.Close()
	}()
	c, err := Dial(1024)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v; want hello", got, err)
	}
}

func TestDialMissingPortNamesIt(t *testing.T) {
	t.Setenv(TestDirEnv, t.TempDir())
	_, err := Dial(7)
	if err == nil || !contains(err.Error(), "port 7") {
		t.Fatalf("Dial(7) error = %v, want one naming port 7", err)
	}
}

func TestMountVirtiofsUnderTestDouble(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount")
	}
	dir := t.TempDir()
	t.Setenv(TestDirEnv, dir)
	share := filepath.Join(dir, "virtiofs", "kb0")
	if err := os.MkdirAll(share, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(share, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		target := t.TempDir()
		if err := MountVirtiofs("kb0", target, ro); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
		if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != "x" {
			t.Fatalf("ro=%v: read through mount: %q, %v", ro, b, err)
		}
		err := os.WriteFile(filepath.Join(target, "g"), nil, 0o644)
		if ro && !errors.Is(err, unix.EROFS) {
			t.Errorf("write to read-only mount: %v, want EROFS", err)
		}
		if !ro && err != nil {
			t.Errorf("write to read-write mount: %v", err)
		}
	}
}

func TestMountVirtiofsMissingTag(t *testing.T) {
	t.Setenv(TestDirEnv, t.TempDir())
	err := MountVirtiofs("nope", t.TempDir(), false)
	if err == nil || !contains(err.Error(), "nope") {
		t.Fatalf("error = %v, want one naming the tag", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
