package krun

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// BundleDir is where a krunbox release bundle keeps its libkrun and
// libkrunfw, relative to the folder of the krunbox binary: bin/krunbox and
// lib/krunbox/libkrun.so.1 under one prefix.
const BundleDir = "../lib/krunbox"

// HomeEnv is the variable that puts all of krunbox's files under one
// folder; $KRUNBOX_HOME/lib is searched for libkrun.
const HomeEnv = "KRUNBOX_HOME"

// Why a candidate library file is tried, as [Library.Why] reports it.
const (
	WhyEnv       = "named by " + LibraryEnv
	WhyBundled   = "installed with krunbox: " + BundleDir + " from the krunbox binary"
	WhyBeside    = "installed with krunbox: beside the krunbox binary"
	WhyHome      = "from $" + HomeEnv + "/lib"
	WhySystem    = "found by the system's dynamic loader"
	WhyGiven     = "named by the caller"
	libkrunLinux = "libkrun.so.1"
	libkrunMac   = "libkrun.1.dylib"
	krunfwLinux  = "libkrunfw.so.5"
	krunfwMac    = "libkrunfw.5.dylib"
)

// Candidate is a libkrun file [Open] tries, and why.
type Candidate struct {
	// Path is the file, or a bare name the dynamic loader resolves.
	Path string
	// Why says where the candidate comes from (one of the Why constants).
	Why string
}

// Candidates returns the files [Open] tries, in order, when given no path:
// the file named by KRUNBOX_LIBKRUN alone when it is set; otherwise a
// libkrun installed with krunbox (in ../lib/krunbox from the real path of
// the running executable, as a release bundle has it, then beside the
// executable, as the pi package has it), then $KRUNBOX_HOME/lib, then the
// platform's library name resolved by the dynamic loader (and, on macOS,
// Homebrew's folders). Files installed with krunbox or in $KRUNBOX_HOME
// are listed only when they exist.
func Candidates() []Candidate {
	if p := os.Getenv(LibraryEnv); p != "" {
		return []Candidate{{p, WhyEnv}}
	}
	name := libName()
	var cs []Candidate
	add := func(dir, why string) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			cs = append(cs, Candidate{p, why})
		}
	}
	if dir := exeDir(); dir != "" {
		add(filepath.Join(dir, BundleDir), WhyBundled)
		add(dir, WhyBeside)
	}
	if h := os.Getenv(HomeEnv); h != "" {
		if abs, err := filepath.Abs(h); err == nil {
			add(filepath.Join(abs, "lib"), WhyHome)
		}
	}
	for _, n := range platformNames(libkrunLinux, libkrunMac) {
		cs = append(cs, Candidate{n, WhySystem})
	}
	return cs
}

// exeDir returns the folder of the running executable's real path, or ""
// when it cannot be found.
func exeDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Dir(exe)
}

func libName() string {
	if runtime.GOOS == "darwin" {
		return libkrunMac
	}
	return libkrunLinux
}

func krunfwName() string {
	if runtime.GOOS == "darwin" {
		return krunfwMac
	}
	return krunfwLinux
}

// besideKrunfw returns the libkrunfw file in the folder of the libkrun file
// path, or "" when path is a bare name or there is none. libkrun loads
// libkrunfw by name only, so [Open] loads this one first: the dynamic
// loader then hands libkrun the copy already loaded.
func besideKrunfw(path string) string {
	if !strings.ContainsRune(path, '/') {
		return ""
	}
	p := filepath.Join(filepath.Dir(path), krunfwName())
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return p
}

// InstallHint says where to get libkrun on the platform krunbox runs on.
func InstallHint() string {
	const bundle = "the krunbox release bundle (krunbox-VERSION-OS-ARCH.tar.gz, unpacked under a prefix such as ~/.local) carries libkrun and libkrunfw"
	const source = "or build libkrun 1.19 (github.com/containers/libkrun) and libkrunfw 5 (github.com/containers/libkrunfw) from source and install them where the loader finds them"
	switch runtime.GOOS {
	case "darwin":
		return "brew tap slp/krun && brew install libkrun (it brings libkrunfw), " + source + ", or set " + LibraryEnv + " to its file"
	case "linux":
		switch distro() {
		case "fedora", "rhel":
			return "dnf install libkrun (it brings libkrunfw); or " + bundle + "; or set " + LibraryEnv + " to its file"
		case "debian", "ubuntu":
			return "no " + distroName() + " package of libkrun exists: " + bundle + "; " + source + "; or set " + LibraryEnv + " to its file"
		}
		return bundle + "; on Fedora/RHEL dnf install libkrun; " + source + "; or set " + LibraryEnv + " to its file"
	}
	return "krunbox runs on Linux and macOS"
}

// distro returns the family of the Linux distribution in /etc/os-release
// ("fedora", "rhel", "debian", "ubuntu"), or "".
func distro() string {
	id, like := osRelease()
	for _, f := range append([]string{id}, strings.Fields(like)...) {
		switch f {
		case "fedora", "debian", "ubuntu":
			return f
		case "rhel", "centos":
			return "rhel"
		}
	}
	return ""
}

func distroName() string {
	if id, _ := osRelease(); id == "ubuntu" {
		return "Ubuntu"
	}
	return "Debian"
}

// osRelease returns ID and ID_LIKE of /etc/os-release.
func osRelease() (id, like string) {
	data, err := os.ReadFile("/etc/os-release")
	if err != nil || len(data) > 64<<10 {
		return "", ""
	}
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "ID_LIKE":
			like = v
		}
	}
	return id, like
}
