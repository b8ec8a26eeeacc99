package apiserver_test

import "testing"

// TestGroupScaleSmall runs the scale harness (groupscale_test.go) at 8
// simulated nodes, two rounds, in `make test`: every rank restarts once a
// round, and the coordination's writes of a round stay within what the
// design makes (docs/gang.md, "At scale"), so that a change that writes
// more per node fails here.
func TestGroupScaleSmall(t *testing.T) {
	const n = 8
	for i, r := range runGroupScale(t, n, 2) {
		if r.groupWrites > maxGroupWrites(n) {
			t.Errorf("round %d: %d coordination writes for %d nodes, want at most %d", i+1, r.groupWrites, n, maxGroupWrites(n))
		}
	}
}

// TestGroupScaleSmallStandIn runs the same size with the stand-in members
// the harness uses where the machine cannot hold a supervisor per pod
// (standin_test.go): every rank restarts once a round through the same
// files, within the same bound on the writes, so that the stand-in's rows
// measure the design and not a stand-in that answers differently.
func TestGroupScaleSmallStandIn(t *testing.T) {
	const n = 8
	for i, r := range runGroupScaleWith(t, n, 2, true) {
		if r.groupWrites > maxGroupWrites(n) {
			t.Errorf("round %d: %d coordination writes for %d nodes, want at most %d", i+1, r.groupWrites, n, maxGroupWrites(n))
		}
	}
}

// maxGroupWrites bounds a round's writes of the coordination's objects for
// n nodes in the design of docs/gang.md: the generation's update (and the
// object's creation in the first round), each node's two reports (its
// members stopped, started again; the first made, the next patched), and
// the coordinator's release and done: 2n+3, 2n+4 in the first round. A
// change that writes once more per node, or per member, fails it.
func maxGroupWrites(n int) int { return 2*n + 4 }
