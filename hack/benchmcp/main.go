// Command benchmcp is "make bench-mcp": the overhead a tool call through
// krunbox mcp adds to the same operation made directly with hostapi's agent
// client, on one ready sandbox of the libkrun test double, the two
// interleaved in one run:
//
//	go run ./hack/benchmcp -krunbox build/krunbox -image oci:build/testimage:latest [-n 200]
//
// The MCP side is the deployed path: krunbox mcp as a process on stdio,
// driven by the Go SDK's client. Operations: read (the read tool against
// Client.ReadFile of a 110-byte file) and run (the run tool's `true`
// against Client.Run of the same shell -c true). It prints the medians and
// the difference. KRUNBOX_LIBKRUN names the libkrun (the test double);
// KRUNBOX_HOME, when unset, is a fresh temporary directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/krunbox/krunbox/hostapi"
)

func main() {
	krunbox := flag.String("krunbox", "build/krunbox", "the krunbox binary")
	image := flag.String("image", "", "the sandbox's image (oci:LAYOUT:TAG)")
	n := flag.Int("n", 200, "calls of each kind")
	flag.Parse()
	if err := run(context.Background(), *krunbox, *image, *n); err != nil {
		fmt.Fprintf(os.Stderr, "benchmcp: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, krunbox, image string, n int) error {
	tmp, err := os.MkdirTemp("", "benchmcp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if os.Getenv("KRUNBOX_HOME") == "" {
		os.Setenv("KRUNBOX_HOME", filepath.Join(tmp, "home"))
	}
	ws := filepath.Join(tmp, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return err
	}
	file := filepath.Join(ws, "small.txt")
	if err := os.WriteFile(file, []byte(strings.Repeat("krunbox\n", 13)+"mcp bench\n"), 0o644); err != nil {
		return err
	}
	bin, err := filepath.Abs(krunbox)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "mcp", "--image", image)
	cmd.Dir = ws
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "benchmcp", Version: "0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("start krunbox mcp: %w", err)
	}
	defer cs.Close()
	call := func(tool string, args map[string]any) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err == nil && res.IsError {
			err = fmt.Errorf("%s: error result %v", tool, res.Content)
		}
		return err
	}
	if err := call("sandbox_status", nil); err != nil {
		return err
	}
	if err := call("run", map[string]any{"command": "true"}); err != nil { // starts the sandbox
		return err
	}
	h, err := hostapi.NewHost()
	if err != nil {
		return err
	}
	sbs, err := h.List()
	if err != nil || len(sbs) != 1 {
		return fmt.Errorf("want the one sandbox of krunbox mcp: %v, %v", sbs, err)
	}
	c := sbs[0].Client()
	defer c.Close()

	ops := []struct {
		name   string
		mcp    func() error
		direct func() error
	}{
		{"read (110-byte file)", func() error { return call("read", map[string]any{"path": file}) },
			func() error { _, err := c.ReadFile(ctx, file); return err }},
		{"run `true`", func() error { return call("run", map[string]any{"command": "true"}) },
			func() error {
				res, err := c.Run(ctx, hostapi.Command("/bin/sh", "-c", "true"))
				if err == nil {
					err = res.Err()
				}
				return err
			}},
	}
	fmt.Printf("%d calls of each, interleaved; medians\n", n)
	fmt.Printf("%-22s %12s %12s %12s\n", "operation", "krunbox mcp", "hostapi", "overhead")
	for _, op := range ops {
		var viaMCP, direct []time.Duration
		for i := 0; i < n; i++ {
			for _, side := range []struct {
				f   func() error
				out *[]time.Duration
			}{{op.mcp, &viaMCP}, {op.direct, &direct}} {
				t0 := time.Now()
				if err := side.f(); err != nil {
					return fmt.Errorf("%s: %w", op.name, err)
				}
				*side.out = append(*side.out, time.Since(t0))
			}
		}
		m, d := median(viaMCP), median(direct)
		fmt.Printf("%-22s %12s %12s %12s\n", op.name, ms(m), ms(d), "+"+ms(m-d))
	}
	cs.Close() // before the sandbox goes, which the server would report
	return sbs[0].Remove(ctx)
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
