package podstate

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// The tests here run the test binary as other users (PODSTATE_TEST_ROLE=op):
// each process does one thing to the state volume, as a container of the
// pod running as that UID would, and prints "ok" or its error.

// opRole performs PODSTATE_OP on PODSTATE_DIR with PODSTATE_ARG.
func opRole() int {
	dir, arg := os.Getenv("PODSTATE_DIR"), os.Getenv("PODSTATE_ARG")
	var err error
	switch op := os.Getenv("PODSTATE_OP"); op {
	case "write": // write the status document of container arg
		err = statevol.WriteStatus(dir, statevol.Status{Container: arg, State: contract.PhaseRunning, SupervisorPID: os.Getpid()})
	case "remove": // remove dir/arg
		err = os.Remove(filepath.Join(dir, arg))
	case "rename": // rename dir/arg to dir/arg.aside
		err = os.Rename(filepath.Join(dir, arg), filepath.Join(dir, arg+".aside"))
	case "statevol.AnnounceWith": // statevol.AnnounceWith a pod restart as observer of generation arg
		observed, _ := strconv.ParseUint(arg, 10, 64)
		var won bool
		_, won, err = statevol.Announce(dir, observed, "c", 42)
		if err == nil && !won {
			err = fmt.Errorf("generation %d existed already", observed+1)
		}
	default:
		err = fmt.Errorf("unknown PODSTATE_OP %q", op)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("ok")
	return 0
}

// podUIDs is a state volume shared by processes running as other users.
type podUIDs struct {
	t           *testing.T
	bin, shared string
}

// newPodUIDs makes a directory like an emptyDir's root (root's, 0777,
// not sticky) and a copy of the test binary other users can run. It
// skips without root.
func newPodUIDs(t *testing.T) *podUIDs {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root in CI")
		}
		t.Skip("needs root to run processes as other users")
	}
	// t.TempDir's parent is private: use a directory every user can enter.
	base, err := os.MkdirTemp("", "podstate-sticky-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := filepath.Join(base, "podstate.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(base, "state")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777)
	return &podUIDs{t: t, bin: bin, shared: shared}
}

// as runs op with arg as uid and returns whether it succeeded and what it
// printed.
func (p *podUIDs) as(uid uint32, op, arg string) (bool, string) {
	p.t.Helper()
	cmd := exec.Command(p.bin)
	cmd.Env = append(os.Environ(), "PODSTATE_TEST_ROLE=op", "PODSTATE_DIR="+p.shared, "PODSTATE_OP="+op, "PODSTATE_ARG="+arg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		p.t.Fatal(err)
	}
	return err == nil, strings.TrimSpace(string(out))
}

func (p *podUIDs) must(uid uint32, op, arg string) {
	p.t.Helper()
	if ok, out := p.as(uid, op, arg); !ok {
		p.t.Fatalf("UID %d %s %s: %s", uid, op, arg, out)
	}
}

func (p *podUIDs) refused(uid uint32, op, arg string) {
	p.t.Helper()
	ok, out := p.as(uid, op, arg)
	if ok {
		p.t.Fatalf("UID %d could %s %s", uid, op, arg)
	}
	if !strings.Contains(out, "operation not permitted") {
		p.t.Fatalf("UID %d %s %s: %s, want EPERM", uid, op, arg, out)
	}
}

func modeOf(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

const (
	victim = 1001
	forger = 1002
)

// TestStickyStateVolumeRefusesForgery: a container running as another
// UID cannot replace, remove or move aside another container's status
// document, while each container keeps replacing its own. A root
// supervisor in the pod (here the test process) seals the volume's root.
func TestStickyStateVolumeRefusesForgery(t *testing.T) {
	p := newPodUIDs(t)
	pod, err := Open(p.shared, "root-container", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	pod.Close(supervise.State{Phase: contract.PhaseExited})
	if m := modeOf(t, p.shared); m&os.ModeSticky == 0 {
		t.Fatalf("volume root %v, want sticky", m)
	}
	for _, sub := range []string{"status", "pod-restarts"} {
		if m := modeOf(t, filepath.Join(p.shared, sub)); m != os.ModeDir|os.ModeSticky|0o777 {
			t.Fatalf("%s: %v, want drwxrwxrwt", sub, m)
		}
	}

	p.must(victim, "write", "victim")
	p.refused(forger, "write", "victim")
	p.refused(forger, "remove", "status/victim.json")
	p.refused(forger, "rename", "status")
	p.refused(forger, "remove", "status/root-container.json")
	// The owner's temporary file and rename(2) still replace its own.
	p.must(victim, "write", "victim")
	p.must(forger, "write", "forger")
	st, err := statevol.ReadAll(p.shared)
	if err != nil || len(st) != 3 {
		t.Fatalf("%+v: %v", st, err)
	}
	fi, _ := os.Stat(statevol.StatusPath(p.shared, "victim"))
	if owner := fi.Sys().(*syscall.Stat_t).Uid; owner != victim {
		t.Fatalf("victim's document owned by %d", owner)
	}
}

// TestStickySubdirWithoutRootSupervisor: no supervisor of the pod runs as
// root, so the volume's root stays as the kubelet made it; the
// subdirectory the first container creates is still sticky.
func TestStickySubdirWithoutRootSupervisor(t *testing.T) {
	p := newPodUIDs(t)
	p.must(victim, "write", "victim")
	if m := modeOf(t, filepath.Join(p.shared, "status")); m != os.ModeDir|os.ModeSticky|0o777 {
		t.Fatalf("status: %v, want drwxrwxrwt", m)
	}
	if m := modeOf(t, p.shared); m&os.ModeSticky != 0 {
		t.Fatalf("a non-root supervisor changed the mode of root's directory: %v", m)
	}
	p.refused(forger, "write", "victim")
	p.refused(forger, "remove", "status/victim.json")
	p.must(victim, "write", "victim")
}

// TestStickyRootSupervisorOwnsSubdirs: the sticky bit spares a
// directory's owner. A non-root container that started first created
// status/; once a root supervisor of the pod writes there, the directory
// is root's and its creator can no longer remove others' documents.
func TestStickyRootSupervisorOwnsSubdirs(t *testing.T) {
	p := newPodUIDs(t)
	p.must(victim, "write", "victim")
	p.must(forger, "write", "forger")
	if err := statevol.WriteStatus(p.shared, statevol.Status{Container: "root-container"}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Lstat(filepath.Join(p.shared, "status"))
	if owner := fi.Sys().(*syscall.Stat_t).Uid; owner != 0 || fi.Mode() != os.ModeDir|os.ModeSticky|0o777 {
		t.Fatalf("status: owner %d, %v; want root's drwxrwxrwt", owner, fi.Mode())
	}
	p.refused(victim, "remove", "status/forger.json")
	p.refused(victim, "write", "root-container")
	p.must(victim, "write", "victim")
}

// TestStickyOldSharedDirs: an older supervisor made the subdirectories
// 0777. Their owner (or root) adds the sticky bit; any other UID uses them
// as they are.
func TestStickyOldSharedDirs(t *testing.T) {
	p := newPodUIDs(t)
	sdir := filepath.Join(p.shared, "status")
	os.Mkdir(sdir, 0o777)
	os.Chmod(sdir, 0o777)
	os.Chown(sdir, victim, victim)
	p.must(forger, "write", "forger")
	if m := modeOf(t, sdir); m != os.ModeDir|0o777 {
		t.Fatalf("status: %v after a write by another UID, want drwxrwxrwx", m)
	}
	p.must(victim, "write", "victim")
	if m := modeOf(t, sdir); m != os.ModeDir|os.ModeSticky|0o777 {
		t.Fatalf("status: %v after its owner's write, want drwxrwxrwt", m)
	}
	p.refused(forger, "write", "victim")

	// Root may change any directory's mode.
	gdir := filepath.Join(p.shared, "pod-restarts")
	os.Mkdir(gdir, 0o777)
	os.Chmod(gdir, 0o777)
	os.Chown(gdir, forger, forger)
	if _, _, err := statevol.Announce(p.shared, 0, "root-container", 42); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, gdir); m != os.ModeDir|os.ModeSticky|0o777 {
		t.Fatalf("pod-restarts: %v after root's announcement, want drwxrwxrwt", m)
	}
}

// TestStickyPruneKeepsOtherUIDsFiles: announcers prune old generation
// files, but in the sticky directory only their own. Every announcement
// still succeeds, and each UID's leftovers stay bounded by its own next
// announcement.
func TestStickyPruneKeepsOtherUIDsFiles(t *testing.T) {
	p := newPodUIDs(t)
	const last = 20
	for g := uint64(0); g < last; g++ {
		uid := uint32(victim + g%2) // victim creates odd generations, forger even ones
		p.must(uid, "statevol.AnnounceWith", strconv.FormatUint(g, 10))
	}
	entries, err := os.ReadDir(filepath.Join(p.shared, "pod-restarts"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if n, ok := statevol.ParseGenName(e.Name()); ok {
			got = append(got, fmt.Sprint(n))
		} else {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	// forger announced 20 and pruned its own files below 12; victim
	// announced 19 and pruned its own below 11.
	want := "11 12 13 14 15 16 17 18 19 20"
	if strings.Join(got, " ") != want {
		t.Fatalf("generation files %s, want %s", strings.Join(got, " "), want)
	}
	if n, err := statevol.Current(p.shared); err != nil || n != last {
		t.Fatalf("current %d: %v", n, err)
	}
}

// TestResumeOnlyFromOwnDocument: a document for this container created by
// another UID before the container ever wrote one (the sticky bit does not
// stop that) is not taken up as its back-off.
func TestResumeOnlyFromOwnDocument(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root in CI")
		}
		t.Skip("needs root to give a file to another user")
	}
	dir := t.TempDir()
	planted := statevol.Status{Container: "app", BackoffRestarts: 50, LastExit: &statevol.Exit{Code: 1}}
	if err := statevol.WriteStatus(dir, planted); err != nil {
		t.Fatal(err)
	}
	os.Chown(statevol.StatusPath(dir, "app"), forger, forger)
	var logs testutil.SyncBuffer
	pod, err := Open(dir, "app", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close(supervise.State{Phase: contract.PhaseExited})
	if r := pod.Resume(); r != nil {
		t.Fatalf("resumed %+v from another UID's document", *r)
	}
	if !strings.Contains(logs.String(), "owned by UID 1002") {
		t.Fatalf("log does not say why the back-off starts over:\n%s", logs.String())
	}

	// Its own document is taken up.
	dir = t.TempDir()
	statevol.WriteStatus(dir, planted)
	own, err := Open(dir, "app", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close(supervise.State{Phase: contract.PhaseExited})
	if r := own.Resume(); r == nil || r.BackoffRestarts != 50 {
		t.Fatalf("resume %+v, want 50 back-off restarts", r)
	}
}
