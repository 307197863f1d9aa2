// Package hostchange lists the ways a host changes a directory it shares
// with a guest, with what the guest must read right after each: the e2e
// scenarios check that the guest's first read sees each change, and the
// real-VM benchmarks time how long each takes to become visible.
package hostchange

import (
	"os"
	"path/filepath"
)

// Change is one way the host changes a shared directory while the guest
// has what it touches cached.
type Change struct {
	// Name says what the change is.
	Name string
	// Before lays out the directory on the host; Prime, a shell script run
	// in the guest from the directory, then reads what the change will
	// touch, so that the guest kernel caches it.
	Before func(dir string) error
	Prime  string
	// Apply is the host's change; Check, run in the guest from the
	// directory right after, must print Want.
	Apply func(dir string) error
	Check string
	Want  string
}

// All are the host changes the guest must see at its first access: what
// an editor, a git checkout, a build or a person does to a workspace.
// Their file names do not collide, so they can run one after the other in
// one directory.
var All = []Change{
	{
		Name:   "atomic rename-over save",
		Before: func(d string) error { return write(d, "saved.txt", "one\n") },
		Prime:  "cat saved.txt",
		Apply: func(d string) error {
			if err := write(d, ".saved.txt.swp", "two, a longer line\n"); err != nil {
				return err
			}
			return os.Rename(filepath.Join(d, ".saved.txt.swp"), filepath.Join(d, "saved.txt"))
		},
		Check: "cat saved.txt",
		Want:  "two, a longer line\n",
	},
	{
		Name:   "in-place write",
		Before: func(d string) error { return write(d, "inplace.txt", "aaaa\n") },
		Prime:  "cat inplace.txt",
		Apply: func(d string) error {
			f, err := os.OpenFile(filepath.Join(d, "inplace.txt"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt([]byte("bbbb and more\n"), 0); err != nil { // same inode, longer
				f.Close()
				return err
			}
			return f.Close()
		},
		Check: "cat inplace.txt",
		Want:  "bbbb and more\n",
	},
	{
		Name:   "truncation",
		Before: func(d string) error { return write(d, "trunc.txt", "keep|drop this\n") },
		Prime:  "cat trunc.txt",
		Apply:  func(d string) error { return os.Truncate(filepath.Join(d, "trunc.txt"), 4) },
		Check:  "cat trunc.txt; echo; wc -c < trunc.txt",
		Want:   "keep\n4\n",
	},
	{
		Name:   "delete",
		Before: func(d string) error { return write(d, "gone.txt", "x\n") },
		Prime:  "cat gone.txt",
		Apply:  func(d string) error { return os.Remove(filepath.Join(d, "gone.txt")) },
		Check:  "test -e gone.txt && echo present || echo gone",
		Want:   "gone\n",
	},
	{
		// The guest looked the name up and found nothing: a negative
		// entry, which a cache keeps as it keeps the others.
		Name:   "create",
		Before: func(string) error { return nil },
		Prime:  "test -e new.txt && echo present || echo absent",
		Apply:  func(d string) error { return write(d, "new.txt", "created\n") },
		Check:  "cat new.txt",
		Want:   "created\n",
	},
	{
		Name: "directory rename",
		Before: func(d string) error {
			if err := os.Mkdir(filepath.Join(d, "olddir"), 0o755); err != nil {
				return err
			}
			return write(d, "olddir/in.txt", "inside\n")
		},
		Prime: "ls; cat olddir/in.txt",
		Apply: func(d string) error { return os.Rename(filepath.Join(d, "olddir"), filepath.Join(d, "newdir")) },
		Check: "cat newdir/in.txt; test -e olddir/in.txt && echo old-present || echo old-gone",
		Want:  "inside\nold-gone\n",
	},
	{
		Name:   "permission change",
		Before: func(d string) error { return write(d, "mode.sh", "#!/bin/sh\necho ran\n") },
		Prime:  "ls -l mode.sh | cut -c1-10",
		Apply:  func(d string) error { return os.Chmod(filepath.Join(d, "mode.sh"), 0o755) },
		Check:  "ls -l mode.sh | cut -c1-10; ./mode.sh",
		Want:   "-rwxr-xr-x\nran\n",
	},
}

// Save replaces dir/name with content the way editors save: a temporary
// file renamed over it.
func Save(dir, name, content string) error {
	tmp := "." + name + ".tmp"
	if err := write(dir, tmp, content); err != nil {
		return err
	}
	return os.Rename(filepath.Join(dir, tmp), filepath.Join(dir, name))
}

func write(dir, name, content string) error {
	return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
}
