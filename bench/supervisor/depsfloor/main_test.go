package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// The floor must pay for exactly the signals the supervisor registers:
// each is a round trip to the runtime's signal-mask thread at start-up.
func TestHandledSignalsMatchSupervisor(t *testing.T) {
	want := supervise.HandledSignals()
	for _, s := range supervise.DefaultStopSignals {
		if !slices.Contains(want, os.Signal(s)) {
			want = append(want, s)
		}
	}
	if !slices.Equal(handledSignals, want) {
		t.Fatalf("depsfloor registers %v, the supervisor %v", handledSignals, want)
	}
}

// A floor that does not supervise would measure less than the supervisor
// must do: it passes the workload's status on, and writes the status
// documents where a state directory is given.
func TestSupervisesLikeThePID1ItStandsFor(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "depsfloor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	state := t.TempDir()
	cmd := exec.Command(bin, "--", "/bin/sh", "-c", "exit 3")
	cmd.Env = append(os.Environ(), `RESTART_SUPERVISOR_CONFIG={"restartPolicy": Never}`, "RESTART_SUPERVISOR_STATE_DIR="+state)
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("exit 3 passed on as %v", err)
	}
	doc, err := os.ReadFile(filepath.Join(state, "c.json"))
	if err != nil || !strings.Contains(string(doc), `"state":"exited","exitCode":3,"config":{"restartPolicy":"Never"`) {
		t.Fatalf("status document %q, %v", doc, err)
	}
	err = exec.Command(bin, "--", "/bin/sh", "-c", "kill -TERM $$").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+15 {
		t.Fatalf("death by SIGTERM passed on as %v, want exit 143", err)
	}
}
