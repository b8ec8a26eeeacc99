package training

import (
	"strconv"
	"testing"
)

// TestRanksRestartedInPlace is the slice of `make training` that `make
// test` runs: real PyTorch ranks (DDP over gloo on loopback), each under
// the built supervisor, rank 1 exiting 42 at step 25. Its rule restarts it
// in place, its peer's gloo error (exit 1) restarts the peer in place, and
// both resume from the step-20 checkpoint to the unfaulted run's final
// loss, bit for bit. Each rank's first restart sees its attempt in its
// environment: RESTART_SUPERVISOR_RESTART_COUNT 1 and the exit it was
// restarted after.
func TestRanksRestartedInPlace(t *testing.T) {
	needTorch(t)
	want := finalLoss(t, job(t, false))
	runs := job(t, true, "--fault-kind", "exit", "--fault-code", "42", "--fault-step", strconv.Itoa(fault))
	rec := measure(t, runs)
	if rec.finalLoss != want {
		t.Fatalf("final loss %v, want the unfaulted run's %v", rec.finalLoss, want)
	}
	if rec.stepsLost != fault-1-every*((fault-1)/every) {
		t.Errorf("%d steps lost, want %d (from the step-%d checkpoint to the fault)", rec.stepsLost, fault-1-every*((fault-1)/every), every*((fault-1)/every))
	}
	// The rank that faulted was restarted after its 42; its peer after
	// gloo's error, which Python turns into exit 1.
	wantCode := map[int]string{0: "1", 1: "42"}
	for r, run := range runs {
		var starts []line
		for _, l := range run.lines {
			if l.Event == "start" {
				starts = append(starts, l)
			}
		}
		// A rank restarted while its peer's old process group still
		// stands can fail once more and start a third time (the supervisor
		// restarts that too): what is asserted is the first restart.
		if len(starts) < 2 {
			t.Fatalf("rank %d started %d times, want at least 2 (once, and in place after the fault):\n%s", r, len(starts), run.stderr)
		}
		first, again := starts[0].Env, starts[1].Env
		if first["RESTART_SUPERVISOR_RESTART_COUNT"] != "0" || first["RESTART_SUPERVISOR_LAST_EXIT_CODE"] != "" {
			t.Errorf("rank %d's first start saw %v, want RESTART_SUPERVISOR_RESTART_COUNT 0 and no last exit", r, first)
		}
		if again["RESTART_SUPERVISOR_RESTART_COUNT"] != "1" || again["RESTART_SUPERVISOR_LAST_EXIT_CODE"] != wantCode[r] {
			t.Errorf("rank %d's restart saw %v, want RESTART_SUPERVISOR_RESTART_COUNT 1 and RESTART_SUPERVISOR_LAST_EXIT_CODE %s", r, again, wantCode[r])
		}
	}
	t.Logf("%.2f s from the fault to the first step after resume, %d steps lost, final loss %v", rec.seconds, rec.stepsLost, rec.finalLoss)
}
