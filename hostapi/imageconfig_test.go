package hostapi

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/oci"
)

func TestCheckImageConfig(t *testing.T) {
	for _, tt := range []struct {
		name    string
		in      ImageConfig
		want    ImageConfig
		warn    []string
		wantErr string
	}{
		{name: "sane", in: ImageConfig{Env: []string{"PATH=/bin", "EMPTY="}, User: "app:app", WorkingDir: "/src"},
			want: ImageConfig{Env: []string{"PATH=/bin", "EMPTY="}, User: "app:app", WorkingDir: "/src"}},
		{name: "bad env entries", in: ImageConfig{Env: []string{"NOEQ", "PATH=/bin", "=v", "A=b\x00c"}, User: "nobody"},
			want: ImageConfig{Env: []string{"PATH=/bin"}, User: "nobody"}, warn: []string{"NOEQ", `"=v"`, `A=b\x00c`}},
		{name: "relative working directory", in: ImageConfig{WorkingDir: "src"}, want: ImageConfig{}, warn: []string{"workingDir=src"}},
		{name: "user with a NUL", in: ImageConfig{User: "app\x00"}, wantErr: "control characters"},
		{name: "user with a newline", in: ImageConfig{User: "app\nroot"}, wantErr: "control characters"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			in := tt.in
			in.Env = append([]string(nil), tt.in.Env...)
			got, err := checkImageConfig("img", oci.ImageConfig(in), slog.New(slog.NewTextHandler(&logs, nil)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "img") {
					t.Fatalf("err %v, want one naming the image and saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got.Env, "|") != strings.Join(tt.want.Env, "|") || got.User != tt.want.User || got.WorkingDir != tt.want.WorkingDir {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if strings.Join(in.Env, "|") != strings.Join(tt.in.Env, "|") {
				t.Errorf("the caller's env changed: %q", in.Env)
			}
			for _, w := range tt.warn {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("no warning naming %s in %q", w, logs.String())
				}
			}
			if len(tt.warn) == 0 && logs.String() != "" {
				t.Errorf("warnings for a sane config: %q", logs.String())
			}
		})
	}
}

// One bad Env entry in an image used to make the agent refuse its whole
// config and serve with none: no workspace, root instead of the image's
// user, while Start said it started. Now the entry is dropped with a
// warning and everything else applies.
func TestBadImageEnvEntryIsDroppedNotTheConfig(t *testing.T) {
	var logs syncbuf.Buffer
	h, _ := testHost(t, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	img, err := mutate.Config(testimage.Busybox(t), testimage.Config{
		Env: []string{"PATH=/bin", "NOEQ", "IMAGE_VAR=kept"}, User: "nobody", Cmd: []string{"/bin/sh"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ref := testimage.Serve(t, img)
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	sb := started(t, h, Config{Image: ref, Workspace: ws, IdleTimeout: time.Hour})
	if !strings.Contains(logs.String(), "NOEQ") {
		t.Errorf("no warning naming the dropped entry: %q", logs.String())
	}
	if got := run(t, sb, "id", "-u"); got != "65534" {
		t.Errorf("uid %s, want the image's user nobody (65534)", got)
	}
	if got := run(t, sb, "sh", "-c", "echo $IMAGE_VAR; pwd; echo from-guest > out"); got != "kept\n"+ws {
		t.Errorf("env and workdir: %q, want the image's variable and the workspace", got)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(b) != "from-guest\n" {
		t.Errorf("the guest's write did not reach the workspace: %q, %v", b, err)
	}
}

// A sandbox recorded before Create checked the image's config may hold what
// the agent refuses: Start says so rather than boot a guest that serves
// with another config.
func TestRecordWithBadImageEnvDoesNotStart(t *testing.T) {
	h, ref := testHost(t)
	sb, err := h.Create(t.Context(), Config{Name: "old", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Remove(t.Context()) })
	rec, err := readRecord(sb.Dir())
	if err != nil {
		t.Fatal(err)
	}
	rec.Image.Config.Env = append(rec.Image.Config.Env, "NOEQ")
	if err := writeRecord(sb.Dir(), rec); err != nil {
		t.Fatal(err)
	}
	old, err := h.Get("old")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "NOEQ") {
		t.Fatalf("start: %v, want an error naming the bad entry", err)
	}
}
