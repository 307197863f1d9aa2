package hostapi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/krunbox/krunbox/hostapi/internal/treecopy"
	"github.com/krunbox/krunbox/hostapi/vmm"
)

// RootKind is how a sandbox's root file system is made. It is chosen when
// the sandbox is created and never changes for that sandbox.
type RootKind string

// Root kinds.
const (
	// RootAuto chooses RootBlock where this host can give one (a libkrun
	// with disks and mke2fs, see vmm.CheckBlock), else RootOverlay where
	// it can mount one (see vmm.CheckOverlay), else RootCopy.
	RootAuto RootKind = "auto"
	// RootOverlay: the image's cached tree, read-only and shared between
	// sandboxes, under a writable layer of the sandbox's own, mounted by
	// the VM runner in its mount (and, unprivileged, user) namespace.
	// Creating it copies nothing. Linux only, and where the runner gets
	// its namespaces and overlayfs accepts the layer.
	RootOverlay RootKind = "overlay"
	// RootCopy: a private copy of the image's tree in the sandbox's
	// directory, made at its first start: cloned where the file system can
	// (clonefile on macOS's APFS, reflinks on btrfs and XFS), its data
	// copied otherwise, which costs the image's size in disk and time and
	// is logged as a warning.
	RootCopy RootKind = "copy"
	// RootBlock: the image's cached tree, shared read-only with the
	// guest, under a writable layer on a disk of the sandbox's own (a
	// sparse ext4 image of Config.DiskMiB, made at its first start): the
	// guest agent mounts the disk and assembles the overlay in the
	// guest, so the host never mounts or reads what the guest writes,
	// and the guest's writes are bounded by the disk's size. It needs a
	// libkrun with disks (a BLK build) and mke2fs on the host (see
	// vmm.CheckBlock).
	RootBlock RootKind = "block"
)

// ParseRootKind parses "auto", "block", "overlay" or "copy".
func ParseRootKind(s string) (RootKind, error) {
	switch k := RootKind(s); k {
	case RootAuto, RootBlock, RootOverlay, RootCopy:
		return k, nil
	}
	return "", fmt.Errorf("root %q: want %s, %s, %s or %s", s, RootAuto, RootBlock, RootOverlay, RootCopy)
}

// RootInfo is the root a sandbox was created with.
type RootInfo struct {
	// Kind is RootBlock, RootOverlay or RootCopy.
	Kind RootKind `json:"kind"`
	// Reason says why a sandbox's root is not the one RootAuto prefers.
	Reason string `json:"reason,omitempty"`
	// DiskSize is a RootBlock sandbox's disk size in bytes.
	DiskSize int64 `json:"disk_size,omitempty"`
}

// Root says how the sandbox's root file system is made.
func (s *Sandbox) Root() RootInfo {
	r := s.rec.Root
	if r.Kind == "" {
		r.Kind = RootOverlay // records of version 1 had nothing else
	}
	return r
}

// Files and directories of a sandbox's root, in its directory.
const (
	upperDir   = "upper"  // an overlay root's writable layer
	workDir    = "work"   // overlayfs's work directory
	mergedDir  = "merged" // where the runner mounts the overlay, in its namespace
	rootfsDir  = "rootfs" // a copy root
	partialDir = "rootfs.partial"
)

// OverlayUnavailableError reports a sandbox asked to have an overlay root
// on a host where the VM runner cannot mount one.
type OverlayUnavailableError struct {
	// Err says what failed: the runner's namespaces or the mount.
	Err error
}

func (e *OverlayUnavailableError) Error() string {
	return "overlay roots are unavailable on this host: " + e.Err.Error()
}

func (e *OverlayUnavailableError) Unwrap() error { return e.Err }

// Hint says what to do.
func (e *OverlayUnavailableError) Hint() string {
	return "use a copied root (root = \"auto\" or \"copy\", KRUNBOX_ROOT, --root); 'krunbox doctor' says how to enable overlay roots"
}

// BlockUnavailableError reports a sandbox asked to have a block root on a
// host that cannot give it one.
type BlockUnavailableError struct {
	// Err says what is missing: libkrun's disks, mke2fs.
	Err error
}

func (e *BlockUnavailableError) Error() string {
	return "block roots are unavailable on this host: " + e.Err.Error()
}

func (e *BlockUnavailableError) Unwrap() error { return e.Err }

// Hint says what to do.
func (e *BlockUnavailableError) Hint() string {
	return "use another root (root = \"auto\", \"overlay\" or \"copy\", KRUNBOX_ROOT, --root); 'krunbox doctor' says what block roots need"
}

// blockCheck runs vmm.CheckBlock on the host's libkrun and looks for
// mke2fs. A Host runs it once (checkBlock).
func (h *Host) blockCheck() error {
	if _, err := Mke2fs(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return vmm.CheckBlock(ctx, h.libkrun)
}

// chooseRoot decides the root of a sandbox asked to have kind, with a
// disk of diskMiB for a block root.
func (h *Host) chooseRoot(kind RootKind, diskMiB int) (RootInfo, error) {
	if kind == RootBlock {
		if err := h.checkBlock(); err != nil {
			return RootInfo{}, &BlockUnavailableError{Err: err}
		}
		return RootInfo{Kind: RootBlock, DiskSize: int64(diskMiB) << 20}, nil
	}
	if kind == RootCopy {
		return RootInfo{Kind: RootCopy, Reason: "a copy was asked for"}, nil
	}
	noBlock := ""
	if kind == RootAuto {
		err := h.checkBlock()
		if err == nil {
			return RootInfo{Kind: RootBlock, DiskSize: int64(diskMiB) << 20}, nil
		}
		noBlock = (&BlockUnavailableError{Err: err}).Error()
	}
	err := h.checkOverlay()
	switch {
	case err == nil:
		return RootInfo{Kind: RootOverlay, Reason: noBlock}, nil
	case kind == RootOverlay:
		return RootInfo{}, &OverlayUnavailableError{Err: err}
	}
	return RootInfo{Kind: RootCopy, Reason: noBlock + "; " + (&OverlayUnavailableError{Err: err}).Error()}, nil
}

// overlayCheck runs vmm.CheckOverlay on the sandboxes' directory, where
// the writable layers live. A Host runs it once (checkOverlay): it costs a
// process start, and what it finds changes only with the host's settings.
func (h *Host) overlayCheck() error {
	if err := os.MkdirAll(h.dirs.Sandboxes(), 0o700); err != nil {
		return err
	}
	return vmm.CheckOverlay(h.dirs.Sandboxes())
}

// root returns the VM's root: the image tree and the sandbox's disk (made
// at its first start), the image tree under the sandbox's writable layer,
// or the sandbox's own copy of the image, made at its first start.
func (s *Sandbox) root(ctx context.Context) (vmm.Root, error) {
	if r := s.Root(); r.Kind == RootBlock {
		tree, err := s.imageTree(ctx)
		if err != nil {
			return vmm.Root{}, err
		}
		disk, err := s.blockDisk(ctx)
		if err != nil {
			return vmm.Root{}, err
		}
		return vmm.Root{Image: tree, Disk: disk, DiskSize: r.DiskSize}, nil
	}
	if s.Root().Kind == RootOverlay {
		tree, err := s.imageTree(ctx)
		if err != nil {
			return vmm.Root{}, err
		}
		return vmm.Root{Lower: tree, Upper: s.path(upperDir), Work: s.path(workDir), Merged: s.path(mergedDir)}, nil
	}
	dir := s.path(rootfsDir)
	if _, err := os.Lstat(dir); err == nil {
		return vmm.Root{Dir: dir}, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return vmm.Root{}, err
	}
	tree, err := s.imageTree(ctx)
	if err != nil {
		return vmm.Root{}, err
	}
	if err := s.copyImage(ctx, tree, dir); err != nil {
		return vmm.Root{}, err
	}
	return vmm.Root{Dir: dir}, nil
}

// copyImage copies the image tree to dst, through a temporary name, so a
// copy that was interrupted is never taken for a whole one: it is removed
// and made again at the next start. The caller holds the sandbox's lock.
func (s *Sandbox) copyImage(ctx context.Context, tree, dst string) error {
	partial := s.path(partialDir)
	if err := removeTree(partial); err != nil {
		return fmt.Errorf("remove an interrupted copy of the image: %w", err)
	}
	start := time.Now()
	st, err := treecopy.Copy(ctx, tree, partial)
	if err == nil {
		err = os.Rename(partial, dst)
	}
	if err != nil {
		removeTree(partial)
		return fmt.Errorf("make the sandbox's root: %w", err)
	}
	log := s.host.log.With("sandbox", s.name, "method", st.Method, "took", time.Since(start).Round(time.Millisecond))
	if st.Method != treecopy.Plain {
		log.Info("root file system cloned from the image", "why", s.rec.Root.Reason)
		return nil
	}
	log.Warn("root file system copied from the image: this file system cannot clone files, so every sandbox with a copied root costs the image's size in disk, and time at its first start",
		"files", st.Files, "mib", st.Bytes>>20, "why", s.rec.Root.Reason)
	return nil
}
