package supervise

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary is also the workload of TestNextRunFindsItsPortAndLockFree
// (SUPERVISE_TEST_ROLE=holder) and the grandchild a run leaves behind
// (SUPERVISE_TEST_ROLE=grandchild).
func TestMain(m *testing.M) {
	switch os.Getenv("SUPERVISE_TEST_ROLE") {
	case "holder":
		os.Exit(holder())
	case "grandchild":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// holder is one run: it binds HOLD_PORT on loopback and takes an exclusive
// flock on HOLD_DIR/lock, both without waiting, and records a failure in
// HOLD_DIR/failures. Runs 1 to 5 then start a grandchild in a session of
// its own that ignores SIGTERM and inherits the socket and the lock, and
// exit 42 while it holds them; run 6 exits 0.
func holder() int {
	dir := os.Getenv("HOLD_DIR")
	n := 1
	if b, err := os.ReadFile(filepath.Join(dir, "n")); err == nil {
		n, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		n++
	}
	os.WriteFile(filepath.Join(dir, "n"), []byte(strconv.Itoa(n)), 0o644)
	fail := func(what string, err error) int {
		f, _ := os.OpenFile(filepath.Join(dir, "failures"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		fmt.Fprintf(f, "run %d: %s: %v\n", n, what, err)
		f.Close()
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("HOLD_PORT"))
	if err != nil {
		return fail("bind", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fail("open lock", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail("flock", err)
	}
	if n >= 6 {
		return 0
	}
	sock, err := ln.(*net.TCPListener).File()
	if err != nil {
		return fail("socket file", err)
	}
	gc := exec.Command(os.Args[0])
	gc.Env = append(os.Environ(), "SUPERVISE_TEST_ROLE=grandchild")
	gc.ExtraFiles = []*os.File{sock, lock}
	gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := gc.Start(); err != nil {
		return fail("grandchild", err)
	}
	os.WriteFile(filepath.Join(dir, fmt.Sprintf("grandchild.%d", n)), []byte(strconv.Itoa(gc.Process.Pid)), 0o644)
	return 42
}

// TestNextRunFindsItsPortAndLockFree: each run leaves behind a grandchild
// in its own session that ignores SIGTERM and holds the run's listening
// socket and its file lock; the next run must bind the same port and take
// the same lock at once, five times in a row, with both cores busy. The
// supervisor kills what is left of a run (its group, and every other
// descendant it reaps as the subreaper) and waits for it to be gone
// before the next start (docs/supervisor.md, "freed before restarted").
func TestNextRunFindsItsPortAndLockFree(t *testing.T) {
	dir := t.TempDir()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(probe.Addr().(*net.TCPAddr).Port)
	probe.Close()
	var stop atomic.Bool
	defer stop.Store(true)
	for range runtime.NumCPU() * 2 {
		go func() {
			for x := 0; !stop.Load(); x++ {
				_ = x * x
			}
		}()
	}
	o := Options{Path: os.Args[0], Argv: []string{os.Args[0]}, GracePeriod: 5 * time.Second,
		Env: append(os.Environ(), "SUPERVISE_TEST_ROLE=holder", "HOLD_DIR="+dir, "HOLD_PORT="+port)}
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s","max":"0s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`)
	r := waitResult(t, runAsync(o))
	stop.Store(true)
	if b, err := os.ReadFile(filepath.Join(dir, "failures")); err == nil {
		t.Fatalf("a run found its port or lock taken by what the run before left:\n%s", b)
	}
	if r.Status != 0 || r.Restarts != 5 {
		t.Fatalf("result %+v, want status 0 after 5 restarts", r)
	}
	gcs, _ := filepath.Glob(filepath.Join(dir, "grandchild.*"))
	if len(gcs) != 5 {
		t.Fatalf("%d grandchildren recorded, want 5", len(gcs))
	}
	for _, f := range gcs {
		b, _ := os.ReadFile(f)
		if pid, _ := strconv.Atoi(string(b)); pid > 0 && syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (pid %d) outlived its run", filepath.Base(f), pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
