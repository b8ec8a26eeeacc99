package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests kill a member's container whole, as an out-of-memory kill
// under cgroup v2's memory.oom.group does: its supervisor runs as PID 1 of
// a PID namespace (and a mount namespace of its own, as in a container)
// and gets SIGKILL, so it writes no last status document and the kernel
// kills its workload with it. The others must not wait for it.

// TestEndedMemberOutlivesAKilledMember: a's workload ended (exit 3) and a
// waits in phase Ended for b; b's container is killed whole. a exits 3.
// With the state volume read-only at the moment a's workload exits, a's
// "ended" document is written once the volume is writable again, without
// a further change to write.
func TestEndedMemberOutlivesAKilledMember(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("readOnly=%v", readOnly), func(t *testing.T) {
			requirePIDNamespace(t)
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			os.Mkdir(state, 0o777)
			if readOnly {
				mountTmpfs(t, state)
			}
			members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"
			never := `{"restartPolicy":"Never","podRestartPolicy":"Never"}`
			b := startPID1(t, podEnv(state, "b", never, members), "--", "sleep", "600")
			waitFor(t, "b running", 15*time.Second, func() bool { return statusState(state, "b") == "running" })
			a := start(t, podEnv(state, "a", never, members), bin, "--", "sh", "-c",
				fmt.Sprintf(`while [ ! -e %s/go ]; do sleep 0.02; done; exit 3`, dir))
			waitFor(t, "a running", 15*time.Second, func() bool { return statusState(state, "a") == "running" })
			if readOnly {
				runMount(t, "-o", "remount,ro", state)
			}
			os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
			if readOnly {
				a.waitLog("cannot write the status document", 15*time.Second)
				runMount(t, "-o", "remount,rw", state)
				a.waitLog("status document written again", 15*time.Second)
			}
			waitFor(t, "a ended", 15*time.Second, func() bool { return statusState(state, "a") == "ended" })
			select {
			case <-a.done:
				t.Fatalf("a exited while b runs:\n%s", a.stderr.String())
			default:
			}
			b.signal(syscall.SIGKILL)
			b.wait(10 * time.Second)
			if got := statusState(state, "b"); got != "running" {
				t.Fatalf("b's document says %q; the test needs the running its container was killed in", got)
			}
			if st := a.wait(30 * time.Second); st != 3 {
				t.Fatalf("a exited %d, want its workload's 3\n%s", st, a.stderr.String())
			}
		})
	}
}

// TestPodRestartRoundWithAKilledMember: a announces a pod restart (exit
// 88); b's workload takes its time to stop, and b's container is killed
// whole meanwhile. a starts its next run without waiting out the bound on
// the others' stop (it logs when it does), and its document and exit are
// its own.
func TestPodRestartRoundWithAKilledMember(t *testing.T) {
	requirePIDNamespace(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular"
	b := startPID1(t, podEnv(state, "b", `{}`, members), "--", "sh", "-c",
		fmt.Sprintf(`trap 'touch %s/b.term; sleep 600' TERM; while :; do sleep 0.02; done`, dir))
	waitFor(t, "b running", 15*time.Second, func() bool { return statusState(state, "b") == "running" })
	a := start(t, podEnv(state, "a", strings.Replace(restartAll88, "{", `{"backoff":{"initial":"100ms"},`, 1), members), bin, "--", "sh", "-c",
		fmt.Sprintf(`if [ -e %[1]s/a.once ]; then touch %[1]s/a.run2; while [ ! -e %[1]s/end ]; do sleep 0.02; done; exit 5; fi
touch %[1]s/a.once; exit 88`, dir))
	waitFor(t, "b's stop for the pod restart", 15*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "b.term"))
		return err == nil
	})
	b.signal(syscall.SIGKILL)
	b.wait(10 * time.Second)
	waitFor(t, "a's second run", 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "a.run2"))
		return err == nil
	})
	if strings.Contains(a.stderr.String(), "did not stop within the bound") {
		t.Errorf("a waited for b, whose container was killed, until the bound:\n%s", a.stderr.String())
	}
	os.WriteFile(filepath.Join(dir, "end"), nil, 0o644)
	if st := a.wait(30 * time.Second); st != 5 {
		t.Fatalf("a exited %d, want its workload's 5\n%s", st, a.stderr.String())
	}
}

// mountTmpfs mounts a small tmpfs on dir for the test (root only, which
// requirePIDNamespace has checked).
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	runMount(t, "-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs", dir)
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
}

func runMount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v: %s", args, err, out)
	}
}

// TestBadFileFloodIsNotLogged: any container of the pod can rename
// malformed files into the state volume as fast as it likes: documents
// that do not parse in place of another member's, links and FIFOs at its
// liveness lock, generation files and round markers no one announced. A
// member that reads them at every poll (waiting in phase Ended for b)
// logs a bounded number of lines however many there are: each kind once,
// or once per 10 s with a count.
func TestBadFileFloodIsNotLogged(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	os.Mkdir(state, 0o777)
	members := "RESTART_SUPERVISOR_POD_MEMBERS=a:regular,b:regular,c:regular"
	b := start(t, podEnv(state, "b", `{}`, members), bin, "--", "sleep", "600")
	waitFor(t, "b running", 15*time.Second, func() bool { return statusState(state, "b") == "running" })
	// c never starts: a reads whatever is at its name at every poll.
	a := start(t, podEnv(state, "a", restartAll88, members), bin, "--", "true")
	waitFor(t, "a ended", 15*time.Second, func() bool { return statusState(state, "a") == "ended" })
	before := strings.Count(a.stderr.String(), "\n")
	for _, sub := range []string{"status", "live", "pod-restarts"} {
		os.MkdirAll(filepath.Join(state, sub), 0o777)
	}
	files := 0
	// A second or more of renames, for a's 250 ms polls.
	for ; files < 2500; files += 5 {
		tmp := filepath.Join(state, "tmp")
		os.WriteFile(tmp, []byte(fmt.Sprintf("{bad %d", files)), 0o644)
		os.Rename(tmp, filepath.Join(state, "status", "c.json"))
		os.Remove(filepath.Join(state, "live", "c.lock"))
		os.Symlink("/dev/zero", filepath.Join(state, "live", "c.lock"))
		gen := fmt.Sprintf("%020d", files+1)
		os.WriteFile(tmp, []byte(`{"generation":1,"source":"c","exitCode":88}`), 0o644)
		os.Rename(tmp, filepath.Join(state, "pod-restarts", gen))
		os.WriteFile(tmp, []byte("junk"), 0o644)
		os.Rename(tmp, filepath.Join(state, "pod-restarts", gen+".stopped.c"))
		syscall.Mkfifo(filepath.Join(state, "status", fmt.Sprintf("c%d.json", files)), 0o666)
	}
	// A few more polls of the last files; the bound below holds however
	// many of them a has seen.
	time.Sleep(600 * time.Millisecond)
	lines := strings.Count(a.stderr.String(), "\n") - before
	t.Logf("%d bad files: %d log lines", files, lines)
	if lines > 3 {
		t.Errorf("%d log lines for %d bad files:\n%s", lines, files, a.stderr.String())
	}
	select {
	case <-a.done:
		t.Fatalf("a exited while b runs:\n%s", a.stderr.String())
	default:
	}
	for _, s := range []*sup{a, b} {
		s.signal(syscall.SIGTERM)
		s.wait(10 * time.Second)
	}
}
