package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/logfile"
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
that a rule can be widened. Each log keeps its latest output only, a few
MiB: the guest decides how much it writes.`,
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
			if err := printLog(sb.ConsolePath(), s.out); err != nil {
				return err
			}
			return printLog(sb.RunnerLogPath(), s.errOut)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the VM stops")
	cmd.Flags().BoolVar(&netLog, "net", false, "print the connections and DNS questions the network policy refused")
	return cmd
}

// printLog prints the log at path, across its rotation; no log prints
// nothing.
func printLog(path string, w io.Writer) error {
	r, err := logfile.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}

// maxNetLogRead bounds what logs --net reads of the refusal log: the
// runner bounds it (vmm.Spec.LogMax), and the guest decides what it holds.
const maxNetLogRead = 16 << 20

// printNetLog prints the refusal log, one line a refusal.
func printNetLog(path string, w io.Writer) error {
	data, err := logfile.TailLines(path, maxNetLogRead)
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
// they grow, across their rotations, until the VM is not running and
// everything written has been copied, or ctx ends. A log started again (a
// new boot makes new ones) is followed from its start.
func followLogs(ctx context.Context, sb *hostapi.Sandbox, w, errW io.Writer) error {
	vm := vmm.Open(sb.Dir())
	console, runnerLog := logfile.NewFollower(sb.ConsolePath()), logfile.NewFollower(sb.RunnerLogPath())
	defer console.Close()
	defer runnerLog.Close()
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		// The state first: output written before the VM stopped is
		// copied in this round.
		st, err := vm.State()
		if err != nil {
			return err
		}
		if err := console.Copy(w); err != nil {
			return err
		}
		if err := runnerLog.Copy(errW); err != nil {
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
