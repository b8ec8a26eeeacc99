package nodeagent

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// collectorOf serves fixed samples through the agent's metric builder.
type collectorOf []sample

func (c collectorOf) Describe(ch chan<- *prometheus.Desc) { (&Agent{}).Describe(ch) }
func (c collectorOf) Collect(ch chan<- prometheus.Metric) {
	for _, m := range metricsOf(c) {
		ch <- m
	}
}

// TestMetricsOf gathers the series of two pods of one name (a StatefulSet's
// pod recreated: two UIDs) through a pedantic registry, which checks each
// series against its description: every series carries kube-state-metrics'
// namespace, pod and uid labels, so the two pods stay apart, and a pod's
// restarts are the largest its containers report.
func TestMetricsOf(t *testing.T) {
	exit := int32(137)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collectorOf{
		{namespace: "ml", pod: "trainer-0", uid: "uid-old", container: "worker", restarts: 5, podRestarts: 2, lastExit: &exit, lastReason: "Stalled"},
		{namespace: "ml", pod: "trainer-0", uid: "uid-old", container: "side", restarts: 0, podRestarts: 1},
		{namespace: "ml", pod: "trainer-0", uid: "uid-new", container: "worker", restarts: 1, inBackoff: true},
	})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var l []string
			for _, p := range m.GetLabel() {
				l = append(l, p.GetName()+"="+p.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got = append(got, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(l, ","), v))
		}
	}
	sort.Strings(got)
	want := []string{
		"restart_supervisor_container_in_backoff{container=side,namespace=ml,pod=trainer-0,uid=uid-old} 0",
		"restart_supervisor_container_in_backoff{container=worker,namespace=ml,pod=trainer-0,uid=uid-new} 1",
		"restart_supervisor_container_in_backoff{container=worker,namespace=ml,pod=trainer-0,uid=uid-old} 0",
		"restart_supervisor_container_last_exit_code{container=worker,namespace=ml,pod=trainer-0,uid=uid-old} 137",
		"restart_supervisor_container_last_exit_reason{container=worker,namespace=ml,pod=trainer-0,reason=Stalled,uid=uid-old} 1",
		"restart_supervisor_container_restarts_total{container=side,namespace=ml,pod=trainer-0,uid=uid-old} 0",
		"restart_supervisor_container_restarts_total{container=worker,namespace=ml,pod=trainer-0,uid=uid-new} 1",
		"restart_supervisor_container_restarts_total{container=worker,namespace=ml,pod=trainer-0,uid=uid-old} 5",
		"restart_supervisor_pod_restarts_total{namespace=ml,pod=trainer-0,uid=uid-new} 0",
		"restart_supervisor_pod_restarts_total{namespace=ml,pod=trainer-0,uid=uid-old} 2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDiffPodSampleUID: the samples of a scan carry the pod's UID.
func TestDiffPodSampleUID(t *testing.T) {
	d := diffPod(nil, podInfoOf(testPod(agentStart, "app"), agentStart), []Doc{doc(status("app", 1, 0, agentStart))}, agentStart)
	if len(d.samples) != 1 || d.samples[0].uid != "uid-1" {
		t.Errorf("samples %+v, want the pod's uid uid-1", d.samples)
	}
}
