package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/krunbox/krunbox/internal/session"
)

// pathsNote is what every file tool's description says of paths.
const pathsNote = " Paths are paths in the sandbox VM: the project is mounted there at the same path as on the host " +
	"(a relative path is taken from the project); any other path (/etc, /tmp, ~) is the VM's own, never the host's."

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "run",
		Title: "Run a shell command in the sandbox",
		Description: "Run a shell command (bash when the sandbox has it, else sh) in the sandbox VM and wait for it. " +
			"Returns its stdout, its stderr and its exit code; a non-zero exit is an error result. " +
			"Long output is cut to its last lines; the whole of it is then saved in the sandbox and the answer says where. " +
			"The command runs in the project directory unless cwd says otherwise, with the sandbox's environment plus env. " +
			"It is killed (with its children) after timeout_sec (default 600), or when the call is cancelled. " +
			"Use it for builds, tests, git, package managers and anything else a shell does.",
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: new(true), DestructiveHint: new(true)},
	}, s.run)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "read",
		Title: "Read a file in the sandbox",
		Description: "Read a text file, with line numbers (cat -n). offset is the first line (1-based, default 1), " +
			"limit the number of lines (default 2000). Long lines are cut. A binary file is not shown: the answer says its size." + pathsNote,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.read)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "write",
		Title: "Write a file in the sandbox",
		Description: "Write content to a file, replacing it whole (atomically) or creating it and its missing parent directories. " +
			"An existing file keeps its mode. Prefer edit to change part of a file." + pathsNote,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: true},
	}, s.write)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "edit",
		Title: "Edit a file in the sandbox",
		Description: "Replace old_string with new_string in a file. old_string must match the file's text exactly " +
			"(whitespace and indentation included) and only once, unless replace_all is true: give enough surrounding lines to make it unique. " +
			"Read the file first." + pathsNote,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true)},
	}, s.edit)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "list",
		Title:       "List a directory in the sandbox",
		Description: "List a directory (default: the project), sorted; directories end with /, symbolic links with @." + pathsNote,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.list)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "find",
		Title: "Find files by name in the sandbox",
		Description: "Find files whose path matches a glob pattern, under path (default: the project), skipping .git. " +
			"* matches within a path component, ** across components: \"*.go\" matches by name anywhere, \"src/**/*.ts\" by path." + pathsNote,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.find)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "grep",
		Title: "Search file contents in the sandbox",
		Description: "Search files under path (default: the project) for a regular expression (extended syntax), " +
			"with ripgrep when the sandbox has it, else grep. Answers file:line:text lines. glob narrows the files searched by name (\"*.go\")." + pathsNote,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.grep)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "sandbox_status",
		Title:       "The sandbox's status",
		Description: "Say whether the sandbox VM runs, its image, its workspace and where its configuration came from; and, when it cannot start, why.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.status)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "sandbox_restart",
		Title: "Restart the sandbox",
		Description: "Restart the sandbox VM: running commands are killed. With recreate, the VM is made again from its image " +
			"(everything outside the project is lost, the project's files stay). Use it when the sandbox is broken or unresponsive.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true)},
	}, s.restart)
	if s.opts.Sandbox.Config.Isolate {
		s.addIsolateTools()
	}
}

// result is a text answer.
func result(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}

// RunInput are the run tool's arguments.
type RunInput struct {
	Command    string            `json:"command" jsonschema:"the shell command line"`
	Cwd        string            `json:"cwd,omitempty" jsonschema:"the directory to run in (default: the project)"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables to add"`
	TimeoutSec int               `json:"timeout_sec,omitempty" jsonschema:"kill the command after this many seconds (default 600, at most 3600)"`
}

func (s *Server) run(ctx context.Context, req *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, any, error) {
	if in.Command == "" {
		return nil, nil, errors.New("command: required")
	}
	if err := s.checkArg("command", in.Command); err != nil {
		return nil, nil, err
	}
	dir, err := s.guestPath(in.Cwd)
	if err != nil {
		return nil, nil, err
	}
	env, err := session.EnvList(in.Env)
	if err != nil {
		return nil, nil, fmt.Errorf("env: %v", err)
	}
	if err := s.checkArg("env", strings.Join(env, "\n")); err != nil {
		return nil, nil, err
	}
	timeout := s.limits.RunTimeout
	if in.TimeoutSec < 0 || time.Duration(in.TimeoutSec)*time.Second > s.limits.MaxRunTimeout {
		return nil, nil, fmt.Errorf("timeout_sec %d: want 1 to %d", in.TimeoutSec, int(s.limits.MaxRunTimeout/time.Second))
	} else if in.TimeoutSec > 0 {
		timeout = time.Duration(in.TimeoutSec) * time.Second
	}
	tools, err := s.ensure(ctx)
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	r := execRequest{argv: []string{tools.shell, "-c", in.Command}, dir: dir, env: env, timeout: timeout, keep: s.limits.KeepBytes}
	if token := req.Params.GetProgressToken(); token != nil {
		r.progress = func(elapsed time.Duration, written int64) {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: elapsed.Seconds(),
				Message: fmt.Sprintf("running for %ds, %d bytes of output", int(elapsed.Seconds()), written)})
		}
	}
	res, err := s.exec(ctx, r)
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	var b strings.Builder
	s.section(ctx, &b, "stdout", res.stdout)
	s.section(ctx, &b, "stderr", res.stderr)
	failed := true
	switch e := res.exit; {
	case e.TimedOut:
		fmt.Fprintf(&b, "timed out after %ds: killed", int(timeout/time.Second))
	case e.Signal != nil:
		fmt.Fprintf(&b, "killed by %s", *e.Signal)
	default:
		fmt.Fprintf(&b, "exit code: %d", *e.ExitCode)
		failed = *e.ExitCode != 0
	}
	out := result("%s", b.String())
	out.IsError = failed
	return out, nil, nil
}

// section writes a stream's output: its end when it is long, the whole of
// it (as much as was kept) saved in the guest, and where.
func (s *Server) section(ctx context.Context, b *strings.Builder, stream string, c *capture) {
	if c.total == 0 {
		return
	}
	shown, cut := tailLines(c.last(), s.limits.OutputLines, s.limits.OutputBytes)
	cut = cut || !c.complete()
	fmt.Fprintf(b, "[%s]\n%s", stream, text(shown))
	if !bytes.HasSuffix(shown, []byte("\n")) {
		b.WriteString("\n")
	}
	if !cut {
		return
	}
	saved := fmt.Sprintf("/tmp/krunbox-mcp/%s.%s", s.nextID(), stream)
	what := "the whole output"
	if !c.complete() {
		what = fmt.Sprintf("its first %d bytes", len(c.kept))
	}
	if err := s.core.WriteFile(ctx, s.name, saved, c.kept, 0o600, true); err != nil {
		fmt.Fprintf(b, "[%s cut to its last lines: %d bytes in all; it could not be saved: %v]\n", stream, c.total, err)
		return
	}
	fmt.Fprintf(b, "[%s cut to its last lines: %d bytes in all; %s is in the sandbox at %s (read it with read, or grep it)]\n", stream, c.total, what, saved)
}

// ReadInput are the read tool's arguments.
type ReadInput struct {
	Path   string `json:"path" jsonschema:"the file"`
	Offset int    `json:"offset,omitempty" jsonschema:"the first line to read, from 1 (default 1)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"how many lines to read (default 2000)"`
}

// readChunk is how much of a file one guest read fetches.
const readChunk = 1 << 20

func (s *Server) read(ctx context.Context, _ *mcp.CallToolRequest, in ReadInput) (*mcp.CallToolResult, any, error) {
	p, err := s.guestPath(in.Path)
	if err != nil {
		return nil, nil, err
	}
	if in.Offset < 0 || in.Limit < 0 {
		return nil, nil, errors.New("offset and limit: want 1 or more")
	}
	first, limit := max(in.Offset, 1), in.Limit
	if limit == 0 {
		limit = s.limits.OutputLines
	}
	if _, err := s.ensure(ctx); err != nil {
		return nil, nil, s.toolError(err)
	}
	var b strings.Builder
	line, shown := 1, 0
	var pending []byte // a line not ended yet
	var off int64
	for {
		r, err := s.core.ReadFile(ctx, s.name, p, off, readChunk)
		if err != nil {
			return nil, nil, s.toolError(err)
		}
		if off == 0 && isBinary(r.Data) {
			return result("%s is a binary file of %d bytes: not shown (run od, xxd or file on it to look inside)", p, r.Size), nil, nil
		}
		off += int64(len(r.Data))
		pending = append(pending, r.Data...)
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 && !(r.EOF && len(pending) > 0) {
				break
			}
			var l []byte
			if i < 0 {
				l, pending = pending, nil
			} else {
				l, pending = pending[:i], pending[i+1:]
			}
			if line >= first {
				if shown == limit || b.Len() >= s.limits.OutputBytes {
					fmt.Fprintf(&b, "[more lines: read again with offset=%d]\n", line)
					return result("%s", b.String()), nil, nil
				}
				s.writeLine(&b, line, l)
				shown++
			}
			line++
		}
		if r.EOF {
			break
		}
		if off >= s.limits.ScanBytes {
			return nil, nil, fmt.Errorf("%s: read stops %d bytes into a file; use run (sed -n, tail) to see further", p, s.limits.ScanBytes)
		}
		if len(pending) > s.limits.LineChars*4+readChunk {
			// One enormous line: keep its start only.
			pending = pending[:s.limits.LineChars*4]
		}
	}
	if shown == 0 {
		if line == 1 {
			return result("%s is empty", p), nil, nil
		}
		return result("%s has %d lines: none from line %d", p, line-1, first), nil, nil
	}
	return result("%s", b.String()), nil, nil
}

// writeLine writes one numbered line, cut to Limits.LineChars.
func (s *Server) writeLine(b *strings.Builder, n int, l []byte) {
	t := text(bytes.TrimSuffix(l, []byte("\r")))
	if len(t) > s.limits.LineChars {
		t = strings.ToValidUTF8(t[:s.limits.LineChars], "") + " [line cut]"
	}
	fmt.Fprintf(b, "%6d\t%s\n", n, t)
}

// isBinary reports whether the start of a file looks binary: a NUL in its
// first 8000 bytes, as git decides.
func isBinary(b []byte) bool { return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 }

// WriteInput are the write tool's arguments.
type WriteInput struct {
	Path    string `json:"path" jsonschema:"the file"`
	Content string `json:"content" jsonschema:"the whole new content of the file"`
}

func (s *Server) write(ctx context.Context, _ *mcp.CallToolRequest, in WriteInput) (*mcp.CallToolResult, any, error) {
	p, err := s.guestPath(in.Path)
	if err != nil {
		return nil, nil, err
	}
	if len(in.Content) > s.limits.WriteBytes {
		return nil, nil, fmt.Errorf("content: %d bytes is more than the %d one write takes: write the file in a command instead", len(in.Content), s.limits.WriteBytes)
	}
	if _, err := s.ensure(ctx); err != nil {
		return nil, nil, s.toolError(err)
	}
	if err := s.core.WriteFile(ctx, s.name, p, []byte(in.Content), 0o644, true); err != nil {
		return nil, nil, s.toolError(err)
	}
	return result("wrote %d bytes to %s", len(in.Content), p), nil, nil
}

// EditInput are the edit tool's arguments.
type EditInput struct {
	Path       string `json:"path" jsonschema:"the file"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence (default: old_string must occur once)"`
}

func (s *Server) edit(ctx context.Context, _ *mcp.CallToolRequest, in EditInput) (*mcp.CallToolResult, any, error) {
	p, err := s.guestPath(in.Path)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case in.OldString == "":
		return nil, nil, errors.New("old_string: required (to create a file, use write)")
	case in.OldString == in.NewString:
		return nil, nil, errors.New("old_string and new_string are the same: nothing to do")
	case len(in.OldString) > s.limits.WriteBytes || len(in.NewString) > s.limits.WriteBytes:
		return nil, nil, fmt.Errorf("old_string or new_string: more than %d bytes", s.limits.WriteBytes)
	}
	if _, err := s.ensure(ctx); err != nil {
		return nil, nil, s.toolError(err)
	}
	r, err := s.core.ReadFile(ctx, s.name, p, 0, int64(s.limits.WriteBytes)+1)
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	if !r.EOF || len(r.Data) > s.limits.WriteBytes {
		return nil, nil, fmt.Errorf("%s: %d bytes is more than the %d edit works on: change it with a command (sed, patch) instead", p, r.Size, s.limits.WriteBytes)
	}
	if isBinary(r.Data) {
		return nil, nil, fmt.Errorf("%s is a binary file: edit works on text", p)
	}
	old := string(r.Data)
	n := strings.Count(old, in.OldString)
	switch {
	case n == 0:
		return nil, nil, fmt.Errorf("old_string was not found in %s: it must match exactly, whitespace included; read the file again", p)
	case n > 1 && !in.ReplaceAll:
		return nil, nil, fmt.Errorf("old_string occurs %d times in %s: add surrounding lines to make it unique, or set replace_all", n, p)
	}
	var changed string
	if in.ReplaceAll {
		changed = strings.ReplaceAll(old, in.OldString, in.NewString)
	} else {
		changed = strings.Replace(old, in.OldString, in.NewString, 1)
	}
	if len(changed) > s.limits.WriteBytes {
		return nil, nil, fmt.Errorf("%s would grow to %d bytes, more than the %d edit writes", p, len(changed), s.limits.WriteBytes)
	}
	if err := s.core.WriteFile(ctx, s.name, p, []byte(changed), 0o644, false); err != nil {
		return nil, nil, s.toolError(err)
	}
	return result("replaced %d occurrence(s) in %s", n, p), nil, nil
}

// ListInput are the list tool's arguments.
type ListInput struct {
	Path string `json:"path,omitempty" jsonschema:"the directory (default: the project)"`
}

func (s *Server) list(ctx context.Context, _ *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, any, error) {
	p, err := s.guestPath(in.Path)
	if err != nil {
		return nil, nil, err
	}
	if _, err := s.ensure(ctx); err != nil {
		return nil, nil, s.toolError(err)
	}
	entries, err := s.core.ReadDir(ctx, s.name, p)
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
		switch e.Type {
		case "dir":
			names[i] += "/"
		case "symlink":
			names[i] += "@"
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return result("%s is empty", p), nil, nil
	}
	out, cut := headLines([]byte(strings.Join(names, "\n")+"\n"), s.limits.OutputLines, s.limits.OutputBytes)
	if cut {
		out = fmt.Appendf(out, "[%d entries in all: cut; use find or run ls for the rest]\n", len(names))
	}
	return result("%s", text(out)), nil, nil
}

// FindInput are the find tool's arguments.
type FindInput struct {
	Pattern string `json:"pattern" jsonschema:"a glob: *.go, **/test_*.py, src/**/*.ts"`
	Path    string `json:"path,omitempty" jsonschema:"the directory to search (default: the project)"`
}

func (s *Server) find(ctx context.Context, _ *mcp.CallToolRequest, in FindInput) (*mcp.CallToolResult, any, error) {
	dir, err := s.guestPath(in.Path)
	if err != nil {
		return nil, nil, err
	}
	if in.Pattern == "" {
		return nil, nil, errors.New("pattern: required")
	}
	if err := s.checkArg("pattern", in.Pattern); err != nil {
		return nil, nil, err
	}
	re, err := globRegexp(in.Pattern)
	if err != nil {
		return nil, nil, err
	}
	if _, err := s.ensure(ctx); err != nil {
		return nil, nil, s.toolError(err)
	}
	res, err := s.exec(ctx, execRequest{argv: []string{"find", ".", "-name", ".git", "-prune", "-o", "-print"}, dir: dir, keep: s.limits.KeepBytes, timeout: s.limits.RunTimeout})
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	if c := res.exit.ExitCode; c == nil || *c != 0 && res.stdout.total == 0 {
		return nil, nil, fmt.Errorf("find in %s failed: %s", dir, strings.TrimSpace(text(res.stderr.last())))
	}
	var matches []string
	for l := range strings.Lines(string(res.stdout.kept)) {
		rel := strings.TrimPrefix(strings.TrimSuffix(l, "\n"), "./")
		if rel == "." || rel == "" {
			continue
		}
		if re.MatchString(rel) {
			matches = append(matches, rel)
		}
	}
	if len(matches) == 0 {
		return result("no file under %s matches %s", dir, in.Pattern), nil, nil
	}
	slices.Sort(matches)
	out, cut := headLines([]byte(strings.Join(matches, "\n")+"\n"), s.limits.OutputLines, s.limits.OutputBytes)
	if cut || !res.stdout.complete() {
		out = fmt.Appendf(out, "[cut: narrow the pattern or the path]\n")
	}
	return result("%s", text(out)), nil, nil
}

// globRegexp turns a glob into a regular expression on paths relative to
// the search's directory: * and ? stay within a component, ** crosses
// them, and a pattern without / matches a name at any depth.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	if !strings.Contains(glob, "/") {
		b.WriteString("(?:.*/)?")
	}
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			if strings.HasPrefix(glob[i:], "**/") {
				b.WriteString("(?:.*/)?")
				i += 2
			} else if strings.HasPrefix(glob[i:], "**") {
				b.WriteString(".*")
				i++
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %v", glob, err)
	}
	return re, nil
}

// GrepInput are the grep tool's arguments.
type GrepInput struct {
	Pattern    string `json:"pattern" jsonschema:"a regular expression (extended syntax)"`
	Path       string `json:"path,omitempty" jsonschema:"the file or directory to search (default: the project)"`
	Glob       string `json:"glob,omitempty" jsonschema:"search only files whose name matches this glob (*.go)"`
	IgnoreCase bool   `json:"ignore_case,omitempty" jsonschema:"match without regard to case"`
}

func (s *Server) grep(ctx context.Context, _ *mcp.CallToolRequest, in GrepInput) (*mcp.CallToolResult, any, error) {
	p, err := s.guestPath(in.Path)
	if err != nil {
		return nil, nil, err
	}
	if in.Pattern == "" {
		return nil, nil, errors.New("pattern: required")
	}
	for _, a := range []struct{ name, v string }{{"pattern", in.Pattern}, {"glob", in.Glob}} {
		if err := s.checkArg(a.name, a.v); err != nil {
			return nil, nil, err
		}
	}
	tools, err := s.ensure(ctx)
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	if in.Glob != "" {
		if _, err := path.Match(in.Glob, ""); err != nil {
			return nil, nil, fmt.Errorf("glob %q: %v", in.Glob, err)
		}
	}
	var argv []string
	keep := s.limits.OutputBytes * 2
	if tools.rg != "" {
		argv = []string{tools.rg, "-n", "--no-heading", "--color", "never", "--hidden", "-g", "!.git"}
		if in.Glob != "" {
			argv = append(argv, "-g", in.Glob)
		}
	} else {
		// grep (busybox's too) has no --include and does not skip .git:
		// its lines are filtered here.
		argv = []string{"grep", "-rnHE"}
		keep = s.limits.KeepBytes
	}
	if in.IgnoreCase {
		argv = append(argv, "-i")
	}
	argv = append(argv, "-e", in.Pattern, "--", p)
	res, err := s.exec(ctx, execRequest{argv: argv, dir: s.ws, keep: keep, timeout: s.limits.RunTimeout})
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	matches := res.stdout.kept
	if tools.rg == "" {
		matches = grepFilter(matches, in.Glob)
	}
	code := -1
	if res.exit.ExitCode != nil {
		code = *res.exit.ExitCode
	}
	switch {
	case code != 0 && code != 1 || code == 0 && res.stdout.total == 0:
		return nil, nil, fmt.Errorf("grep failed (%s): %s", exitWords(res.exit), strings.TrimSpace(text(res.stderr.last())))
	case len(matches) == 0:
		return result("no match for %s in %s", in.Pattern, p), nil, nil
	}
	out, cut := headLines(matches, s.limits.OutputLines, s.limits.OutputBytes)
	if cut || !res.stdout.complete() {
		out = fmt.Appendf(out, "[cut: %d bytes of matches in all; narrow the pattern, the path or the glob]\n", res.stdout.total)
	}
	return result("%s", text(out)), nil, nil
}

// grepFilter keeps the lines of grep's output (FILE:LINE:TEXT) that are not
// in a .git directory and, when glob is set, whose file name matches it.
func grepFilter(out []byte, glob string) []byte {
	var kept []byte
	for l := range bytes.Lines(out) {
		file, _, _ := bytes.Cut(l, []byte(":"))
		f := string(file)
		if strings.Contains("/"+f+"/", "/.git/") {
			continue
		}
		if ok, _ := path.Match(glob, path.Base(f)); glob != "" && !ok {
			continue
		}
		kept = append(kept, l...)
	}
	return kept
}

// exitWords says how a command ended.
func exitWords(e *session.Exit) string {
	switch {
	case e.TimedOut:
		return "timed out"
	case e.Signal != nil:
		return "killed by " + *e.Signal
	case e.ExitCode != nil:
		return fmt.Sprintf("exit code %d", *e.ExitCode)
	}
	return "unknown end"
}

// StatusInput are the sandbox_status tool's arguments: none.
type StatusInput struct{}

func (s *Server) status(ctx context.Context, _ *mcp.CallToolRequest, _ StatusInput) (*mcp.CallToolResult, any, error) {
	st, err := s.core.Status(ctx, s.name, 2*time.Second)
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sandbox %s: %s\n", st.Name, st.State)
	if st.Reason != "" {
		fmt.Fprintf(&b, "reason: %s\n", st.Reason)
	}
	if st.Hint != "" {
		fmt.Fprintf(&b, "hint: %s\n", st.Hint)
	}
	s.mu.Lock()
	startErr := s.startErr
	s.mu.Unlock()
	if startErr != nil && st.State != session.StateReady {
		fmt.Fprintf(&b, "the last start failed: %v\n", s.toolError(startErr))
	}
	cfg := s.opts.Sandbox.Config
	fmt.Fprintf(&b, "workspace: %s (mounted at the same path in the VM)\n", cfg.Workspace)
	if cfg.Isolate {
		b.WriteString("isolated: the VM works on its own checkout of the project; diff shows its work, land brings it into the project\n")
	}
	fmt.Fprintf(&b, "image: %s\nnetwork: %s\ncpus: %d, memory: %d MiB\n", cfg.Image, cfg.Network, cfg.CPUs, cfg.MemoryMiB)
	for _, n := range s.opts.Notes {
		fmt.Fprintf(&b, "%s\n", n)
	}
	return result("%s", b.String()), nil, nil
}

// RestartInput are the sandbox_restart tool's arguments.
type RestartInput struct {
	Recreate bool `json:"recreate,omitempty" jsonschema:"make the VM again from its image (default: stop and start it)"`
}

func (s *Server) restart(ctx context.Context, _ *mcp.CallToolRequest, in RestartInput) (*mcp.CallToolResult, any, error) {
	req := *s.opts.Sandbox
	req.Recreate = in.Recreate
	s.mu.Lock()
	s.ready = false
	s.mu.Unlock()
	st, err := s.core.Restart(ctx, &req)
	if err != nil {
		return nil, nil, s.toolError(err)
	}
	if _, err := s.ensure(ctx); err != nil {
		return nil, nil, s.toolError(err)
	}
	how := "restarted"
	if in.Recreate {
		how = "made again from its image"
	}
	return result("sandbox %s %s: %s", st.Name, how, st.State), nil, nil
}
