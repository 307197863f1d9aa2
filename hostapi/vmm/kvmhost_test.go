package vmm

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestDescribeKVM(t *testing.T) {
	cpu := func(vendor, flags string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte("processor\t: 0\nvendor_id\t: " + vendor + "\nflags\t\t: " + flags + "\n\nprocessor\t: 1\nflags\t\t: vmx\n")}
	}
	module := &fstest.MapFile{Mode: os.ModeDir | 0o755}
	tests := []struct {
		name      string
		fs        fstest.MapFS
		want      KVMHost
		cause     []string // substrings of LikelyCause; nil: no cause
		fixPrefix string
	}{
		{"PVM in a VM (these CI machines)",
			fstest.MapFS{"sys/module/kvm_pvm": module, "sys/module/kvm": module, "proc/cpuinfo": cpu("GenuineIntel", "fpu hypervisor lm")},
			KVMHost{Module: "kvm_pvm", Guest: true, Vendor: "GenuineIntel"},
			[]string{"/dev/kvm is PVM (module kvm_pvm)", "libkrunfw's kernel is not one", "this machine is itself a virtual machine (GenuineIntel CPU)"},
			"run krunbox where /dev/kvm is hardware KVM"},
		{"nested with SVM (the realvm L1)",
			fstest.MapFS{"sys/module/kvm_amd": module, "proc/cpuinfo": cpu("AuthenticAMD", "fpu svm hypervisor")},
			KVMHost{Module: "kvm_amd", Guest: true, Vendor: "AuthenticAMD", HardwareVirt: true},
			[]string{"VMs here are nested (/dev/kvm from kvm_amd)", "too slow"},
			"enable nested virtualization"},
		{"a VM without VMX or SVM",
			fstest.MapFS{"proc/cpuinfo": cpu("GenuineIntel", "fpu hypervisor")},
			KVMHost{Guest: true, Vendor: "GenuineIntel"},
			[]string{"shows no VMX or SVM"},
			"run krunbox where /dev/kvm is hardware KVM"},
		{"bare metal",
			fstest.MapFS{"sys/module/kvm_intel": module, "proc/cpuinfo": cpu("GenuineIntel", "fpu vmx lm")},
			KVMHost{Module: "kvm_intel", Vendor: "GenuineIntel", HardwareVirt: true},
			nil, "check that libkrunfw matches libkrun"},
		{"nothing readable", fstest.MapFS{}, KVMHost{}, nil, "check that libkrunfw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := describeKVM(tt.fs)
			if got != tt.want {
				t.Errorf("describeKVM = %+v, want %+v", got, tt.want)
			}
			cause := got.LikelyCause()
			if (cause == "") != (tt.cause == nil) {
				t.Errorf("cause %q, want one: %v", cause, tt.cause != nil)
			}
			for _, w := range tt.cause {
				if !strings.Contains(cause, w) {
					t.Errorf("cause %q lacks %q", cause, w)
				}
			}
			if fix := got.Fix(); !strings.HasPrefix(fix, tt.fixPrefix) {
				t.Errorf("fix %q, want it to start with %q", fix, tt.fixPrefix)
			}
		})
	}
}

// A huge /proc/cpuinfo without a flags line is read only up to its bound.
func TestDescribeKVMBoundsCPUInfo(t *testing.T) {
	big := strings.Repeat("model name\t: x\n", 2*maxCPUInfo/15) + "flags\t: hypervisor\n"
	if got := describeKVM(fstest.MapFS{"proc/cpuinfo": {Data: []byte(big)}}); got.Guest {
		t.Errorf("read past %d bytes of cpuinfo: %+v", maxCPUInfo, got)
	}
}

// processCPUTime reads what this process has used: it grows while the
// process spins, and never beyond the time spent with all CPUs busy.
func TestCPUTimeOfSelf(t *testing.T) {
	begin := time.Now()
	before, err := processCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := begin.Add(20 * time.Second); ; {
		d, err := processCPUTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if d > before {
			if limit := before + time.Duration(runtime.NumCPU())*time.Since(begin) + 10*time.Millisecond; d > limit {
				t.Errorf("CPU time %v, more than %v", d, limit)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed %v while spinning for 20s", d)
		}
	}
}
