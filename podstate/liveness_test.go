package podstate

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// liveRole holds the liveness lock of PODSTATE_NAME, writes a "running"
// status document, says "ok" and sleeps until it is killed: a supervisor
// whose container is killed whole.
func liveRole() int {
	dir, name := os.Getenv("PODSTATE_DIR"), os.Getenv("PODSTATE_NAME")
	l, err := statevol.HoldLiveness(dir, name)
	if err == nil {
		err = statevol.WriteStatus(dir, statevol.Status{Container: name, State: contract.PhaseRunning, SupervisorPID: os.Getpid()})
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer l.Release()
	fmt.Println("ok")
	time.Sleep(time.Hour)
	return 0
}

// startLive runs liveRole for container name and returns once it holds
// the lock.
func startLive(t *testing.T, dir, name string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PODSTATE_TEST_ROLE=live", "PODSTATE_DIR="+dir, "PODSTATE_NAME="+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ok" {
		t.Fatalf("live role: %q", line)
	}
	return cmd
}

// TestLivenessFollowsTheProcess: a member whose supervisor is SIGKILLed
// leaves "running" in its document; the lock the kernel released says it
// is dead, and a member in phase Ended waiting for it proceeds.
func TestLivenessFollowsTheProcess(t *testing.T) {
	dir := t.TempDir()
	b := startLive(t, dir, "b")
	m := &Member{dir: dir, name: "a"}
	m.SetRound([]contract.PodMember{{Name: "a", Kind: contract.MemberRegular}, {Name: "b", Kind: contract.MemberRegular}}, nil, nil)
	if got := readMember(dir, "b").live; got != statevol.Alive {
		t.Fatalf("b's supervisor runs, liveness %d, want alive", got)
	}
	ended, cancel := m.OthersEnded(rules.Never)
	if ended == nil {
		t.Fatal("b runs: there is someone to wait for")
	}
	defer cancel()
	select {
	case <-ended:
		t.Fatal("ended while b's supervisor lives")
	case <-time.After(3 * endedPoll):
	}
	b.Process.Signal(syscall.SIGKILL)
	b.Wait()
	if st, err := statevol.ReadStatus(dir, "b"); err != nil || st.State != contract.PhaseRunning {
		t.Fatalf("b's document: %+v %v, want the running it was killed in", st, err)
	}
	if got := readMember(dir, "b").live; got != statevol.Dead {
		t.Fatalf("b's supervisor was killed, liveness %d, want dead", got)
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("a still waits for b, whose supervisor was killed")
	}
	// Under a pod policy that restarts a SIGKILL's 137 the kubelet starts
	// b's container again: b has not ended.
	for _, pod := range []rules.RestartPolicy{rules.OnFailure, rules.Always} {
		if m.othersEnded([]string{"b"}, pod) {
			t.Errorf("pod %s: b, killed whole, taken as ended; the kubelet restarts it", pod)
		}
	}
	if !m.gone(contract.PodMember{Name: "b", Kind: contract.MemberRegular}) {
		t.Error("a round would wait for b, whose supervisor was killed")
	}
	if m.gone(contract.PodMember{Name: "b", Kind: contract.MemberInit}) {
		t.Error("an init container's re-run whose supervisor died must be waited for: the kubelet restarts it")
	}
	// The container's next supervisor takes the same lock again.
	startLive(t, dir, "b")
	if got := readMember(dir, "b").live; got != statevol.Alive {
		t.Fatalf("b's new supervisor runs, liveness %d, want alive", got)
	}
}

// TestLivenessRefusesPlantedFiles: any container can put a link, a FIFO or
// a file of its own UID at another's lock. A supervisor does not follow,
// block on or trust any of them, and a waiter takes none as a sign of
// life or death.
func TestLivenessRefusesPlantedFiles(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, contract.LiveDir)
	if err := os.Mkdir(filepath.Join(dir, contract.LiveDir), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, nil, 0o644)
	os.Symlink(target, filepath.Join(live, "link.lock"))
	unix.Mkfifo(filepath.Join(live, "fifo.lock"), 0o666)
	os.Mkdir(filepath.Join(live, "dir.lock"), 0o755)
	for _, name := range []string{"link", "fifo", "dir"} {
		done := make(chan error, 1)
		go func() {
			l, err := statevol.HoldLiveness(dir, name)
			l.Release()
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: lock taken on a planted file", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: HoldLiveness blocks", name)
		}
		if got := statevol.ProbeLiveness(dir, name, -1); got != statevol.LivenessUnknown {
			t.Errorf("%s: liveness %d, want unknown", name, got)
		}
	}
	// The link's target was not locked either.
	fd, _ := unix.Open(target, unix.O_RDONLY, 0)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("the link's target is locked: %v", err)
	}
	unix.Close(fd)

	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the other-UID case needs root")
		}
		t.Skip("the other-UID case needs root")
	}
	// A free lock file of another UID: that UID could remove it while
	// the member holds it and put a free one in its place.
	planted := filepath.Join(live, "other.lock")
	os.WriteFile(planted, nil, 0o644)
	os.Chown(planted, 1001, 1001)
	if l, err := statevol.HoldLiveness(dir, "other"); err == nil || !strings.Contains(err.Error(), "owned by UID 1001") {
		l.Release()
		t.Errorf("a lock file of UID 1001 taken: %v", err)
	}
	statevol.WriteStatus(dir, statevol.Status{Container: "other", State: contract.PhaseRunning})
	if got := readMember(dir, "other").live; got != statevol.LivenessUnknown {
		t.Errorf("a lock of another UID than the document's: liveness %d, want unknown", got)
	}
}

// TestRecorderRetriesUntilTheVolumeRecovers: a write that fails because
// the volume is read-only or full at that moment is retried without any
// further change, and lands once the volume recovers; a failed Sync (an
// announcement) too.
func TestRecorderRetriesUntilTheVolumeRecovers(t *testing.T) {
	readOnly := func(t *testing.T, mnt string) { mount(t, "-o", "remount,ro", mnt) }
	readWrite := func(t *testing.T, mnt string) { mount(t, "-o", "remount,rw", mnt) }
	for _, c := range []struct {
		name           string
		break_, repair func(t *testing.T, mnt string)
		sync           bool
	}{
		{name: "read-only Sync", break_: readOnly, repair: readWrite, sync: true},
		{"read-only",
			func(t *testing.T, mnt string) { mount(t, "-o", "remount,ro", mnt) },
			func(t *testing.T, mnt string) { mount(t, "-o", "remount,rw", mnt) }, false},
		{"full",
			func(t *testing.T, mnt string) {
				f, err := os.Create(filepath.Join(mnt, "filler"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := f.Write(buf); err != nil {
						if !strings.Contains(err.Error(), "no space left") {
							t.Fatal(err)
						}
						return
					}
				}
			},
			func(t *testing.T, mnt string) { os.Remove(filepath.Join(mnt, "filler")) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mnt := tmpfs(t)
			var logs testutil.SyncBuffer
			r, err := NewRecorder(mnt, statevol.Status{Container: "a", State: contract.PhaseRunning}, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			waitFor(t, "the first document", func() bool {
				st, err := statevol.ReadStatus(mnt, "a")
				return err == nil && st.State == contract.PhaseRunning
			})
			c.break_(t, mnt)
			if c.sync {
				if err := r.Sync(func(s *statevol.Status) { s.State = contract.PhaseEnded }); err == nil {
					t.Fatal("Sync on a broken volume succeeded")
				}
			} else {
				r.Update(func(s *statevol.Status) { s.State = contract.PhaseEnded })
			}
			waitFor(t, "a failed write", func() bool { return r.FailedWrites() > 0 })
			c.repair(t, mnt)
			// No further update: only a retry writes it.
			waitFor(t, "the document written after the volume recovered", func() bool {
				st, err := statevol.ReadStatus(mnt, "a")
				return err == nil && st.State == contract.PhaseEnded
			})
			if !strings.Contains(logs.String(), "status document written again") {
				t.Errorf("the recovery is not logged:\n%s", logs.String())
			}
		})
	}
}

// tmpfs mounts a 64 KiB tmpfs for the test, which needs root.
func tmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("mounting a tmpfs needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	mnt := t.TempDir()
	mount(t, "-t", "tmpfs", "-o", "size=64k,mode=0777", "tmpfs", mnt)
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

func mount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v: %s", args, err, out)
	}
}

// TestEndedMarkerRefusesPlantedFiles: any container of the pod can put a
// link, a FIFO or a file of another UID at a member's ended marker. A
// waiter takes none of them for the member's end (only a regular file of
// the UID that owns the member's status document counts), and the
// member's own markEnded refuses to adopt them.
func TestEndedMarkerRefusesPlantedFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file another UID")
	}
	dir := t.TempDir()
	if err := statevol.WriteStatus(dir, statevol.Status{Container: "b", State: contract.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, contract.LiveDir), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, contract.LiveDir, "b.ended")
	elsewhere := filepath.Join(dir, "elsewhere")
	os.WriteFile(elsewhere, nil, 0o644)
	for name, plant := range map[string]func() error{
		"link":      func() error { return os.Symlink(elsewhere, marker) },
		"FIFO":      func() error { return unix.Mkfifo(marker, 0o644) },
		"other UID": func() error { return errors.Join(os.WriteFile(marker, nil, 0o644), os.Lchown(marker, 65534, 65534)) },
	} {
		os.Remove(marker)
		if err := plant(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if readMember(dir, "b").ended {
			t.Errorf("%s at b's ended marker taken for b's end", name)
		}
		if err := statevol.MarkEnded(dir, "b", true); err == nil {
			t.Errorf("%s at b's ended marker adopted by markEnded", name)
		}
	}
	os.Remove(marker)
	if err := statevol.MarkEnded(dir, "b", true); err != nil {
		t.Fatal(err)
	}
	if !readMember(dir, "b").ended {
		t.Error("b's own marker not taken for its end")
	}
	if err := statevol.MarkEnded(dir, "b", false); err != nil || readMember(dir, "b").ended {
		t.Errorf("b's marker removed: %v, still ended %v", err, readMember(dir, "b").ended)
	}
}
