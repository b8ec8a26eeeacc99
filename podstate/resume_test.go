package podstate

import (
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// TestResumeClampsTheFuture: the times in a status document are a
// writer's claims. A resumed exit or start after now is taken as now, a
// start after its exit as the exit, and a back-off step out of range is
// brought into it, so that the resumed wait never exceeds the back-off's
// maximum from now.
func TestResumeClampsTheFuture(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name              string
		exit, start       time.Time
		backoff, wantStep int
		wantExit, wantRun time.Time
	}{
		{"2100", time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), 3, 3, now, now},
		{"an hour on", now.Add(time.Hour), now.Add(-time.Minute), 1 << 62, maxResumedBackoff, now, now.Add(-time.Minute)},
		{"start after exit", now.Add(-time.Minute), now.Add(-time.Second), -5, 0, now.Add(-time.Minute), now.Add(-time.Minute)},
		{"in the past", now.Add(-time.Minute), now.Add(-time.Hour), 2, 2, now.Add(-time.Minute), now.Add(-time.Hour)},
	} {
		var p Pod
		p.resumeFrom(statevol.Status{LastExit: &statevol.Exit{Code: 1, At: c.exit}, StartedAt: c.start, BackoffRestarts: c.backoff}, now)
		r := p.Resume()
		if !r.LastExit.Equal(c.wantExit) || !r.LastStart.Equal(c.wantRun) || r.BackoffRestarts != c.wantStep {
			t.Errorf("%s: resumed %+v, want exit %s start %s step %d", c.name, *r, c.wantExit, c.wantRun, c.wantStep)
		}
		if p.handedOver.Code != 1 || !p.handedOver.At.Equal(c.wantExit) {
			t.Errorf("%s: handed-over exit %+v", c.name, *p.handedOver)
		}
	}
}

// TestResumeTakesOnlyAKey: the back-off key a document carries is taken
// only when it is one a supervisor makes (16 hex digits); anything else a
// writer of the container's UID put there is dropped, which leaves the
// curve keyed by nothing, as before the key existed.
func TestResumeTakesOnlyAKey(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for key, want := range map[string]string{
		"0123456789abcdef":          "0123456789abcdef",
		"0123456789ABCDEZ":          "",
		"0123456789abcdef0":         "",
		"":                          "",
		"../../../../../etc/passwd": "",
	} {
		var p Pod
		p.resumeFrom(statevol.Status{LastExit: &statevol.Exit{Code: 1, At: now}, StartedAt: now, BackoffKey: key}, now)
		if got := p.Resume().BackoffKey; got != want {
			t.Errorf("document key %q resumed as %q, want %q", key, got, want)
		}
	}
}

// TestRestartsTotalFromThePreviousDocument: restartsTotal goes on from the
// document the container's earlier supervisor left; a document of an
// earlier release, without it, gives its restarts; a count out of range
// (any process of the UID can write one) is brought into it.
func TestRestartsTotalFromThePreviousDocument(t *testing.T) {
	for _, c := range []struct {
		name     string
		prev     statevol.Status
		restarts int
		want     int
	}{
		{"continued", statevol.Status{Restarts: 2, RestartsTotal: 7}, 3, 10},
		{"earlier release", statevol.Status{Restarts: 5}, 1, 6},
		{"negative", statevol.Status{Restarts: -9, RestartsTotal: -3}, 1, 1},
		{"huge", statevol.Status{RestartsTotal: 1 << 62}, 1, maxRestartsTotal + 1},
	} {
		dir := t.TempDir()
		c.prev.Container = "app"
		if err := statevol.WriteStatus(dir, c.prev); err != nil {
			t.Fatal(err)
		}
		p, err := Open(dir, "app", nil)
		if err != nil {
			t.Fatal(err)
		}
		st := p.Close(supervise.State{Phase: contract.PhaseExited, Restarts: c.restarts})
		if st.RestartsTotal != c.want || st.Restarts != c.restarts {
			t.Errorf("%s: restarts %d restartsTotal %d, want %d and %d", c.name, st.Restarts, st.RestartsTotal, c.restarts, c.want)
		}
		if doc, err := statevol.ReadStatus(dir, "app"); err != nil || doc.RestartsTotal != c.want {
			t.Errorf("%s: document %+v %v", c.name, doc, err)
		}
	}
}

// TestLimitsFromAHostileDocument: the limits' state in a status document
// is a writer's claim too. Counts are brought into range, no more than
// supervise.MaxBudgetRecent times are taken and none after now (a window
// counts back from now, so a time to come would never leave it), and a
// digest that is not one is dropped.
func TestLimitsFromAHostileDocument(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	recent := make([]time.Time, 5000)
	for i := range recent {
		recent[i] = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	l := limitsFrom(&statevol.Limits{BudgetRestarts: -7, BudgetRecent: recent, ProgressDigest: "../../etc", StalledRestarts: 1 << 62}, now)
	if l.BudgetRestarts != 0 || l.StalledRestarts != maxRestartsTotal || len(l.BudgetRecent) != supervise.MaxBudgetRecent || l.ProgressDigest != "" {
		t.Fatalf("limits %+v (%d times)", *l, len(l.BudgetRecent))
	}
	for _, r := range l.BudgetRecent {
		if r.After(now) {
			t.Fatalf("a restart time after now was kept: %s", r)
		}
	}
	digest := "0123456789abcdef0123456789abcdef"
	for _, d := range []string{digest, "absent"} {
		if got := limitsFrom(&statevol.Limits{ProgressDigest: d}, now).ProgressDigest; got != d {
			t.Errorf("digest %q taken as %q", d, got)
		}
	}
	if limitsFrom(nil, now) != nil {
		t.Error("no limits in the document must give none")
	}
}
