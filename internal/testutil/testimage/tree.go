package testimage

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// HostPlatform is linux on the host's architecture.
func HostPlatform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// Node describes one path of a directory tree, as tests compare it.
type Node struct {
	Type  string // "dir", "file", "symlink", "fifo", "char", "block", "socket"
	Mode  fs.FileMode
	UID   int
	GID   int
	Body  string // regular files
	Link  string // symlink target
	MTime time.Time
	// Inode identifies the file, to check hard links; ReadTree sets it,
	// comparisons ignore it.
	Inode uint64
	// Override is the user.containers.override_stat xattr ("" if unset).
	Override string
}

func (n Node) String() string {
	s := fmt.Sprintf("%s %v %d:%d", n.Type, n.Mode, n.UID, n.GID)
	if n.Type == "file" {
		s += fmt.Sprintf(" %q", n.Body)
	}
	if n.Link != "" {
		s += " -> " + n.Link
	}
	if n.Override != "" {
		s += " override=" + n.Override
	}
	return s
}

// ReadTree returns every path below root (relative, "/"-separated), with
// its Node. Regular file bodies longer than 4 KiB are not read.
func ReadTree(t testing.TB, root string) map[string]Node {
	t.Helper()
	tree := map[string]Node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := Node{UID: int(st.Uid), GID: int(st.Gid), Inode: st.Ino, MTime: time.Unix(st.Mtim.Unix()).UTC()}
		n.Mode = fs.FileMode(st.Mode & 0o777)
		if st.Mode&syscall.S_ISUID != 0 {
			n.Mode |= fs.ModeSetuid
		}
		if st.Mode&syscall.S_ISGID != 0 {
			n.Mode |= fs.ModeSetgid
		}
		if st.Mode&syscall.S_ISVTX != 0 {
			n.Mode |= fs.ModeSticky
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			n.Type = "dir"
		case syscall.S_IFREG:
			n.Type = "file"
			if st.Size <= 4096 {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				n.Body = string(b)
			}
		case syscall.S_IFLNK:
			n.Type = "symlink"
			n.Mode = 0
			if n.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case syscall.S_IFIFO:
			n.Type = "fifo"
		case syscall.S_IFCHR:
			n.Type = "char"
		case syscall.S_IFBLK:
			n.Type = "block"
		default:
			n.Type = "socket"
		}
		buf := make([]byte, 256)
		if sz, err := unix.Lgetxattr(p, "user.containers.override_stat", buf); err == nil {
			n.Override = string(buf[:sz])
		}
		tree[filepath.ToSlash(rel)] = n
		return nil
	})
	if err != nil {
		t.Fatalf("read tree %s: %v", root, err)
	}
	return tree
}

// CompareTrees reports, one line per difference, how got differs from
// want. Fields of a want node left at their zero value are not compared
// for UID/GID/MTime/Override unless checkOwner/checkTimes say so; Inode is
// never compared.
func CompareTrees(want, got map[string]Node, checkOwner, checkTimes bool) []string {
	var diffs []string
	for _, p := range sortedKeys(want) {
		w := want[p]
		g, ok := got[p]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: missing, want %v", p, w))
			continue
		}
		if !checkOwner {
			g.UID, g.GID, w.UID, w.GID = 0, 0, 0, 0
		}
		if !checkTimes || w.MTime.IsZero() {
			g.MTime, w.MTime = time.Time{}, time.Time{}
		}
		if w.Override == "" {
			g.Override = ""
		}
		g.Inode, w.Inode = 0, 0
		if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: got %v, want %v", p, g, w))
		}
	}
	for _, p := range sortedKeys(got) {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: unexpected %v", p, got[p]))
		}
	}
	return diffs
}

func sortedKeys(m map[string]Node) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, strings.Compare)
	return keys
}
