package oci

import "golang.org/x/sys/unix"

// bootID identifies the current boot of the host.
func bootID() string {
	id, err := unix.Sysctl("kern.bootsessionuuid")
	if err != nil {
		return ""
	}
	return id
}

// syncFS flushes file systems to disk.
func syncFS(string) error {
	unix.Sync()
	return nil
}

// hugeBytes returns n bytes of Go memory (huge pages are Linux's).
func hugeBytes(n int) []byte { return make([]byte, n) }
