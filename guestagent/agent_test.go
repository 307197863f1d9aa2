//go:build linux

package guestagent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

func TestEnvValue(t *testing.T) {
	got := []string{"PATH=/bin", "HOME=/root", "A=2", "B=x=y"}
	if envValue(got, "B") != "x=y" || envValue(got, "NOPE") != "" {
		t.Error("envValue")
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	bin1, bin2 := filepath.Join(dir, "bin1"), filepath.Join(dir, "bin2")
	os.Mkdir(bin1, 0o755)
	os.Mkdir(bin2, 0o755)
	os.WriteFile(filepath.Join(bin1, "tool"), nil, 0o644) // not executable: skipped
	os.WriteFile(filepath.Join(bin2, "tool"), nil, 0o755)
	os.WriteFile(filepath.Join(bin1, "noexec"), nil, 0o644)
	os.Mkdir(filepath.Join(bin1, "adir"), 0o755)
	path := bin1 + ":" + bin2
	for _, tt := range []struct {
		file, want, code string
	}{
		{"tool", filepath.Join(bin2, "tool"), ""},
		{"./rel/x", "./rel/x", ""},
		{"noexec", "", "EACCES"},
		{"adir", "", "ENOENT"},
		{"missing", "", "ENOENT"},
	} {
		got, perr := lookPath(tt.file, path, "/")
		if tt.code != "" {
			if perr == nil || perr.Code != tt.code || perr.Op != "exec" {
				t.Errorf("lookPath(%s) = %q, %+v; want %s", tt.file, got, perr, tt.code)
			}
			continue
		}
		if perr != nil || got != tt.want {
			t.Errorf("lookPath(%s) = %q, %+v; want %q", tt.file, got, perr, tt.want)
		}
	}
	// Relative PATH entries are relative to the process's directory.
	if got, perr := lookPath("tool", "bin2", dir); perr != nil || got != "bin2/tool" {
		t.Errorf("relative PATH entry: %q, %+v", got, perr)
	}
}

func TestLookupIdentity(t *testing.T) {
	self, perr := lookupIdentity("")
	if perr != nil || int(self.uid) != os.Geteuid() || int(self.gid) != os.Getegid() {
		t.Fatalf("own identity = %+v, %+v", self, perr)
	}
	if cred, perr := self.credential(); perr != nil || (os.Geteuid() != 0 && cred != nil) {
		t.Errorf("credential for oneself = %+v, %+v", cred, perr)
	}
	root, perr := lookupIdentity("root")
	if perr != nil || root.uid != 0 || root.home != "/root" || root.name != "root" {
		t.Fatalf("root = %+v, %+v", root, perr)
	}
	anon, perr := lookupIdentity("4242:4343")
	if perr != nil || anon.uid != 4242 || anon.gid != 4343 || anon.name != "" || anon.home != "/" || !slices.Equal(anon.groups, []uint32{4343}) {
		t.Fatalf("4242:4343 = %+v, %+v", anon, perr)
	}
	anon, _ = lookupIdentity("4242")
	if anon.gid != 0 {
		t.Errorf("a uid not in passwd gets gid %d, want 0", anon.gid)
	}
	for _, spec := range []string{"no-such-user-krunbox", "root:no-such-group-krunbox"} {
		if _, perr := lookupIdentity(spec); perr == nil || perr.Code != protocol.CodeUnknownUser || perr.Op != "user" {
			t.Errorf("lookupIdentity(%q) = %+v, want unknown_user", spec, perr)
		}
	}
	if os.Geteuid() != 0 {
		if _, perr := root.credential(); perr == nil || perr.Code != "EPERM" {
			t.Errorf("switching to root without being root: %+v", perr)
		}
	}
}

func TestReaperKeepsEachStatus(t *testing.T) {
	r, err := newReaper()
	if err != nil {
		t.Fatal(err)
	}
	sh, perr := lookPath("sh", os.Getenv("PATH"), "/")
	if perr != nil {
		t.Fatal(perr)
	}
	// Processes exit while orphans (reparented to this subreaper) exit
	// too; every registered process must get its own status.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			script := fmt.Sprintf("(exit 9) & (sleep 0.01; exit 8) & exit %d", i%5)
			pid, exited, err := r.start(func() (int, error) {
				return syscall.ForkExec(sh, []string{"sh", "-c", script}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
			})
			if err != nil {
				errs <- err
				return
			}
			if ws := <-exited; ws.ExitStatus() != i%5 {
				errs <- fmt.Errorf("process %d (%d) got status %d, want %d", i, pid, ws.ExitStatus(), i%5)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if r.running() != 0 {
		t.Errorf("%d processes still registered", r.running())
	}
}
