package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTerminalForegroundAcrossRestarts runs the supervisor on a real
// pseudo-terminal (util-linux script): every run of the workload must be
// the terminal's foreground process group, so Ctrl-C and job control reach
// it, and must not inherit ignored SIGTTIN/SIGTTOU.
func TestTerminalForegroundAcrossRestarts(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("util-linux script is needed for the terminal test")
		}
		t.Skip("no util-linux script here")
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", restart42, 0o644)
	w := writeFile(t, dir, "w.sh", fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/count
# pgrp and tpgid from /proc/self/stat (fields 5 and 8), ignored signals.
set -- $(cat /proc/$$/stat)
echo "$5 $8 $(grep SigIgn /proc/$$/status | cut -f2)" >> %[1]s/tty
[ $n -lt 3 ] && exit 42
exit 0
`, dir), 0o755)
	out, err := exec.Command("script", "-qec", bin+" --config "+cfg+" -- "+w, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "tty"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d runs recorded, want 3: %q", len(lines), b)
	}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != f[1] {
			t.Errorf("run %d: process group %s is not the terminal's foreground group %s", i+1, f[0], f[1])
			continue
		}
		ign, _ := strconv.ParseUint(f[2], 16, 64)
		if ign&(1<<20|1<<21) != 0 {
			t.Errorf("run %d: SIGTTIN/SIGTTOU ignored (SigIgn %s)", i+1, f[2])
		}
	}
}
