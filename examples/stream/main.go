// Command stream runs a shell script in a microVM and streams its output
// line by line as the guest writes it, with its stdin fed from this
// program's, the way a build log or a test run is followed.
//
//	printf 'one\ntwo\n' | go run ./examples/stream -image alpine \
//	    'while read l; do echo "got $l"; sleep 1; done'
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/krunbox/krunbox/hostapi"
)

func main() {
	image := flag.String("image", "alpine", "image to boot")
	flag.Parse()
	script := "for i in 1 2 3; do echo line $i; sleep 0.2; done"
	if flag.NArg() > 0 {
		script = flag.Arg(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	code, err := stream(ctx, *image, script, os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stream:", err)
		os.Exit(125)
	}
	os.Exit(code)
}

func stream(ctx context.Context, image, script string, stdin io.Reader) (int, error) {
	host, err := hostapi.NewHost()
	if err != nil {
		return 0, err
	}
	sb, err := host.Create(ctx, hostapi.Config{Image: image})
	if err != nil {
		return 0, err
	}
	defer sb.Remove(context.WithoutCancel(ctx))
	if err := sb.Start(ctx); err != nil {
		return 0, err
	}
	c := sb.Client()
	defer c.Close()
	// Stdout left nil: the process's output is read from p.Stdout() as it
	// comes. Stdin is copied in and closed at its end. Cancelling ctx
	// (Ctrl-C) kills the guest process.
	p, err := c.Start(ctx, hostapi.Cmd{Args: []string{"sh", "-c", script}, Stdin: stdin, Stderr: os.Stderr})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	start := time.Now()
	sc := bufio.NewScanner(p.Stdout())
	for sc.Scan() {
		fmt.Printf("[%6.2fs] %s\n", time.Since(start).Seconds(), sc.Text())
	}
	err = p.Wait()
	var exit *hostapi.ExitError
	if err != nil && !errors.As(err, &exit) {
		return 0, err
	}
	return p.ExitCode(), nil
}
