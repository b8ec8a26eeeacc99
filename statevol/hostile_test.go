package statevol

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
)

func genDirOf(t *testing.T, dir string) string {
	t.Helper()
	gdir, err := sharedSubdir(dir, contract.PodRestartsDir)
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
	if err := unix.Mkfifo(filepath.Join(gdir, GenName(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/dev/zero", filepath.Join(gdir, GenName(2)))
	os.WriteFile(filepath.Join(gdir, GenName(3)), []byte(`{"source":"`+strings.Repeat("x", 10<<20)+`"}`), 0o644)
	for n := uint64(1); n <= 3; n++ {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g := testutil.Within(t, 5*time.Second, func() Generation { return ReadGeneration(dir, n) })
		runtime.ReadMemStats(&after)
		if g.N != n || g.Source != "" {
			t.Errorf("generation %d: %+v", n, g)
		}
		if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
			t.Errorf("generation %d: allocated %d KiB", n, a>>10)
		}
	}
	if cur := testutil.Within(t, 5*time.Second, func() uint64 { c, _ := Current(dir); return c }); cur != 3 {
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
	if cur, err := Current(dir); err != nil || cur != 0 {
		t.Fatalf("current %d, %v", cur, err)
	}
	g, won, err := Announce(dir, 0, "app", 1)
	if err != nil || !won || g.N != 1 {
		t.Fatalf("AnnounceWith: %+v %v %v", g, won, err)
	}
	if cur, _ := Current(dir); cur != 1 {
		t.Fatalf("current %d after the announcement", cur)
	}
	// The last generation refuses to announce instead of wrapping.
	if _, _, err := Announce(dir, MaxGeneration, "app", 1); err == nil {
		t.Fatal("announced past MaxGeneration")
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
	err := WriteStatus(dir, Status{Container: "app"})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("WriteStatus through a link: %v", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("wrote %v through the link", entries[0].Name())
	}
	// The same when the link appears after the directory was checked.
	os.Remove(filepath.Join(dir, contract.StatusDir))
	os.Mkdir(filepath.Join(dir, contract.StatusDir), 0o777)
	os.Rename(filepath.Join(dir, contract.StatusDir), filepath.Join(dir, "old"))
	os.Symlink(elsewhere, filepath.Join(dir, contract.StatusDir))
	if err := writeAtomicBeneath(dir, contract.StatusDir, "app.json", []byte("{}")); err == nil {
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
	os.Symlink(victim, StatusPath(dir, "app"))
	if err := WriteStatus(dir, Status{Container: "app", Restarts: 3}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(victim); string(data) != "keep" {
		t.Fatalf("link target overwritten: %q", data)
	}
	s, err := ReadStatus(dir, "app")
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
	if _, _, err := Announce(dir, 0, "app", 1); err == nil {
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
	os.WriteFile(filepath.Join(elsewhere, GenName(7)), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(elsewhere, "app.json"), []byte(`{"container":"app","state":"running"}`), 0o644)
	if err := os.Symlink(elsewhere, filepath.Join(dir, contract.PodRestartsDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, contract.StatusDir)); err != nil {
		t.Fatal(err)
	}
	if cur, err := Current(dir); err == nil || cur != 0 {
		t.Errorf("Current through a linked %s/: %d, %v; want an error", contract.PodRestartsDir, cur, err)
	}
	if st, err := ReadAll(dir); err == nil || len(st) != 0 {
		t.Errorf("ReadAll through a linked %s/: %v, %v; want an error", contract.StatusDir, st, err)
	}
	if GroupStopped(dir, 7) || LastGroup(dir) != 0 {
		t.Errorf("group readers listed a linked %s/", contract.PodRestartsDir)
	}

	flooded := t.TempDir()
	gdir := genDirOf(t, flooded)
	for i := 0; i <= maxGenEntries; i++ {
		f, err := os.Create(filepath.Join(gdir, "x"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	os.WriteFile(filepath.Join(gdir, GenName(3)), []byte("{}"), 0o644)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Current(flooded)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("Current of %d names: %v; want the bound's error", maxGenEntries+2, err)
	}
	// The names held are the bound's (about 40 bytes each), not more.
	if a := after.TotalAlloc - before.TotalAlloc; a > 64<<20 {
		t.Errorf("listing a flooded %s/ allocated %d MiB", contract.PodRestartsDir, a>>20)
	}
	// Within the bound, everything is seen.
	for i := 0; i <= 10; i++ {
		os.Remove(filepath.Join(gdir, "x"+strconv.Itoa(i)))
	}
	if cur, err := Current(flooded); err != nil || cur != 3 {
		t.Fatalf("Current within the bound: %d, %v; want 3", cur, err)
	}
}
