package podstate

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// needRoot skips a test that chowns files to another UID.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root in CI")
		}
		t.Skip("needs root")
	}
}

// A generation that claims a group cause counts only when the node agent,
// root, wrote it: a file of the same content owned by another UID (a
// co-container running as a user) is no group restart, and neither is a
// release marker it makes.
func TestGroupDeliveryIsTheAgents(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m, err := Join(dir, "rank", WatchOptions{ForcePoll: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetRound(nil, nil, nil)
	cause := statevol.GroupCause{Generation: 3, Group: "g=x", Pod: "rank-0", Container: "rank", ExitCode: 42}
	n, delivered, err := statevol.DeliverGroup(dir, cause)
	if err != nil || !delivered || n != 1 {
		t.Fatalf("statevol.DeliverGroup = %d, %v, %v", n, delivered, err)
	}
	if n2, again, err := statevol.DeliverGroup(dir, cause); err != nil || again || n2 != 1 {
		t.Fatalf("statevol.DeliverGroup again = %d, %v, %v; want the same round, not delivered again", n2, again, err)
	}
	g := statevol.ReadGeneration(dir, 1)
	if g.Group == nil || g.Group.Generation != 3 {
		t.Fatalf("generation 1 = %+v", g)
	}
	if err := m.Verify(g); err != nil {
		t.Fatalf("Verify of the agent's delivery: %v", err)
	}
	if statevol.LastGroup(dir) != 3 {
		t.Fatalf("statevol.LastGroup = %d", statevol.LastGroup(dir))
	}
	if !m.groupRound(1) || m.released(1) {
		t.Fatal("round 1 is a group round, not yet released")
	}
	if err := statevol.ReleaseGroup(dir, 1); err != nil || !m.released(1) {
		t.Fatalf("ReleaseGroup: %v", err)
	}

	// The same files, owned by nobody.
	for _, name := range []string{statevol.GenName(1), statevol.MarkerName(1, statevol.MarkReleased, statevol.ReleasedBy)} {
		if err := os.Chown(filepath.Join(dir, contract.PodRestartsDir, name), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Verify(g); err == nil {
		t.Fatal("Verify took a group generation owned by UID 65534")
	}
	if m.groupRound(1) || m.released(1) || statevol.LastGroup(dir) != 0 {
		t.Fatal("a file owned by UID 65534 counted as the agent's")
	}
}

// runGroupMember runs one supervisor of a real workload that exits 42
// under a RestartGroup rule, with its pod state in dir.
func runGroupMember(t *testing.T, dir string) (supervise.Result, supervise.State) {
	t.Helper()
	p, err := OpenMember(dir, "rank", nil, WatchOptions{ForcePoll: true}, supervise.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rules.Parse([]byte(`{"restartPolicy":"Never","podRestartPolicy":"Never","restartPolicyRules":[{"action":"RestartGroup","exitCodes":{"operator":"In","values":[42]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last supervise.State
	res := supervise.Run(supervise.Options{Path: "/bin/sh", Argv: []string{"sh", "-c", "exit 42"}, Config: cfg,
		Pod: p.Restarter(), Group: p.GroupRequester(), OnChange: func(s supervise.State) {
			mu.Lock()
			last = s
			mu.Unlock()
			p.Observe(s)
		}})
	p.Close(last)
	return res, last
}

// Without a node agent the request is never answered: after
// GroupAnswerWait the exit goes to the kubelet, with its reason.
func TestGroupRequestWithoutAgentHandsOver(t *testing.T) {
	old := supervise.GroupAnswerWait
	supervise.GroupAnswerWait = 300 * time.Millisecond
	t.Cleanup(func() { supervise.GroupAnswerWait = old })
	dir := t.TempDir()
	res, st := runGroupMember(t, dir)
	if res.Status != 42 || st.HandOver == nil || st.HandOver.Reason != supervise.ReasonNoNodeAgent || st.Restarts != 0 {
		t.Fatalf("status %d, hand-over %+v, restarts %d; want 42, NoNodeAgent, 0", res.Status, st.HandOver, st.Restarts)
	}
	reqs, errs := statevol.GroupRequests(dir)
	if len(errs) > 0 || len(reqs) != 1 || reqs[0].ExitCode != 42 || reqs[0].Container != "rank" || reqs[0].Observed != 0 {
		t.Fatalf("requests %+v, %v", reqs, errs)
	}
}

// The agent's refusal (the group's limit) hands the exit over at once.
func TestGroupRefusalHandsOver(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	go func() {
		for i := 0; i < 200; i++ {
			if reqs, _ := statevol.GroupRequests(dir); len(reqs) == 1 {
				_ = statevol.AnswerGroup(dir, reqs[0], "the group's limit")
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	res, st := runGroupMember(t, dir)
	if res.Status != 42 || st.HandOver == nil || st.HandOver.Reason != supervise.ReasonGroupRestartRefused {
		t.Fatalf("status %d, hand-over %+v; want 42, GroupRestartRefused", res.Status, st.HandOver)
	}
	if took := time.Since(start); took > supervise.GroupAnswerWait {
		t.Fatalf("the refusal took %s, as long as no answer", took)
	}
}

// Reading the requests closes the directory's descriptor once. It was
// closed twice (by hand and by the os.File's finalizer at the next
// collection), and the second close hit whatever the process had opened
// under that number since: in the node agent, a file it was writing
// ("bad file descriptor"), and in a test that runs the agent in its own
// process, the pidfd through which it signals a supervisor, whose SIGTERM
// then never arrived.
func TestGroupRequestsClosesItsDescriptorOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "group"), 0o777); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		statevol.GroupRequests(dir)
		// The lowest free number: the one the listing just used.
		f, err := os.CreateTemp(dir, "after")
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.GC() // the finalizers of the first collection run before the second ends
		time.Sleep(time.Millisecond)
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatalf("round %d: a file opened after the listing: %v", i, err)
		}
		f.Close()
	}
}
