package oci

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// InUse reports whether the flattened tree of a manifest digest is still
// used (by a sandbox, say) and must be kept. A nil InUse keeps nothing.
//
// Remove and Prune call it only while they hold the store's lock
// exclusively, when no Pull, Rootfs or Hold is under way: an InUse that
// looks at its users when first called (rather than one made before
// Remove or Prune was) sees every user recorded under a Hold.
type InUse func(manifest v1.Hash) bool

// Hold keeps Remove and Prune from running until release is called, as a
// Pull does while it runs; pulls, Rootfs and other holds may run meanwhile.
// Take it before Pull or Rootfs and release it once their caller has
// recorded that it uses the image (where the InUse it gives Remove and
// Prune will see it), so that the image cannot be removed in between. Do
// not call Remove or Prune while holding it: they would wait for it.
func (s *Store) Hold(ctx context.Context) (release func(), err error) {
	return lockFile(ctx, s.path("locks", "store.lock"), false)
}

// Freed says what Remove or Prune deleted.
type Freed struct {
	Images []string  // records removed (Remove only), by name and platform
	Trees  []v1.Hash // flattened trees deleted, by manifest digest
	Blobs  int       // blobs deleted
	// Leftovers counts what interrupted pulls left in the store's tmp/
	// (Prune only): partial blobs and trees.
	Leftovers int
	Bytes     int64 // bytes of blobs, tree file content and leftovers deleted
}

// Remove deletes the records matching ref (a reference, a manifest digest
// "sha256:...", or at least 12 hex digits of one), then the trees and
// blobs that no remaining image references and inUse does not claim.
func (s *Store) Remove(ctx context.Context, ref string, inUse InUse) (Freed, error) {
	unlock, err := lockFile(ctx, s.path("locks", "store.lock"), true)
	if err != nil {
		return Freed{}, err
	}
	defer unlock()
	match, err := recordMatcher(ref)
	if err != nil {
		return Freed{}, err
	}
	var removed []*Image
	var remaining *records
	err = s.updateRecords(ctx, func(r *records) error {
		kept := r.Images[:0]
		for _, img := range r.Images {
			if match(img) {
				removed = append(removed, img)
			} else {
				kept = append(kept, img)
			}
		}
		if len(removed) == 0 {
			return fmt.Errorf("%s: %w", ref, ErrNotFound)
		}
		r.Images = kept
		remaining = r
		return nil
	})
	if err != nil {
		return Freed{}, err
	}
	trees, blobs := map[v1.Hash]bool{}, map[v1.Hash]bool{}
	var freed Freed
	for _, img := range removed {
		freed.Images = append(freed.Images, img.Name+" ("+img.Platform.String()+")")
		trees[img.Digest] = true
		for _, h := range referencedBlobs(img) {
			blobs[h] = true
		}
	}
	err = s.collect(remaining, func(h v1.Hash) bool { return trees[h] }, func(h v1.Hash) bool { return blobs[h] }, inUse, &freed)
	return freed, err
}

// recordMatcher returns a predicate for the records ref names.
func recordMatcher(ref string) (func(*Image) bool, error) {
	digest := strings.TrimPrefix(ref, "sha256:")
	if _, err := hex.DecodeString(digest); err == nil && len(digest) >= 12 && len(digest) <= 64 {
		return func(img *Image) bool { return strings.HasPrefix(img.Digest.Hex, digest) }, nil
	}
	src, err := parseSource(ref)
	if err != nil {
		return nil, err
	}
	return func(img *Image) bool { return img.Name == src.name || src.oldName != "" && img.Name == src.oldName }, nil
}

func referencedBlobs(img *Image) []v1.Hash {
	hs := []v1.Hash{img.Digest, img.ConfigDigest}
	for _, l := range img.Layers {
		hs = append(hs, l.Digest)
	}
	return hs
}

// Prune deletes the trees and blobs that no image references and inUse
// does not claim, unfinished pulls' leftovers, and the trash.
func (s *Store) Prune(ctx context.Context, inUse InUse) (Freed, error) {
	unlock, err := lockFile(ctx, s.path("locks", "store.lock"), true)
	if err != nil {
		return Freed{}, err
	}
	defer unlock()
	r, err := s.readRecords()
	if err != nil {
		return Freed{}, err
	}
	all := func(v1.Hash) bool { return true }
	var freed Freed
	if err := s.collect(r, all, all, inUse, &freed); err != nil {
		return freed, err
	}
	// No pull runs while the store lock is held exclusively: whatever is
	// in tmp/ was left by an interrupted one, and no lock file is held.
	for _, dir := range []string{"tmp", "locks"} {
		entries, err := os.ReadDir(s.path(dir))
		if err != nil {
			return freed, err
		}
		for _, e := range entries {
			if dir == "locks" && !strings.HasPrefix(e.Name(), "blob-") && !strings.HasPrefix(e.Name(), "rootfs-") {
				continue
			}
			p := s.path(dir, e.Name())
			if dir == "tmp" {
				freed.Leftovers++
				freed.Bytes += diskUsage(p)
			}
			if err := os.RemoveAll(p); err != nil {
				return freed, err
			}
		}
	}
	return freed, nil
}

// diskUsage is the size of the regular files at or under p, not following
// symbolic links; what cannot be read counts as nothing.
func diskUsage(p string) int64 {
	var n int64
	filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// collect deletes the candidate trees and blobs that r does not reference
// and inUse does not claim, then empties the trash.
func (s *Store) collect(r *records, treeCandidate, blobCandidate func(v1.Hash) bool, inUse InUse, freed *Freed) error {
	refTrees, refBlobs := map[v1.Hash]bool{}, map[v1.Hash]bool{}
	for _, img := range r.Images {
		refTrees[img.Digest] = true
		for _, h := range referencedBlobs(img) {
			refBlobs[h] = true
		}
	}
	trees, err := os.ReadDir(s.path("rootfs"))
	if err != nil {
		return err
	}
	// An image in use keeps its blobs too, so that its tree can be made
	// again (after a reboot, say) even once its record is gone.
	for _, e := range trees {
		h := v1.Hash{Algorithm: "sha256", Hex: e.Name()}
		if inUse == nil || refTrees[h] || !inUse(h) {
			continue
		}
		if img, err := s.cachedImage(h); err == nil {
			for _, b := range referencedBlobs(img) {
				refBlobs[b] = true
			}
		}
	}
	for _, e := range trees {
		h := v1.Hash{Algorithm: "sha256", Hex: e.Name()}
		if !treeCandidate(h) || refTrees[h] || (inUse != nil && inUse(h)) {
			continue
		}
		if meta, _ := s.treeValid(h); meta != nil {
			freed.Bytes += meta.Stats.FileBytes
		}
		if err := s.trash(s.treeDir(h)); err != nil {
			return err
		}
		freed.Trees = append(freed.Trees, h)
	}
	blobs, err := os.ReadDir(s.path("blobs", "sha256"))
	if err != nil {
		return err
	}
	for _, e := range blobs {
		h := v1.Hash{Algorithm: "sha256", Hex: e.Name()}
		if !blobCandidate(h) || refBlobs[h] {
			continue
		}
		if fi, err := e.Info(); err == nil {
			freed.Bytes += fi.Size()
		}
		if err := os.Remove(s.blobPath(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		freed.Blobs++
	}
	return s.emptyTrash()
}

func (s *Store) emptyTrash() error {
	entries, err := os.ReadDir(s.path("trash"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(s.path("trash", e.Name())); err != nil {
			return fmt.Errorf("empty the trash: %w", err)
		}
	}
	return nil
}

// DirNotEmptyError reports an export target that already has content.
type DirNotEmptyError struct{ Dir string }

func (e *DirNotEmptyError) Error() string {
	return fmt.Sprintf("%s exists and is not empty", e.Dir)
}

// Hint tells the user what to do.
func (e *DirNotEmptyError) Hint() string { return "export into a new or empty directory" }

// Export pulls ref (as Pull does, with the same options) and writes its
// flattened root file system to dir, which must not exist or be empty.
// The setuid and setgid bits of its files and directories are dropped
// unless WithKeepSetID(true) is given (without root they always are).
func (s *Store) Export(ctx context.Context, ref, dir string, opts ...PullOption) (*Image, error) {
	entries, err := os.ReadDir(dir)
	created := false
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		created = true
	case err != nil:
		return nil, fmt.Errorf("export to %s: %w", dir, err)
	case len(entries) > 0:
		return nil, &DirNotEmptyError{Dir: dir}
	}
	img, err := s.export(ctx, ref, dir, opts)
	if err != nil {
		// Leave dir as it was: absent or empty.
		if created {
			os.RemoveAll(dir)
		} else if entries, rerr := os.ReadDir(dir); rerr == nil {
			for _, e := range entries {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
		return nil, err
	}
	return img, nil
}

func (s *Store) export(ctx context.Context, ref, dir string, opts []PullOption) (*Image, error) {
	img, err := s.Pull(ctx, ref, opts...)
	if err != nil {
		return nil, err
	}
	o := pullOptions{}
	for _, fn := range opts {
		fn(&o)
	}
	unlock, err := lockFile(ctx, s.path("locks", "store.lock"), false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := s.flattenInto(ctx, dir, img.Name, cachedLayers(img), o.progress, !o.keepSetID); err != nil {
		return nil, fmt.Errorf("export %s: %w", img.Name, err)
	}
	return img, nil
}
