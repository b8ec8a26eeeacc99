package nodeagent

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// StatusRow is one supervised container as the agent's Events tell it.
type StatusRow struct {
	Namespace, Pod string
	Restart
	PodRestarts uint64
	Last        time.Time
}

// ReadStatus lists the RestartedInPlace and PodRestartedInPlace Events in
// namespace ("" for all) for pod ("" for every pod), and returns one row
// per container, from its newest Event. Events live as long as the API
// server keeps them (--event-ttl, 1 h by default): a container whose last
// in-place restart is older has no row.
func ReadStatus(ctx context.Context, client kubernetes.Interface, namespace, pod string) ([]StatusRow, error) {
	list := func(reason string) ([]corev1.Event, error) {
		sel := fields.Set{"reason": reason, "source": Component}
		if pod != "" {
			sel["involvedObject.name"] = pod
		}
		var out []corev1.Event
		opts := metav1.ListOptions{FieldSelector: fields.SelectorFromSet(sel).String(), Limit: 500}
		for {
			l, err := client.CoreV1().Events(namespace).List(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("list %s events: %w", reason, err)
			}
			out = append(out, l.Items...)
			if l.Continue == "" {
				return out, nil
			}
			opts.Continue = l.Continue
		}
	}
	restarts, err := list(ReasonRestarted)
	if err != nil {
		return nil, err
	}
	podRestarts, err := list(ReasonPodRestarted)
	if err != nil {
		return nil, err
	}
	type podKey struct{ ns, name string }
	gens := map[podKey]uint64{}
	for _, e := range podRestarts {
		var g uint64
		if _, err := fmt.Sscanf(strings.TrimPrefix(e.Message, combinedPrefix), podRestartFormat, &g); err == nil {
			k := podKey{e.InvolvedObject.Namespace, e.InvolvedObject.Name}
			gens[k] = max(gens[k], g)
		}
	}
	rows := map[[3]string]*StatusRow{}
	for _, e := range restarts {
		r, ok := ParseRestart(e.Message)
		if !ok {
			continue
		}
		last := eventTime(e)
		k := [3]string{e.InvolvedObject.Namespace, e.InvolvedObject.Name, r.Container}
		// Event times have a resolution of a second: on a tie, the
		// higher count is the later restart.
		if row := rows[k]; row != nil && (last.Before(row.Last) || last.Equal(row.Last) && r.Total <= row.Total) {
			continue
		}
		rows[k] = &StatusRow{Namespace: k[0], Pod: k[1], Restart: r, Last: last,
			PodRestarts: gens[podKey{k[0], k[1]}]}
	}
	out := make([]StatusRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		return a.Container < b.Container
	})
	return out, nil
}

func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// WriteStatus prints rows as a table, with a NAMESPACE column when
// allNamespaces.
func WriteStatus(w io.Writer, rows []StatusRow, allNamespaces bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	if allNamespaces {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "POD\tCONTAINER\tIN-PLACE RESTARTS\tLAST EXIT\tRULE\tBACK-OFF\tPOD RESTARTS\tLAST RESTART")
	for _, r := range rows {
		if allNamespaces {
			fmt.Fprintf(tw, "%s\t", r.Namespace)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s ago\n", r.Pod, r.Container, r.Total,
			strings.TrimPrefix(r.Exit, "exit code "), r.Rule, strings.TrimPrefix(r.Backoff, "back-off "),
			r.PodRestarts, now.Sub(r.Last).Round(time.Second))
	}
	return tw.Flush()
}
