package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckUsageErrors: check's usage errors exit 2 with one line, before
// any API call (test/apiserver's TestCheckCommand runs the checks).
func TestCheckUsageErrors(t *testing.T) {
	dir := t.TempDir()
	deploy := filepath.Join(dir, "deploy.yaml")
	if err := os.WriteFile(deploy, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notk8s := filepath.Join(dir, "notk8s.yaml")
	if err := os.WriteFile(notk8s, []byte("name: web\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("apiVersion: v1\nkind: Pod\n"+strings.Repeat("#", maxCheckFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"a", "b"}, "give one POD or -f FILE, not both or more"},
		{[]string{"a", "-f", deploy}, "give one POD or -f FILE, not both or more"},
		{[]string{"-f", deploy}, `apps/v1 Deployment "web" has no pod template the injector knows`},
		{[]string{"-f", notk8s}, "want one object with apiVersion and kind"},
		{[]string{"-o", "yaml"}, `-o "yaml": want json`},
		{[]string{"-f", big}, "larger than 1048576 bytes"},
		{[]string{"-f", dir}, "not a regular file"},
		{[]string{"-f", filepath.Join(dir, "none.yaml")}, "no such file or directory"},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
	} {
		code, _, errs := runBin(t, nil, append([]string{"check"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errs, c.msg) || strings.Count(strings.TrimSpace(errs), "\n") > 0 && c.args[0] != "--bogus" {
			t.Errorf("check %s: exit %d %q, want %d and one line with %q", strings.Join(c.args, " "), code, errs, exitUsage, c.msg)
		}
	}
}
