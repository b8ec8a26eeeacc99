package apiserver_test

import "testing"

// TestGroupScaleSmall runs the scale harness (groupscale_test.go) at 8
// simulated nodes, two rounds, in `make test`: every rank restarts once a
// round, and the GroupRestart writes of a round stay within what the
// design makes (docs/gang.md, "At scale"), so that a change that writes
// more per node fails here.
func TestGroupScaleSmall(t *testing.T) {
	const n = 8
	for i, r := range runGroupScale(t, n, 2) {
		if r.groupWrites > maxGroupWrites(n) {
			t.Errorf("round %d: %d GroupRestart writes for %d nodes, want at most %d", i+1, r.groupWrites, n, maxGroupWrites(n))
		}
	}
}

// maxGroupWrites bounds a round's writes of GroupRestart objects for n
// nodes in the design of docs/gang.md: the generation's update, and per
// node its report when its members stopped, its release and its status.
func maxGroupWrites(n int) int { return 3*n + 2 }
