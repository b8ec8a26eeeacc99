package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

// The matrix (docs/conformance.md) is made from the per-release files
// TestConformance writes (docs/conformance-<version>.md): one row per
// scenario, three columns per release (native, supervised, auto), each cell
// compared with the newest release's native outcome, the behaviour users
// of an older cluster are promised. It is rewritten whenever a release's
// file is, and TestConformanceMatrix keeps it in step with the files.

var updateMatrix = flag.Bool("update-matrix", false, "rewrite docs/conformance.md from the per-release files")

// releaseRun is what one per-release file says.
type releaseRun struct {
	version string
	file    string // base name
	lastRun string // "2026-12-01 07:34 UTC"
	auto    string // what --native=auto chose, as the file words it
	rows    map[string]releaseRow
	// autoRun is the release's auto run (docs/conformance-auto-<version>.md);
	// nil when the release has none.
	autoRun *autoRun
}

// autoRun is what a file writeAuto wrote says.
type autoRun struct {
	// apiVersion and kubeletVersion are set for a version-skew run
	// (skewFile), whose API server is newer than its kubelet.
	apiVersion, kubeletVersion string
	// kubeletGates are the kubelet's own gates ("Name=false"), from the
	// file's name.
	kubeletGates []string
	file         string
	lastRun      string
	concluded    string
	rows         map[string]autoRow
}

type autoRow struct{ outcome, choice string }

type releaseRow struct {
	desc       string
	native     string // outcome, "n/a" where the release has no native counterpart
	supervised string
}

var (
	lastRunRe   = regexp.MustCompile(`^Last run: (\d{4}-\d\d-\d\d \d\d:\d\d UTC), .*Kubernetes (v\d+\.\d+\.\d+)`)
	autoRe      = regexp.MustCompile("^- \\*\\*`--native=auto`\\*\\* \\([^)]*\\): (.*)\\.$")
	concludedRe = regexp.MustCompile("^- \\*\\*`--native=auto` concluded\\*\\*: (.*)\\.$")
)

// tableRows are the cells of each row of the Markdown table under the
// "| Scenario |" header in a file a report wrote, keyed by the scenario's
// name, the first cell its description; each line is also given to each.
func tableRows(path string, data []byte, minCells int, each func(line string)) (map[string][]string, error) {
	rows := map[string][]string{}
	inTable := false
	for _, line := range strings.Split(string(data), "\n") {
		each(line)
		switch {
		case strings.HasPrefix(line, "| Scenario |"):
			inTable = true
			continue
		case !inTable || strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "| "):
			inTable = false
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		if len(cells) < minCells {
			return nil, fmt.Errorf("%s: a table row with %d cells: %q", path, len(cells), line)
		}
		name, desc, ok := strings.Cut(cells[0], ": ")
		if !ok {
			return nil, fmt.Errorf("%s: no scenario name in %q", path, cells[0])
		}
		rows[name] = append([]string{desc}, cells[1:]...)
	}
	return rows, nil
}

// readAuto parses a file writeAuto wrote.
func readAuto(path string) (*autoRun, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	run := &autoRun{file: filepath.Base(path), rows: map[string]autoRow{}}
	rows, err := tableRows(path, data, 4, func(line string) {
		if m := lastRunRe.FindStringSubmatch(line); m != nil {
			run.lastRun = m[1]
		}
		if m := concludedRe.FindStringSubmatch(line); m != nil {
			run.concluded = m[1]
		}
	})
	if err != nil {
		return nil, err
	}
	for name, c := range rows {
		run.rows[name] = autoRow{outcome: c[1], choice: c[2]}
	}
	if run.lastRun == "" || len(run.rows) == 0 {
		return nil, fmt.Errorf("%s: no \"Last run\" line or no table", path)
	}
	return run, nil
}

// readRelease parses a file report.write wrote.
func readRelease(path string) (*releaseRun, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	run := &releaseRun{file: filepath.Base(path), rows: map[string]releaseRow{}}
	rows, err := tableRows(path, data, 7, func(line string) {
		if m := lastRunRe.FindStringSubmatch(line); m != nil {
			run.lastRun, run.version = m[1], m[2]
		}
		if m := autoRe.FindStringSubmatch(line); m != nil {
			run.auto = m[1]
		}
	})
	if err != nil {
		return nil, err
	}
	for name, c := range rows {
		run.rows[name] = releaseRow{desc: c[0], native: c[1], supervised: c[2]}
	}
	if run.version == "" || len(run.rows) == 0 {
		return nil, fmt.Errorf("%s: no \"Last run\" line or no table", path)
	}
	return run, nil
}

var (
	skewFileRe = regexp.MustCompile(`^conformance-auto-(v\d+\.\d+\.\d+)-kubelet-(v\d+\.\d+\.\d+)((?:-[A-Za-z0-9]+-(?:true|false))*)\.md$`)
	skewGateRe = regexp.MustCompile(`-([A-Za-z0-9]+)-(true|false)`)
)

// readSkews reads every version-skew auto run in docs, by API server and
// then kubelet release.
func readSkews(docs string) ([]*autoRun, error) {
	paths, err := filepath.Glob(filepath.Join(docs, "conformance-auto-v*-kubelet-v*.md"))
	if err != nil {
		return nil, err
	}
	var runs []*autoRun
	for _, p := range paths {
		m := skewFileRe.FindStringSubmatch(filepath.Base(p))
		if m == nil {
			return nil, fmt.Errorf("%s: not conformance-auto-<API server>-kubelet-<kubelet>.md", p)
		}
		r, err := readAuto(p)
		if err != nil {
			return nil, err
		}
		r.apiVersion, r.kubeletVersion = m[1], m[2]
		for _, g := range skewGateRe.FindAllStringSubmatch(m[3], -1) {
			r.kubeletGates = append(r.kubeletGates, g[1]+"="+g[2])
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool {
		a, b := runs[i], runs[j]
		if a.apiVersion != b.apiVersion {
			return version.MustParseGeneric(a.apiVersion).LessThan(version.MustParseGeneric(b.apiVersion))
		}
		if a.kubeletVersion != b.kubeletVersion {
			return version.MustParseGeneric(a.kubeletVersion).LessThan(version.MustParseGeneric(b.kubeletVersion))
		}
		return a.file < b.file
	})
	return runs, nil
}

// readReleases reads every per-release file in docs, oldest release first.
func readReleases(docs string) ([]*releaseRun, error) {
	paths, err := filepath.Glob(filepath.Join(docs, "conformance-v*.md"))
	if err != nil {
		return nil, err
	}
	var runs []*releaseRun
	for _, p := range paths {
		r, err := readRelease(p)
		if err != nil {
			return nil, err
		}
		if want := "conformance-" + r.version + ".md"; r.file != want {
			return nil, fmt.Errorf("%s reports Kubernetes %s (expected in %s)", p, r.version, want)
		}
		if a := autoFile(docs, r.version); fileExists(a) {
			if r.autoRun, err = readAuto(a); err != nil {
				return nil, err
			}
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool {
		return version.MustParseGeneric(runs[i].version).LessThan(version.MustParseGeneric(runs[j].version))
	})
	if len(runs) == 0 {
		return nil, fmt.Errorf("no docs/conformance-v*.md in %s", docs)
	}
	return runs, nil
}

// matrixCell compares one outcome of a release with ref, the newest
// release's native outcome of scenario s.
func matrixCell(s scenario, row releaseRow, have, sup bool, ref string) string {
	if !have {
		return "– (row added after this run)"
	}
	outcome := row.native
	if sup {
		outcome = row.supervised
	}
	switch {
	case outcome == "n/a":
		return "n/a"
	case strings.HasPrefix(outcome, "error: ") || outcome == "not run":
		return "**failed**: " + outcome
	case outcome == ref:
		return "same"
	case sup && s.limitation != "" && outcome == s.want[supervised]:
		return "limitation: " + outcome
	}
	return "**differs**: " + outcome
}

// autoCell compares an auto run's outcome with ref and says what auto chose.
func autoCell(s scenario, run *autoRun, ref string) string {
	if run == nil {
		return "not run"
	}
	row, ok := run.rows[s.name]
	if !ok {
		return "– (row added after this run)"
	}
	switch {
	case strings.HasPrefix(row.outcome, "error: ") || row.outcome == "not run":
		return "**failed**: " + row.outcome
	case row.outcome == ref:
		return "same (" + row.choice + ")"
	case s.limitation != "" && row.outcome == s.want[supervised] && row.choice != "native":
		return "limitation (" + row.choice + "): " + row.outcome
	}
	return "**differs** (" + row.choice + "): " + row.outcome
}

// cellKinds are the kinds of matrix cell, in the order the counts list them.
var cellKinds = []string{"same", "limitation", "differs", "failed", "n/a", "not run", "– (row added after this run)"}

// cellKind is the kind of a matrix cell: the kind its text starts with.
func cellKind(c string) string {
	c = strings.TrimLeft(c, "*")
	for _, k := range cellKinds {
		if strings.HasPrefix(c, k) {
			return k
		}
	}
	return c
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// renderMatrix writes docs/conformance.md's text from runs.
func renderMatrix(runs []*releaseRun, skews []*autoRun, upstream []upstreamRun) string {
	newest := runs[len(runs)-1]
	var b strings.Builder
	b.WriteString("# Conformance across Kubernetes releases: native vs supervised\n\n")
	b.WriteString("Generated by test/e2e from the per-release files below (`go test ./test/e2e/ -run TestConformance` writes a " +
		"release's file and this one; `go test ./test/e2e/ -run TestConformanceMatrix -update-matrix` rewrites this one alone); " +
		"do not edit by hand. How the releases are built and run, and what each run showed: [conformance-matrix.md](conformance-matrix.md).\n\n")
	if len(upstream) > 0 {
		// Written by TestUpstreamSpecs (upstream_test.go, `make upstream-e2e`).
		b.WriteString("## Upstream's e2e specs, run as written\n\n")
		b.WriteString("Upstream Kubernetes' own e2e specs for the restart rules and RestartAllContainers " +
			"(test/e2e/common/node/container_restart_policy.go), run as written on the same cluster, native and supervised, " +
			"spec by spec (`make upstream-e2e`); each release's file gives every spec, its failing assertion and why:\n\n")
		for _, u := range upstream {
			fmt.Fprintf(&b, "- [%[1]s](%[1]s): %[2]s\n", u.file, u.summary)
		}
		b.WriteString("\nNot run: the node e2e specs of test/e2e_node/restart_all_containers_test.go (\"kubelet restart during " +
			"cleanup\" and \"during startup\", Serial and Disruptive). They need the node e2e framework, which runs the kubelet " +
			"itself to stop and start it, and their first wait is for the pod condition AllContainersRestarting " +
			"(restart_all_containers_test.go:112-124 and :214-226, v1.37.2), which only a kubelet that knows the feature " +
			"sets (docs/pod-level.md, \"No pod condition\"). The rows RestartAllContainersKubeletRestartCleanup and " +
			"RestartAllContainersKubeletRestartStartup below restart the harness's kubelet at the same two moments.\n")
		b.WriteString("\n## The project's scenarios\n\n")
	}
	fmt.Fprintf(&b, "Every cell compares an outcome with the **newest release's native outcome** (Kubernetes %s, the "+
		"\"reference\" column): the behaviour the restart rules have upstream, which the supervisor gives older clusters. "+
		"\"same\" means the same final state and the same restarts; \"limitation\" a documented difference "+
		"(see the release's file); \"n/a\" a release without the feature natively. Native: the release's own kubelet "+
		"with its restart-rules gates on; supervised: the gates off and every pod through the restart-injector webhook "+
		"of deploy/ in `--native=auto`, which then wraps every pod with rules; auto: what a user of the release gets, "+
		"its default gates and the same webhook, which wraps a pod or leaves it to the kubelet for each feature the pod "+
		"uses (the cell says which: native, wrapped, or how many of the scenario's pods were wrapped; \"not run\": the "+
		"release has no auto run yet).\n\n", newest.version)
	b.WriteString("| Release | Per-release files | Run | What `--native=auto` chose: supervised run (gates off) | auto run (default gates) |\n|---|---|---|---|---|\n")
	for _, r := range runs {
		sup, files, when, def := r.auto, fmt.Sprintf("[%s](%s)", r.file, r.file), r.lastRun, "not run"
		if sup == "" {
			sup = "–"
		}
		if a := r.autoRun; a != nil {
			files += fmt.Sprintf(", [%s](%s)", a.file, a.file)
			when += ", " + a.lastRun
			def = a.concluded
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.version, files, when, sup, def)
	}
	b.WriteString("\n| Scenario | Reference: native outcome on " + newest.version + " |")
	for _, r := range runs {
		fmt.Fprintf(&b, " %[1]s native | %[1]s supervised | %[1]s auto |", r.version)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|---|---|", len(runs)) + "\n")
	counts := make([][3]map[string]int, len(runs))
	for _, s := range scenarios() {
		name := s.name
		ref, ok := newest.rows[name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s: %s | %s |", name, ref.desc, ref.native)
		for i, r := range runs {
			row, have := r.rows[name]
			cells := []string{
				matrixCell(s, row, have, false, ref.native),
				matrixCell(s, row, have, true, ref.native),
				autoCell(s, r.autoRun, ref.native),
			}
			for m, c := range cells {
				if counts[i][m] == nil {
					counts[i][m] = map[string]int{}
				}
				counts[i][m][cellKind(c)]++
				fmt.Fprintf(&b, " %s |", c)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\nPer column:\n\n")
	for i, r := range runs {
		for m, mode := range []string{"native", "supervised", "auto"} {
			var parts []string
			for _, k := range cellKinds {
				if n := counts[i][m][k]; n > 0 {
					parts = append(parts, fmt.Sprintf("%d %s", n, k))
				}
			}
			fmt.Fprintf(&b, "- %s %s: %s\n", r.version, mode, strings.Join(parts, ", "))
		}
	}
	if len(skews) > 0 {
		b.WriteString("\n## Version skew: an upgraded control plane over an older kubelet, or a kubelet with a gate off\n\n")
		b.WriteString("The auto run on a node not yet upgraded: the API server and controller manager of one release, the kubelet of an " +
			"older one, all at their default gates, every pod through the webhook in `--native=auto`, which must judge by the " +
			"kubelet; and on a node whose kubelet turns a feature off that the control plane keeps, which `--native=auto` must judge " +
			"by the features the node declares. Each row's outcome against the reference column above, and what auto chose for its pods:\n\n")
		b.WriteString("| Control plane | Kubelet | File | Run | `--native=auto` concluded | Outcomes | Choices |\n|---|---|---|---|---|---|---|\n")
		for _, r := range skews {
			kinds, choices := map[string]int{}, map[string]int{}
			for _, sc := range scenarios() {
				ref, ok := newest.rows[sc.name]
				if !ok {
					continue
				}
				c := autoCell(sc, r, ref.native)
				kinds[cellKind(c)]++
				if row, ok := r.rows[sc.name]; ok {
					choices[row.choice]++
				}
			}
			var outcomes, chose []string
			for _, k := range cellKinds {
				if n := kinds[k]; n > 0 {
					outcomes = append(outcomes, fmt.Sprintf("%d %s", n, k))
				}
			}
			names := make([]string, 0, len(choices))
			for k := range choices {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				chose = append(chose, fmt.Sprintf("%s %d", k, choices[k]))
			}
			kubelet := r.kubeletVersion
			if len(r.kubeletGates) > 0 {
				kubelet += ", " + strings.Join(r.kubeletGates, ", ")
			}
			fmt.Fprintf(&b, "| %s | %s | [%s](%s) | %s | %s | %s | %s |\n", r.apiVersion, kubelet, r.file, r.file,
				r.lastRun, r.concluded, strings.Join(outcomes, ", "), strings.Join(chose, ", "))
		}
	}
	return b.String()
}

// writeMatrix rewrites docs/conformance.md from the per-release files.
func writeMatrix(docs string) error {
	runs, err := readReleases(docs)
	if err != nil {
		return err
	}
	skews, err := readSkews(docs)
	if err != nil {
		return err
	}
	upstream, err := upstreamFiles(docs)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(docs, "conformance.md"), []byte(renderMatrix(runs, skews, upstream)), 0o644)
}

// upstreamRun is one docs/upstream-e2e-<release>.md: its name and its
// pass counts, the file's bold summary line.
type upstreamRun struct{ file, summary string }

// upstreamFiles are the docs/upstream-e2e-<release>.md files, by release.
func upstreamFiles(docs string) ([]upstreamRun, error) {
	paths, err := filepath.Glob(filepath.Join(docs, "upstream-e2e-v*.md"))
	if err != nil {
		return nil, err
	}
	var runs []upstreamRun
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		u := upstreamRun{file: filepath.Base(p)}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "**v") && strings.HasSuffix(l, "**") {
				u.summary = strings.Trim(l, "*")
				break
			}
		}
		if u.summary == "" {
			return nil, fmt.Errorf("%s: no summary line (**vX.Y.Z: native …**)", u.file)
		}
		runs = append(runs, u)
	}
	sort.Slice(runs, func(i, j int) bool {
		a := strings.TrimSuffix(strings.TrimPrefix(runs[i].file, "upstream-e2e-"), ".md")
		b := strings.TrimSuffix(strings.TrimPrefix(runs[j].file, "upstream-e2e-"), ".md")
		return version.MustParseGeneric(a).LessThan(version.MustParseGeneric(b))
	})
	return runs, nil
}

// TestConformanceMatrix checks that docs/conformance.md is the matrix of
// the per-release files as they are (no cluster: it reads files only).
func TestConformanceMatrix(t *testing.T) {
	docs := filepath.Join(repoRoot(t), "docs")
	if *updateMatrix {
		if err := writeMatrix(docs); err != nil {
			t.Fatal(err)
		}
		return
	}
	runs, err := readReleases(docs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if len(r.rows) < 10 {
			t.Errorf("%s: only %d rows read", r.file, len(r.rows))
		}
	}
	have, err := os.ReadFile(filepath.Join(docs, "conformance.md"))
	if err != nil {
		t.Fatal(err)
	}
	skews, err := readSkews(docs)
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := upstreamFiles(docs)
	if err != nil {
		t.Fatal(err)
	}
	if want := renderMatrix(runs, skews, upstream); string(have) != want {
		t.Fatalf("docs/conformance.md is not the matrix of the per-release files; rewrite it with " +
			"go test ./test/e2e/ -run TestConformanceMatrix -update-matrix")
	}
}
