package podstate

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

func genDirOf(t *testing.T, dir string) string {
	t.Helper()
	gdir, err := statevol.SharedSubdir(dir, contract.PodRestartsDir)
	if err != nil {
		t.Fatal(err)
	}
	return gdir
}

// Another container of the pod plants special files as generations: the
// reader neither blocks nor reads without end, and the generation still
// counts.
func TestReadGenerationRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	gdir := genDirOf(t, dir)
	if err := unix.Mkfifo(filepath.Join(gdir, statevol.GenName(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/dev/zero", filepath.Join(gdir, statevol.GenName(2)))
	os.WriteFile(filepath.Join(gdir, statevol.GenName(3)), []byte(`{"source":"`+strings.Repeat("x", 10<<20)+`"}`), 0o644)
	for n := uint64(1); n <= 3; n++ {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g := testutil.Within(t, 5*time.Second, func() statevol.Generation { return statevol.ReadGeneration(dir, n) })
		runtime.ReadMemStats(&after)
		if g.N != n || g.Source != "" {
			t.Errorf("generation %d: %+v", n, g)
		}
		if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
			t.Errorf("generation %d: allocated %d KiB", n, a>>10)
		}
	}
	if cur := testutil.Within(t, 5*time.Second, func() uint64 { c, _ := statevol.Current(dir); return c }); cur != 3 {
		t.Fatalf("current %d", cur)
	}
}

// A file named after the largest uint64 made the next announcement wrap
// to generation 0 and pod restarts stop for good.
func TestHugeGenerationNamesAreIgnored(t *testing.T) {
	dir := t.TempDir()
	gdir := genDirOf(t, dir)
	for _, name := range []string{"18446744073709551615", "00000001099511627777"} {
		os.WriteFile(filepath.Join(gdir, name), []byte("{}"), 0o644)
	}
	if cur, err := statevol.Current(dir); err != nil || cur != 0 {
		t.Fatalf("current %d, %v", cur, err)
	}
	g, won, err := statevol.Announce(dir, 0, "app", 1)
	if err != nil || !won || g.N != 1 {
		t.Fatalf("statevol.AnnounceWith: %+v %v %v", g, won, err)
	}
	if cur, _ := statevol.Current(dir); cur != 1 {
		t.Fatalf("current %d after the announcement", cur)
	}
	// The last generation refuses to announce instead of wrapping.
	if _, _, err := statevol.Announce(dir, statevol.MaxGeneration, "app", 1); err == nil {
		t.Fatal("announced past statevol.MaxGeneration")
	}
}

// A container that replaces status/ by a link must not make another
// container's supervisor write <name>.json where the link leads.
func TestWriteStatusDoesNotFollowALinkedStatusDir(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, contract.StatusDir)); err != nil {
		t.Fatal(err)
	}
	err := statevol.WriteStatus(dir, statevol.Status{Container: "app"})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("statevol.WriteStatus through a link: %v", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("wrote %v through the link", entries[0].Name())
	}
	// The same when the link appears after the directory was checked.
	os.Remove(filepath.Join(dir, contract.StatusDir))
	os.Mkdir(filepath.Join(dir, contract.StatusDir), 0o777)
	os.Rename(filepath.Join(dir, contract.StatusDir), filepath.Join(dir, "old"))
	os.Symlink(elsewhere, filepath.Join(dir, contract.StatusDir))
	if err := statevol.WriteAtomicBeneath(dir, contract.StatusDir, "app.json", []byte("{}")); err == nil {
		t.Fatal("wrote beneath a link")
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("wrote %v through the link", entries[0].Name())
	}
}

// A link at the document's own name is replaced, its target untouched.
func TestWriteStatusReplacesALinkAtItsName(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.MkdirAll(filepath.Join(dir, contract.StatusDir), 0o777)
	os.Symlink(victim, statevol.StatusPath(dir, "app"))
	if err := statevol.WriteStatus(dir, statevol.Status{Container: "app", Restarts: 3}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(victim); string(data) != "keep" {
		t.Fatalf("link target overwritten: %q", data)
	}
	s, err := statevol.ReadStatus(dir, "app")
	if err != nil || s.Restarts != 3 {
		t.Fatalf("%+v %v", s, err)
	}
}

// The same for pod-restarts/: an announcement never creates files where a
// link planted there leads.
func TestAnnounceDoesNotFollowALinkedGenerationDir(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(dir, contract.PodRestartsDir))
	if _, _, err := statevol.Announce(dir, 0, "app", 1); err == nil {
		t.Fatal("announced through a link")
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("created %v through the link", entries[0].Name())
	}
}

// A container that puts a link where pod-restarts/ or status/ belongs,
// leading to a directory it fills, makes no reader list that directory;
// a directory of its own with more names than the pod can make is refused
// whole, within a bound of memory.
func TestListingsRefuseLinksAndFloods(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	os.WriteFile(filepath.Join(elsewhere, statevol.GenName(7)), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(elsewhere, "app.json"), []byte(`{"container":"app","state":"running"}`), 0o644)
	if err := os.Symlink(elsewhere, filepath.Join(dir, contract.PodRestartsDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, contract.StatusDir)); err != nil {
		t.Fatal(err)
	}
	if cur, err := statevol.Current(dir); err == nil || cur != 0 {
		t.Errorf("statevol.Current through a linked %s/: %d, %v; want an error", contract.PodRestartsDir, cur, err)
	}
	if st, err := statevol.ReadAll(dir); err == nil || len(st) != 0 {
		t.Errorf("statevol.ReadAll through a linked %s/: %v, %v; want an error", contract.StatusDir, st, err)
	}
	if statevol.GroupStopped(dir, 7) || statevol.LastGroup(dir) != 0 {
		t.Errorf("group readers listed a linked %s/", contract.PodRestartsDir)
	}

	flooded := t.TempDir()
	gdir := genDirOf(t, flooded)
	for i := 0; i <= statevol.MaxGenEntries; i++ {
		f, err := os.Create(filepath.Join(gdir, "x"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	os.WriteFile(filepath.Join(gdir, statevol.GenName(3)), []byte("{}"), 0o644)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := statevol.Current(flooded)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("statevol.Current of %d names: %v; want the bound's error", statevol.MaxGenEntries+2, err)
	}
	// The names held are the bound's (about 40 bytes each), not more.
	if a := after.TotalAlloc - before.TotalAlloc; a > 64<<20 {
		t.Errorf("listing a flooded %s/ allocated %d MiB", contract.PodRestartsDir, a>>20)
	}
	// Within the bound, everything is seen.
	for i := 0; i <= 10; i++ {
		os.Remove(filepath.Join(gdir, "x"+strconv.Itoa(i)))
	}
	if cur, err := statevol.Current(flooded); err != nil || cur != 3 {
		t.Fatalf("statevol.Current within the bound: %d, %v; want 3", cur, err)
	}
}

// Another container forges a generation naming this container as its
// source just before this container announces: the announcement checks
// the forged file while it holds the member's lock, and must not wait on
// that lock itself (it did: the supervising goroutine blocked for good,
// and with it every signal, the stop included).
func TestAnnounceOverAForgedOwnGenerationReturns(t *testing.T) {
	dir := t.TempDir()
	members := []contract.PodMember{{Name: "app", Kind: contract.MemberRegular}, {Name: "other", Kind: contract.MemberRegular}}
	p, err := OpenMember(dir, "app", members, WatchOptions{ForcePoll: true}, supervise.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(supervise.State{Phase: contract.PhaseExited})
	gdir := genDirOf(t, dir)
	if err := os.WriteFile(filepath.Join(gdir, statevol.GenName(1)), []byte(`{"n":1,"source":"app","exitCode":42}`), 0o644); err != nil {
		t.Fatal(err)
	}
	g := testutil.Within(t, 5*time.Second, func() statevol.Generation {
		g, _, err := p.member.Announce(42)
		if err != nil {
			t.Errorf("statevol.AnnounceWith: %v", err)
		}
		return g
	})
	if g.N != 2 {
		t.Fatalf("announced generation %d; want 2, past the forged one", g.N)
	}
}
