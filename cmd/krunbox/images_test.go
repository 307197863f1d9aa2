package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/oci"
)

// imageCLIEnv isolates krunbox's state and serves a small image; it
// returns its reference.
func imageCLIEnv(t *testing.T) string {
	t.Helper()
	t.Setenv("KRUNBOX_HOME", t.TempDir())
	img := testimage.Image(t, "", testimage.Config{Cmd: []string{"/bin/sh"}},
		testimage.Layer(t, testimage.Dir("etc", 0o755), testimage.File("etc/hostname", "box\n", 0o644)),
		testimage.Layer(t, testimage.Dir("bin", 0o755), testimage.File("bin/sh", "#!", 0o755)))
	return testimage.Serve(t, img)
}

func TestPullImagesExportRmiPrune(t *testing.T) {
	ref := imageCLIEnv(t)

	code, out, errOut := runCLI(t, "pull", ref)
	if code != 0 || !strings.Contains(out, "Digest: sha256:") {
		t.Fatalf("pull: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Not a terminal: plain lines, one per layer event, no escape codes.
	if strings.Contains(errOut, "\x1b[") || strings.Count(errOut, "extracted") != 2 || !strings.Contains(errOut, "layer 1/2 ") {
		t.Errorf("progress on a non-terminal:\n%s", errOut)
	}
	checkProgressLines(t, errOut, "downloading")

	code, out, _ = runCLI(t, "images", "--json")
	var imgs []imageJSON
	if code != 0 || json.Unmarshal([]byte(out), &imgs) != nil || len(imgs) != 1 {
		t.Fatalf("images --json: code %d, %q", code, out)
	}
	if imgs[0].Name != ref || imgs[0].Tag != "latest" || !strings.HasPrefix(imgs[0].Digest, "sha256:") || imgs[0].Size <= 0 {
		t.Errorf("images --json: %+v", imgs[0])
	}
	if b, err := os.ReadFile(filepath.Join(imgs[0].Rootfs, "etc", "hostname")); err != nil || string(b) != "box\n" {
		t.Errorf("rootfs %s: %q, %v", imgs[0].Rootfs, b, err)
	}
	code, out, _ = runCLI(t, "images")
	if code != 0 || !strings.Contains(out, "REPOSITORY") || !strings.Contains(out, imgs[0].Digest[7:19]) {
		t.Errorf("images: code %d, %q", code, out)
	}

	dir := filepath.Join(t.TempDir(), "out")
	code, out, errOut = runCLI(t, "export", ref, dir)
	if code != 0 || !strings.Contains(out, "Exported") {
		t.Fatalf("export: code %d, %q, %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "bin", "sh")); err != nil || string(b) != "#!" {
		t.Errorf("exported tree: %q, %v", b, err)
	}
	code, _, errOut = runCLI(t, "export", ref, dir)
	if code != ExitKrunbox || !strings.Contains(errOut, "not empty") || !strings.Contains(errOut, "hint: ") {
		t.Errorf("export into a non-empty dir: code %d, %q", code, errOut)
	}

	code, out, _ = runCLI(t, "rmi", ref)
	if code != 0 || !strings.Contains(out, "Removed "+ref) || !strings.Contains(out, "Freed ") || !strings.Contains(out, "1 root file system, 4 blobs") {
		t.Errorf("rmi: code %d, %q", code, out)
	}
	code, out, _ = runCLI(t, "images", "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("images after rmi: %q", out)
	}
	code, out, _ = runCLI(t, "prune")
	if code != 0 || !strings.Contains(out, "Nothing to free") {
		t.Errorf("prune: code %d, %q", code, out)
	}
	code, _, errOut = runCLI(t, "rmi", ref)
	if code != ExitKrunbox || !strings.Contains(errOut, "not found") {
		t.Errorf("rmi again: code %d, %q", code, errOut)
	}
}

func TestPullErrors(t *testing.T) {
	ref := imageCLIEnv(t)
	notTar := filepath.Join(t.TempDir(), "not.tar")
	if err := os.WriteFile(notTar, []byte("not a tarball"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
		hint string // in the hint line, when not empty
	}{
		{"never, not cached", []string{"pull", "--pull", "never", ref}, "not found", "krunbox pull " + ref + "), or pull without --pull never"},
		{"bad policy", []string{"pull", "--policy", "sometimes", ref}, "pull policy", ""},
		{"bad platform", []string{"pull", "--platform", "amd64", ref}, "platform", ""},
		{"no such platform", []string{"pull", "--platform", "linux/s390x", ref}, "has no image for linux/s390x", "--platform"},
		{"no reference", []string{"pull"}, "needs an image reference", ""},
		{"export needs two", []string{"export", ref}, "needs an image reference and a directory", ""},
		{"negative max-size", []string{"pull", "--max-size", "-5", ref}, "--max-size -5: want a positive limit", ""},
		{"negative max-files", []string{"pull", "--max-files=-1", ref}, "--max-files -1: want a positive limit", ""},
		{"export, negative max-size", []string{"export", "--max-size", "-5", ref, t.TempDir()}, "--max-size -5", ""},
		{"bad reference", []string{"pull", "UPPER/case"}, `invalid image reference "UPPER/case"`, "references look like alpine, alpine:3.20,"},
		{"rmi, bad reference", []string{"rmi", "a b"}, `invalid image reference "a b"`, "references look like"},
		{"a local path", []string{"pull", "./build/testimage"}, `invalid image reference "./build/testimage": a local path is not an image reference`, "write oci:./build/testimage"},
		{"docker transport, bad reference", []string{"pull", "docker://UPPER/case"}, `invalid image reference "docker://UPPER/case"`, "references look like"},
		{"no OCI layout", []string{"pull", "oci:/nonexistent"}, "read OCI layout /nonexistent", "OCI image layout directory"},
		{"not a docker archive", []string{"pull", "docker-archive:" + notTar}, "read docker archive " + notTar, "'docker save -o FILE IMAGE'"},
		{"registry down", []string{"pull", closedPort(t) + "/img"}, "connection refused", "check the registry name"},
		{"rmi, not cached", []string{"rmi", "nosuch"}, "nosuch: image not found", "'krunbox images' lists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tt.args...)
			if code != ExitKrunbox || !strings.Contains(errOut, tt.want) {
				t.Errorf("code %d, stderr %q; want %d and %q", code, errOut, ExitKrunbox, tt.want)
			}
			if _, hint, ok := strings.Cut(errOut, "\nhint: "); tt.hint != "" && (!ok || !strings.Contains(hint, tt.hint)) {
				t.Errorf("stderr %q: want a hint line saying %q", errOut, tt.hint)
			}
		})
	}
	code, out, _ := runCLI(t, "pull", "--help")
	if code != 0 || !strings.Contains(out, "oci:PATH[:TAG]") || !strings.Contains(out, "docker-archive:PATH[:REF]") {
		t.Errorf("pull --help does not document references: %q", out)
	}
}

// checkProgressLines asserts that each layer's first progress line says
// first, and its extracting line comes later.
func checkProgressLines(t *testing.T, progress, first string) {
	t.Helper()
	layers := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(progress), "\n") {
		// layer I/N DIGEST: STATE (SIZE)
		head, rest, ok := strings.Cut(l, ": ")
		if !ok || !strings.HasPrefix(head, "layer ") {
			t.Errorf("progress line %q: want \"layer I/N DIGEST: STATE (SIZE)\"", l)
			continue
		}
		state, _, _ := strings.Cut(rest, " (")
		layers[head] = append(layers[head], state)
	}
	if len(layers) == 0 {
		t.Errorf("no progress lines in %q", progress)
	}
	for layer, states := range layers {
		if states[0] != first || !slices.Contains(states[1:], "extracting") {
			t.Errorf("%s: %q, want %q first and \"extracting\" after it", layer, states, first)
		}
	}
}

func TestPullLayoutTwoSpellingsOneImage(t *testing.T) {
	t.Setenv("KRUNBOX_HOME", t.TempDir())
	img := testimage.Image(t, "", testimage.Config{Cmd: []string{"/bin/sh"}},
		testimage.Layer(t, testimage.Dir("etc", 0o755), testimage.File("etc/hostname", "box\n", 0o644)))
	dir := testimage.WriteLayout(t, filepath.Join(t.TempDir(), "layout"), "latest", img)
	for i, ref := range []string{"oci:" + dir, "oci:" + dir + ":latest", "oci:" + dir} {
		code, out, errOut := runCLI(t, "pull", "--policy", "always", ref)
		if code != 0 || !strings.HasPrefix(out, "oci:"+dir+":latest (") {
			t.Fatalf("pull %s: code %d, stdout %q, stderr %q; want it named oci:%s:latest", ref, code, out, errOut, dir)
		}
		if i == 0 { // the blobs are cached after the first pull
			checkProgressLines(t, errOut, "copying")
		}
	}
	code, out, _ := runCLI(t, "images", "--json")
	var imgs []imageJSON
	if code != 0 || json.Unmarshal([]byte(out), &imgs) != nil || len(imgs) != 1 {
		t.Fatalf("images --json after pulling oci:DIR and oci:DIR:latest: code %d, %s; want one image", code, out)
	}
	if imgs[0].Repository != "oci:"+dir || imgs[0].Tag != "latest" {
		t.Errorf("images: repository %q, tag %q; want oci:%s and latest", imgs[0].Repository, imgs[0].Tag, dir)
	}
	code, out, _ = runCLI(t, "images")
	if code != 0 || strings.Contains(out, "<none>") {
		t.Errorf("images: code %d, %q; want no <none> tag", code, out)
	}
}

func TestPullDockerTransport(t *testing.T) {
	ref := imageCLIEnv(t)
	for _, r := range []string{"docker://" + ref, ref} {
		code, out, errOut := runCLI(t, "pull", r)
		if code != 0 || !strings.HasPrefix(out, ref+" (") {
			t.Fatalf("pull %s: code %d, stdout %q, stderr %q; want it named %s", r, code, out, errOut, ref)
		}
	}
	code, out, _ := runCLI(t, "images", "--json")
	var imgs []imageJSON
	if code != 0 || json.Unmarshal([]byte(out), &imgs) != nil || len(imgs) != 1 || imgs[0].Name != ref {
		t.Errorf("images --json after pulling docker://%s and %s: code %d, %s; want one image named %s", ref, ref, code, out, ref)
	}
}

func TestPrintFreedPlurals(t *testing.T) {
	tests := []struct {
		freed oci.Freed
		want  string
	}{
		{oci.Freed{Trees: make([]v1.Hash, 1), Blobs: 1, Bytes: 10}, "Freed 10 B: 1 root file system, 1 blob\n"},
		{oci.Freed{Trees: make([]v1.Hash, 2), Blobs: 4, Bytes: 10}, "Freed 10 B: 2 root file systems, 4 blobs\n"},
		{oci.Freed{Leftovers: 1, Bytes: 10}, "Freed 10 B: 0 root file systems, 0 blobs, 1 leftover of interrupted pulls\n"},
		{oci.Freed{}, "Nothing to free\n"},
	}
	for _, tt := range tests {
		var buf strings.Builder
		if err := printFreed(&buf, tt.freed); err != nil || buf.String() != tt.want {
			t.Errorf("printFreed(%+v) = %q, %v; want %q", tt.freed, buf.String(), err, tt.want)
		}
	}
}

func TestProgressOnTerminal(t *testing.T) {
	var buf strings.Builder
	p := &progressPrinter{w: &buf, tty: true}
	ref := imageCLIEnv(t)
	store, err := openImageStore()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Pull(t.Context(), ref, withProgress(p)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "\x1b[2A") || !strings.Contains(buf.String(), "extracted") {
		t.Errorf("terminal progress does not redraw two layer lines: %q", buf.String())
	}
}

func TestPruneSaysWhatInterruptedPullsLeft(t *testing.T) {
	t.Setenv("KRUNBOX_HOME", t.TempDir())
	store, err := openImageStore()
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range map[string]int{"blob-0123456789ab-1": 1000, "images.json.2": 500} {
		if err := os.WriteFile(filepath.Join(store.Dir(), "tmp", p), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI(t, "prune")
	if code != 0 || !strings.Contains(out, "Freed 1.5 kB: 0 root file systems, 0 blobs, 2 leftovers of interrupted pulls") {
		t.Errorf("prune: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// closedPort returns "127.0.0.1:PORT" where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestAgo(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{10 * time.Second, "just now"},
		{90 * time.Second, "1 minute ago"},
		{5 * time.Minute, "5 minutes ago"},
		{61 * time.Minute, "1 hour ago"},
		{47 * time.Hour, "47 hours ago"},
		{49 * time.Hour, "2 days ago"},
	} {
		if got := ago(tt.d); got != tt.want {
			t.Errorf("ago(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
