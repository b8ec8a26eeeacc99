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

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

func intPtr(i int) *int { return &i }

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
