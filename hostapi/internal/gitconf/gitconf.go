// Package gitconf reads the small files in which git names other paths
// and switches: the entries of a config file, the "gitdir:" line of a
// .git file, and resolves the paths they name as git does.
//
// What it reads comes from a checkout or a git directory that a guest can
// write: the caller reads the file with a bound (confine), the parsers
// never fail on what they cannot read (git would refuse the file) and
// nothing is run.
package gitconf

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
)

// Entry is one "key = value" of a git config file. Section and Key are
// lower-cased, as git compares them; Sub is the subsection, as written.
type Entry struct {
	Section, Sub, Key, Value string
}

// Parse reads the entries of a git config file well enough to
// find what names other files: core.hooksPath, core.worktree,
// include.path, includeIf.*.path, extensions.worktreeConfig. It never
// fails: a line it cannot read is skipped (git would refuse the file, and
// with it the repository).
func Parse(b []byte) []Entry {
	var out []Entry
	var section, sub string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			end := strings.LastIndexByte(line, ']')
			if end < 0 {
				section, sub = "", ""
				continue
			}
			head := strings.TrimSpace(line[1:end])
			rest := strings.TrimSpace(line[end+1:])
			section, sub = head, ""
			if name, quoted, ok := strings.Cut(head, " "); ok {
				section, sub = name, unquote(strings.TrimSpace(quoted))
			} else if name, dotted, ok := strings.Cut(head, "."); ok {
				section, sub = name, dotted
			}
			section = strings.ToLower(section)
			line = rest // "[core] hooksPath = x" is allowed
		}
		if line == "" || line[0] == '#' || line[0] == ';' || section == "" {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			key, value = line, "true"
		}
		out = append(out, Entry{Section: section, Sub: sub, Key: strings.ToLower(strings.TrimSpace(key)), Value: unquote(stripComment(strings.TrimSpace(value)))})
	}
	return out
}

// stripComment drops a "#" or ";" comment outside quotes.
func stripComment(v string) string {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\':
			i++
		case '"':
			quoted = !quoted
		case '#', ';':
			if !quoted {
				return strings.TrimSpace(v[:i])
			}
		}
	}
	return v
}

// unquote removes git's double quotes and backslash escapes.
func unquote(v string) string {
	if !strings.ContainsAny(v, `"\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
		case c == '\\' && i+1 < len(v):
			i++
			switch v[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(v[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Values returns the values of section.key (any subsection when sub is
// "*"), in order: git takes the last of a single-valued key.
func Values(entries []Entry, section, sub, key string) []string {
	var out []string
	for _, e := range entries {
		if e.Section == section && (sub == "*" || e.Sub == sub) && e.Key == key {
			out = append(out, e.Value)
		}
	}
	return out
}

// Last returns the last value of section.key, the one git takes of a
// key that holds one value, and whether there is one.
func Last(entries []Entry, section, sub, key string) (string, bool) {
	v := Values(entries, section, sub, key)
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// Bool reads a git boolean: true, yes, on or 1 in any case.
func Bool(v string) bool {
	switch strings.ToLower(v) {
	case "true", "yes", "on", "1":
		return true
	}
	return false
}

// Gitdir returns the path of the "gitdir: PATH" line of a .git file.
func Gitdir(b []byte) (string, bool) {
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "gitdir:"); ok {
			if p := strings.TrimSpace(rest); p != "" {
				return p, true
			}
		}
	}
	return "", false
}

// GitdirLine returns the path of the "gitdir: PATH" line of the .git
// file at path, whose content is b, or an error naming path.
func GitdirLine(path string, b []byte) (string, error) {
	if p, ok := Gitdir(b); ok {
		return p, nil
	}
	return "", fmt.Errorf("%s has no \"gitdir:\" line", path)
}

// Resolve resolves p, a path git read in a file of the directory dir
// (relative to dir when not absolute), to an absolute path with symlinks
// resolved.
func Resolve(dir, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.EvalSymlinks(p)
}
