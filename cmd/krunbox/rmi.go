package main

import (
	"errors"
	"fmt"
	"io"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/oci"
)

func newRmiCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "rmi REF|DIGEST...",
		Short: "Remove images from the image cache",
		Long: "Remove images, by reference or by (at least 12 hex digits of) digest, and the\n" +
			"flattened trees and blobs no other image uses. The tree of an image a sandbox\n" +
			"was made from is kept, so the sandbox keeps working; 'krunbox prune' frees it\n" +
			"once no sandbox uses it.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return exactArgs(1, "an image reference")(cmd, args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			store, images, err := openImageStoreInUse()
			if err != nil {
				return err
			}
			var total oci.Freed
			for _, ref := range args {
				freed, err := store.Remove(cmd.Context(), ref, images.inUse())
				if errors.Is(err, oci.ErrNotFound) {
					return withHint(err, "'krunbox images' lists the cached images; rmi takes a reference as pulled or (part of) a digest")
				}
				if err != nil {
					return err
				}
				for _, name := range freed.Images {
					fmt.Fprintf(s.out, "Removed %s\n", name)
				}
				if images.err != nil {
					return images.err
				}
				total.Trees = append(total.Trees, freed.Trees...)
				total.Blobs += freed.Blobs
				total.Bytes += freed.Bytes
			}
			return printFreed(s.out, total)
		},
	}
}

func printFreed(w io.Writer, f oci.Freed) error {
	if len(f.Trees) == 0 && f.Blobs == 0 && f.Leftovers == 0 {
		_, err := fmt.Fprintln(w, "Nothing to free")
		return err
	}
	what := count(len(f.Trees), "root file system") + ", " + count(f.Blobs, "blob")
	if f.Leftovers > 0 {
		what += ", " + count(f.Leftovers, "leftover") + " of interrupted pulls"
	}
	_, err := fmt.Fprintf(w, "Freed %s: %s\n", humanSize(f.Bytes), what)
	return err
}

// openImageStoreInUse opens the image cache, with what says which images
// the sandboxes use, so that rmi and prune keep them.
func openImageStoreInUse() (*oci.Store, *sandboxImages, error) {
	h, err := hostapi.NewHost()
	if err != nil {
		return nil, nil, err
	}
	store, err := openImageStore()
	if err != nil {
		return nil, nil, err
	}
	return store, &sandboxImages{h: h}, nil
}

// sandboxImages says which images the sandboxes use, for Store.Remove and
// Store.Prune. The sandboxes are listed when those first ask, which they
// do under the store's exclusive lock: a sandbox whose image was pulled
// while rmi waited for the lock counts, where a list made before would miss
// it and its image would be deleted under it.
type sandboxImages struct {
	h   *hostapi.Host
	err error // why the sandboxes could not be listed, if they could not
}

// inUse returns an oci.InUse that lists the sandboxes once, when first
// called. When they cannot be listed it keeps every image and sets err.
func (si *sandboxImages) inUse() oci.InUse {
	var once sync.Once
	var used func(digest string) bool
	return func(d v1.Hash) bool {
		once.Do(func() {
			var err error
			if used, err = si.h.ImagesInUse(); err != nil && si.err == nil {
				si.err = fmt.Errorf("images kept, since the sandboxes that may use them cannot be listed: %w", err)
			}
		})
		return used == nil || used(d.String())
	}
}
