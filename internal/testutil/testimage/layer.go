// Package testimage builds OCI images for tests: layers from declarative
// entries, a busybox image from Debian's busybox-static, an in-process
// registry on 127.0.0.1 serving them, and OCI layout directories.
package testimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// MTime is the modification time entries get unless they set their own.
var MTime = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// Entry is one tar entry of a layer.
type Entry struct {
	Hdr  tar.Header
	Body string
}

func entry(typ byte, name string, mode int64, opts []Opt) Entry {
	e := Entry{Hdr: tar.Header{Typeflag: typ, Name: name, Mode: mode, ModTime: MTime, Format: tar.FormatPAX}}
	for _, o := range opts {
		o(&e)
	}
	return e
}

// Opt changes an entry.
type Opt func(*Entry)

// Owner sets the entry's uid and gid.
func Owner(uid, gid int) Opt { return func(e *Entry) { e.Hdr.Uid, e.Hdr.Gid = uid, gid } }

// ModTime sets the entry's modification time.
func ModTime(t time.Time) Opt { return func(e *Entry) { e.Hdr.ModTime = t } }

// Xattr sets an extended attribute on the entry.
func Xattr(name, value string) Opt {
	return func(e *Entry) {
		if e.Hdr.PAXRecords == nil {
			e.Hdr.PAXRecords = map[string]string{}
		}
		e.Hdr.PAXRecords["SCHILY.xattr."+name] = value
	}
}

// Dir is a directory entry.
func Dir(name string, mode int64, opts ...Opt) Entry { return entry(tar.TypeDir, name, mode, opts) }

// File is a regular file entry with the given content.
func File(name, body string, mode int64, opts ...Opt) Entry {
	e := entry(tar.TypeReg, name, mode, opts)
	e.Body = body
	e.Hdr.Size = int64(len(body))
	return e
}

// Symlink is a symbolic link entry.
func Symlink(name, target string, opts ...Opt) Entry {
	e := entry(tar.TypeSymlink, name, 0o777, opts)
	e.Hdr.Linkname = target
	return e
}

// Hardlink is a hard link entry to target.
func Hardlink(name, target string, opts ...Opt) Entry {
	e := entry(tar.TypeLink, name, 0o644, opts)
	e.Hdr.Linkname = target
	return e
}

// Whiteout hides name (a path) from lower layers.
func Whiteout(name string) Entry {
	dir, base := splitPath(name)
	return File(dir+".wh."+base, "", 0o644)
}

// Opaque marks directory dir as opaque.
func Opaque(dir string) Entry { return File(dir+"/.wh..wh..opq", "", 0o644) }

// Device is a character device entry.
func Device(name string, major, minor int64, mode int64) Entry {
	e := entry(tar.TypeChar, name, mode, nil)
	e.Hdr.Devmajor, e.Hdr.Devminor = major, minor
	return e
}

// Fifo is a named pipe entry.
func Fifo(name string, mode int64) Entry { return entry(tar.TypeFifo, name, mode, nil) }

func splitPath(p string) (dir, base string) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i+1], p[i+1:]
		}
	}
	return "", p
}

// Tar returns the entries as an uncompressed tar stream.
func Tar(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	b, err := TarBytes(entries...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TarBytes is Tar for callers that are not tests.
func TarBytes(entries ...Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.Hdr
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("tar header %q: %w", h.Name, err)
		}
		if _, err := io.WriteString(tw, e.Body); err != nil {
			return nil, fmt.Errorf("tar body %q: %w", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Layer returns a gzip-compressed layer holding entries.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	t.Helper()
	return RawLayer(t, Tar(t, entries...))
}

// RawLayer returns a gzip-compressed layer of an uncompressed tar stream.
func RawLayer(t testing.TB, tarball_ []byte, opts ...tarball.LayerOption) v1.Layer {
	t.Helper()
	l, err := layerOf(tarball_, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func layerOf(tarball_ []byte, opts ...tarball.LayerOption) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarball_)), nil
	}, opts...)
}

// Config is the part of an image configuration tests set.
type Config = v1.Config

// Image returns an image of the given layers, in order, for platform
// (e.g. "linux/amd64"; empty means the host's), with cfg as its config.
func Image(t testing.TB, platform string, cfg Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := BuildImage(platform, cfg, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// BuildImage is Image for callers that are not tests.
func BuildImage(platform string, cfg Config, layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	p := HostPlatform()
	if platform != "" {
		pp, err := v1.ParsePlatform(platform)
		if err != nil {
			return nil, err
		}
		p = *pp
	}
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = cfg
	cf.Created = v1.Time{Time: MTime}
	return mutate.ConfigFile(img, cf)
}

// Index returns an image index of imgs, each annotated with the platform
// of its config.
func Index(t testing.TB, imgs ...v1.Image) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant},
			},
		})
	}
	return idx
}
