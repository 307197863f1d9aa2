//go:build linux

package guestagent

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// identity is who a process runs as.
type identity struct {
	uid, gid uint32
	groups   []uint32
	name     string // empty for a uid not in /etc/passwd
	home     string
}

// lookupIdentity resolves "user[:group]" (names or numbers) in the guest's
// /etc/passwd and /etc/group. An empty spec is the agent's own identity.
// A uid that is not in /etc/passwd is allowed, with gid 0 and home "/"
// unless a group is given.
func lookupIdentity(spec string) (*identity, *protocol.Error) {
	if spec == "" {
		spec = strconv.Itoa(os.Geteuid()) + ":" + strconv.Itoa(os.Getegid())
	}
	uspec, gspec, hasGroup := strings.Cut(spec, ":")
	unknown := func(msg string) *protocol.Error {
		return &protocol.Error{Code: protocol.CodeUnknownUser, Op: "user", Path: spec, Message: msg}
	}
	id := &identity{home: "/"}
	var u *user.User
	if n, err := strconv.ParseUint(uspec, 10, 32); err == nil {
		id.uid = uint32(n)
		u, _ = user.LookupId(uspec)
	} else {
		var err error
		if u, err = user.Lookup(uspec); err != nil {
			return nil, unknown(fmt.Sprintf("no user %q in the guest's /etc/passwd", uspec))
		}
	}
	if u != nil {
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return nil, unknown(fmt.Sprintf("bad ids for user %q in the guest's /etc/passwd", uspec))
		}
		id.uid, id.gid, id.name = uint32(uid), uint32(gid), u.Username
		if u.HomeDir != "" {
			id.home = u.HomeDir
		}
	}
	switch {
	case hasGroup:
		if n, err := strconv.ParseUint(gspec, 10, 32); err == nil {
			id.gid = uint32(n)
		} else if g, err := user.LookupGroup(gspec); err == nil {
			n, _ := strconv.ParseUint(g.Gid, 10, 32)
			id.gid = uint32(n)
		} else {
			return nil, unknown(fmt.Sprintf("no group %q in the guest's /etc/group", gspec))
		}
		id.groups = []uint32{id.gid}
	case u != nil:
		if gids, err := u.GroupIds(); err == nil {
			for _, g := range gids {
				if n, err := strconv.ParseUint(g, 10, 32); err == nil {
					id.groups = append(id.groups, uint32(n))
				}
			}
		}
	}
	return id, nil
}

// credential is what a child needs to switch to id: nil when it already
// runs as id, an error when the agent cannot switch (it is not root).
func (id *identity) credential() (*syscall.Credential, *protocol.Error) {
	euid, egid := os.Geteuid(), os.Getegid()
	if euid != 0 {
		if int(id.uid) == euid && int(id.gid) == egid {
			return nil, nil
		}
		e := errorFor("user", strconv.Itoa(int(id.uid)), syscall.EPERM)
		e.Message = "the agent does not run as root, so it can only run processes as itself"
		return nil, e
	}
	return &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: id.groups, NoSetGroups: setgroupsDenied()}, nil
}

// setgroupsDenied reports whether this process may not set its groups: in
// a user namespace whose creator wrote "deny" to /proc/self/setgroups, as
// krunbox's runner does for a caller who is not root. A guest with its own
// kernel never meets it; an agent under the libkrun test double, sharing
// the host's kernel, does, and then runs processes with its own groups.
func setgroupsDenied() bool {
	b, err := os.ReadFile("/proc/self/setgroups")
	return err == nil && strings.TrimSpace(string(b)) == "deny"
}
