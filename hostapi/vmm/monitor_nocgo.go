//go:build !cgo || !(linux || darwin)

package vmm

// haveMonitor is false in a build without cgo, which cannot run VMs.
const haveMonitor = false
