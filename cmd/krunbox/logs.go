package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/confine"
	"github.com/krunbox/krunbox/internal/netstack"
)

// followPoll is how often logs -f looks for more console output.
const followPoll = 100 * time.Millisecond

func newLogsCmd(s *streams) *cobra.Command {
	var follow, netLog bool
	cmd := &cobra.Command{
		Use:   "logs [-f] [--net] NAME",
		Short: "Print a sandbox's console log",
		Long: `logs prints the console of the sandbox's last boot: the kernel's and init's
messages and what the guest agent logs (mounts, failures). On stderr it
prints the VM runner's log of that boot: libkrun's warnings and errors
(why a VM died) and the runner's own messages. With -f it keeps printing
what comes until the VM stops. With --net it prints what the sandbox's
network policy refused instead (time, protocol, name, address, why), so
that a rule can be widened.`,
		Args: exactArgs(1, "a sandbox name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			if netLog {
				return printNetLog(filepath.Join(sb.Dir(), vmm.NetLogFile), s.out)
			}
			if follow {
				return followLogs(cmd.Context(), sb, s.out, s.errOut)
			}
			if _, err := copyFrom(sb.ConsolePath(), 0, s.out); err != nil {
				return err
			}
			_, err = copyFrom(sb.RunnerLogPath(), 0, s.errOut)
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the VM stops")
	cmd.Flags().BoolVar(&netLog, "net", false, "print the connections and DNS questions the network policy refused")
	return cmd
}

// printNetLog prints the refusal log, one line a refusal. The log is the
// runner's (the guest cannot write it); it is read bounded all the same.
func printNetLog(path string, w io.Writer) error {
	data, err := confine.ReadFileNoSymlinks(path, 8<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(data)) {
		var r netstack.Refusal
		if json.Unmarshal([]byte(line), &r) != nil {
			continue
		}
		name := r.Name
		if name == "" {
			name = "-"
		}
		addr := r.Addr
		if addr == "" {
			addr = "-"
		}
		fmt.Fprintf(w, "%s refused %s %s %s: %s\n", r.Time.Local().Format(time.RFC3339), r.Proto, name, addr, r.Reason)
	}
	return nil
}

// followLogs copies the console log to w and the runner's log to errW as
// they grow, until the VM is not running and everything written has been
// copied, or ctx ends. A log started again (a new boot truncates it) is
// followed from its start.
func followLogs(ctx context.Context, sb *hostapi.Sandbox, w, errW io.Writer) error {
	vm := vmm.Open(sb.Dir())
	var offset, logOffset int64
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		// The state first: output written before the VM stopped is
		// copied in this round.
		st, err := vm.State()
		if err != nil {
			return err
		}
		if offset, err = copyFrom(sb.ConsolePath(), offset, w); err != nil {
			return err
		}
		if logOffset, err = copyFrom(sb.RunnerLogPath(), logOffset, errW); err != nil {
			return err
		}
		if st != vmm.StateRunning {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// copyFrom copies what path holds past offset to w and returns the new
// offset; a file shorter than offset is copied from its start.
func copyFrom(path string, offset int64, w io.Writer) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return offset, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < offset {
		offset = 0
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset, err
	}
	n, err := io.Copy(w, f)
	return offset + n, err
}
