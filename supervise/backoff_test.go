package supervise

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// TestBackoffCurve pins the container curve to the kubelet's
// CrashLoopBackOff with its defaults: the first restart at once, then
// 10 s doubling to the 300 s cap, and a run of 10 min starts it over
// (flowcontrol.Backoff.Next with the kubelet's HasExpiredFunc,
// k8s.io/kubernetes v1.37.2).
func TestBackoffCurve(t *testing.T) {
	var c rules.Backoff // the defaults
	var b backoff
	short := time.Second
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 300 * time.Second, 300 * time.Second}
	for i, w := range want {
		if d := b.next(c, short, ""); d != w {
			t.Fatalf("restart %d after a short run: delay %v, want %v", i, d, w)
		}
	}
	if b.n != len(want) {
		t.Fatalf("step %d after %d restarts", b.n, len(want))
	}
	if d := b.next(c, 10*time.Minute-time.Millisecond, ""); d != 300*time.Second {
		t.Fatalf("a run just short of resetAfter: delay %v, want the cap", d)
	}
	if d := b.next(c, 10*time.Minute, ""); d != 0 || b.n != 1 {
		t.Fatalf("a run of resetAfter: delay %v at step %d, want 0 at step 1", d, b.n)
	}
	if d := b.next(c, short, ""); d != 10*time.Second {
		t.Fatalf("after the reset: delay %v, want the initial 10s", d)
	}
}

// TestBackoffNoRunNeverResets: a round entered before any start (an init
// container's re-run) takes a step but cannot reset the curve, even with
// resetAfter 0.
func TestBackoffNoRunNeverResets(t *testing.T) {
	zero, initial := rules.Duration(0), rules.Duration(time.Second)
	c := rules.Backoff{Initial: &initial, ResetAfter: &zero}
	b := backoff{n: 2}
	if d := b.next(c, -1, ""); d != 2*time.Second || b.n != 3 {
		t.Fatalf("no run: delay %v at step %d, want 2s at step 3", d, b.n)
	}
	if d := b.next(c, 0, ""); d != 0 || b.n != 1 {
		t.Fatalf("a run of 0 with resetAfter 0: delay %v at step %d, want 0 at step 1", d, b.n)
	}
}

// TestBackoffResumed: a supervisor that follows one which handed its exit
// over continues the container's curve from the status document's
// BackoffRestarts, unless that supervisor's last run was long enough to
// reset it.
func TestBackoffResumed(t *testing.T) {
	var c rules.Backoff
	exit := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, d := resumed(c, &Resume{BackoffRestarts: 3, LastStart: exit.Add(-time.Second), LastExit: exit}, "")
	if d != 40*time.Second || b.n != 4 {
		t.Fatalf("resumed at 3 after a short run: delay %v at step %d, want 40s at step 4", d, b.n)
	}
	b, d = resumed(c, &Resume{BackoffRestarts: 3, LastStart: exit.Add(-10 * time.Minute), LastExit: exit}, "")
	if d != 0 || b.n != 1 {
		t.Fatalf("resumed at 3 after a run of resetAfter: delay %v at step %d, want 0 at step 1", d, b.n)
	}
}

// TestBackoffKeyedByResources: the kubelet's back-off key holds the
// container's resources (GetBackoffKey, kuberuntime/helpers.go:193-207,
// v1.37.2): other resources than the last step's start a fresh curve,
// from the supervisor's own steps and from a resumed one; an unknown key
// ("") changes nothing.
func TestBackoffKeyedByResources(t *testing.T) {
	var c rules.Backoff
	short := time.Second
	b := backoff{n: 3, key: "aaaaaaaaaaaaaaaa"}
	if d := b.next(c, short, "aaaaaaaaaaaaaaaa"); d != 40*time.Second {
		t.Fatalf("same resources: delay %v, want 40s", d)
	}
	if d := b.next(c, short, ""); d != 80*time.Second || b.key != "aaaaaaaaaaaaaaaa" {
		t.Fatalf("unknown resources: delay %v, key %q, want 80s and the key kept", d, b.key)
	}
	if d := b.next(c, short, "bbbbbbbbbbbbbbbb"); d != 0 || b.n != 1 || b.key != "bbbbbbbbbbbbbbbb" {
		t.Fatalf("resized: delay %v at step %d, key %q, want 0 at step 1 under the new key", d, b.n, b.key)
	}
	if d := b.next(c, short, "bbbbbbbbbbbbbbbb"); d != 10*time.Second {
		t.Fatalf("after the resize: delay %v, want the initial 10s", d)
	}
	exit := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Resume{BackoffRestarts: 3, BackoffKey: "aaaaaaaaaaaaaaaa", LastStart: exit.Add(-time.Second), LastExit: exit}
	if b, d := resumed(c, r, "bbbbbbbbbbbbbbbb"); d != 0 || b.n != 1 {
		t.Fatalf("resumed after a resize: delay %v at step %d, want 0 at step 1", d, b.n)
	}
	if b, d := resumed(c, r, "aaaaaaaaaaaaaaaa"); d != 40*time.Second || b.n != 4 {
		t.Fatalf("resumed, same resources: delay %v at step %d, want 40s at step 4", d, b.n)
	}
}

// TestStoppedResumeAfterAResize: the kubelet restarted the container for a
// resize (RestartContainer), so the earlier supervisor was stopped, with
// the curve at step 3 under other resources. The kubelet's start found no
// entry under the new key and made one (an earlier instance had exited):
// the next crash waits the initial delay, not the old curve's step 3.
// With the same resources the old curve goes on.
func TestStoppedResumeAfterAResize(t *testing.T) {
	for _, c := range []struct {
		name, limit string
		want        string
	}{
		{"resized", "83886080\n", "delay=1s"},
		{"same resources", "67108864\n", "delay=4s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			limit := filepath.Join(dir, "memory.max")
			os.WriteFile(limit, []byte("67108864\n"), 0o644)
			before := resourcesKey([]string{limit})
			os.WriteFile(limit, []byte(c.limit), 0o644)
			o := shell(fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 2 ] && exit 0
exit 42`, dir))
			o.ResourceFiles = []string{limit}
			o.Resume = &Resume{Stopped: true, BackoffRestarts: 3, BackoffKey: before,
				LastStart: time.Now().Add(-time.Minute), LastExit: time.Now().Add(-time.Second)}
			o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"1s"},
			  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`)
			var log syncBuffer
			o.Log = slog.New(slog.NewTextHandler(&log, nil))
			if r := waitResult(t, runAsync(o)); r.Status != 0 || r.Restarts != 1 {
				t.Fatalf("result %+v, want status 0 after 1 restart; log:\n%s", r, log.String())
			}
			if !strings.Contains(log.String(), c.want) {
				t.Fatalf("no %s in the log:\n%s", c.want, log.String())
			}
		})
	}
}
