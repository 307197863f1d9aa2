package oci

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestHugeBytes: the block is aligned on a huge page and advised as such
// (the "hg" flag of its mapping in /proc/self/smaps).
func TestHugeBytes(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skipf("this kernel has no transparent huge pages: %v", err)
	}
	const n = 3 * hugePage
	b := hugeBytes(n)
	if len(b) != n || cap(b) != n {
		t.Fatalf("len %d cap %d, want %d", len(b), cap(b), n)
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if addr%hugePage != 0 {
		t.Fatalf("block at %#x: not aligned on a huge page", addr)
	}
	b[0], b[n-1] = 1, 1
	flags, err := vmFlags(addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the block's mapping has VmFlags %q, want hg (MADV_HUGEPAGE)", flags)
	}
	if last, err := vmFlags(addr + n - 1); err != nil || last != flags {
		t.Errorf("the block's last byte is in a mapping with VmFlags %q (%v), want %q", last, err, flags)
	}
}

// vmFlags returns the VmFlags of the mapping of this process that holds
// addr.
func vmFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			in = lo <= addr && addr < hi
			continue
		}
		if in {
			if v, ok := strings.CutPrefix(line, "VmFlags:"); ok {
				return strings.TrimSpace(v), nil
			}
		}
	}
	return "", fmt.Errorf("no mapping holds %#x in /proc/self/smaps (%v)", addr, sc.Err())
}
