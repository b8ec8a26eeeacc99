package supervise

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLineMatcher: a line matches only once it ends, whatever the reads
// cut it into (a prefix split between two reads included); a line longer
// than maxTappedLine is matched on its start; after a match the output is
// not matched for beatQuiet.
func TestLineMatcher(t *testing.T) {
	re := regexp.MustCompile(`step [0-9]+`)
	beats := make(chan struct{}, 1)
	got := func() bool {
		select {
		case <-beats:
			return true
		default:
			return false
		}
	}
	m := &lineMatcher{beats: beats}
	for _, c := range []struct {
		chunks []string
		want   bool
	}{
		{[]string{"loss 0.1\n", "warn\n"}, false},
		{[]string{"ste", "p 12 loss\n"}, true},
		{[]string{"step 7"}, false}, // not ended
		{[]string{"\n"}, true},
		{[]string{"x step\n"}, false},
		{[]string{strings.Repeat("y", maxTappedLine) + " step 1\n"}, false}, // past the held start
		{[]string{"step 2 " + strings.Repeat("z", 2*maxTappedLine) + "\n"}, true},
	} {
		m.quiet = time.Time{}
		for _, ch := range c.chunks {
			m.feed([]byte(ch), re)
		}
		if b := got(); b != c.want {
			t.Errorf("%.40q: heartbeat %v, want %v", c.chunks, b, c.want)
		}
	}
	m.feed([]byte("step 3\n"), re)
	got()
	m.feed([]byte("step 4\n"), re)
	if got() {
		t.Error("a match within beatQuiet of the last one")
	}
	if len(m.line) != 0 {
		t.Errorf("held %q after ended lines", m.line)
	}
}
