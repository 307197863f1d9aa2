package oci_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/oci"
)

var testConfig = testimage.Config{
	Env:          []string{"PATH=/bin", "A=b"},
	Entrypoint:   []string{"/bin/sh", "-c"},
	Cmd:          []string{"echo hi"},
	WorkingDir:   "/home/user",
	User:         "1000:1000",
	ExposedPorts: map[string]struct{}{"8080/tcp": {}},
	Labels:       map[string]string{"org.example": "yes"},
}

// rulesImage is the rule test image with one layer per compression:
// gzip, zstd and uncompressed.
func rulesImage(t *testing.T, platform string) v1.Image {
	t.Helper()
	ls := testimage.RuleLayers()
	gz := testimage.Layer(t, ls[0]...)
	zst := testimage.RawLayer(t, testimage.Tar(t, ls[1]...), tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	raw := static.NewLayer(testimage.Tar(t, ls[2]...), types.OCIUncompressedLayer)
	return testimage.Image(t, platform, testConfig, gz, zst, raw)
}

func openStore(t *testing.T, opts ...oci.Option) *oci.Store {
	t.Helper()
	s, err := oci.Open(filepath.Join(t.TempDir(), "cache"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantTree() map[string]testimage.Node {
	if os.Geteuid() == 0 {
		return testimage.WantRules()
	}
	return testimage.RootlessView(testimage.WantRules(), os.Geteuid(), os.Getegid())
}

func checkTree(t *testing.T, root string, want map[string]testimage.Node) {
	t.Helper()
	got := testimage.ReadTree(t, root)
	for _, d := range testimage.CompareTrees(want, got, true, true) {
		t.Error(d)
	}
}

// checkClean asserts that nothing half-made is left in the store, and
// that it holds no tree when it should not.
func checkClean(t *testing.T, s *oci.Store, trees bool) {
	t.Helper()
	dirs := []string{"tmp"}
	if !trees {
		dirs = append(dirs, "rootfs")
	}
	for _, d := range dirs {
		entries, err := os.ReadDir(filepath.Join(s.Dir(), d))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if d == "tmp" || e.IsDir() {
				t.Errorf("left behind: %s/%s", d, e.Name())
			}
		}
	}
}

func TestPullRules(t *testing.T) {
	img := rulesImage(t, "")
	ref := testimage.Serve(t, img)
	s := openStore(t)
	var states []oci.ProgressState
	got, err := s.Pull(t.Context(), ref, oci.WithProgress(func(p oci.Progress) { states = append(states, p.State) }))
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, got.Rootfs, wantTree())
	wantDigest, _ := img.Digest()
	if got.Digest != wantDigest || got.Ref != ref || got.Name != ref {
		t.Errorf("got digest %s ref %q name %q; want %s and %q", got.Digest, got.Ref, got.Name, wantDigest, ref)
	}
	if got.Rootfs != filepath.Join(s.Dir(), "rootfs", wantDigest.Hex, "rootfs") {
		t.Errorf("rootfs at %s", got.Rootfs)
	}
	if !got.Platform.Equals(testimage.HostPlatform()) || len(got.Layers) != 3 || got.Size <= 0 || got.Files == 0 {
		t.Errorf("record %+v", got)
	}
	c := got.Config
	if strings.Join(c.Env, ",") != "PATH=/bin,A=b" || c.Entrypoint[1] != "-c" || c.Cmd[0] != "echo hi" ||
		c.WorkingDir != "/home/user" || c.User != "1000:1000" || c.ExposedPorts[0] != "8080/tcp" || c.Labels["org.example"] != "yes" {
		t.Errorf("config %+v", c)
	}
	for _, d := range []string{filepath.Join(s.Dir(), "rootfs"), filepath.Dir(got.Rootfs)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, %v; want 0700", d, fi.Mode(), err)
		}
	}
	if n := countState(states, oci.LayerApplied); n != 3 {
		t.Errorf("progress reported %d applied layers, want 3 (%v)", n, states)
	}
	checkClean(t, s, true)
}

func countState(states []oci.ProgressState, want oci.ProgressState) int {
	n := 0
	for _, s := range states {
		if s == want {
			n++
		}
	}
	return n
}

func TestPullRootlessOption(t *testing.T) {
	ref := testimage.Serve(t, rulesImage(t, ""))
	s := openStore(t, oci.WithRootless(true))
	got, err := s.Pull(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, got.Rootfs, testimage.RootlessView(testimage.WantRules(), os.Geteuid(), os.Getegid()))
}

func TestPullHostile(t *testing.T) {
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := testimage.NewRegistry(t, nil)
	for i, tc := range testimage.HostileCases(victim) {
		t.Run(tc.Name, func(t *testing.T) {
			before := testimage.ReadTree(t, victim)
			var layers []v1.Layer
			for _, l := range tc.Layers {
				layers = append(layers, testimage.Layer(t, l...))
			}
			ref := reg.Push(t, "hostile", string(rune('a'+i)), testimage.Image(t, "", testimage.Config{}, layers...))
			s := openStore(t)
			img, err := s.Pull(t.Context(), ref)
			if tc.WantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.WantErr) {
					t.Errorf("pull: %v, want an error containing %q", err, tc.WantErr)
				}
				checkClean(t, s, false)
			} else if err != nil {
				t.Errorf("pull: %v", err)
			} else {
				for p, n := range testimage.ReadTree(t, img.Rootfs) {
					if n.Type == "char" || n.Type == "block" {
						t.Errorf("device %s created", p)
					}
				}
			}
			for _, d := range testimage.CompareTrees(before, testimage.ReadTree(t, victim), true, true) {
				t.Errorf("host changed outside the rootfs: %s", d)
			}
		})
	}
}

// countingRegistry counts requests per kind ("manifests", "blobs").
func countingRegistry(t *testing.T, fault func(w http.ResponseWriter, r *http.Request) bool) (*testimage.Registry, map[string]*atomic.Int64) {
	counts := map[string]*atomic.Int64{"manifests": {}, "blobs": {}}
	reg := testimage.NewRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				for k, c := range counts {
					if strings.Contains(r.URL.Path, "/"+k+"/") {
						c.Add(1)
					}
				}
			}
			if fault != nil && fault(w, r) {
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	return reg, counts
}

func TestPullPolicies(t *testing.T) {
	reg, counts := countingRegistry(t, nil)
	ctx := t.Context()
	ls := testimage.RuleLayers()
	v1img := testimage.Image(t, "", testimage.Config{}, testimage.Layer(t, ls[0]...))
	v2img := testimage.Image(t, "", testimage.Config{}, testimage.Layer(t, ls[0]...), testimage.Layer(t, ls[1]...))
	ref := reg.Push(t, "pol", "latest", v1img)
	s := openStore(t)

	if _, err := s.Pull(ctx, ref, oci.WithPolicy(oci.PullNever)); !errors.Is(err, oci.ErrNotFound) {
		t.Fatalf("never, not cached: %v, want ErrNotFound", err)
	}
	first, err := s.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	reg.Push(t, "pol", "latest", v2img) // the tag moves on
	counts["manifests"].Store(0)
	counts["blobs"].Store(0)
	for _, p := range []oci.PullPolicy{oci.PullIfMissing, oci.PullNever} {
		img, err := s.Pull(ctx, ref, oci.WithPolicy(p))
		if err != nil || img.Digest != first.Digest {
			t.Errorf("%s: %v, digest %v; want the cached %s", p, err, img, first.Digest)
		}
	}
	if n := counts["manifests"].Load() + counts["blobs"].Load(); n != 0 {
		t.Errorf("cached pulls made %d registry requests, want 0", n)
	}
	img, err := s.Pull(ctx, ref, oci.WithPolicy(oci.PullAlways))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := v2img.Digest()
	if img.Digest != want || counts["manifests"].Load() == 0 {
		t.Errorf("always: digest %s after %d manifest requests; want %s from the registry", img.Digest, counts["manifests"].Load(), want)
	}
	// The layer shared with v1 came from the blob cache.
	if n := counts["blobs"].Load(); n != 2 {
		t.Errorf("always fetched %d blobs, want 2 (the config and the new layer)", n)
	}
	if _, err := oci.ParsePullPolicy("sometimes"); err == nil {
		t.Error("ParsePullPolicy accepted sometimes")
	}
}

func TestConcurrentPulls(t *testing.T) {
	reg, counts := countingRegistry(t, nil)
	img := rulesImage(t, "")
	ref := reg.Push(t, "conc", "latest", img)
	counts["blobs"].Store(0)
	dir := filepath.Join(t.TempDir(), "cache")
	var wg sync.WaitGroup
	results := make([]*oci.Image, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := oci.Open(dir) // one Store per "process": locks are per open file
			if err != nil {
				errs[i] = err
				return
			}
			results[i], errs[i] = s.Pull(context.Background(), ref)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
	}
	if results[0].Rootfs != results[1].Rootfs {
		t.Errorf("two trees: %s and %s", results[0].Rootfs, results[1].Rootfs)
	}
	checkTree(t, results[0].Rootfs, wantTree())
	if n := counts["blobs"].Load(); n > 5 {
		t.Errorf("%d blob requests for 3 layers and two reads of the config: the pulls did not share the work", n)
	}
	s, _ := oci.Open(dir)
	if list, _ := s.List(t.Context()); len(list) != 1 {
		t.Errorf("%d records, want 1", len(list))
	}
	checkClean(t, s, true)
}

// faultyBlob returns a fault that breaks GETs of one blob with do.
func faultyBlob(digest v1.Hash, on *atomic.Bool, do func(w http.ResponseWriter, body []byte)) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !on.Load() || r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+digest.String()) {
			return false
		}
		do(w, nil)
		return true
	}
}

func TestPullCorruptAndInterruptedBlobs(t *testing.T) {
	img := rulesImage(t, "")
	layers, _ := img.Layers()
	bad, _ := layers[1].Digest()
	good, _ := layers[1].Compressed()
	var body []byte
	buf := make([]byte, 1<<20)
	for {
		n, err := good.Read(buf)
		body = append(body, buf[:n]...)
		if err != nil {
			break
		}
	}
	tests := []struct {
		name string
		do   func(w http.ResponseWriter)
		want string
	}{
		{"corrupt", func(w http.ResponseWriter) {
			c := append([]byte(nil), body...)
			c[len(c)/2] ^= 0xff
			w.Write(c)
		}, "corrupt"},
		{"dropped connection", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusOK)
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
		}, "interrupted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var on atomic.Bool
			on.Store(true)
			reg, _ := countingRegistry(t, faultyBlob(bad, &on, func(w http.ResponseWriter, _ []byte) { tt.do(w) }))
			ref := reg.Push(t, "faulty", "latest", img)
			s := openStore(t)
			_, err := s.Pull(t.Context(), ref)
			if err == nil || !strings.Contains(err.Error(), bad.String()) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("pull: %v, want an error naming blob %s (%s)", err, bad, tt.want)
			}
			if _, err := os.Stat(filepath.Join(s.Dir(), "blobs", "sha256", bad.Hex)); !os.IsNotExist(err) {
				t.Errorf("the bad blob is in the cache: %v", err)
			}
			checkClean(t, s, false)
			on.Store(false)
			got, err := s.Pull(t.Context(), ref)
			if err != nil {
				t.Fatalf("pull after the fault is gone: %v", err)
			}
			checkTree(t, got.Rootfs, wantTree())
		})
	}
}

// TestPullCorruptLayoutBlob pulls from an OCI layout whose layer blob has
// the right size but not the right content: a source that, unlike a
// registry, does not verify what it hands out, so the download's own digest
// check must catch it.
func TestPullCorruptLayoutBlob(t *testing.T) {
	img := rulesImage(t, "")
	layers, _ := img.Layers()
	bad, _ := layers[1].Digest()
	layoutDir := testimage.WriteLayout(t, filepath.Join(t.TempDir(), "layout"), "v1", img)
	blob := filepath.Join(layoutDir, "blobs", bad.Algorithm, bad.Hex)
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	_, err = s.Pull(t.Context(), "oci:"+layoutDir+":v1")
	if err == nil || !strings.Contains(err.Error(), bad.String()) || !strings.Contains(err.Error(), "corrupt: got content with digest") {
		t.Fatalf("pull: %v, want an error naming blob %s as corrupt", err, bad)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "blobs", "sha256", bad.Hex)); !os.IsNotExist(err) {
		t.Errorf("the bad blob is in the cache: %v", err)
	}
	checkClean(t, s, false)
}

// TestPullDiffIDMismatch pulls an image whose config lists a wrong diff_id
// for a layer: the pull fails naming the layer and both digests, leaves
// nothing half-made, and keeps the (valid) layer blob, so that pulling
// again fails the same way instead of blaming the cache.
func TestPullDiffIDMismatch(t *testing.T) {
	img := rulesImage(t, "")
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	wrong, _, _ := v1.SHA256(strings.NewReader("not the layer"))
	cf.RootFS.DiffIDs[1] = wrong
	broken, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := broken.Layers()
	layer, _ := layers[1].Digest()
	diffID, _ := layers[1].DiffID()
	ref := testimage.Serve(t, broken)
	s := openStore(t)
	for _, attempt := range []string{"first pull", "pull again, layer cached"} {
		_, err := s.Pull(t.Context(), ref)
		var de *oci.DiffIDError
		if !errors.As(err, &de) || de.Layer != layer || de.DiffID != wrong || de.Got != diffID {
			t.Fatalf("%s: %v, want a DiffIDError for layer %s (config %s, content %s)", attempt, err, layer, wrong, diffID)
		}
		for _, want := range []string{layer.String(), wrong.String(), diffID.String(), "config and layer", "broken at its source"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", attempt, err, want)
			}
		}
		if strings.Contains(err.Error(), "damaged") {
			t.Errorf("%s: error %q blames the cache", attempt, err)
		}
		if _, err := os.Stat(filepath.Join(s.Dir(), "blobs", "sha256", layer.Hex)); err != nil {
			t.Errorf("%s: the valid layer blob left the cache: %v", attempt, err)
		}
		checkClean(t, s, false)
	}
}

// TestPullDamagedCachedBlob damages a cached layer blob: flattening from the
// cache fails naming it and drops it, and a pull allowed to use the
// network fetches it again.
func TestPullDamagedCachedBlob(t *testing.T) {
	img := rulesImage(t, "")
	ref := testimage.Serve(t, img)
	s := openStore(t)
	got, err := s.Pull(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	layer, _ := layers[0].Digest()
	blob := filepath.Join(s.Dir(), "blobs", "sha256", layer.Hex)
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff // same size: only the digest shows it
	if err := os.WriteFile(blob, b, 0o600); err != nil {
		t.Fatal(err)
	}
	damageStaleTree(t, got)
	_, err = s.Pull(t.Context(), ref, oci.WithPolicy(oci.PullNever))
	if err == nil || !strings.Contains(err.Error(), layer.String()) || !strings.Contains(err.Error(), "damaged and has been removed") {
		t.Fatalf("pull from a damaged cache: %v, want an error naming blob %s as damaged", err, layer)
	}
	if _, err := os.Stat(blob); !os.IsNotExist(err) {
		t.Errorf("the damaged blob is still cached: %v", err)
	}
	again, err := s.Pull(t.Context(), ref)
	if err != nil {
		t.Fatalf("pull after the damaged blob was dropped: %v", err)
	}
	checkTree(t, again.Rootfs, wantTree())
}

func TestPullPlatforms(t *testing.T) {
	host := testimage.HostPlatform()
	other := "linux/s390x"
	if host.Architecture == "s390x" {
		other = "linux/riscv64"
	}
	small := func(platform string) v1.Image {
		return testimage.Image(t, platform, testimage.Config{}, testimage.Layer(t, testimage.File("arch", platform, 0o644)))
	}
	reg := testimage.NewRegistry(t, nil)
	both := reg.Push(t, "multi", "both", testimage.Index(t, small(host.String()), small(other)))
	foreign := reg.Push(t, "multi", "foreign", testimage.Index(t, small(other), small("linux/mips64le")))
	s := openStore(t)

	img, err := s.Pull(t.Context(), both)
	if err != nil || img.Platform.String() != host.String() {
		t.Fatalf("host platform: %v, %v", img, err)
	}
	p, _ := v1.ParsePlatform(other)
	img, err = s.Pull(t.Context(), both, oci.WithPlatform(*p))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(img.Rootfs, "arch")); string(b) != other {
		t.Errorf("--platform %s gave the image of %q", other, b)
	}
	_, err = s.Pull(t.Context(), foreign)
	var pe *oci.PlatformError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), "linux/mips64le") {
		t.Errorf("index without the host platform: %v, want an error naming %s and linux/mips64le", err, other)
	}
}

// TestPullImageWithoutPlatform pulls single-platform images whose config
// leaves out the architecture (crane append writes that) or the OS: what
// is there does not contradict the host, so they are the host's; only a
// field that says another platform refuses the image, naming both.
func TestPullImageWithoutPlatform(t *testing.T) {
	host := testimage.HostPlatform()
	other := "arm64"
	if host.Architecture == "arm64" {
		other = "amd64"
	}
	// withConfig is the small image with its config's platform fields set.
	withConfig := func(os, arch, variant string) v1.Image {
		img := testimage.Image(t, "", testimage.Config{}, testimage.Layer(t, testimage.File("f", "x", 0o644)))
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Variant = os, arch, variant
		img, err = mutate.ConfigFile(img, cf)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	tests := []struct {
		name    string
		img     v1.Image
		refused string // "" when it is accepted as the host's; else what the error says the image has
	}{
		{"no architecture", withConfig("linux", "", ""), ""},
		{"no os", withConfig("", host.Architecture, ""), ""},
		{"neither", withConfig("", "", ""), ""},
		{"the host's", withConfig("linux", host.Architecture, ""), ""},
		{"another architecture", withConfig("linux", other, ""), "linux/" + other},
		{"another os", withConfig("windows", "", ""), "windows/(no architecture)"},
		{"another architecture, no os", withConfig("", other, ""), "(no os)/" + other},
	}
	reg := testimage.NewRegistry(t, nil)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "layout")
			refs := map[string]string{
				"registry": reg.Push(t, "noplatform", strconv.Itoa(i), tt.img),
				"layout":   "oci:" + testimage.WriteLayout(t, dir, "v1", tt.img),
			}
			for kind, ref := range refs {
				got, err := openStore(t).Pull(t.Context(), ref)
				if tt.refused == "" {
					if err != nil {
						t.Fatalf("%s: %v", kind, err)
					}
					if !got.Platform.Equals(host) {
						t.Errorf("%s: recorded as %s, want the host's %s", kind, got.Platform.String(), host.String())
					}
					continue
				}
				var pe *oci.PlatformError
				want := "has no image for " + host.String() + " (it has: " + tt.refused + ")"
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v; want a PlatformError saying %q", kind, err, want)
				}
			}
		})
	}
}

func TestPullOfflineSources(t *testing.T) {
	img := rulesImage(t, "")
	dir := t.TempDir()
	layoutDir := testimage.WriteLayout(t, filepath.Join(dir, "layout"), "v1", img)
	archive := testimage.WriteDockerArchive(t, filepath.Join(dir, "img.tar"), "example.com/test/img:v1", img)
	s := openStore(t)
	for _, ref := range []string{"oci:" + layoutDir + ":v1", "oci:" + layoutDir, "docker-archive:" + archive, "docker-archive:" + archive + ":example.com/test/img:v1"} {
		t.Run(ref, func(t *testing.T) {
			got, err := s.Pull(t.Context(), ref, oci.WithPolicy(oci.PullAlways))
			if err != nil {
				t.Fatal(err)
			}
			checkTree(t, got.Rootfs, wantTree())
			if got.Config.WorkingDir != "/home/user" {
				t.Errorf("config %+v", got.Config)
			}
		})
	}
	if _, err := s.Pull(t.Context(), "oci:"+layoutDir+":nope"); err == nil || !strings.Contains(err.Error(), "v1") {
		t.Errorf("missing tag: %v, want an error listing tag v1", err)
	}
}

// TestPullProgressOrder checks what a pull says of each layer, in order:
// where its bytes come from first (downloading from a registry, copying
// from a local layout, cached), extracting only after that.
func TestPullProgressOrder(t *testing.T) {
	img := rulesImage(t, "")
	ref := testimage.Serve(t, img)
	layoutRef := "oci:" + testimage.WriteLayout(t, filepath.Join(t.TempDir(), "layout"), "v1", img) + ":v1"
	tests := []struct {
		name  string
		ref   string
		again bool     // pull, then export: every layer is cached
		want  []string // each layer's labels, in order
	}{
		{"registry", ref, false, []string{"downloading", "extracting", "downloaded", "extracted"}},
		{"layout", layoutRef, false, []string{"copying", "extracting", "copied", "extracted"}},
		{"cached", ref, true, []string{"cached", "extracting", "extracted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One fetch at a time: the first layer's fetch waits behind the
			// others', so applying it does not begin as soon as it is fetched.
			s := openStore(t, oci.WithJobs(1))
			if tt.again {
				if _, err := s.Pull(t.Context(), tt.ref); err != nil {
					t.Fatal(err)
				}
			}
			labels := map[int][]string{}
			progress := oci.WithProgress(func(p oci.Progress) {
				if p.State == oci.LayerFetching && p.Done > 0 {
					return // the same label again
				}
				labels[p.Index] = append(labels[p.Index], p.Label())
			})
			if tt.again { // an export flattens the cached blobs again
				dir := filepath.Join(t.TempDir(), "export")
				if _, err := s.Export(t.Context(), tt.ref, dir, progress); err != nil {
					t.Fatal(err)
				}
			} else if _, err := s.Pull(t.Context(), tt.ref, progress); err != nil {
				t.Fatal(err)
			}
			if len(labels) != 3 {
				t.Fatalf("progress for %d layers, want 3: %v", len(labels), labels)
			}
			for i, got := range labels {
				// A layer's download may end before or after its extraction
				// starts; what it says first and last may not vary.
				if got[0] != tt.want[0] || got[len(got)-1] != "extracted" || !sameSet(got, tt.want) {
					t.Errorf("layer %d: %q, want %q (or with the middle two swapped)", i+1, got, tt.want)
				}
			}
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// TestLayoutOneNameForBothSpellings pulls an OCI layout as oci:DIR and as
// oci:DIR:latest: one record. A record made when the layout had no latest
// tag keeps its name oci:DIR, and rmi oci:DIR still finds it once the
// layout has one.
func TestLayoutOneNameForBothSpellings(t *testing.T) {
	ctx := t.Context()
	img := rulesImage(t, "")
	dir := filepath.Join(t.TempDir(), "layout")
	testimage.WriteLayout(t, dir, "v1", img)
	s := openStore(t)
	old, err := s.Pull(ctx, "oci:"+dir)
	if err != nil || old.Name != "oci:"+dir {
		t.Fatalf("pull oci:DIR without a latest tag: %v, %v; want it named oci:%s", old, err, dir)
	}
	testimage.WriteLayout(t, dir, "latest", img)
	for _, ref := range []string{"oci:" + dir, "oci:" + dir + ":latest"} {
		got, err := s.Pull(ctx, ref)
		if err != nil || got.Name != "oci:"+dir+":latest" {
			t.Fatalf("pull %s: %v, %v; want it named oci:%s:latest", ref, got, err, dir)
		}
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %v, %v; want the old oci:DIR record and one oci:DIR:latest", list, err)
	}
	freed, err := s.Remove(ctx, "oci:"+dir, nil)
	if err != nil || len(freed.Images) != 2 {
		t.Errorf("rmi oci:DIR: %+v, %v; want both records removed", freed, err)
	}
}

func TestListRemovePrune(t *testing.T) {
	ctx := t.Context()
	reg := testimage.NewRegistry(t, nil)
	ls := testimage.RuleLayers()
	base := testimage.Layer(t, ls[0]...)
	refA := reg.Push(t, "a", "1", testimage.Image(t, "", testimage.Config{}, base))
	refB := reg.Push(t, "b", "1", testimage.Image(t, "", testimage.Config{}, base, testimage.Layer(t, ls[1]...)))
	s := openStore(t)
	imgA, err := s.Pull(ctx, refA)
	if err != nil {
		t.Fatal(err)
	}
	imgB, err := s.Pull(ctx, refB)
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != refB {
		t.Fatalf("list: %v, %v", list, err)
	}
	if _, err := s.Remove(ctx, "nope:1", nil); !errors.Is(err, oci.ErrNotFound) {
		t.Errorf("remove unknown: %v", err)
	}
	// B is in use: the record goes; the tree and the blobs to make it
	// again stay.
	inUse := func(h v1.Hash) bool { return h == imgB.Digest }
	freed, err := s.Remove(ctx, imgB.Digest.Hex[:12], inUse)
	if err != nil {
		t.Fatal(err)
	}
	if len(freed.Images) != 1 || len(freed.Trees) != 0 || freed.Blobs != 0 {
		t.Errorf("remove B (in use): %+v; want its record only", freed)
	}
	if _, err := os.Stat(imgB.Rootfs); err != nil {
		t.Errorf("tree in use was deleted: %v", err)
	}
	if root, err := s.Rootfs(ctx, imgB.Digest); err != nil || root != imgB.Rootfs {
		t.Errorf("Rootfs of B after its record was removed: %q, %v", root, err)
	}
	freed, err = s.Prune(ctx, nil)
	if err != nil || len(freed.Trees) != 1 || freed.Trees[0] != imgB.Digest || freed.Blobs != 3 || freed.Bytes <= 0 {
		t.Errorf("prune: %+v, %v; want B's tree and 3 blobs (manifest, config, top layer)", freed, err)
	}
	if _, err := os.Stat(imgB.Rootfs); !os.IsNotExist(err) {
		t.Errorf("pruned tree still there: %v", err)
	}
	freed, err = s.Remove(ctx, refA, nil)
	if err != nil || len(freed.Trees) != 1 || freed.Blobs != 3 {
		t.Errorf("remove A: %+v, %v; want its tree and 3 blobs", freed, err)
	}
	for _, d := range []string{"blobs/sha256", "rootfs", "trash"} {
		if entries, _ := os.ReadDir(filepath.Join(s.Dir(), d)); len(entries) != 0 {
			t.Errorf("%s not empty after removing everything: %d entries", d, len(entries))
		}
	}
	_ = imgA
}

// TestHoldKeepsImagesFromRemoval checks what lets a caller record that it
// uses an image before Remove or Prune can delete it: they wait while a
// Hold is held, and call InUse only under the store's exclusive lock.
func TestHoldKeepsImagesFromRemoval(t *testing.T) {
	ref := testimage.Serve(t, rulesImage(t, ""))
	s := openStore(t)
	release, err := s.Hold(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Pull(t.Context(), ref) // a pull runs under a hold
	if err != nil {
		t.Fatal(err)
	}
	for name, gc := range map[string]func(context.Context) error{
		"remove": func(ctx context.Context) error { _, err := s.Remove(ctx, ref, nil); return err },
		"prune":  func(ctx context.Context) error { _, err := s.Prune(ctx, nil); return err },
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		err := gc(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s during a hold: %v, want it to wait until its context ends", name, err)
		}
	}
	if _, err := os.Stat(img.Rootfs); err != nil {
		t.Fatalf("the tree went during a hold: %v", err)
	}
	release()

	var calls, unlocked int
	inUse := func(v1.Hash) bool {
		calls++
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		if release, err := s.Hold(ctx); err == nil {
			unlocked++
			release()
		}
		return true
	}
	if _, err := s.Remove(t.Context(), ref, inUse); err != nil {
		t.Fatal(err)
	}
	if calls == 0 || unlocked != 0 {
		t.Errorf("InUse called %d times, %d of them without the store locked; want it called, always under the lock", calls, unlocked)
	}
	if _, err := os.Stat(img.Rootfs); err != nil {
		t.Errorf("the tree InUse claimed was removed: %v", err)
	}
}

// makeLeftovers puts in the store's tmp/ what a killed pull leaves: a
// partial blob and a partial tree, 1500 bytes in all.
func makeLeftovers(t *testing.T, dir string) {
	t.Helper()
	tree := filepath.Join(dir, "tmp", "rootfs-0123456789ab-42", "rootfs", "etc")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, n := range map[string]int{filepath.Join(tree, "f"): 1000, filepath.Join(dir, "tmp", "blob-0123456789ab-43"): 500} {
		if err := os.WriteFile(p, make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/", filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
}

func TestPruneCountsLeftovers(t *testing.T) {
	s := openStore(t)
	makeLeftovers(t, s.Dir())
	freed, err := s.Prune(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if freed.Leftovers != 2 || freed.Bytes != 1500 {
		t.Errorf("prune: %+v; want 2 leftovers of 1500 bytes", freed)
	}
	checkClean(t, s, false)
}

func TestExport(t *testing.T) {
	ref := testimage.Serve(t, rulesImage(t, ""))
	s := openStore(t)
	dir := filepath.Join(t.TempDir(), "out")
	if _, err := s.Export(t.Context(), ref, dir); err != nil {
		t.Fatal(err)
	}
	// An export drops set-id bits (see TestExportSetID).
	want := wantTree()
	for p, n := range want {
		n.Mode &^= fs.ModeSetuid | fs.ModeSetgid
		want[p] = n
	}
	checkTree(t, dir, want)
	_, err := s.Export(t.Context(), ref, dir)
	var ne *oci.DirNotEmptyError
	if !errors.As(err, &ne) {
		t.Errorf("export into a non-empty dir: %v", err)
	}
}

// TestExportSetID exports an image holding a setuid-root file (bin/su) and
// a setgid one (bin/wall): the export drops their set-id bits unless asked
// to keep them, and only root can keep them.
func TestExportSetID(t *testing.T) {
	ref := testimage.Serve(t, rulesImage(t, ""))
	for _, tt := range []struct {
		name string
		opts []oci.PullOption
		keep bool
	}{
		{name: "default", keep: false},
		{name: "keep", opts: []oci.PullOption{oci.WithKeepSetID(true)}, keep: os.Geteuid() == 0},
		{name: "keep false", opts: []oci.PullOption{oci.WithKeepSetID(false)}, keep: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			dir := filepath.Join(t.TempDir(), "out")
			if _, err := s.Export(t.Context(), ref, dir, tt.opts...); err != nil {
				t.Fatal(err)
			}
			for name, bit := range map[string]fs.FileMode{"bin/su": fs.ModeSetuid, "bin/wall": fs.ModeSetgid} {
				fi, err := os.Lstat(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode()&bit != 0; got != tt.keep {
					t.Errorf("%s: mode %v; want its %v bit: %v", name, fi.Mode(), bit, tt.keep)
				}
			}
			// The cache's own tree keeps the image's modes as root.
			img, err := s.Pull(t.Context(), ref, oci.WithPolicy(oci.PullNever))
			if err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Lstat(filepath.Join(img.Rootfs, "bin/su")); err != nil || (os.Geteuid() == 0) != (fi.Mode()&fs.ModeSetuid != 0) {
				t.Errorf("cached bin/su: %v, %v", fi, err)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	ref := testimage.Serve(t, rulesImage(t, ""))
	s := openStore(t, oci.WithLimits(oci.Limits{MaxEntries: 10}))
	_, err := s.Pull(t.Context(), ref)
	var le *oci.LimitsError
	if !errors.As(err, &le) {
		t.Fatalf("pull: %v, want a LimitsError", err)
	}
	checkClean(t, s, false)
}

func TestReflattenStaleTreeOffline(t *testing.T) {
	ref := testimage.Serve(t, rulesImage(t, ""))
	s := openStore(t)
	img, err := s.Pull(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	// A tree from an earlier boot that was never synced is not trusted.
	damageStaleTree(t, img)
	again, err := s.Pull(t.Context(), ref, oci.WithPolicy(oci.PullNever))
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, again.Rootfs, wantTree())
}

func TestPullBusybox(t *testing.T) {
	ref := testimage.Serve(t, testimage.Busybox(t))
	img, err := openStore(t).Pull(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	tree := testimage.ReadTree(t, img.Rootfs)
	if tree["bin/sh"].Link != "busybox" || tree["bin/busybox"].Mode.Perm() != 0o755 || tree["tmp"].Type != "dir" {
		t.Errorf("busybox tree: sh %v, busybox %v, tmp %v", tree["bin/sh"], tree["bin/busybox"], tree["tmp"])
	}
	if !strings.Contains(tree["etc/passwd"].Body, "root:x:0:0") || img.Config.Cmd[0] != "/bin/sh" {
		t.Errorf("passwd %q, config %+v", tree["etc/passwd"].Body, img.Config)
	}
}

func TestRootfsByDigest(t *testing.T) {
	ctx := t.Context()
	var offline atomic.Bool
	reg := testimage.NewRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if offline.Load() {
				http.Error(w, "offline", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ref := reg.Push(t, "img", "v1", rulesImage(t, ""))
	s := openStore(t)
	img, err := s.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.Rootfs(ctx, img.Digest)
	if err != nil || root != img.Rootfs {
		t.Fatalf("Rootfs = %q, %v; want %q", root, err, img.Rootfs)
	}
	// The tag moves to another image: the digest still finds the first.
	other := testimage.Image(t, "", testimage.Config{Env: []string{"OTHER=1"}}, testimage.Layer(t, testimage.RuleLayers()[0]...))
	reg.Push(t, "img", "v1", other)
	if moved, err := s.Pull(ctx, ref, oci.WithPolicy(oci.PullAlways)); err != nil || moved.Digest == img.Digest {
		t.Fatalf("pull of the moved tag: %v, %v", moved, err)
	}
	// A stale, damaged tree is flattened again from the blob cache, offline.
	offline.Store(true)
	damageStaleTree(t, img)
	root, err = s.Rootfs(ctx, img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, root, wantTree())

	missing := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	if _, err := s.Rootfs(ctx, missing); !errors.Is(err, oci.ErrNotFound) {
		t.Fatalf("Rootfs of an unknown digest: %v, want ErrNotFound", err)
	}
}

// damageStaleTree makes img's tree look made during an earlier boot and
// unsynced, so that it is not trusted, and damages a file of it.
func damageStaleTree(t *testing.T, img *oci.Image) {
	t.Helper()
	meta := filepath.Join(filepath.Dir(img.Rootfs), "meta.json")
	b, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(meta, []byte(strings.Replace(string(b), `"bootID":"`, `"bootID":"old-`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(img.Rootfs, "etc", "passwd"), []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Layers are fetched in their order, so that the applier, which needs the
// first one first, does not wait behind the fetches of later ones.
// TestFetchOrder checks that layers are asked for in their order, one
// request after the other has been answered, whatever the number of
// parallel downloads: the applier needs the first layer first.
func TestFetchOrder(t *testing.T) {
	for _, jobs := range []int{1, 4} {
		t.Run(fmt.Sprintf("jobs=%d", jobs), func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			reg := testimage.NewRegistry(t, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
						mu.Lock()
						got = append(got, r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:])
						mu.Unlock()
					}
					h.ServeHTTP(w, r)
				})
			})
			var layers []v1.Layer
			for i := range 8 {
				layers = append(layers, testimage.Layer(t, testimage.File("f"+strconv.Itoa(i), strings.Repeat("x", i+1), 0o644)))
			}
			img := testimage.Image(t, "", testimage.Config{}, layers...)
			ref := reg.Push(t, "order", "latest", img)
			var want []string
			for _, l := range layers {
				d, err := l.Digest()
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, d.String())
			}
			for range 3 {
				mu.Lock()
				got = nil
				mu.Unlock()
				if _, err := openStore(t, oci.WithJobs(jobs)).Pull(t.Context(), ref); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				var fetched []string
				for _, d := range got {
					if slices.Contains(want, d) {
						fetched = append(fetched, d)
					}
				}
				mu.Unlock()
				if !slices.Equal(fetched, want) {
					t.Fatalf("layers fetched in the order\n%s\nwant\n%s", strings.Join(fetched, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}
}
