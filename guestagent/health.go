//go:build linux

package guestagent

import (
	"bufio"
	"bytes"
	"os"
	"strconv"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

// health gathers the guest's vital signs.
func (a *Agent) health() protocol.Health {
	h := protocol.Health{
		Uptime:       BootTime(),
		Processes:    a.reaper.running(),
		AgentVersion: a.version,
	}
	a.mu.Lock()
	h.Boot = a.boot
	a.mu.Unlock()
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		unit := uint64(si.Unit)
		if unit == 0 {
			unit = 1
		}
		for i := range h.Load {
			h.Load[i] = float64(si.Loads[i]) / (1 << unix.SI_LOAD_SHIFT)
		}
		h.Memory.Total = uint64(si.Totalram) * unit
		h.Memory.Free = uint64(si.Freeram) * unit
	}
	h.Memory.Available = memAvailable()
	var fs unix.Statfs_t
	if unix.Statfs("/", &fs) == nil {
		bs := uint64(fs.Bsize)
		h.Disk = protocol.DiskStats{Path: "/", Total: fs.Blocks * bs, Free: fs.Bfree * bs, Available: fs.Bavail * bs}
	}
	return h
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemAvailable:" {
			kb, _ := strconv.ParseUint(string(f[1]), 10, 64)
			return kb << 10
		}
	}
	return 0
}
