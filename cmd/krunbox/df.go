package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

// dfJSON is `krunbox df --json`.
type dfJSON struct {
	Images    []dfImageJSON   `json:"images"`
	Sandboxes []dfSandboxJSON `json:"sandboxes"`
	// ImagesSize is what the image cache's blobs and trees take.
	ImagesSize int64 `json:"imagesSize"`
	// DisksUsed is what the block roots' disks take on the host, and
	// DisksSize the most they can take.
	DisksUsed int64 `json:"disksUsed"`
	DisksSize int64 `json:"disksSize"`
}

type dfImageJSON struct {
	Name string `json:"name"`
	// Size is the compressed layers, UnpackedSize the flattened tree.
	Size         int64 `json:"size"`
	UnpackedSize int64 `json:"unpackedSize"`
}

type dfSandboxJSON struct {
	Name string           `json:"name"`
	Root hostapi.RootKind `json:"root"`
	// Disk is a block root's disk; other roots' writable layers are
	// not measured (that would walk a tree the guest wrote).
	Disk *hostapi.DiskInfo `json:"disk,omitempty"`
}

func newDfCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "df [--json]",
		Short: "Show the host disk space that images and sandboxes take",
		Long: `Show the host disk space that images (their layers and flattened trees) and
sandboxes take. A sandbox with a block root (root = "block") has a disk of its
own: its size is the most its guest can write, and the host file takes what the
guest holds (it is sparse). The writable layers of other roots are not measured:
that would walk a tree the guest wrote.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out dfJSON
			store, err := openImageStore()
			if err != nil {
				return err
			}
			imgs, err := store.List(cmd.Context())
			if err != nil {
				return err
			}
			for _, img := range imgs {
				out.Images = append(out.Images, dfImageJSON{Name: img.Name, Size: img.Size, UnpackedSize: img.UnpackedSize})
				out.ImagesSize += img.Size + img.UnpackedSize
			}
			h, err := hostapi.NewHost()
			if err != nil {
				return err
			}
			sbs, err := h.List()
			if err != nil {
				return err
			}
			for _, sb := range sbs {
				d, err := sb.Disk()
				if err != nil {
					return err
				}
				out.Sandboxes = append(out.Sandboxes, dfSandboxJSON{Name: sb.Name(), Root: sb.Root().Kind, Disk: d})
				if d != nil {
					out.DisksUsed += d.Used
					out.DisksSize += d.Size
				}
			}
			if asJSON {
				return printJSON(s.out, out)
			}
			tw := tabwriter.NewWriter(s.out, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tNAME\tROOT\tUSED\tSIZE")
			for _, img := range out.Images {
				fmt.Fprintf(tw, "image\t%s\t-\t%s\t%s\n", img.Name, humanSize(img.Size+img.UnpackedSize), "-")
			}
			for _, sb := range out.Sandboxes {
				used, size := "not measured", "-"
				if sb.Disk != nil {
					used, size = humanSize(sb.Disk.Used), humanSize(sb.Disk.Size)
				}
				fmt.Fprintf(tw, "sandbox\t%s\t%s\t%s\t%s\n", sb.Name, sb.Root, used, size)
			}
			fmt.Fprintf(tw, "total\timages\t-\t%s\t-\n", humanSize(out.ImagesSize))
			fmt.Fprintf(tw, "total\tdisks\t-\t%s\t%s\n", humanSize(out.DisksUsed), humanSize(out.DisksSize))
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
