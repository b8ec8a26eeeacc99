// Package rules_test checks the monitoring that ships beside the chart:
// the Grafana dashboard's queries against the metrics the code exports
// (and, with PROMTOOL set, against promtool's parser); the alerts' own unit
// tests are prometheus-rules_test.yaml, run by `make rules-test`.
package rules_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const dashboard = "../../charts/restart-injector/files/grafana-dashboard.json"

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

type board struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// exprs are the dashboard's queries, each with its panel's title.
func exprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d board
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: Grafana needs both to keep one dashboard across reloads", d.UID, d.Title)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	if !vars["datasource"] {
		t.Error("no datasource variable: the dashboard would be tied to one Prometheus")
	}
	out := map[string]string{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for i, tg := range p.Targets {
				if tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q query %d: datasource %q, want the ${datasource} variable", p.Title, i, tg.Datasource.UID)
				}
				out[fmt.Sprintf("%s #%d", p.Title, i)] = tg.Expr
			}
		}
	}
	walk(d.Panels)
	return out
}

var (
	metricName = regexp.MustCompile(`\brestart_(?:supervisor|injector)_[a-z_]+`)
	// exported are the metric names the node agent and the webhook
	// register: the string literals of their non-test sources.
	exportedDirs = []string{"../../nodeagent", "../../webhook"}
)

func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, dir := range exportedDirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range regexp.MustCompile(`"(restart_(?:supervisor|injector)_[a-z_]+)"`).FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = true
			}
		}
	}
	if len(names) < 5 {
		t.Fatalf("found only %d exported metric names in %v", len(names), exportedDirs)
	}
	return names
}

// TestDashboardQueriesNameExportedMetrics: every series a panel queries is
// one the node agent or the webhook exports (a histogram's _bucket, _sum
// and _count of an exported histogram), and every exported metric has a
// panel: a renamed metric would leave a panel empty without an error.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	used := map[string]bool{}
	for where, e := range exprs(t) {
		names := metricName.FindAllString(e, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no restart-supervisor metric", where, e)
		}
		for _, n := range names {
			base := n
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if strings.HasSuffix(n, suf) && exported[strings.TrimSuffix(n, suf)] {
					base = strings.TrimSuffix(n, suf)
				}
			}
			if !exported[base] {
				t.Errorf("%s: %s is not a metric the node agent or the webhook exports", where, n)
			}
			used[base] = true
		}
	}
	var unused []string
	for n := range exported {
		if !used[n] {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("exported metrics without a panel: %v", unused)
	}
}

// TestDashboardQueriesParse: with PROMTOOL set (`make rules-test`), every
// query, its Grafana variables given values, goes through promtool's own
// parser as a recording rule.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Skip("PROMTOOL is not set: make rules-test builds promtool and sets it")
	}
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*")
	var b strings.Builder
	b.WriteString("groups:\n- name: dashboard\n  rules:\n")
	keys := make([]string, 0)
	all := exprs(t)
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		q, _ := json.Marshal(grafana.Replace(all[k]))
		fmt.Fprintf(&b, "  - record: dashboard:query_%d\n    expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, b.String())
	}
	t.Logf("promtool: %s", strings.TrimSpace(string(out)))
}
