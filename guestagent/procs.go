//go:build linux

package guestagent

import (
	"bytes"
	"os"
	"strconv"
)

// child is a live (not zombie) child process of the agent.
type child struct {
	pid, pgid int
}

// children lists the agent's live children by scanning /proc. Since the
// agent is a subreaper, every process it started directly or indirectly
// either is a child or descends from one, so no children means nothing of
// ours runs.
func children() []child {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []child
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || string(f[0]) == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		pgid, _ := strconv.Atoi(string(f[2]))
		if ppid == self {
			out = append(out, child{pid: pid, pgid: pgid})
		}
	}
	return out
}
