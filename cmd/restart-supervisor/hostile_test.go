package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// vmHWM returns a process's peak resident set in KiB.
func vmHWM(pid int) int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// Another container of the pod plants a FIFO and a link to /dev/zero as
// pod restart generations, then one named after the largest uint64. The
// supervisor reads neither as a pod restart (no announcer can be read from
// them, so they restart nothing), stays small, ignores the third, and
// still exits on SIGTERM with its status written.
func TestHostileGenerationFilesNeitherHangNorBloat(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	gdir := filepath.Join(state, "pod-restarts")
	os.MkdirAll(gdir, 0o777)
	w := writeFile(t, dir, "w.sh", fmt.Sprintf("#!/bin/sh\nn=$(cat %[1]s/count 2>/dev/null || echo 0); echo $((n+1)) > %[1]s/count\nexec sleep 60\n", dir), 0o755)
	s := start(t, []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=app"}, bin, "--", w)
	waitFor(t, "first run", 10*time.Second, func() bool { return runs(t, dir) == 1 })
	if err := syscall.Mkfifo(filepath.Join(gdir, "00000000000000000001"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitLog("pod restart file ignored", 10*time.Second)
	os.Symlink("/dev/zero", filepath.Join(gdir, "00000000000000000002"))
	time.Sleep(500 * time.Millisecond)
	os.WriteFile(filepath.Join(gdir, "18446744073709551615"), nil, 0o644)
	time.Sleep(500 * time.Millisecond)
	if n := runs(t, dir); n != 1 {
		t.Errorf("%d runs after the hostile generations, want 1", n)
	}
	if hwm := vmHWM(s.cmd.Process.Pid); hwm > 64<<10 {
		t.Errorf("supervisor peak RSS %d MiB", hwm>>10)
	}
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 143 {
		t.Errorf("exit status %d, want 143", st)
	}
	doc, err := os.ReadFile(filepath.Join(state, "status", "app.json"))
	if err != nil || !strings.Contains(string(doc), `"podRestarts":0`) {
		t.Errorf("status document: %s %v", doc, err)
	}
}

// A live reload to a FIFO, /dev/zero or a huge file is refused with a short
// log line; the supervisor stays small and still exits on SIGTERM with its
// status written (a blocked reload used to hang the exit).
func TestHostileConfigReloadNeitherHangsNorBloats(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	cfg := writeFile(t, dir, "restart.yaml", restart42, 0o644)
	s := start(t, []string{"RESTART_SUPERVISOR_STATE_DIR=" + state, "RESTART_SUPERVISOR_CONTAINER_NAME=app"},
		bin, "--config", cfg, "--", "sleep", "60")
	replace := func(make func(tmp string) error) {
		t.Helper()
		tmp := filepath.Join(dir, ".next")
		os.Remove(tmp)
		if err := make(tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	s.waitLog("workload started", 10*time.Second)
	replace(func(tmp string) error { return os.Symlink("/dev/zero", tmp) })
	s.waitLog("not a regular file (Dc", 10*time.Second)
	replace(func(tmp string) error {
		return os.WriteFile(tmp, []byte(strings.Repeat("restartPolicy: Never\n", 1<<20)), 0o644)
	})
	s.waitLog("larger than 65536 bytes", 10*time.Second)
	replace(func(tmp string) error { return syscall.Mkfifo(tmp, 0o644) })
	s.waitLog("not a regular file (p", 10*time.Second)
	if hwm := vmHWM(s.cmd.Process.Pid); hwm > 64<<10 {
		t.Errorf("supervisor peak RSS %d MiB", hwm>>10)
	}
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		if len(line) > 2048 {
			t.Errorf("log line of %d bytes", len(line))
		}
	}
	s.signal(syscall.SIGTERM)
	if st := s.wait(10 * time.Second); st != 143 {
		t.Errorf("exit status %d, want 143", st)
	}
	if _, err := os.Stat(filepath.Join(state, "status", "app.json")); err != nil {
		t.Errorf("status document: %v", err)
	}
}
