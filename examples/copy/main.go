// Command copy moves files in and out of a microVM through its guest
// agent: it copies a host directory in, has the guest work on it (here:
// compress every file), and copies the result out.
//
//	go run ./examples/copy -image alpine ./some/dir ./out
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/krunbox/krunbox/hostapi"
)

func main() {
	image := flag.String("image", "alpine", "image to boot")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: copy [-image IMAGE] SRC-DIR DST-DIR")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := copyThrough(ctx, *image, flag.Arg(0), flag.Arg(1)); err != nil {
		fmt.Fprintln(os.Stderr, "copy:", err)
		os.Exit(1)
	}
}

func copyThrough(ctx context.Context, image, src, dst string) error {
	host, err := hostapi.NewHost()
	if err != nil {
		return err
	}
	sb, err := host.Create(ctx, hostapi.Config{Image: image})
	if err != nil {
		return err
	}
	defer sb.Remove(context.WithoutCancel(ctx))
	if err := sb.Start(ctx); err != nil {
		return err
	}
	c := sb.Client()
	defer c.Close()

	// A whole tree in, streamed, modes kept.
	if err := c.CopyIn(ctx, src, "/work"); err != nil {
		return err
	}
	// Single files: WriteFile replaces atomically, ReadFile reads whole.
	if err := c.WriteFile(ctx, "/work/NOTE", []byte("compressed in a krunbox VM\n"), 0o644); err != nil {
		return err
	}
	if _, err := c.Output(ctx, "sh", "-c", "cd /work && for f in $(find . -type f); do gzip -9 \"$f\"; done"); err != nil {
		return fmt.Errorf("compress: %w", err)
	}
	listing, err := c.ReadDir(ctx, "/work")
	if err != nil {
		return err
	}
	for _, e := range listing {
		fmt.Println("guest:", filepath.Join("/work", e.Name()))
	}
	// And out: nothing lands outside dst, whatever the guest made.
	return c.CopyOut(ctx, "/work", dst)
}
