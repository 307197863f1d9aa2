package testimage

import (
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// OldMTime is the modification time of the "mtime" file of RuleLayers.
var OldMTime = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

// RuleLayers returns three layers that exercise every OCI layer rule:
// whiteouts, opaque directories (marker before and after its siblings),
// hard links to lower-layer files, a hard link whose target is later
// whited out, one alias of a hard link overwritten by a later layer (the
// other keeps its content), whiteout plus re-creation in one layer (both
// orders, for a file and for a directory with children), dir→file→dir and
// file→dir replacements, absolute and relative symbolic links,
// setuid/setgid/sticky modes, ownership, modification times and a FIFO.
// WantRules is the tree they must produce.
func RuleLayers() [][]Entry {
	return [][]Entry{
		{
			Dir("etc", 0o755),
			File("etc/passwd", "root:x:0:0::/root:/bin/sh\n", 0o644),
			Dir("bin", 0o755),
			File("bin/sh", "#!shell", 0o755),
			File("bin/su", "su", 0o4755),
			File("bin/wall", "wall", 0o2755, Owner(0, 5)),
			Dir("tmp", 0o1777),
			Dir("home", 0o755),
			Dir("home/user", 0o750, Owner(1000, 1000)),
			File("home/user/.profile", "profile", 0o640, Owner(1000, 1000)),
			Dir("opq", 0o755),
			File("opq/old", "old", 0o644),
			Dir("opq/sub", 0o755),
			File("opq/sub/deep", "deep", 0o644),
			Dir("opq2", 0o755),
			File("opq2/old2", "old2", 0o644),
			Dir("d2f", 0o755),
			File("d2f/child", "child", 0o644),
			File("f2d", "file", 0o644),
			Dir("wh", 0o755),
			File("wh/gone", "gone", 0o644),
			File("wh/keep", "keep", 0o644),
			File("lower", "lower content", 0o644),
			File("t2", "t2 content", 0o644),
			Dir("links", 0o755),
			Symlink("links/abs", "/etc/passwd"),
			Symlink("links/rel", "../etc/passwd"),
			File("mtime", "old", 0o600, ModTime(OldMTime)),
			Dir("same", 0o755),
			File("same/x", "old x", 0o644),
			File("same/y", "old y", 0o644),
			Dir("same2", 0o755),
			Dir("same2/d", 0o755),
			File("same2/d/inner", "inner", 0o644),
			Fifo("fifo", 0o644),
			Dir("whdir", 0o755),
			File("whdir/lowerchild", "lower", 0o644),
			File("alias-a", "a and b", 0o644),
			Hardlink("alias-b", "alias-a"),
			File("alias-c", "c and d", 0o644),
			Hardlink("alias-d", "alias-c"),
		},
		{
			Dir("opq", 0o755),
			File("opq/new", "new", 0o644),
			Opaque("opq"), // after its sibling
			Dir("opq2", 0o711),
			Opaque("opq2"), // before its sibling
			File("opq2/new2", "new2", 0o644),
			File("d2f", "now a file", 0o644),
			Dir("f2d", 0o750),
			File("f2d/inside", "inside", 0o644),
			Dir("wh", 0o755),
			Whiteout("wh/gone"),
			Hardlink("upper-link", "lower"),
			Hardlink("hl", "t2"),
			Dir("same", 0o755),
			Whiteout("same/x"),
			File("same/x", "new x", 0o644),
			File("same/y", "new y", 0o644),
			Whiteout("same/y"), // after the re-creation: hides only the lower y
			Dir("same2", 0o755),
			Whiteout("same2/d"),
			File("same2/d", "now a file", 0o644),
			Dir("whdir", 0o750),
			File("whdir/new", "new", 0o644),
			Whiteout("whdir"),               // after the layer's own children: hides only the lower ones
			File("alias-a", "new a", 0o600), // not written through to alias-b
			File("alias-d", "new d", 0o600), // nor to alias-c
		},
		{
			Whiteout("t2"),
			Dir("d2f", 0o700),
			File("d2f/again", "again", 0o644),
		},
	}
}

// WantRules is the tree RuleLayers produce when applied as root.
func WantRules() map[string]Node {
	dir := func(mode fs.FileMode, uid, gid int) Node {
		return Node{Type: "dir", Mode: mode, UID: uid, GID: gid, MTime: MTime}
	}
	file := func(body string, mode fs.FileMode, uid, gid int) Node {
		return Node{Type: "file", Mode: mode, Body: body, UID: uid, GID: gid, MTime: MTime}
	}
	link := func(target string) Node { return Node{Type: "symlink", Link: target, MTime: MTime} }
	mtime := file("old", 0o600, 0, 0)
	mtime.MTime = OldMTime
	return map[string]Node{
		"etc":                dir(0o755, 0, 0),
		"etc/passwd":         file("root:x:0:0::/root:/bin/sh\n", 0o644, 0, 0),
		"bin":                dir(0o755, 0, 0),
		"bin/sh":             file("#!shell", 0o755, 0, 0),
		"bin/su":             file("su", 0o755|fs.ModeSetuid, 0, 0),
		"bin/wall":           file("wall", 0o755|fs.ModeSetgid, 0, 5),
		"tmp":                dir(0o777|fs.ModeSticky, 0, 0),
		"home":               dir(0o755, 0, 0),
		"home/user":          dir(0o750, 1000, 1000),
		"home/user/.profile": file("profile", 0o640, 1000, 1000),
		"opq":                dir(0o755, 0, 0),
		"opq/new":            file("new", 0o644, 0, 0),
		"opq2":               dir(0o711, 0, 0),
		"opq2/new2":          file("new2", 0o644, 0, 0),
		"d2f":                dir(0o700, 0, 0),
		"d2f/again":          file("again", 0o644, 0, 0),
		"f2d":                dir(0o750, 0, 0),
		"f2d/inside":         file("inside", 0o644, 0, 0),
		"wh":                 dir(0o755, 0, 0),
		"wh/keep":            file("keep", 0o644, 0, 0),
		"lower":              file("lower content", 0o644, 0, 0),
		"upper-link":         file("lower content", 0o644, 0, 0),
		"hl":                 file("t2 content", 0o644, 0, 0),
		"links":              dir(0o755, 0, 0),
		"links/abs":          link("/etc/passwd"),
		"links/rel":          link("../etc/passwd"),
		"mtime":              mtime,
		"same":               dir(0o755, 0, 0),
		"same/x":             file("new x", 0o644, 0, 0),
		"same/y":             file("new y", 0o644, 0, 0),
		"same2":              dir(0o755, 0, 0),
		"same2/d":            file("now a file", 0o644, 0, 0),
		"fifo":               {Type: "fifo", Mode: 0o644, MTime: MTime},
		"whdir":              dir(0o750, 0, 0),
		"whdir/new":          file("new", 0o644, 0, 0),
		"alias-a":            file("new a", 0o600, 0, 0),
		"alias-b":            file("a and b", 0o644, 0, 0),
		"alias-c":            file("c and d", 0o644, 0, 0),
		"alias-d":            file("new d", 0o600, 0, 0),
	}
}

// RootlessView turns a tree expected as root into the tree a rootless
// flattening must produce: everything owned by uid:gid, set-id bits
// dropped, the owner's access kept, and the truth recorded in the
// override_stat xattr of files and directories.
func RootlessView(want map[string]Node, uid, gid int) map[string]Node {
	out := make(map[string]Node, len(want))
	for p, n := range want {
		perm := uint32(n.Mode.Perm())
		if n.Mode&fs.ModeSetuid != 0 {
			perm |= 0o4000
		}
		if n.Mode&fs.ModeSetgid != 0 {
			perm |= 0o2000
		}
		if n.Mode&fs.ModeSticky != 0 {
			perm |= 0o1000
		}
		switch n.Type {
		case "file":
			n.Override = fmt.Sprintf("%d:%d:%04o:file", n.UID, n.GID, perm)
			n.Mode = n.Mode&^(fs.ModeSetuid|fs.ModeSetgid) | 0o600
		case "dir":
			n.Override = fmt.Sprintf("%d:%d:%04o:dir", n.UID, n.GID, perm)
			n.Mode = n.Mode&^(fs.ModeSetuid|fs.ModeSetgid) | 0o700
		case "fifo":
			n.Mode |= 0o600
		}
		n.UID, n.GID = uid, gid
		out[p] = n
	}
	return out
}

// HostileCase is an image that tries to reach outside its root file system.
type HostileCase struct {
	Name   string
	Layers [][]Entry
	// WantErr is a substring of the error the flattening must fail with;
	// empty when the image must apply (with everything kept inside).
	WantErr string
}

// HostileCases returns images that target victim, an absolute host
// directory outside the root file system holding a file "secret".
func HostileCases(victim string) []HostileCase {
	up := strings.Repeat("../", 12) + strings.TrimPrefix(victim, "/")
	return []HostileCase{
		{Name: "dotdot", Layers: [][]Entry{{File(up+"/dotdot", "x", 0o644)}}, WantErr: "leaves the root"},
		{Name: "absolute name", Layers: [][]Entry{{File(victim+"/absolute", "x", 0o644)}}},
		{Name: "symlink then write, same layer", Layers: [][]Entry{{
			Symlink("escape", victim), File("escape/planted", "x", 0o644),
		}}, WantErr: "dangling"},
		{Name: "relative symlink then write, same layer", Layers: [][]Entry{{
			Symlink("escape", up), File("escape/planted", "x", 0o644),
		}}, WantErr: "dangling"},
		{Name: "symlink then write, later layer", Layers: [][]Entry{
			{Symlink("escape", victim)},
			{File("escape/planted", "x", 0o644)},
		}, WantErr: "dangling"},
		{Name: "symlink then overwrite file, later layer", Layers: [][]Entry{
			{Symlink("secret-link", victim+"/secret")},
			{File("secret-link", "overwritten", 0o777)},
		}},
		{Name: "symlink then directory chmod, later layer", Layers: [][]Entry{
			{Symlink("dirlink", victim)},
			{Dir("dirlink", 0o777)},
		}},
		{Name: "symlink named dot", Layers: [][]Entry{{Symlink(".", victim)}}, WantErr: "type of the root"},
		{Name: "symlink named slash", Layers: [][]Entry{{Symlink("/", victim)}}, WantErr: "type of the root"},
		{Name: "root becomes a file", Layers: [][]Entry{{File(".", "x", 0o644)}}, WantErr: "type of the root"},
		{Name: "hard link with dotdot", Layers: [][]Entry{{Hardlink("hl", up+"/secret")}}, WantErr: "leaves the root"},
		{Name: "hard link absolute", Layers: [][]Entry{{Hardlink("hl", victim+"/secret")}}, WantErr: "hard link target"},
		{Name: "hard link through symlink", Layers: [][]Entry{{
			Symlink("s", victim), Hardlink("hl", "s/secret"),
		}}, WantErr: "hard link target"},
		{Name: "whiteout through symlink", Layers: [][]Entry{
			{Symlink("wlink", victim)},
			{Whiteout("wlink/secret")},
		}},
		{Name: "whiteout of a symlink of the same layer", Layers: [][]Entry{
			{Symlink("wself", victim), Whiteout("wself")},
		}},
		{Name: "opaque through symlink", Layers: [][]Entry{
			{Symlink("wlink", victim)},
			{Opaque("wlink")},
		}},
		{Name: "device nodes", Layers: [][]Entry{{
			Dir("dev", 0o755), Device("dev/kmsg", 1, 11, 0o666), Device(victim+"/dev", 1, 3, 0o666),
		}}},
	}
}
