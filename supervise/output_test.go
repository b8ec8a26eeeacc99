package supervise

import (
	"fmt"
	"math/rand/v2"
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
	re := newLinePattern(regexp.MustCompile(`step [0-9]+`))
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

// TestLinePatternRegionIsPerLine: matching a run of whole lines at once
// finds a match exactly when one of its lines matches alone, whatever the
// pattern does with newlines, anchors or word boundaries, on random lines
// of a small alphabet where a match across lines would be easy.
func TestLinePatternRegionIsPerLine(t *testing.T) {
	patterns := []string{`step [0-9]+`, `(epoch|iter) [0-9]+`, `a(bx|y)+`, `(step){2,}`, `^step [0-9]+$`, `(?s)step.*loss`, `step\s+12`, `a[^x]b`, `\Aiter`, `loss\z`,
		`x\ny`, `\bepoch\b`, `(?i)STEP`, `(?m)^$`, `[\n]`, `.`, `^`, `(epoch|iter) [0-9]+`}
	rnd := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"step", " ", "12", "loss", "a", "b", "x", "y", "iter", "epoch", "\t", "STEP"}
	for _, pat := range patterns {
		p := newLinePattern(regexp.MustCompile(pat))
		for range 2000 {
			lines := make([]string, 1+rnd.IntN(4))
			for i := range lines {
				var b strings.Builder
				for range rnd.IntN(5) {
					b.WriteString(alphabet[rnd.IntN(len(alphabet))])
				}
				lines[i] = b.String()
			}
			want := false
			for _, l := range lines {
				want = want || p.line.MatchString(l)
			}
			if got := p.region.MatchString(strings.Join(lines, "\n")); got != want {
				t.Fatalf("pattern %q (region %q), lines %q: region match %v, a line matches alone %v", pat, p.region, lines, got, want)
			}
			// The prefilter never skips a read that holds a match, the
			// held start of a line included.
			m := &lineMatcher{line: []byte(lines[0])}
			if want && !m.mayMatch([]byte(strings.Join(lines[1:], "\n")+"\n"), p) && !m.mayMatch([]byte("\n"+strings.Join(lines[1:], "\n")), p) {
				t.Fatalf("pattern %q (needs %q), lines %q: a read with a match skipped", pat, p.needs, lines)
			}
		}
	}
}

// TestRequiredLiterals: the literals a match must hold, which let a read
// without any of them go unmatched.
func TestRequiredLiterals(t *testing.T) {
	for pat, want := range map[string]string{
		`step [0-9]+`:         `["step "]`,
		`(epoch|iter) [0-9]+`: `["epoch" "iter"]`,
		`"step": [0-9]+`:      `["\"step\": "]`,
		`[0-9]+ loss`:         `[" loss"]`,
		`(?i)step`:            `[]`,
		`(a|[0-9]) b`:         `[" b"]`,
		`x*`:                  `[]`,
		`(train|val) (ep|it)`: `["train" "val"]`,
	} {
		p := newLinePattern(regexp.MustCompile(pat))
		var got []string
		for _, n := range p.needs {
			got = append(got, string(n))
		}
		if s := fmt.Sprintf("%q", got); s != want {
			t.Errorf("%s: needs %s, want %s", pat, s, want)
		}
	}
}
