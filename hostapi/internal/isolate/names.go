package isolate

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// checkTreeName refuses the name n of a tree entry of mode m that git
// refuses to check out (its verify_path) with both core.protectNTFS and
// core.protectHFS on, as on the systems where the user's repository may
// be checked out: empty, a slash or a NUL in it, "." or "..", .git in
// any case or in a form that Windows or macOS reads as .git, and for a
// symlink .gitmodules in any such form. It refuses more than git on
// Linux: a name of dots and spaces alone, which Windows reads as "." or
// "..".
func checkTreeName(n string, m filemode.FileMode) error {
	switch {
	case n == "":
		return fmt.Errorf("an entry with an empty name: a name git refuses")
	case strings.ContainsAny(n, "/\x00"):
		return fmt.Errorf("entry %q is a name git refuses (a slash or a NUL in it)", n)
	case strings.Trim(n, ". ") == "" && strings.Contains(n, "."):
		return fmt.Errorf("entry %q is a name git refuses (., .., or what Windows reads as them)", n)
	case isDotGit(n):
		return fmt.Errorf("entry %q is a name git refuses (.git, in a form some file system reads as it)", n)
	case m == filemode.Symlink && isDotGitmodules(n):
		return fmt.Errorf("entry %q is a name git refuses for a symlink (.gitmodules, in a form some file system reads as it)", n)
	}
	return nil
}

// isDotGit reports whether n is .git on some file system: in any case,
// as NTFS reads it (trailing dots and spaces dropped, an alternate data
// stream after a colon, the short name git~1, a backslash separating
// names), as HFS+ reads it (code points it ignores). The name after each
// backslash counts too: NTFS reads "a\.git" as a directory a and .git.
func isDotGit(n string) bool {
	if isHFSDot(n, "git") {
		return true
	}
	for {
		if isNTFSDotGit(n) {
			return true
		}
		i := strings.IndexByte(n, '\\')
		if i < 0 {
			return false
		}
		n = n[i+1:]
	}
}

// isDotGitmodules reports whether n is .gitmodules on some file system,
// as isDotGit says of .git, NTFS's short names included (gitmod~1 to ~4,
// and the hashed ones such as gi7eba~1).
func isDotGitmodules(n string) bool {
	if isHFSDot(n, "gitmodules") {
		return true
	}
	for {
		if isNTFSDot(n, "gitmodules", "gi7eba") {
			return true
		}
		i := strings.IndexByte(n, '\\')
		if i < 0 {
			return false
		}
		n = n[i+1:]
	}
}

// isNTFSDotGit reports whether n, up to a separator or an alternate data
// stream, is .git or git~1 (in any case) followed by dots and spaces
// alone, which NTFS drops.
func isNTFSDotGit(n string) bool {
	var rest string
	switch {
	case len(n) >= 4 && n[0] == '.' && hasPrefixFold(n[1:], "git"):
		rest = n[4:]
	case len(n) >= 5 && hasPrefixFold(n, "git") && n[3:5] == "~1":
		rest = n[5:]
	default:
		return false
	}
	return ntfsEnd(rest, true)
}

// isNTFSDot reports whether n is .name as NTFS reads it: .name in any
// case, its 8.3 short name (the first six letters, ~1 to ~4) or a
// fall-back short name (letters of short, a tilde and digits, eight
// characters in all), followed by dots and spaces alone or a stream.
// name is lower case and at least six letters long.
func isNTFSDot(n, name, short string) bool {
	switch {
	case len(n) > len(name) && n[0] == '.' && hasPrefixFold(n[1:], name):
		return ntfsEnd(n[1+len(name):], false)
	case len(n) >= 8 && hasPrefixFold(n, name[:6]) && n[6] == '~' && n[7] >= '1' && n[7] <= '4':
		return ntfsEnd(n[8:], false)
	}
	if len(n) < 8 {
		return false
	}
	tilde := false
	for i := 0; i < 8; i++ {
		c := n[i]
		switch {
		case tilde:
			if c < '0' || c > '9' {
				return false
			}
		case c == '~':
			if i++; i >= 8 || n[i] < '1' || n[i] > '9' {
				return false
			}
			tilde = true
		case i >= 6 || c >= 0x80 || lower(c) != short[i]:
			return false
		}
	}
	return ntfsEnd(n[8:], false)
}

// ntfsEnd reports whether rest, what follows a name, is nothing to NTFS:
// dots and spaces alone up to the end, a stream (a colon) or, with seps,
// a separator.
func ntfsEnd(rest string, seps bool) bool {
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == ':' || seps && (c == '\\' || c == '/'):
			return true
		case c != '.' && c != ' ':
			return false
		}
	}
	return true
}

// isHFSDot reports whether n is .name as HFS+ reads it: in any case,
// with the code points it ignores anywhere. As git does, a name that
// stops being UTF-8 right after .name is .name; one that is not UTF-8
// before is not.
func isHFSDot(n, name string) bool {
	want := "." + name
	for _, r := range n {
		switch {
		case hfsIgnored(r):
		case want == "":
			return r == utf8.RuneError
		case r >= utf8.RuneSelf || lower(byte(r)) != want[0]:
			return false
		default:
			want = want[1:]
		}
	}
	return want == ""
}

// hfsIgnored reports whether HFS+ drops r from a name.
func hfsIgnored(r rune) bool {
	switch r {
	case 0x200c, 0x200d, 0x200e, 0x200f, // zero-width joiners, directional marks
		0x202a, 0x202b, 0x202c, 0x202d, 0x202e, // directional embeddings and overrides
		0x206a, 0x206b, 0x206c, 0x206d, 0x206e, 0x206f, // deprecated format characters
		0xfeff: // zero-width no-break space
		return true
	}
	return false
}

// hasPrefixFold reports whether s starts with prefix (lower case ASCII),
// in any ASCII case.
func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if lower(s[i]) != prefix[i] {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
