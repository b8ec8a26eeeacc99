package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Exit codes as the other subcommands: 2 for usage, 1 for a file that
// cannot be read or generated, 0 with the output written to -o.
func TestComposeExitCodes(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.yaml")
	// The service gives its entrypoint and stop_signal, so no engine is asked.
	doc := "services:\n  worker:\n    image: x\n    entrypoint: [/app]\n    stop_signal: SIGTERM\n    x-restart-rules: {restartPolicy: OnFailure}\n"
	if err := os.WriteFile(in, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.yaml")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, exitUsage, "-f FILE is required"},
		{[]string{"-f", in, "extra"}, exitUsage, "unexpected arguments"},
		{[]string{"-x"}, exitUsage, "unknown shorthand flag: 'x' in -x"},
		{[]string{"-f", filepath.Join(dir, "absent.yaml")}, exitFailure, "no such file or directory"},
		{[]string{"-f", dir}, exitFailure, "not a regular file"},
		{[]string{"-f", big}, exitFailure, "larger than 1048576 bytes"},
		{[]string{"-f", in, "-o", out, "--supervisor-image", "sup:1"}, exitOK, ""},
	} {
		var stdout, stderr bytes.Buffer
		code := runCompose(t.Context(), tc.args, strings.NewReader(""), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.msg) {
			t.Errorf("compose %q: exit %d, stderr %q; want %d with %q", tc.args, code, stderr.String(), tc.code, tc.msg)
		}
	}
	got, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(got), "entrypoint: [/opt/restart-supervisor/restart-supervisor, --, /app]") || !strings.Contains(string(got), "image: sup:1") {
		t.Errorf("-o file: %v\n%s", err, got)
	}
}
