package main

import (
	"os"
	"testing"

	"github.com/krunbox/krunbox/hostapi"
)

// TestRmiKeepsImageOfSandboxCreatedMeanwhile creates a sandbox after rmi
// started but before it removes anything (as when it waits for the store's
// lock while the sandbox's image is pulled): the sandboxes must be looked
// at under the lock, so that the sandbox's image tree is kept.
func TestRmiKeepsImageOfSandboxCreatedMeanwhile(t *testing.T) {
	ref := imageCLIEnv(t)
	if code, _, errOut := runCLI(t, "pull", ref); code != 0 {
		t.Fatalf("pull: %s", errOut)
	}
	store, images, err := openImageStoreInUse()
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := store.List(t.Context())
	if err != nil || len(imgs) != 1 {
		t.Fatalf("images: %v, %v", imgs, err)
	}
	inUse := images.inUse()
	host, err := hostapi.NewHost()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := host.Create(t.Context(), hostapi.Config{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	freed, err := store.Remove(t.Context(), ref, inUse)
	if err != nil || images.err != nil {
		t.Fatalf("rmi: %v, %v", err, images.err)
	}
	if len(freed.Images) != 1 || len(freed.Trees) != 0 || freed.Blobs != 0 {
		t.Errorf("rmi freed %+v; want the record only, the sandbox's image kept", freed)
	}
	if sb.Image().Digest != imgs[0].Digest.String() {
		t.Fatalf("sandbox made from %s, want %s", sb.Image().Digest, imgs[0].Digest)
	}
	if _, err := os.Stat(imgs[0].Rootfs); err != nil {
		t.Errorf("the tree of sandbox %s's image was removed: %v", sb.Name(), err)
	}
}
