package hostapi

import (
	"bufio"
	"bytes"
	"strings"
)

// gitConfigEntry is one "key = value" of a git config file. Section and
// Key are lower-cased, as git compares them; Sub is the subsection, as
// written.
type gitConfigEntry struct {
	Section, Sub, Key, Value string
}

// parseGitConfig reads the entries of a git config file well enough to
// find what names other files: core.hooksPath, core.worktree,
// include.path, includeIf.*.path, extensions.worktreeConfig. It never
// fails: a line it cannot read is skipped (git would refuse the file, and
// with it the repository).
func parseGitConfig(b []byte) []gitConfigEntry {
	var out []gitConfigEntry
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
				section, sub = name, unquoteGit(strings.TrimSpace(quoted))
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
		out = append(out, gitConfigEntry{Section: section, Sub: sub, Key: strings.ToLower(strings.TrimSpace(key)), Value: unquoteGit(stripComment(strings.TrimSpace(value)))})
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

// unquoteGit removes git's double quotes and backslash escapes.
func unquoteGit(v string) string {
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

// gitConfigValues returns the values of section.key (any subsection when
// sub is "*"), in order.
func gitConfigValues(entries []gitConfigEntry, section, sub, key string) []string {
	var out []string
	for _, e := range entries {
		if e.Section == section && (sub == "*" || e.Sub == sub) && e.Key == key {
			out = append(out, e.Value)
		}
	}
	return out
}
