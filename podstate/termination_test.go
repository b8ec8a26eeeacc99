package podstate

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// TestEmptyTerminationMessage: a regular file is emptied; a symbolic link
// is not followed (its target keeps its content), a FIFO without a reader
// neither blocks nor fails, and a missing file is no error.
func TestEmptyTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "termination-log")
	os.WriteFile(reg, []byte("run 1's message"), 0o644)
	if err := EmptyTerminationMessage(reg); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(reg); len(b) != 0 {
		t.Fatalf("not emptied: %q", b)
	}

	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, []byte("keep"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	if err := EmptyTerminationMessage(link); err == nil {
		t.Error("a symbolic link was accepted")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the link's target was changed: %q", b)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := EmptyTerminationMessage(fifo); err != nil {
		t.Errorf("FIFO: %v", err)
	}
	if err := EmptyTerminationMessage(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("missing file: %v", err)
	}
}

// TestSummaryNamesHandOverAndOOM: the termination message, which the
// kubelet shows in the container's lastState, says why the supervisor
// handed the exit over and that the kernel's OOM killer ended the run.
func TestSummaryNamesHandOverAndOOM(t *testing.T) {
	s := statevol.Status{State: contract.PhaseExited, Restarts: 3,
		LastExit: &statevol.Exit{Code: 137, Signal: "SIGKILL", Reason: "OOMKilled"},
		HandOver: &statevol.HandOver{Reason: "RestartBudgetExhausted", Message: "3 in-place restarts"}}
	want := "restart-supervisor: 3 in-place restarts; final exit 137 (SIGKILL, OOMKilled); handed over: RestartBudgetExhausted"
	if got := Summary(s); got != want {
		t.Errorf("summary %q\nwant    %q", got, want)
	}
}
