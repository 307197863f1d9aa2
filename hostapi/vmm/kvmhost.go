package vmm

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// KVMHost is what backs /dev/kvm on this machine, as far as /sys and
// /proc tell: what explains a VM that does not boot on a /dev/kvm that
// opens.
type KVMHost struct {
	// Module is the KVM module loaded: "kvm_pvm", "kvm_intel", "kvm_amd",
	// or empty when none of them is (or on macOS).
	Module string
	// Guest is true when this machine is itself a virtual machine (the
	// CPU's hypervisor flag), so its VMs are nested.
	Guest bool
	// Vendor is the CPU vendor (GenuineIntel, AuthenticAMD...).
	Vendor string
	// HardwareVirt is true when the CPU shows VMX or SVM.
	HardwareVirt bool
}

// DescribeKVM reports what backs /dev/kvm on this machine. It never
// fails: what it cannot read stays empty.
func DescribeKVM() KVMHost { return describeKVM(os.DirFS("/")) }

// maxCPUInfo bounds what is read of /proc/cpuinfo: the first CPU's entry
// is enough, and a machine with many CPUs has a large file.
const maxCPUInfo = 64 << 10

// describeKVM reads sys/module and proc/cpuinfo under fsys.
func describeKVM(fsys fs.FS) KVMHost {
	var k KVMHost
	for _, m := range []string{"kvm_pvm", "kvm_intel", "kvm_amd"} {
		if fi, err := fs.Stat(fsys, "sys/module/"+m); err == nil && fi.IsDir() {
			k.Module = m
			break
		}
	}
	f, err := fsys.Open("proc/cpuinfo")
	if err != nil {
		return k
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxCPUInfo))
	sc.Buffer(make([]byte, 0, 8192), maxCPUInfo)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "vendor_id":
			if k.Vendor == "" {
				k.Vendor = strings.TrimSpace(val)
			}
		case "flags":
			for _, fl := range strings.Fields(val) {
				switch fl {
				case "hypervisor":
					k.Guest = true
				case "vmx", "svm":
					k.HardwareVirt = true
				}
			}
			return k // the first CPU's entry says it all
		}
	}
	return k
}

// LikelyCause explains a VM that ran without writing anything on its
// console (the guest kernel never started) on a /dev/kvm that opens, from
// what backs that /dev/kvm; empty when nothing here explains it.
func (k KVMHost) LikelyCause() string {
	var where string
	if k.Guest {
		where = "this machine is itself a virtual machine"
		if k.Vendor != "" {
			where += " (" + k.Vendor + " CPU)"
		}
	}
	switch {
	case k.Module == "kvm_pvm":
		cause := "/dev/kvm is PVM (module kvm_pvm), which runs only guest kernels built for PVM; libkrunfw's kernel is not one, so it never starts"
		if where != "" {
			cause += "; " + where + " without hardware virtualization for its guests"
		}
		return cause
	case k.Guest && !k.HardwareVirt:
		return where + " and its CPU shows no VMX or SVM: this /dev/kvm cannot run an ordinary guest kernel"
	case k.Guest && k.Module != "":
		return fmt.Sprintf("%s, so VMs here are nested (/dev/kvm from %s): its host must offer nested virtualization, and a nested guest may be too slow to answer in time", where, k.Module)
	}
	return ""
}

// Fix says what to do about the cause LikelyCause reports.
func (k KVMHost) Fix() string {
	switch {
	case k.Module == "kvm_pvm" || (k.Guest && !k.HardwareVirt):
		return "run krunbox where /dev/kvm is hardware KVM (kvm_intel or kvm_amd): on bare metal, or in a virtual machine whose host enables nested virtualization"
	case k.Guest:
		return "enable nested virtualization on this machine's host (kvm_intel or kvm_amd nested=1 there, or the cloud's nested-virtualization option), or give the check more time (--boot-timeout)"
	}
	return "check that libkrunfw matches libkrun (libkrunfw.so.5 for libkrun 1.x), and read libkrun's log above"
}
