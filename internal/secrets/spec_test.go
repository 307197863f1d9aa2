package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/confine"
)

func TestParse(t *testing.T) {
	wd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	for _, tc := range []struct {
		in      string
		want    Spec
		wantErr string
	}{
		{in: "OPENAI_API_KEY=env:OPENAI_KEY@api.example.com", want: Spec{Name: "OPENAI_API_KEY", Source: "env:OPENAI_KEY", Hosts: []string{"api.example.com"}}},
		{in: "GH=file:/run/gh@git.example.com,*.cdn.example.com", want: Spec{Name: "GH", Source: "file:/run/gh", Hosts: []string{"git.example.com", "*.cdn.example.com"}}},
		{in: "T=file:tok@a.example", want: Spec{Name: "T", Source: "file:" + filepath.Join(wd, "tok"), Hosts: []string{"a.example"}}},
		{in: "T=file:~/.config/tok@a.example", want: Spec{Name: "T", Source: "file:" + filepath.Join(home, ".config/tok"), Hosts: []string{"a.example"}}},
		{in: "T=file:/a@b@c.example", want: Spec{Name: "T", Source: "file:/a@b", Hosts: []string{"c.example"}}},
		{in: "T=env:X", wantErr: "want NAME="},
		{in: "env:X@a.example", wantErr: "want NAME="},
		{in: "T=env:X@", wantErr: "no hosts"},
		{in: "1T=env:X@a.example", wantErr: `name "1T"`},
		{in: "A-B=env:X@a.example", wantErr: `name "A-B"`},
		{in: "T=env:X-Y@a.example", wantErr: "no environment variable name"},
		{in: "T=value:abc@a.example", wantErr: "want env:HOST_VAR or file:PATH"},
		{in: "T=env:X@10.0.0.1", wantErr: "not an address"},
		{in: "T=env:X@https://a.example/", wantErr: "no scheme, port or path"},
		{in: "T=env:X@a.example:443", wantErr: "no scheme, port or path"},
		{in: "T=env:X@*", wantErr: "no scheme, port or path"},
		{in: "T=env:X@*.com", wantErr: "needs a domain with a dot"},
		{in: "T=env:X@a..b", wantErr: "not a valid host name"},
		{in: "T=env:X@a.example,", wantErr: "not a valid host name"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want.String() {
				t.Errorf("Parse = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidateAllDuplicate(t *testing.T) {
	s := Spec{Name: "A", Source: "env:X", Hosts: []string{"a.example"}}
	if err := ValidateAll([]Spec{s, s}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("ValidateAll: %v", err)
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tok := write("tok", "s3cr3t-from-file\n")
	twoLines := write("two", "a\nb\n")
	empty := write("empty", "")
	big := write("big", strings.Repeat("x", MaxValueSize+1))
	link := filepath.Join(dir, "link")
	os.Symlink(tok, link)
	t.Setenv("KRUNBOX_TEST_SECRET", "s3cr3t-from-env")
	t.Setenv("KRUNBOX_TEST_EMPTY", "")
	for _, tc := range []struct {
		source, want, wantErr string
		is                    error
	}{
		{source: "env:KRUNBOX_TEST_SECRET", want: "s3cr3t-from-env"},
		{source: "env:KRUNBOX_TEST_UNSET_VAR", wantErr: "is not set"},
		{source: "env:KRUNBOX_TEST_EMPTY", wantErr: "is empty"},
		{source: "file:" + tok, want: "s3cr3t-from-file"},
		{source: "file:" + twoLines, wantErr: "line break"},
		{source: "file:" + empty, wantErr: "is empty"},
		{source: "file:" + big, is: confine.ErrTooLarge},
		{source: "file:" + link, wantErr: "symbolic link"},
		{source: "file:" + dir, is: confine.ErrNotRegular},
		{source: "file:" + filepath.Join(dir, "missing"), is: os.ErrNotExist},
	} {
		t.Run(tc.source, func(t *testing.T) {
			s := Spec{Name: "S", Source: tc.source, Hosts: []string{"a.example"}}
			got, err := s.Read()
			switch {
			case tc.is != nil:
				if !errors.Is(err, tc.is) {
					t.Fatalf("Read: %v, want %v", err, tc.is)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Read: %v, want an error with %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Errorf("Read = %q, want %q", got, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error holds the value: %v", err)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	home, work := filepath.Join(dir, "home"), filepath.Join(dir, "work")
	os.MkdirAll(home, 0o700)
	os.MkdirAll(work, 0o700)
	tok := filepath.Join(home, "tok")
	os.WriteFile(tok, []byte("v"), 0o600)
	os.Symlink(tok, filepath.Join(dir, "link"))
	os.WriteFile(filepath.Join(work, "tok"), []byte("v"), 0o600)

	s := Spec{Name: "S", Source: "file:" + filepath.Join(dir, "link"), Hosts: []string{"a.example"}}
	got, err := s.Resolve([]string{work})
	if err != nil {
		t.Fatal(err)
	}
	if got.Source != "file:"+tok {
		t.Errorf("Resolve: source %s, want file:%s", got.Source, tok)
	}
	s.Source = "file:" + filepath.Join(work, "tok")
	if _, err := s.Resolve([]string{work}); err == nil || !strings.Contains(err.Error(), "which the guest shares") {
		t.Errorf("Resolve of a file in a share: %v", err)
	}
}

func TestPlaceholder(t *testing.T) {
	a, b := NewPlaceholder(), NewPlaceholder()
	if a == b || !ValidPlaceholder(a) || !strings.HasPrefix(a, PlaceholderPrefix) {
		t.Errorf("placeholders %q, %q", a, b)
	}
	for _, bad := range []string{"", PlaceholderPrefix, PlaceholderPrefix + "xyz", "x" + a[1:], strings.ToUpper(a)} {
		if ValidPlaceholder(bad) {
			t.Errorf("ValidPlaceholder(%q) = true", bad)
		}
	}
}
