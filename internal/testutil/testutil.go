// Package testutil holds what several test suites share to drive real
// processes.
package testutil

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SyncBuffer collects a child process's output while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Within runs f and fails the test if it does not return within limit: a
// reader that opens a FIFO without O_NONBLOCK, for one, waits for ever for
// a writer that never comes.
func Within[T any](t testing.TB, limit time.Duration, f func() T) T {
	t.Helper()
	c := make(chan T, 1)
	go func() { c <- f() }()
	select {
	case v := <-c:
		return v
	case <-time.After(limit):
		t.Fatalf("still blocked after %v", limit)
		panic("unreachable")
	}
}

// HeapCost runs f and returns the bytes allocated meanwhile by the whole
// process (servers the test runs in-process included).
func HeapCost(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// ProcStatusKiB is a field of pid's /proc/pid/status given in kB (VmRSS,
// VmHWM: the peak, which writing "5" to /proc/pid/clear_refs resets).
func ProcStatusKiB(t testing.TB, pid int, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// HelmBinary returns the helm that hack/helm.sh builds from the Go module
// proxy into ~/.cache/restart-supervisor (minutes cold, a `helm version`
// warm); its progress goes to progress.
func HelmBinary(repo string, progress io.Writer) (string, error) {
	cmd := exec.Command("bash", filepath.Join(repo, "hack", "helm.sh"))
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/helm.sh: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	bin := filepath.Join(lines[len(lines)-1], "helm")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("hack/helm.sh: %w", err)
	}
	return bin, nil
}

// HelmEnv is the environment of a helm whose configuration, cache and data
// live in home, so that nothing of the machine's helm setup (or of another
// test) takes part.
func HelmEnv(home string) []string {
	return append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
}
