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
// (default 3), each pod the real supervisor below GROUPSCALE_STANDIN_FROM
// (default 1000) and the stand-in of standin_test.go from it, and with -update-gang writes the table into docs/gang.md
// between its groupscale markers, followed by the before table of
// GROUPSCALE_BEFORE (the groupscale block of a docs/gang.md the design
// before wrote in the same `make groupscale`). `make groupscale` runs it.
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
	standInFrom := 1000
	if s := os.Getenv("GROUPSCALE_STANDIN_FROM"); s != "" {
		var err error
		if standInFrom, err = strconv.Atoi(s); err != nil {
			t.Fatalf("GROUPSCALE_STANDIN_FROM=%q", s)
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
	var rows strings.Builder
	rows.WriteString("| pods (one per node) | members | exit → last start, median | worst | coordination writes a round (median) | per node | watch events a round (median) | per node | API server CPU a round (median) | API server memory (peak) | agents' CPU a round, per agent (median) | agents' memory, per agent | load (1 min, peak) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range sizes {
		var rs []groupRound
		standIn := n >= standInFrom
		t.Run(strconv.Itoa(n), func(t *testing.T) { rs = runGroupScaleWith(t, n, rounds, standIn) })
		kind := "supervisor"
		if standIn {
			kind = "stand-in"
		}
		if len(rs) == 0 {
			continue
		}
		times, writes, events, cpu, acpu := []time.Duration{}, []int{}, []int{}, []float64{}, []float64{}
		var rss, arss, load float64
		for _, r := range rs {
			times, writes, events, cpu = append(times, r.restart), append(writes, r.groupWrites), append(events, r.groupWatchEvent), append(cpu, r.apiCPU)
			acpu = append(acpu, r.agentsCPU)
			rss, arss, load = max(rss, r.apiRSS), max(arss, r.agentsRSS), max(load, r.load)
		}
		slices.Sort(acpu)
		slices.Sort(times)
		slices.Sort(writes)
		slices.Sort(events)
		slices.Sort(cpu)
		w, e := writes[len(writes)/2], events[len(events)/2]
		fmt.Fprintf(&rows, "| %d | %s | %.2f s | %.2f s | %d | %.1f | %d | %.1f | %.2f s | %.0f MiB | %.1f ms | %.2f MiB | %.1f |\n", n, kind, times[len(times)/2].Seconds(), times[len(times)-1].Seconds(),
			w, float64(w)/float64(n), e, float64(e)/float64(n), cpu[len(cpu)/2], rss/(1<<20), 1000*acpu[len(acpu)/2]/float64(n), arss/float64(n)/(1<<20), load)
	}
	fmt.Fprintf(&table, "Run %s, %d rounds a size, every node the real node agent, each pod the real supervisor or the stand-in (members), API server %s:\n\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), rounds, scaleAPIVersion, rows.String())
	if before := os.Getenv("GROUPSCALE_BEFORE"); before != "" {
		// The design before GroupRestartReport, run by `make groupscale`
		// just before this one from a work tree of its commit.
		b, err := os.ReadFile(before)
		must(t, err)
		block, ok := groupscaleBlock(string(b))
		if !ok {
			t.Fatalf("%s has no groupscale block", before)
		}
		fmt.Fprintf(&table, "\nThe design before it (one object, every node's report in it; commit %s, with a connection per agent), by `make groupscale`: %s",
			os.Getenv("GROUPSCALE_BEFORE_REF"), strings.Replace(strings.TrimPrefix(block, "Run "), ", this design,", ",", 1))
	}
	t.Logf("\n%s", table.String())
	if !*updateGang {
		return
	}
	path := filepath.Join(repoRoot(t), "docs", "gang.md")
	b, err := os.ReadFile(path)
	must(t, err)
	i, j := strings.Index(string(b), scaleStart), strings.Index(string(b), scaleEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no groupscale markers", path)
	}
	must(t, os.WriteFile(path, []byte(string(b[:i+len(scaleStart)])+table.String()+string(b[j:])), 0o644))
}

const scaleStart, scaleEnd = "<!-- groupscale:start -->\n", "<!-- groupscale:end -->"

// groupscaleBlock is the text between the groupscale markers of doc.
func groupscaleBlock(doc string) (string, bool) {
	i, j := strings.Index(doc, scaleStart), strings.Index(doc, scaleEnd)
	if i < 0 || j < i {
		return "", false
	}
	return doc[i+len(scaleStart) : j], true
}
