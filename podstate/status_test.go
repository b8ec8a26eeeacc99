package podstate

import (
	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"

	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

func intPtr(i int) *int { return &i }

func TestWriteStatusReadAllRoundTrip(t *testing.T) {
	dir := t.TempDir()
	started := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	want := []statevol.Status{
		{Container: "worker", State: contract.PhaseBackingOff, Restarts: 3, PodRestarts: 1, Generation: 1,
			LastExit:    &statevol.Exit{Code: 42, Rule: intPtr(0), Action: rules.ActionRestart, At: started.Add(time.Minute)},
			LastRestart: &statevol.Exit{Code: 42, Rule: intPtr(0), Action: rules.ActionRestart, At: started.Add(time.Minute)},
			StartedAt:   started, NextStartAt: started.Add(2 * time.Minute), SupervisorPID: 1, SupervisorVersion: "v1"},
		{Container: "app", State: contract.PhaseRunning, StartedAt: started, SupervisorPID: 1},
		{Container: "sidecar", State: contract.PhaseExited,
			LastExit: &statevol.Exit{Code: 143, Signal: "SIGTERM", At: started}, SupervisorPID: 7},
	}
	for _, s := range want {
		if err := statevol.WriteStatus(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := statevol.ReadAll(dir)
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
	fi, err := os.Stat(statevol.StatusPath(dir, "app"))
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
	if err := statevol.WriteStatus(dir, statevol.Status{Container: "good", State: contract.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "status")
	os.WriteFile(filepath.Join(sdir, ".good.json.123.tmp"), []byte("{"), 0o644)
	os.WriteFile(filepath.Join(sdir, "notes.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(sdir, "broken.json"), []byte("{\"state\":"), 0o644)
	got, err := statevol.ReadAll(dir)
	if len(got) != 1 || got[0].Container != "good" {
		t.Fatalf("got %+v", got)
	}
	if err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Fatalf("want an error naming broken.json, got %v", err)
	}
}

func TestReadAllMissingDirectories(t *testing.T) {
	dir := t.TempDir()
	if got, err := statevol.ReadAll(dir); err != nil || len(got) != 0 {
		t.Fatalf("empty state dir: %v %v", got, err)
	}
	if _, err := statevol.ReadAll(filepath.Join(dir, "absent")); err == nil {
		t.Fatal("a missing state directory must be an error")
	}
}

func TestSummaryAndTerminationMessage(t *testing.T) {
	s := statevol.Status{Restarts: 3, PodRestarts: 1, State: contract.PhaseExited,
		LastRestart: &statevol.Exit{Code: 42, Rule: intPtr(0), Action: rules.ActionRestart},
		LastExit:    &statevol.Exit{Code: 1}}
	want := "restart-supervisor: 3 in-place restarts (1 pod restart); last exit 42 (rule 0 Restart); final exit 1"
	if got := Summary(s); got != want {
		t.Fatalf("summary\n got %q\nwant %q", got, want)
	}
	if got := Summary(statevol.Status{Restarts: 1, State: contract.PhaseExited, LastExit: &statevol.Exit{Code: 143, Signal: "SIGTERM"}}); got !=
		"restart-supervisor: 1 in-place restart; final exit 143 (SIGTERM)" {
		t.Fatalf("summary %q", got)
	}
	killed := &statevol.Exit{Code: 137, Signal: "SIGKILL", PodRestart: 2}
	if got := Summary(statevol.Status{Restarts: 2, PodRestarts: 2, State: contract.PhaseRunning, LastExit: killed, LastRestart: killed}); got !=
		"restart-supervisor: 2 in-place restarts (2 pod restarts); last exit 137 (SIGKILL, pod restart 2)" {
		t.Fatalf("summary %q", got)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "termination-log")
	if err := WriteTerminationMessage(path, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != want {
		t.Fatalf("file holds %q", got)
	}

	// The workload's own message stays first and whole.
	os.WriteFile(path, []byte("checkpoint corrupt"), 0o644)
	if err := WriteTerminationMessage(path, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "checkpoint corrupt\n"+want {
		t.Fatalf("file holds %q", got)
	}

	// Cut to the kubelet's 4096 bytes without splitting a UTF-8 sequence.
	os.WriteFile(path, []byte(strings.Repeat("w", 4000)+"\n"), 0o644)
	if err := WriteTerminationMessage(path, strings.Repeat("a", 94)+"é"+strings.Repeat("b", 100)); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if len(got) != 4095 || !strings.HasSuffix(string(got), "\n"+strings.Repeat("a", 94)) {
		t.Fatalf("%d bytes, ending %q", len(got), got[len(got)-4:])
	}
	// No room left: the workload's message is not touched.
	full := strings.Repeat("w", 4096)
	os.WriteFile(path, []byte(full), 0o644)
	if err := WriteTerminationMessage(path, want); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != full {
		t.Fatalf("a full message was changed")
	}

	if err := WriteTerminationMessage(filepath.Join(dir, "missing", "log"), want); err == nil {
		t.Fatal("a missing directory must be reported")
	}
}

func TestRecorderCoalescesAndFlushesOnClose(t *testing.T) {
	dir := t.TempDir()
	var logs testutil.SyncBuffer
	r, err := NewRecorder(dir, statevol.Status{Container: "app", State: contract.PhaseRunning, SupervisorPID: os.Getpid()},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a reader of the in-memory status, as a status log line would be
		defer wg.Done()
		for i := 0; i < 200; i++ {
			_ = Summary(r.Status())
		}
	}()
	for i := 1; i <= 1000; i++ {
		r.Update(func(s *statevol.Status) {
			s.Restarts = i
			s.LastRestart = &statevol.Exit{Code: 42, Rule: intPtr(0), Action: rules.ActionRestart}
			s.LastExit = s.LastRestart
		})
	}
	r.Update(func(s *statevol.Status) { s.State = contract.PhaseExited; s.LastExit = &statevol.Exit{Code: 1} })
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := statevol.ReadAll(dir)
	if err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	if got[0].Restarts != 1000 || got[0].State != contract.PhaseExited || got[0].LastExit.Code != 1 || got[0].LastRestart.Code != 42 {
		t.Fatalf("the last update was not written: %+v", got[0])
	}
	if got[0].SupervisorPID != os.Getpid() {
		t.Fatalf("pid %d", got[0].SupervisorPID)
	}
	if logs.String() != "" || r.FailedWrites() != 0 {
		t.Fatalf("%d failed writes: %s", r.FailedWrites(), logs.String())
	}
	if _, err := NewRecorder(dir, statevol.Status{Container: "a/b"}, nil); err == nil {
		t.Fatal("bad name accepted")
	}
}

// TestRecorderLogsOnceThenCounts: a document that cannot be written
// stays so, usually for every later write. The first failure is logged,
// the others counted; the count comes with the next write that succeeds
// and with the final words of Pod.Close.
func TestRecorderLogsOnceThenCounts(t *testing.T) {
	dir := t.TempDir()
	// A file where the status directory should be makes every write fail,
	// for root too.
	blocker := filepath.Join(dir, "status")
	os.WriteFile(blocker, nil, 0o644)
	var logs testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p, err := Open(dir, "app", log)
	if err != nil {
		t.Fatal(err)
	}
	// One restart after another, each waiting for its write to fail (an
	// update made before the previous write would be coalesced with it).
	waitFor(t, "the first write", func() bool { return p.rec.FailedWrites() >= 1 })
	const restarts = 20
	for i := 1; i <= restarts; i++ {
		p.Observe(supervise.State{Phase: contract.PhaseRunning, Restarts: i})
		waitFor(t, "a failed write", func() bool { return p.rec.FailedWrites() >= i+1 })
	}
	if n := strings.Count(logs.String(), "cannot write the status document"); n != 1 {
		t.Fatalf("%d failed writes logged %d lines, want 1:\n%s", p.rec.FailedWrites(), n, logs.String())
	}
	if !strings.Contains(logs.String(), "status: not a directory") && !strings.Contains(logs.String(), "is not a directory") {
		t.Errorf("the logged line does not say why:\n%s", logs.String())
	}
	os.Remove(blocker)
	failed := p.rec.FailedWrites()
	p.Observe(supervise.State{Phase: contract.PhaseRunning, Restarts: restarts + 1})
	waitFor(t, "the write that succeeds", func() bool { return strings.Contains(logs.String(), "status document written again") })
	if want := fmt.Sprintf("failedWrites=%d", failed); !strings.Contains(logs.String(), want) {
		t.Errorf("the recovery line lacks %s:\n%s", want, logs.String())
	}
	p.Close(supervise.State{Phase: contract.PhaseExited, Restarts: restarts + 1, LastExit: &supervise.Exit{ExitStatus: supervise.ExitStatus{Code: 1}, Rule: -1}})
	if want := fmt.Sprintf("earlier writes failed\" failedWrites=%d", failed); !strings.Contains(logs.String(), want) {
		t.Errorf("the final line lacks %s:\n%s", want, logs.String())
	}
	if st, err := statevol.ReadStatus(dir, "app"); err != nil || st.State != contract.PhaseExited {
		t.Errorf("final document %+v: %v", st, err)
	}
}

// TestRecorderFinalWriteFails: Close returns the error of the last write,
// and Pod.Close's line says how many writes failed in all (retries
// included).
func TestRecorderFinalWriteFails(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "status"), nil, 0o644)
	r, err := NewRecorder(dir, statevol.Status{Container: "app"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a failed write", func() bool { return r.FailedWrites() == 1 })
	r.Update(func(s *statevol.Status) { s.Restarts = 1 })
	if err := r.Close(); err == nil {
		t.Fatal("Close must return the error of the last write")
	}
	// Each update failed at least once; the writer also retried.
	if n := r.FailedWrites(); n < 2 {
		t.Fatalf("%d failed writes counted, want 2 or more", n)
	}
}

// TestHostileStatusDocuments: every container of the pod can write to the
// status directory. A FIFO must not block the reader, a symbolic link must
// not be followed and an oversized document must not be read whole.
func TestHostileStatusDocuments(t *testing.T) {
	dir := t.TempDir()
	if err := statevol.WriteStatus(dir, statevol.Status{Container: "good", State: contract.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "status")
	if err := unix.Mkfifo(filepath.Join(sdir, "fifo.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte(`{"container":"secret","restarts":7}`), 0o600)
	os.Symlink(secret, filepath.Join(sdir, "link.json"))
	os.WriteFile(filepath.Join(sdir, "big.json"), make([]byte, statevol.MaxStatusSize+1), 0o644)

	done := make(chan struct{})
	var all []statevol.Status
	var err error
	go func() { all, err = statevol.ReadAll(dir); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("statevol.ReadAll blocked on a FIFO")
	}
	if len(all) != 1 || all[0].Container != "good" {
		t.Fatalf("statuses %+v, want only the good one", all)
	}
	for _, want := range []string{"fifo.json: not a regular file", "link.json: is a symbolic link", "big.json: 65537 bytes: larger than 65536 bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if _, err := statevol.ReadStatus(dir, "link"); err == nil {
		t.Error("statevol.ReadStatus followed a symbolic link")
	}
}
