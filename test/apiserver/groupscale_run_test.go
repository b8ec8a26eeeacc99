//go:build groupscale

package apiserver_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var updateGang = flag.Bool("update-gang", false, "write the scale table into docs/gang.md")

// TestGroupScale runs the scale harness (groupscale_test.go) at each size
// of GROUPSCALE_SIZES (default 8,16,32,64), GROUPSCALE_ROUNDS rounds each
// (default 3), and with -update-gang writes the table into docs/gang.md
// between its groupscale markers. `make groupscale` runs it.
func TestGroupScale(t *testing.T) {
	sizes := []int{8, 16, 32, 64}
	if s := os.Getenv("GROUPSCALE_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 {
				t.Fatalf("GROUPSCALE_SIZES=%q: want sizes of 2 or more", s)
			}
			sizes = append(sizes, n)
		}
	}
	rounds := 3
	if s := os.Getenv("GROUPSCALE_ROUNDS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("GROUPSCALE_ROUNDS=%q", s)
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "Run %s, %d rounds a size, this design, every node the real node agent and every pod the real supervisor:\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), rounds)
	table.WriteString("| pods (one per node) | exit → last start, median | worst | GroupRestart writes a round (median) | per node | watch events a round (median) | per node |\n|---|---|---|---|---|---|---|\n")
	for _, n := range sizes {
		var rs []groupRound
		t.Run(strconv.Itoa(n), func(t *testing.T) { rs = runGroupScale(t, n, rounds) })
		if len(rs) == 0 {
			continue
		}
		times, writes, events := []time.Duration{}, []int{}, []int{}
		for _, r := range rs {
			times, writes, events = append(times, r.restart), append(writes, r.groupWrites), append(events, r.groupWatchEvent)
		}
		slices.Sort(times)
		slices.Sort(writes)
		slices.Sort(events)
		w, e := writes[len(writes)/2], events[len(events)/2]
		fmt.Fprintf(&table, "| %d | %.2f s | %.2f s | %d | %.1f | %d | %.1f |\n", n, times[len(times)/2].Seconds(), times[len(times)-1].Seconds(),
			w, float64(w)/float64(n), e, float64(e)/float64(n))
	}
	t.Logf("\n%s", table.String())
	if !*updateGang {
		return
	}
	path := filepath.Join(repoRoot(t), "docs", "gang.md")
	b, err := os.ReadFile(path)
	must(t, err)
	const start, end = "<!-- groupscale:start -->\n", "<!-- groupscale:end -->"
	i, j := strings.Index(string(b), start), strings.Index(string(b), end)
	if i < 0 || j < i {
		t.Fatalf("%s has no groupscale markers", path)
	}
	must(t, os.WriteFile(path, []byte(string(b[:i+len(start)])+table.String()+string(b[j:])), 0o644))
}
