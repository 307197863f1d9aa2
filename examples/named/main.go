// Command named keeps a named sandbox across runs of this program: the
// first run creates and boots it, later runs find it (booting it again if
// it was stopped) and run in it, and what the guest wrote to its root file
// system is still there. Here a counter in /root/count goes up by one per
// run.
//
//	go run ./examples/named -image alpine        # count: 1
//	go run ./examples/named -image alpine        # count: 2
//	go run ./examples/named -stop                # stop it (it persists)
//	go run ./examples/named -rm                  # remove it
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/krunbox/krunbox/hostapi"
)

func main() {
	image := flag.String("image", "alpine", "image of the sandbox, when it is created")
	name := flag.String("name", "example-named", "name of the sandbox")
	stopIt := flag.Bool("stop", false, "stop the sandbox and exit")
	rm := flag.Bool("rm", false, "remove the sandbox and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := named(ctx, *name, *image, *stopIt, *rm); err != nil {
		fmt.Fprintln(os.Stderr, "named:", err)
		os.Exit(1)
	}
}

func named(ctx context.Context, name, image string, stopIt, rm bool) error {
	host, err := hostapi.NewHost()
	if err != nil {
		return err
	}
	sb, err := host.Get(name)
	switch {
	case errors.Is(err, hostapi.ErrNotFound) && !stopIt && !rm:
		// The VM stops itself after 10 idle minutes; the sandbox stays.
		sb, err = host.Create(ctx, hostapi.Config{Name: name, Image: image, IdleTimeout: 10 * time.Minute})
		if err != nil {
			return err
		}
		fmt.Println("created", name)
	case err != nil:
		return err
	}
	switch {
	case rm:
		return sb.Remove(ctx)
	case stopIt:
		return sb.Stop(ctx)
	}
	// Start does nothing when it runs, and boots it otherwise: from
	// any process, at once, one VM.
	if err := sb.Start(ctx); err != nil {
		return err
	}
	c := sb.Client()
	defer c.Close()
	out, err := c.Output(ctx, "sh", "-c", "n=$(cat /root/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > /root/count && echo $n")
	if err != nil {
		return err
	}
	st, err := sb.Status(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("count: %s (sandbox %s is %s, created %s)\n", strings.TrimSpace(string(out)), name, st.State, sb.Created().Format(time.RFC3339))
	return nil
}
