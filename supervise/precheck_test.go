package supervise

import (
	"testing"
)

// TestPreRestartCheckInProcess runs the check in the test process, where
// the race detector sees the loop and the output reader: the check passes
// once (runs 1 and 2), then fails with its output kept, and the exit is
// handed over with the reason.
func TestPreRestartCheckInProcess(t *testing.T) {
	dir := t.TempDir()
	o := shell(`n=$(cat ` + dir + `/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > ` + dir + `/n; exit 3`)
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[3]}}],
	  "preRestartCheck":{"command":["sh","-c","c=$(cat `+dir+`/c 2>/dev/null || echo 0); c=$((c+1)); echo $c > `+dir+`/c; echo check $c; [ $c -lt 2 ]"]}}`)
	var last State
	o.OnChange = func(st State) { last = st }
	r := waitResult(t, runAsync(o))
	if r.Status != 3 || r.Restarts != 1 {
		t.Fatalf("result %+v, want status 3 after 1 restart", r)
	}
	if last.HandOver == nil || last.HandOver.Reason != ReasonPreRestartCheckFailed || last.Limits.BudgetRestarts != 1 {
		t.Fatalf("last state: hand-over %+v, limits %+v", last.HandOver, last.Limits)
	}
}
