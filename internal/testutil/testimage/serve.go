package testimage

import (
	"archive/tar"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is an in-process registry listening on 127.0.0.1 (plain HTTP).
type Registry struct {
	// Host is "127.0.0.1:PORT".
	Host string
	srv  *httptest.Server
}

// NewRegistry starts a registry, stopped when the test ends. wrap, when
// not nil, wraps its handler (to corrupt or cut responses, count
// requests...).
func NewRegistry(t testing.TB, wrap func(http.Handler) http.Handler) *Registry {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return &Registry{Host: strings.TrimPrefix(srv.URL, "http://"), srv: srv}
}

// Push stores img (a v1.Image or v1.ImageIndex) as repo:tag and returns
// the reference "127.0.0.1:PORT/repo:tag".
func (r *Registry) Push(t testing.TB, repo, tag string, img any) string {
	t.Helper()
	ref, err := name.ParseReference(r.Host + "/" + repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	switch v := img.(type) {
	case v1.Image:
		err = remote.Write(ref, v)
	case v1.ImageIndex:
		err = remote.WriteIndex(ref, v)
	default:
		t.Fatalf("push %T: not an image or index", img)
	}
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.String()
}

// Serve starts a registry holding img as test/image:latest and returns
// its reference.
func Serve(t testing.TB, img any) string {
	t.Helper()
	return NewRegistry(t, nil).Push(t, "test/image", "latest", img)
}

// WriteLayout writes img (a v1.Image or v1.ImageIndex) into an OCI image
// layout at dir, tagged tag, and returns dir.
func WriteLayout(t testing.TB, dir, tag string, img any) string {
	t.Helper()
	if err := AppendToLayout(dir, tag, img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// AppendToLayout is WriteLayout for callers that are not tests: it adds img
// to the OCI image layout at dir (created if needed), tagged tag.
func AppendToLayout(dir, tag string, img any) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return err
		}
	}
	ann := layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})
	switch v := img.(type) {
	case v1.Image:
		return p.AppendImage(v, ann)
	case v1.ImageIndex:
		return p.AppendIndex(v, ann)
	}
	return fmt.Errorf("append %T to a layout: not an image or index", img)
}

// WriteDockerArchive writes img as a "docker save" tarball tagged ref and
// returns its path.
func WriteDockerArchive(t testing.TB, path, ref string, img v1.Image) string {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
	return path
}

// BusyboxPath is where Debian's busybox-static package installs busybox.
const BusyboxPath = "/bin/busybox"

// Busybox returns a one-layer image with Debian's static busybox at
// /bin/busybox, a symlink per applet in /bin, a minimal /etc/passwd and
// /etc/group, and /tmp. It skips the test when busybox is missing.
func Busybox(t testing.TB) v1.Image {
	t.Helper()
	if _, err := os.Stat(BusyboxPath); err != nil {
		t.Skipf("%s not found (apt-get install busybox-static): %v", BusyboxPath, err)
	}
	img, err := BusyboxImage()
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// BusyboxImage is Busybox for callers that are not tests.
func BusyboxImage() (v1.Image, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, fmt.Errorf("%w (apt-get install busybox-static)", err)
	}
	entries := []Entry{
		Dir("bin", 0o755),
		entryBytes("bin/busybox", bin, 0o755),
		Dir("etc", 0o755),
		File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644),
		File("etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644),
		Dir("root", 0o700),
		Dir("tmp", 0o1777),
	}
	applets, err := busyboxApplets()
	if err != nil {
		return nil, err
	}
	for _, a := range applets {
		entries = append(entries, Symlink("bin/"+a, "busybox"))
	}
	tb, err := TarBytes(entries...)
	if err != nil {
		return nil, err
	}
	l, err := layerOf(tb)
	if err != nil {
		return nil, err
	}
	cfg := Config{Env: []string{"PATH=/bin"}, Cmd: []string{"/bin/sh"}, WorkingDir: "/"}
	return BuildImage("", cfg, l)
}

func entryBytes(name string, body []byte, mode int64) Entry {
	e := entry(tar.TypeReg, name, mode, nil)
	e.Body = string(body)
	e.Hdr.Size = int64(len(body))
	return e
}

// busyboxApplets lists the applets of the host's busybox by running it.
func busyboxApplets() ([]string, error) {
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", BusyboxPath, err)
	}
	var applets []string
	for a := range strings.FieldsSeq(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	return applets, nil
}
