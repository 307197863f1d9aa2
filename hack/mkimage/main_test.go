package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/oci"
)

func TestMkimageWritesAPullableBusybox(t *testing.T) {
	if _, err := os.Stat(testimage.BusyboxPath); err != nil {
		t.Skipf("needs %s (apt-get install busybox-static)", testimage.BusyboxPath)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := mkimage(dir, "v1"); err != nil {
		t.Fatal(err)
	}
	store, err := oci.Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := store.Pull(t.Context(), "oci:"+dir+":v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bin/busybox", "bin/sh", "etc/passwd", "tmp"} {
		if _, err := os.Lstat(filepath.Join(img.Rootfs, p)); err != nil {
			t.Errorf("image lacks %s: %v", p, err)
		}
	}
	if len(img.Config.Env) == 0 || img.Config.Env[0] != "PATH=/bin" {
		t.Errorf("image env %v, want PATH=/bin", img.Config.Env)
	}
}
