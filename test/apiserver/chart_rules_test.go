package apiserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// promRule is one rule of the chart's PrometheusRule.
type promRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// renderRules renders the chart's PrometheusRule with values (a YAML
// document) under release ri in namespace ml-infra, and returns its rules
// by alert name.
func renderRules(t *testing.T, h helmRunner, values string) (map[string]promRule, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	must(t, os.WriteFile(file, []byte(values), 0o600))
	out, err := h.run("template", "ri", chartDir(t), "-n", "ml-infra", "-f", file, "--show-only", "templates/monitoring.yaml")
	if err != nil {
		return nil, err
	}
	var obj struct {
		Spec struct {
			Groups []struct {
				Rules []promRule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &obj); err != nil {
		t.Fatalf("the PrometheusRule: %v\n%s", err, out)
	}
	rules := map[string]promRule{}
	for _, g := range obj.Spec.Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = r
		}
	}
	return rules, nil
}

// TestChartPrometheusRuleValues: the alerts as prometheusRule's values tune
// them, under a release name and namespace that are not deploy/'s: the
// webhook's and the agent's selectors name this release's objects, the
// cluster label joins every aggregation, alert labels and the runbook base
// apply to every alert, and one alert is disabled, one retuned. Unknown
// alert names and a cluster label that is not a label name are refused
// with a line naming the value.
func TestChartPrometheusRuleValues(t *testing.T) {
	h := newHelm(t)
	defaults, err := renderRules(t, h, "prometheusRule: {enabled: true}\nnodeAgent: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(defaults) != 8 {
		t.Fatalf("%d alerts by default, want the file's 8", len(defaults))
	}
	for name, want := range map[string]string{
		"RestartInjectorDown":               `{namespace="ml-infra", deployment="ri-restart-injector"}`,
		"RestartSupervisorNodeAgentMissing": `{namespace="ml-infra-node-agent", daemonset="ri-restart-injector-node-agent"}`,
	} {
		if got := defaults[name].Expr; !strings.Contains(got, want) || strings.Contains(got, `"restart-supervisor`) {
			t.Errorf("%s: expr %q, want the release's selector %s", name, got, want)
		}
	}

	tuned, err := renderRules(t, h, `
prometheusRule:
  enabled: true
  clusterLabel: cluster
  alertLabels: {team: ml, severity: ignored}
  runbookBaseURL: https://runbooks.example/restart
  alerts:
    SupervisedContainerRestartingOften: {disabled: true}
    RestartSupervisorNodeAgentMissing: {for: 1h, severity: critical}
`)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tuned["SupervisedContainerRestartingOften"]; ok || len(tuned) != 7 {
		t.Errorf("alerts %v: want the 7 others, SupervisedContainerRestartingOften disabled", sortedKeys(tuned))
	}
	if r := tuned["RestartSupervisorNodeAgentMissing"]; r.For != "1h" || r.Labels["severity"] != "critical" {
		t.Errorf("RestartSupervisorNodeAgentMissing: for %q, severity %q; want 1h, critical", r.For, r.Labels["severity"])
	}
	for name, r := range tuned {
		if r.Labels["team"] != "ml" {
			t.Errorf("%s: labels %v, want team=ml", name, r.Labels)
		}
		if name != "RestartSupervisorNodeAgentMissing" && r.Labels["severity"] != defaults[name].Labels["severity"] {
			t.Errorf("%s: severity %q, want its own %q (a rule's labels win over alertLabels)", name, r.Labels["severity"], defaults[name].Labels["severity"])
		}
		if want := "https://runbooks.example/restart#" + strings.ToLower(name); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", name, r.Annotations["runbook_url"], want)
		}
		// Every aggregation keeps the cluster apart, and every one the
		// default had is still there.
		if n, m := strings.Count(r.Expr, "by (")+strings.Count(r.Expr, "on ("), strings.Count(r.Expr, "by (cluster, ")+strings.Count(r.Expr, "on (cluster, "); n != m {
			t.Errorf("%s: %d of %d aggregations keep the cluster label: %s", name, m, n, r.Expr)
		}
		if strings.Count(defaults[name].Expr, "(") != strings.Count(r.Expr, "(") {
			t.Errorf("%s: expr changed shape: %q → %q", name, defaults[name].Expr, r.Expr)
		}
	}
	if !strings.Contains(tuned["RestartInjectorAdmissionErrors"].Expr, "sum by (cluster, namespace)") {
		t.Errorf("RestartInjectorAdmissionErrors: %s, want sum by (cluster, namespace)", tuned["RestartInjectorAdmissionErrors"].Expr)
	}

	for _, bad := range []struct{ values, want string }{
		{"prometheusRule: {enabled: true, alerts: {RestartInjectorDwn: {disabled: true}}}", "prometheusRule.alerts.RestartInjectorDwn: no such alert"},
		// A label name only: anything else would be written into every
		// expression.
		{`prometheusRule: {enabled: true, clusterLabel: "x) or vector(1"}`, "clusterLabel"},
		{"prometheusRule: {enabled: true, alerts: {RestartInjectorDown: {for: soon}}}", "for"},
		{"prometheusRule: {enabled: true, alerts: {RestartInjectorDown: {forr: 1h}}}", "forr"},
	} {
		_, err := renderRules(t, h, bad.values)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("values %s: %v, want a refusal naming %q", bad.values, err, bad.want)
		}
	}
}
