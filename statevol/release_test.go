package statevol

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// A container running as another user than root, whose pod-restarts/ it
// made itself (so that it owns the directory), can rename(2) the agent's
// root-owned files in it, sticky bit or not. It renames the release of
// round 5 to round 6's name, and the delivery of pod generation 1 to
// generation 2's: both still pass an ownership check alone, so
// that an owner check alone released round 6 before the group had
// stopped; by content neither is a release or a delivery.
func TestRenamedAgentFilesAreNotTheAgents(t *testing.T) {
	// rootsByPath is the check by owner alone that took the renamed files
	// for the agent's: a regular file, owned by root.
	rootsByPath := func(path string) error {
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Uid != 0 {
			return fmt.Errorf("%s: mode %o, owner %d", path, st.Mode, st.Uid)
		}
		return nil
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent's files are root's, the renamer another user")
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "release")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(dir, 0o755))
	pr := filepath.Join(dir, contract.PodRestartsDir)
	must(os.Mkdir(pr, 0o777))
	must(os.Chown(pr, nobody, nobody))
	renameAsNobody := func(from, to string) {
		t.Helper()
		mv := exec.Command("mv", "-T", filepath.Join(pr, from), filepath.Join(pr, to))
		mv.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if out, err := mv.CombinedOutput(); err != nil {
			t.Fatalf("rename as UID %d: %v\n%s", nobody, err, out)
		}
	}

	// The release.
	must(ReleaseGroup(dir, 5))
	if !GroupReleased(dir, 5) {
		t.Fatal("the agent's own release of round 5 is not read as one")
	}
	renameAsNobody(MarkerName(5, MarkReleased, ReleasedBy), MarkerName(6, MarkReleased, ReleasedBy))
	if err := rootsByPath(filepath.Join(pr, MarkerName(6, MarkReleased, ReleasedBy))); err != nil {
		t.Fatalf("the renamed release is not root's any more (%v): the test shows nothing", err)
	}
	if GroupReleased(dir, 6) {
		t.Error("round 5's release renamed to round 6's name released round 6")
	}
	must(os.Remove(filepath.Join(pr, MarkerName(6, MarkReleased, ReleasedBy))))
	must(ReleaseGroup(dir, 6))
	if !GroupReleased(dir, 6) {
		t.Error("the agent's own release of round 6 is not read as one")
	}

	// The delivery.
	n, delivered, err := DeliverGroup(dir, GroupCause{Generation: 3, Group: "g=x", Pod: "p", Container: "c", ExitCode: 42})
	must(err)
	if !delivered || n != 1 {
		t.Fatalf("delivery: pod generation %d, delivered %v", n, delivered)
	}
	if _, err := AgentGeneration(dir, 1); err != nil {
		t.Fatalf("the agent's own delivery: %v", err)
	}
	renameAsNobody(GenName(1), GenName(2))
	if err := rootsByPath(filepath.Join(pr, GenName(2))); err != nil {
		t.Fatalf("the renamed delivery is not root's any more (%v): the test shows nothing", err)
	}
	if _, err := AgentGeneration(dir, 2); err == nil {
		t.Error("pod generation 1's delivery renamed to 2's name passes for the agent's delivery of 2")
	}
	if c, ok := groupGenerations(dir)[2]; ok {
		t.Errorf("the agent takes the renamed delivery for its own: %+v", c)
	}
}
