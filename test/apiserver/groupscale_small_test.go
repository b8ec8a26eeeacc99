package apiserver_test

import "testing"

// TestGroupScaleSmall runs the scale harness (groupscale_test.go) at 8
// simulated nodes, two rounds, in `make test`: every rank restarts once a
// round, and the GroupRestart writes of a round stay within what the
// design makes, with room for a loaded machine (docs/gang.md, "At scale"), so that a change that writes
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
// node its report when its members stopped, its release and its status,
// 3 per node in a round that ends within its waits (25-26 at 8 nodes here);
// a loaded machine's late reports add some (3.7 per node were seen at 64
// nodes at load 9), so the bound has one more per node: a change that
// writes once more per node and phase, or per member, fails it.
func maxGroupWrites(n int) int { return 4*n + 2 }
