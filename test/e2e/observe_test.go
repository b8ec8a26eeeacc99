package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestObserve checks the parsing of the supervisor's log lines and of the
// events files on fixed input (it needs no cluster).
func TestObserve(t *testing.T) {
	lines := []logLine{
		{time.Unix(0, 0), `time=2026-11-30T15:50:58.598Z level=INFO msg="workload started" logger=restart-supervisor container=c pid=14 command=sh restarts=0`},
		{time.Unix(1, 0), `RS-E2E-START`},
		{time.Unix(2, 0), `{"time":"x","level":"INFO","msg":"workload started","restarts":3}`},
		{time.Unix(3, 0), `level=WARN msg="workload exited and must not restart, but ...; holding the container idle until it is stopped"`},
	}
	evs := []event{{markStart, 10 * time.Second}, {markExit, 11 * time.Second}, {markStart, 11*time.Second + 20*time.Millisecond}}
	o := observe(&corev1.Pod{}, "c", lines, evs)
	if o.supervisorRestarts != 3 || !o.held || !o.restarted || o.latency != 20*time.Millisecond || o.starts != 2 || o.exits != 1 || o.lastIsExit {
		t.Fatalf("observe = %+v", o)
	}
	o = observe(&corev1.Pod{}, "c", lines[:2], evs[:1])
	if o.supervisorRestarts != 0 || o.restarted || o.held {
		t.Fatalf("observe = %+v", o)
	}
}

// TestBackoffOK checks the back-off row's verdict on fixed delays: the
// kubelet's lateness passes, a count off by one does not.
func TestBackoffOK(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		i    int
		got  time.Duration
		want bool
	}{
		{0, 10 * time.Millisecond, true}, {0, 10 * s, true}, {0, 15 * s, false},
		{1, 10 * s, true}, {1, 16 * s, true}, {1, 2 * s, false}, {1, 20 * s, false},
		{2, 20 * s, true}, {2, 31 * s, true}, {2, 10 * s, false}, {2, 40 * s, false},
		{3, 39500 * time.Millisecond, true}, {3, 20 * s, false},
		{4, 80 * s, true}, {4, 40 * s, false}, {4, 160 * s, false},
	} {
		if got := backoffOK(c.i, c.got); got != c.want {
			t.Errorf("backoffOK(%d, %s) = %v, want %v", c.i, c.got, got, c.want)
		}
	}
}
