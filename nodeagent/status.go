package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// StatusRow is one supervised container as the agent's Events tell it.
type StatusRow struct {
	Namespace, Pod string
	Restart
	PodRestarts uint64
	Last        time.Time
}

// AgentNamespace and AgentLabel find the node agent's pods, which
// ReadStatus checks the Events against.
const (
	AgentNamespace = "restart-supervisor-node-agent"
	AgentLabel     = "app.kubernetes.io/name=" + Component
)

// maxAnnotation bounds the structured value ReadStatus decodes: the agent
// writes under 300 bytes.
const maxAnnotation = 4 << 10

// ReadStatus lists the RestartedInPlace and PodRestartedInPlace Events in
// namespace ("" for all) for pod ("" for every pod), and returns one row
// per container, from its newest Event. It reads the values the agent put
// in the Events' annotations (contract.EventAnnotationRestart), never their
// messages, and only from Events the agent can have made (trustedEvent):
// agentNamespace is where the agent's pods are. Events live as long as the
// API server keeps them (--event-ttl, 1 h by default): a container whose
// last in-place restart is older has no row.
func ReadStatus(ctx context.Context, client kubernetes.Interface, agentNamespace, namespace, pod string) ([]StatusRow, error) {
	agents, err := agentNodes(ctx, client, agentNamespace)
	if err != nil {
		return nil, err
	}
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
			for _, e := range l.Items {
				if trustedEvent(e, agents) {
					out = append(out, e)
				}
			}
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
		v := e.Annotations[contract.EventAnnotationPodRestart]
		if g, err := strconv.ParseUint(v, 10, 64); err == nil && len(v) <= 20 {
			k := podKey{e.InvolvedObject.Namespace, e.InvolvedObject.Name}
			gens[k] = max(gens[k], g)
		}
	}
	rows := map[[3]string]*StatusRow{}
	for _, e := range restarts {
		r, ok := restartFromEvent(e)
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

// restartFromEvent decodes the structured values of a RestartedInPlace
// Event. The container must be the one the Event is about.
func restartFromEvent(e corev1.Event) (Restart, bool) {
	var r Restart
	v := e.Annotations[contract.EventAnnotationRestart]
	if v == "" || len(v) > maxAnnotation || json.Unmarshal([]byte(v), &r) != nil {
		return r, false
	}
	if r.Container == "" || e.InvolvedObject.FieldPath != "spec.containers{"+r.Container+"}" {
		return r, false
	}
	return r, true
}

// agentNodes maps each node that runs a node agent pod (agentNamespace,
// label AgentLabel) to it.
func agentNodes(ctx context.Context, client kubernetes.Interface, agentNamespace string) (map[string]bool, error) {
	nodes := map[string]bool{}
	opts := metav1.ListOptions{LabelSelector: AgentLabel, Limit: 500}
	for {
		l, err := client.CoreV1().Pods(agentNamespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list the node agent's pods in namespace %s (Events are trusted only from a node that runs one): %w", agentNamespace, err)
		}
		for _, p := range l.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				nodes[p.Spec.NodeName] = true
			}
		}
		if l.Continue == "" {
			return nodes, nil
		}
		opts.Continue = l.Continue
	}
}

// trustedEvent reports whether e can be the node agent's: its source and
// reportingController are the agent's component, its reportingInstance is
// its source host, and that node runs a node agent pod. An Event names its
// writer nowhere the API server checks, so this is as far as an Event can
// be checked: whoever may create Events in a namespace (the default edit
// role may) can still copy the agent's fields onto an Event about a pod of
// that namespace, naming a node that runs an agent (docs/observability.md,
// "Who can forge a row").
func trustedEvent(e corev1.Event, agentNodes map[string]bool) bool {
	return e.Source.Component == Component && e.ReportingController == Component &&
		e.Source.Host != "" && e.ReportingInstance == e.Source.Host && agentNodes[e.Source.Host]
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
			fmt.Fprintf(tw, "%s\t", clean(r.Namespace))
		}
		exit := "unknown"
		if r.ExitCode != nil {
			exit = strings.TrimPrefix(r.ExitText(), "exit code ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s ago\n", clean(r.Pod), clean(r.Container), r.Total,
			exit, r.RuleText(), strings.TrimPrefix(r.BackoffText(), "back-off "),
			r.PodRestarts, now.Sub(r.Last).Round(time.Second))
	}
	return tw.Flush()
}
