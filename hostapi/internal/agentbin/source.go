package agentbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// modulePath is the module whose source holds the agent.
const modulePath = "github.com/krunbox/krunbox"

// agentPkg is the agent's main package, relative to the module root.
const agentPkg = "cmd/krunbox-agent"

// agentSources are the folders, relative to the module root, holding every
// package of ours the agent is built from (it imports nothing else of
// ours, see DESIGN.md), and hashed to tell one source from another.
var agentSources = []string{agentPkg, "guestagent"}

// buildMu serialises builds in this process; builds in several processes
// publish by rename, so the last one wins with identical content.
var buildMu sync.Mutex

// fromSource returns the agent for arch built from the krunbox module's
// own source (the module cache's copy for a program that imports hostapi
// after `go get`, or the folder a replace directive names) with the Go
// toolchain, into cache/agent/src-KEY/, KEY a digest of that source, the
// architecture and the Go release: built at first use, found there after.
func fromSource(arch, cache string) (*Binary, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	key, err := sourceKey(root, arch)
	if err != nil {
		return nil, fmt.Errorf("hash the agent's source in %s: %w", root, err)
	}
	dir := filepath.Join(cache, "agent", "src-"+key)
	p := filepath.Join(dir, FileName(arch))
	src := fmt.Sprintf("built from %s with go (%s)", root, p)
	buildMu.Lock()
	defer buildMu.Unlock()
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
		return &Binary{Source: src, Path: p, Size: fi.Size()}, nil
	}
	goBin, err := goTool()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".build-*")
	if err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", tmp.Name(), "./"+agentPkg)
	cmd.Dir = root
	// Static, for the guest; this module's go.mod as it is, whatever the
	// caller's workspace or flags say.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOWORK=off", "GOFLAGS=-mod=readonly")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build the guest agent from %s (%s build ./%s, GOOS=linux GOARCH=%s): %w\n%s", root, goBin, agentPkg, arch, err, bytes.TrimSpace(out.Bytes()))
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	return &Binary{Source: src, Path: p, Size: fi.Size()}, nil
}

// moduleRoot returns the folder of the krunbox module this package was
// compiled from: the path of this file as the compiler saw it, or, for a
// build with -trimpath, the module cache's copy of the version it names.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("the krunbox module's source: no caller information")
	}
	rel := filepath.Join("hostapi", "internal", "agentbin", "source.go")
	root, found := strings.CutSuffix(filepath.FromSlash(file), string(filepath.Separator)+rel)
	if !found {
		return "", fmt.Errorf("the krunbox module's source: this file is %s, not under hostapi/internal/agentbin", file)
	}
	if !filepath.IsAbs(root) {
		// -trimpath: "github.com/krunbox/krunbox@v1.2.3", in the module
		// cache; a replaced module's folder is not recorded.
		if !strings.HasPrefix(root, filepath.FromSlash(modulePath)+"@") {
			return "", fmt.Errorf("the krunbox module's source: built with -trimpath from a folder it does not record (%s); build without -trimpath, or set KRUNBOX_AGENT", root)
		}
		goBin, err := goTool()
		if err != nil {
			return "", err
		}
		out, err := exec.Command(goBin, "env", "GOMODCACHE").Output()
		if err != nil {
			return "", fmt.Errorf("the krunbox module's source: go env GOMODCACHE: %w", err)
		}
		root = filepath.Join(strings.TrimSpace(string(out)), root)
	}
	if fi, err := os.Stat(filepath.Join(root, agentPkg)); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("the krunbox module's source is no longer at %s (%s missing): set KRUNBOX_AGENT to a static krunbox-agent", root, agentPkg)
	}
	return root, nil
}

// goTool returns the go command on PATH.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	return "", errors.New("no Go toolchain (go on PATH) to build the guest agent from the krunbox module's source: install Go, or set KRUNBOX_AGENT to a static krunbox-agent")
}

// sourceKey digests what the agent is built from: the names and contents
// of the files of agentSources, go.mod and go.sum, the architecture and
// this program's Go release.
func sourceKey(root, arch string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", arch, runtime.Version())
	add := func(p string) error {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(data))
		h.Write(data)
		return nil
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := add(filepath.Join(root, f)); err != nil {
			return "", err
		}
	}
	for _, d := range agentSources {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			return add(p)
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
