package hostapi

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/internal/testutil/victim"
)

// An image whose layer holds /.krunbox -> a host directory, and a guest
// that plants that link between a stop and a start: krunbox owns
// /.krunbox, so the link is replaced in the sandbox's root, the host
// directory stays byte for byte as it was, and the sandbox starts each
// time, on either root and whether libkrun serves the agent from memory
// (overlay files) or krunbox writes it into the root (libkrun 1.17/1.18).
func TestKrunboxLinkInImageOrRootNeverWrittenThrough(t *testing.T) {
	for _, tt := range []struct {
		name   string
		root   RootKind // RootAuto: an overlay, where the host has them
		legacy bool
	}{
		{"overlay root", RootAuto, false},
		{"copy root", RootCopy, false},
		{"overlay root on libkrun without overlay files", RootAuto, true},
		{"copy root on libkrun without overlay files", RootCopy, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var opts []HostOption
			if tt.legacy {
				opts = append(opts, WithLibkrun(testkrun.Build(t, "-DTESTKRUN_LEGACY")))
			}
			h, _ := testHost(t, opts...)
			v := victim.New(t)
			victim := v.Path

			img, err := mutate.AppendLayers(testimage.Busybox(t), testimage.Layer(t, testimage.Symlink(".krunbox", victim)))
			if err != nil {
				t.Fatal(err)
			}
			ref := testimage.Serve(t, img)
			sb, err := h.Create(t.Context(), Config{Name: "planted", Image: ref, Root: tt.root})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Remove(context.Background()) })
			if tt.root == RootAuto && sb.Root().Kind != RootOverlay {
				t.Skipf("no overlay roots here: %s", sb.Root().Reason)
			}
			err = sb.Start(t.Context())
			v.Check(t, "first start")
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			if got := run(t, sb, "hostname"); got != "planted" {
				t.Errorf("hostname %q: the agent did not get its config", got)
			}

			run(t, sb, "sh", "-c", "rm -rf /.krunbox; ln -s "+victim+" /.krunbox")
			if err := sb.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			err = sb.Start(t.Context())
			v.Check(t, "second start")
			if err != nil {
				t.Fatalf("start after the guest planted /.krunbox: %v", err)
			}
			if got := run(t, sb, "hostname"); got != "planted" {
				t.Errorf("hostname %q after a restart: the agent did not get its config", got)
			}
		})
	}
}
