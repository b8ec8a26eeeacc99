package supervise

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// watchdogConfig is a config with rule Restart In [124] (the watchdog's
// default exit code) under container restartPolicy Never, a 100 ms
// back-off and watchdog, a JSON object's members.
func watchdogConfig(watchdog string) string {
	return `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"100ms"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[124]}}],
	  "watchdog":{` + watchdog + `}}`
}

// TestStalledRunIsStoppedAndJudgedAsItsExitCode: the first run beats its
// heartbeat file three times, then hangs with SIGTERM ignored, as a rank
// in a dead collective does. No heartbeat for stallSeconds: the stop
// signal, the grace period, then SIGKILL of the whole run; the exit is
// judged as 124, which the rule restarts in place. The second run exits 0.
func TestStalledRunIsStoppedAndJudgedAsItsExitCode(t *testing.T) {
	dir := t.TempDir()
	hb := filepath.Join(dir, "heartbeat")
	script := fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 2 ] && exit 0
trap '' TERM
for i in 1 2 3; do echo $i > %s; sleep 0.3; done
sleep 600 & wait; sleep 600`, dir, hb)
	began := time.Now()
	r, log := runProbed(t, script, watchdogConfig(fmt.Sprintf(`"heartbeatFile":%q,"firstHeartbeatSeconds":60,"stallSeconds":1,"gracePeriodSeconds":1`, hb)))
	took := time.Since(began)
	if r.Status != 0 || r.Restarts != 1 {
		t.Fatalf("result %+v, want status 0 after 1 restart; log:\n%s", r, log)
	}
	for _, want := range []string{"first heartbeat", "no heartbeat within 1s of the last heartbeat", "reason=Stalled", "exitReason=Stalled", "judgedAs=124", "grace period expired", "signal=SIGKILL"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// Three beats 0.3 s apart, 1 s of stall, 1 s of grace: the whole run
	// takes a few seconds, not the 600 s of its sleep.
	t.Logf("stalled run and its restart took %s", took.Round(10*time.Millisecond))
	if took > 60*time.Second {
		t.Errorf("took %s: the stalled run was not stopped", took)
	}
}

// TestFirstHeartbeatTimeout: a run that never beats is stopped once
// firstHeartbeatSeconds have passed, not stallSeconds; with no rule for
// exit code 7 the supervisor exits with it.
func TestFirstHeartbeatTimeout(t *testing.T) {
	hb := filepath.Join(t.TempDir(), "heartbeat")
	r, log := runProbed(t, "exec sleep 600", `{"restartPolicy":"Never","podRestartPolicy":"Never",
	  "watchdog":{"heartbeatFile":"`+hb+`","firstHeartbeatSeconds":1,"stallSeconds":3600,"exitCode":7,"gracePeriodSeconds":5}}`)
	if r.Status != 7 || r.Restarts != 0 {
		t.Fatalf("result %+v, want status 7 (the watchdog's exit code), no restart; log:\n%s", r, log)
	}
	if !strings.Contains(log, "no heartbeat within 1s of the start") {
		t.Errorf("the stop does not say it was the first heartbeat's timeout:\n%s", log)
	}
}

// TestHeartbeatsKeepTheRun: a run that touches its file every 0.2 s for
// 8 s, four times the stall timeout, is not stopped; the last run's exit 0
// ends supervision. (A touch 2 s late, fifteen times its pace, would be a
// stall: the bound leaves a loaded machine that much room.)
func TestHeartbeatsKeepTheRun(t *testing.T) {
	hb := filepath.Join(t.TempDir(), "heartbeat")
	script := fmt.Sprintf(`for i in $(seq 40); do touch %s; sleep 0.2; done; exit 0`, hb)
	r, log := runProbed(t, script, watchdogConfig(fmt.Sprintf(`"heartbeatFile":%q,"firstHeartbeatSeconds":60,"stallSeconds":2`, hb)))
	if r.Status != 0 || r.Restarts != 0 || strings.Contains(log, "Stalled") {
		t.Fatalf("result %+v, want status 0 and no stall; log:\n%s", r, log)
	}
}

// TestStopDuringAStall: a stop requested while the watchdog's stop is in
// its grace period takes its place: the exit ends supervision with the
// workload's own status, unjudged, not restarted.
func TestStopDuringAStall(t *testing.T) {
	hb := filepath.Join(t.TempDir(), "heartbeat")
	o := shell(`trap 'exit 3' INT; trap '' TERM; sleep 600 & wait; sleep 600 & wait`)
	o.Config = mustParse(t, watchdogConfig(fmt.Sprintf(`"heartbeatFile":%q,"stallSeconds":1,"gracePeriodSeconds":30`, hb)))
	var log syncBuffer
	o.Log = slog.New(slog.NewTextHandler(&log, nil))
	ch := runAsync(o)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), "stopping the stalled workload") {
		if time.Now().After(deadline) {
			t.Fatalf("no stall within 30 s; log:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p, _ := os.FindProcess(os.Getpid())
	p.Signal(os.Interrupt)
	r := waitResult(t, ch)
	if r.Status != 3 || r.Restarts != 0 {
		t.Fatalf("result %+v, want the workload's own status 3 after the stop, no restart; log:\n%s", r, log.String())
	}
}

// TestHostileHeartbeatFiles: what another process can put at the
// heartbeat's path shows no progress and costs the loop nothing. A FIFO
// is never opened (lstat only: the loop does not block on it), a link to
// a file the workload touches is not followed, and a file that grows by
// gigabytes a second is never read: its change is a heartbeat like any
// other. The first two runs stall at their first heartbeat's timeout
// (exit 124, rule Restart), the third grows its file and exits 0 after 3 s
// (its first growth has 5 s to come, each next one 2 s).
func TestHostileHeartbeatFiles(t *testing.T) {
	dir := t.TempDir()
	hb := filepath.Join(dir, "heartbeat")
	target := filepath.Join(dir, "target")
	script := fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
case $n in
1) rm -f %[2]s; mkfifo %[2]s; exec sleep 600;;
2) rm -f %[2]s; ln -s %[3]s %[2]s; while :; do touch %[3]s; sleep 0.1; done;;
*) rm -f %[2]s; for i in $(seq 30); do truncate -s ${i}G %[2]s; sleep 0.1; done; exit 0;;
esac`, dir, hb, target)
	r, log := runProbed(t, script, watchdogConfig(fmt.Sprintf(`"heartbeatFile":%q,"firstHeartbeatSeconds":5,"stallSeconds":2,"gracePeriodSeconds":1`, hb)))
	if r.Status != 0 || r.Restarts != 2 {
		t.Fatalf("result %+v, want 2 stalls restarted, then status 0; log:\n%s", r, log)
	}
	if got := strings.Count(log, "reason=Stalled"); got != 2 {
		t.Errorf("%d stalls, want 2 (the FIFO's run and the link's); log:\n%s", got, log)
	}
	if got := strings.Count(log, "the heartbeat file is not a regular file"); got != 2 {
		t.Errorf("%d warnings of a heartbeat that is not a regular file, want 2; log:\n%s", got, log)
	}
}
