// Command mkimage writes the test images krunbox's tests and "make run" use
// into an OCI image layout, built from files of this machine, so that
// nothing has to come from a public registry:
//
//	go run ./hack/mkimage [-tag latest] DIR
//
// writes a busybox image (Debian's busybox-static, its applets, a minimal
// /etc) into the layout DIR; use it as "oci:DIR:latest".
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

func main() {
	tag := flag.String("tag", "latest", "tag of the image in the layout")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: mkimage [-tag TAG] DIR\n\nWrites a busybox image into the OCI image layout DIR.\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := mkimage(flag.Arg(0), *tag); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

func mkimage(dir, tag string) error {
	img, err := testimage.BusyboxImage()
	if err != nil {
		return err
	}
	if err := testimage.AppendToLayout(dir, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("oci:%s:%s %s\n", dir, tag, d)
	return nil
}
