package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// FromDirs returns an image of one gzip layer per directory, in order: each
// layer holds its directory's tree as it is on disk (modes, times, symbolic
// links, hard links within the layer), owned by root. It is for trusted
// trees only (the benchmarks' Debian root file system): it reads them with
// plain path calls.
func FromDirs(dirs ...string) (v1.Image, error) {
	var layers []v1.Layer
	for _, d := range dirs {
		data, err := dirTar(d)
		if err != nil {
			return nil, fmt.Errorf("layer of %s: %w", d, err)
		}
		l, err := layerOf(data, tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("layer of %s: %w", d, err)
		}
		layers = append(layers, l)
	}
	empty, err := BuildImage("", Config{})
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(empty, layers...)
}

// dirTar returns the tree under dir as an uncompressed tar stream, in
// lexical order.
func dirTar(dir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	links := map[uint64]string{} // inode -> first name, for hard links
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var target string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{} // as image builders write them
		hdr.Format = tar.FormatPAX
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			if first, ok := links[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			links[st.Ino] = hdr.Name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
