package statevol

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

func TestWriteStatusRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("a", 254)} {
		if err := WriteStatus(t.TempDir(), Status{Container: name}); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
}

// Readers racing a writer that replaces the document continuously must
// always see a complete document.
func TestWriteStatusIsAtomicForConcurrentReaders(t *testing.T) {
	dir := t.TempDir()
	pad := strings.Repeat("x", 64<<10) // large enough that a torn write would show
	if err := WriteStatus(dir, Status{Container: "c", SupervisorVersion: pad}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				data, err := os.ReadFile(StatusPath(dir, "c"))
				if err != nil {
					errs <- err.Error()
					return
				}
				var s Status
				if err := json.Unmarshal(data, &s); err != nil || s.SupervisorVersion != pad {
					errs <- "torn read"
					return
				}
			}
		}()
	}
	for i := 0; i < 60; i++ {
		if err := WriteStatus(dir, Status{Container: "c", Restarts: i, SupervisorVersion: pad}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func TestWriteStatusReadAllRoundTrip(t *testing.T) {
	dir := t.TempDir()
	started := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	want := []Status{
		{Container: "worker", State: contract.PhaseBackingOff, Restarts: 3, PodRestarts: 1, Generation: 1,
			LastExit:    &Exit{Code: 42, Rule: intPtr(0), Action: rules.ActionRestart, At: started.Add(time.Minute)},
			LastRestart: &Exit{Code: 42, Rule: intPtr(0), Action: rules.ActionRestart, At: started.Add(time.Minute)},
			StartedAt:   started, NextStartAt: started.Add(2 * time.Minute), SupervisorPID: 1, SupervisorVersion: "v1"},
		{Container: "app", State: contract.PhaseRunning, StartedAt: started, SupervisorPID: 1},
		{Container: "sidecar", State: contract.PhaseExited,
			LastExit: &Exit{Code: 143, Signal: "SIGTERM", At: started}, SupervisorPID: 7},
	}
	for _, s := range want {
		if err := WriteStatus(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Container != "app" || got[1].Container != "sidecar" || got[2].Container != "worker" {
		t.Fatalf("want app, sidecar, worker in order; got %+v", got)
	}
	w := got[2]
	if w.Restarts != 3 || w.PodRestarts != 1 || w.State != contract.PhaseBackingOff || w.LastExit == nil || w.LastExit.Code != 42 ||
		w.LastExit.Rule == nil || *w.LastExit.Rule != 0 || w.LastExit.Action != rules.ActionRestart ||
		!w.StartedAt.Equal(started) || !w.NextStartAt.Equal(started.Add(2*time.Minute)) || w.SupervisorVersion != "v1" {
		t.Fatalf("worker status changed in the round trip: %+v", w)
	}
	if w.UpdatedAt.IsZero() {
		t.Fatal("UpdatedAt not stamped")
	}
	if got[1].LastExit.Signal != "SIGTERM" || got[1].LastExit.Rule != nil {
		t.Fatalf("sidecar: %+v", got[1].LastExit)
	}

	// Files are readable by other UIDs and the directory is writable by them.
	fi, err := os.Stat(StatusPath(dir, "app"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Fatalf("status file mode %v, want 0644", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Join(dir, "status"))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o777 {
		t.Fatalf("status directory mode %v, want 0777", di.Mode().Perm())
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(filepath.Join(dir, "status"))
	if len(entries) != 3 {
		t.Fatalf("status directory holds %d entries, want 3", len(entries))
	}
}

func TestReadAllSkipsTempFilesAndReportsBrokenDocuments(t *testing.T) {
	dir := t.TempDir()
	if err := WriteStatus(dir, Status{Container: "good", State: contract.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "status")
	os.WriteFile(filepath.Join(sdir, ".good.json.123.tmp"), []byte("{"), 0o644)
	os.WriteFile(filepath.Join(sdir, "notes.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(sdir, "broken.json"), []byte("{\"state\":"), 0o644)
	got, err := ReadAll(dir)
	if len(got) != 1 || got[0].Container != "good" {
		t.Fatalf("got %+v", got)
	}
	if err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Fatalf("want an error naming broken.json, got %v", err)
	}
}

func TestReadAllMissingDirectories(t *testing.T) {
	dir := t.TempDir()
	if got, err := ReadAll(dir); err != nil || len(got) != 0 {
		t.Fatalf("empty state dir: %v %v", got, err)
	}
	if _, err := ReadAll(filepath.Join(dir, "absent")); err == nil {
		t.Fatal("a missing state directory must be an error")
	}
}

// TestHostileStatusDocuments: every container of the pod can write to the
// status directory. A FIFO must not block the reader, a symbolic link must
// not be followed and an oversized document must not be read whole.
func TestHostileStatusDocuments(t *testing.T) {
	dir := t.TempDir()
	if err := WriteStatus(dir, Status{Container: "good", State: contract.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "status")
	if err := unix.Mkfifo(filepath.Join(sdir, "fifo.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte(`{"container":"secret","restarts":7}`), 0o600)
	os.Symlink(secret, filepath.Join(sdir, "link.json"))
	os.WriteFile(filepath.Join(sdir, "big.json"), make([]byte, maxStatusSize+1), 0o644)

	done := make(chan struct{})
	var all []Status
	var err error
	go func() { all, err = ReadAll(dir); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ReadAll blocked on a FIFO")
	}
	if len(all) != 1 || all[0].Container != "good" {
		t.Fatalf("statuses %+v, want only the good one", all)
	}
	for _, want := range []string{"fifo.json: not a regular file", "link.json: is a symbolic link", "big.json: 65537 bytes: larger than 65536 bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if _, err := ReadStatus(dir, "link"); err == nil {
		t.Error("ReadStatus followed a symbolic link")
	}
}

func intPtr(i int) *int { return &i }
