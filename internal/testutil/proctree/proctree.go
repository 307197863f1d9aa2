//go:build linux

// Package proctree finds processes by their place in the process tree, from
// /proc, for tests that must reach a guest's processes (under the libkrun
// test double they are host processes below the VM's runner).
package proctree

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat returns the fields of /proc/PID/stat after the command name: state,
// parent pid, process group... It reports false when the process is gone.
func Stat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	return strings.Fields(string(b[i+1:])), true
}

// Parent returns the parent pid of pid, and false when pid is gone.
func Parent(pid int) (int, bool) {
	f, ok := Stat(pid)
	if !ok || len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// DescendantNamed returns a process below root whose command name is comm,
// or 0 when there is none.
func DescendantNamed(root int, comm string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		for p := pid; p > 1; {
			ppid, ok := Parent(p)
			if !ok {
				break
			}
			if ppid == root {
				return pid
			}
			p = ppid
		}
	}
	return 0
}

// Stopped reports whether every thread of pid is stopped (state T): kill
// returns before a SIGSTOP's group stop completes, and a thread still
// running may answer meanwhile.
func Stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) == 0 || f[0] != "T" {
			return false
		}
	}
	return true
}
