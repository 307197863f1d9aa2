package oci

import (
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// bootID identifies the current boot of the host.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// syncFS flushes the file system holding dir to disk.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// hugePage is the size of the x86-64 and arm64 (4 KiB granule) huge page.
const hugePage = 2 << 20

// hugeBytes returns n bytes of Go memory, the whole huge pages among them
// marked MADV_HUGEPAGE: where transparent huge pages are enabled for such
// memory (the default "madvise", or "always"), the kernel fills each with
// one fault instead of 512. A hint only, harmless when refused.
func hugeBytes(n int) []byte {
	b := make([]byte, n+hugePage)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (hugePage - 1))
	b = b[off : off+n : off+n]
	if whole := n &^ (hugePage - 1); whole > 0 {
		unix.Madvise(b[:whole], unix.MADV_HUGEPAGE)
	}
	return b
}
