// Package agentstatus owns the reader behind `restart-injector status`:
// the node agent's signed Events listed and watched into one row per
// container (status.go, StatusQuery), the GroupRestart objects as a table
// (groups.go), and the printers of both through kubectl's
// (print.go). It reads only what package agentapi defines and never links
// the agent's daemon.
package agentstatus

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// StatusRow is one supervised container as the agent's Events tell it.
type StatusRow struct {
	Namespace, Pod string
	UID            string // the pod's, as the Event names it
	Node           string // the node whose agent wrote the Event
	agentapi.Restart
	PodRestarts uint64
	Last        time.Time
	// signedTime: Last is the agent's signed time of the Event.
	signedTime bool
}

// ReadStatus lists the RestartedInPlace and PodRestartedInPlace Events in
// namespace ("" for all) for pod ("" for every pod), and returns one row
// per container, from its newest Event: StatusQuery.List without a label
// selector.
func ReadStatus(ctx context.Context, client kubernetes.Interface, agentNamespace, namespace, pod string) ([]StatusRow, error) {
	rows, _, err := (&StatusQuery{Client: client, AgentNamespace: agentNamespace, Namespace: namespace, Pod: pod}).List(ctx)
	return rows, err
}

// StatusQuery is what `restart-injector status` asks: the rows of one
// namespace (or all), one pod (or all), of the pods a label selector
// matches (or all).
//
// It reads the values the agent put in the Events' annotations
// (contract.EventAnnotationRestart), never their messages, and only from
// Events the agent can have made (trustedEvent): AgentNamespace is where
// the agent's pods are. Events live as long as the API server keeps them
// (--event-ttl, 1 h by default): a container whose last in-place restart
// is older has no row.
type StatusQuery struct {
	Client                    kubernetes.Interface
	AgentNamespace, Namespace string
	Pod                       string          // "" for every pod
	Selector                  labels.Selector // nil for every pod

	agents     map[string]bool
	keys       map[string][]ed25519.PublicKey // node → its agent's published keys
	agentsRead time.Time
	pods       map[types.UID]bool // by UID: whether the pod matches Selector
	listing    bool               // in List, where a pod the selector's list did not name is not selected
	gens       map[podKey]uint64
	rows       map[rowKey]*StatusRow
}

type podKey struct{ ns, name string }
type rowKey struct{ ns, pod, container string }

// agentRefresh bounds how often an Event from a node not known to run an
// agent makes the query list the agent's pods again (a watch only).
const agentRefresh = 10 * time.Second

// List returns the rows, sorted by namespace, pod and container, and the
// resourceVersion to watch Events from.
func (q *StatusQuery) List(ctx context.Context) ([]StatusRow, string, error) {
	if err := q.readAgents(ctx); err != nil {
		return nil, "", err
	}
	if err := q.readPods(ctx); err != nil {
		return nil, "", err
	}
	q.gens, q.rows = map[podKey]uint64{}, map[rowKey]*StatusRow{}
	q.listing = true
	defer func() { q.listing = false }()
	var rv string
	// Pod restarts first: a row carries its pod's generation.
	for _, reason := range []string{agentapi.ReasonPodRestarted, agentapi.ReasonRestarted} {
		sel := fields.Set{"reason": reason, "source": agentapi.Component}
		if q.Pod != "" {
			sel["involvedObject.name"] = q.Pod
		}
		opts := metav1.ListOptions{FieldSelector: fields.SelectorFromSet(sel).String(), Limit: 500}
		for {
			l, err := q.Client.CoreV1().Events(q.Namespace).List(ctx, opts)
			if err != nil {
				return nil, "", fmt.Errorf("list %s events: %w", reason, err)
			}
			for _, e := range l.Items {
				if trustedEvent(e, q.agents, q.keys) {
					q.add(ctx, e)
				}
			}
			if l.Continue == "" {
				rv = l.ResourceVersion
				break
			}
			opts.Continue = l.Continue
		}
	}
	q.dropReplacedPods(ctx)
	out := make([]StatusRow, 0, len(q.rows))
	for _, r := range q.rows {
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
	return out, rv, nil
}

// Watch follows the agent's Events from resourceVersion rv (List's) until
// ctx ends, and calls changed with every row that an Event changed: a
// container's newer restart, or a pod restart, which changes every row of
// its pod. A watch the API server ends is resumed from the last Event
// seen; one whose resourceVersion expired starts again with List, and only
// rows that differ from what was reported are passed on.
func (q *StatusQuery) Watch(ctx context.Context, rv string, changed func(StatusRow) error) error {
	sel := fields.Set{"source": agentapi.Component}
	if q.Pod != "" {
		sel["involvedObject.name"] = q.Pod
	}
	for ctx.Err() == nil {
		w, err := q.Client.CoreV1().Events(q.Namespace).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.SelectorFromSet(sel).String(), ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
				return fmt.Errorf("watch events: %w", err)
			}
			if rv, err = q.relist(ctx, changed); err != nil {
				return err
			}
			continue
		}
	events:
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Error:
				w.Stop()
				if st := apierrors.FromObject(ev.Object); apierrors.IsGone(st) || apierrors.IsResourceExpired(st) {
					// Watch again from the listing's resourceVersion,
					// not from the events still buffered.
					if rv, err = q.relist(ctx, changed); err != nil {
						return err
					}
					break events
				}
				return fmt.Errorf("watch events: %v", apierrors.FromObject(ev.Object))
			case watch.Bookmark, watch.Added, watch.Modified:
				e, ok := ev.Object.(*corev1.Event)
				if !ok {
					continue
				}
				rv = e.ResourceVersion
				if ev.Type == watch.Bookmark || e.Reason != agentapi.ReasonRestarted && e.Reason != agentapi.ReasonPodRestarted {
					continue
				}
				// An agent that started after the last read has a pod or
				// a key not read yet.
				trusted := trustedEvent(*e, q.agents, q.keys)
				if !trusted && time.Since(q.agentsRead) >= agentRefresh {
					if err := q.readAgents(ctx); err != nil {
						return err
					}
					trusted = trustedEvent(*e, q.agents, q.keys)
				}
				if !trusted {
					continue
				}
				for _, r := range q.add(ctx, *e) {
					if err := changed(r); err != nil {
						w.Stop()
						return err
					}
				}
			}
		}
		w.Stop()
	}
	return nil
}

// relist lists again after the watch's resourceVersion expired, and
// reports the rows that differ from the ones known before.
func (q *StatusQuery) relist(ctx context.Context, changed func(StatusRow) error) (string, error) {
	before := q.rows
	rows, rv, err := q.List(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range rows {
		if b := before[rowKey{r.Namespace, r.Pod, r.Container}]; b == nil || !sameRow(*b, r) {
			if err := changed(r); err != nil {
				return "", err
			}
		}
	}
	return rv, nil
}

func sameRow(a, b StatusRow) bool {
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	return string(aj) == string(bj)
}

// add takes one trusted Event into the rows and returns the rows it
// changed.
func (q *StatusQuery) add(ctx context.Context, e corev1.Event) []StatusRow {
	ns, name := e.InvolvedObject.Namespace, e.InvolvedObject.Name
	if !q.selected(ctx, e.InvolvedObject) {
		return nil
	}
	pk := podKey{ns, name}
	switch e.Reason {
	case agentapi.ReasonPodRestarted:
		v := e.Annotations[contract.EventAnnotationPodRestart]
		g, err := strconv.ParseUint(v, 10, 64)
		if err != nil || len(v) > 20 || g <= q.gens[pk] {
			return nil
		}
		q.gens[pk] = g
		var out []StatusRow
		for k, r := range q.rows {
			if k.ns == ns && k.pod == name {
				r.PodRestarts = g
				out = append(out, *r)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Container < out[j].Container })
		return out
	case agentapi.ReasonRestarted:
		r, ok := restartFromEvent(e)
		if !ok {
			return nil
		}
		last, signed := signedEventTime(e)
		k := rowKey{ns, name, r.Container}
		// The signed time orders a container's Events (an Event's own
		// timestamps are whatever its copier wrote); an Event of an agent
		// from before it signed its times comes before every signed one.
		// On a tie, the higher count is the later restart.
		if row := q.rows[k]; row != nil && (row.signedTime && !signed || signed == row.signedTime &&
			(last.Before(row.Last) || last.Equal(row.Last) && r.Total <= row.Total)) {
			return nil
		}
		row := &StatusRow{Namespace: ns, Pod: name, UID: string(e.InvolvedObject.UID), Node: agentapi.Clean(e.Source.Host),
			Restart: r, Last: last, PodRestarts: q.gens[pk], signedTime: signed}
		q.rows[k] = row
		return []StatusRow{*row}
	}
	return nil
}

// dropReplacedPods drops the rows whose pod has been replaced by another
// of the same name (a new UID): their Events tell the old pod's restarts,
// not the live one's. A pod that no longer exists keeps its rows (its
// history, while its Events last). Without the right to read pods the
// rows stay as they are.
func (q *StatusQuery) dropReplacedPods(ctx context.Context) {
	if len(q.rows) == 0 {
		return
	}
	live := map[podKey]types.UID{}
	opts := metav1.ListOptions{Limit: 500}
	if q.Pod != "" {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", q.Pod).String()
	}
	for {
		l, err := q.Client.CoreV1().Pods(q.Namespace).List(ctx, opts)
		if err != nil {
			return
		}
		for _, p := range l.Items {
			live[podKey{p.Namespace, p.Name}] = p.UID
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	for k, r := range q.rows {
		if uid, ok := live[podKey{k.ns, k.pod}]; ok && string(uid) != r.UID {
			delete(q.rows, k)
		}
	}
}

// readAgents lists the nodes that run a node agent pod, and their agents'
// keys.
func (q *StatusQuery) readAgents(ctx context.Context) error {
	agents, err := agentNodes(ctx, q.Client, q.AgentNamespace)
	if err != nil {
		return err
	}
	keys, err := agentapi.AgentKeys(ctx, q.Client, q.AgentNamespace)
	if err != nil {
		return err
	}
	q.agents, q.keys, q.agentsRead = agents, keys, time.Now()
	return nil
}

// readPods lists the pods Selector matches, by UID.
func (q *StatusQuery) readPods(ctx context.Context) error {
	if q.Selector == nil {
		return nil
	}
	q.pods = map[types.UID]bool{}
	opts := metav1.ListOptions{LabelSelector: q.Selector.String(), Limit: 500}
	for {
		l, err := q.Client.CoreV1().Pods(q.Namespace).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list pods matching %s: %w", q.Selector, err)
		}
		for _, p := range l.Items {
			q.pods[p.UID] = true
		}
		if l.Continue == "" {
			return nil
		}
		opts.Continue = l.Continue
	}
}

// selected reports whether the Event's pod matches Selector. A pod first
// seen in a watch is read once; a pod that no longer exists matches no
// selector.
func (q *StatusQuery) selected(ctx context.Context, o corev1.ObjectReference) bool {
	if q.Selector == nil {
		return true
	}
	if m, ok := q.pods[o.UID]; ok || q.listing {
		return m
	}
	p, err := q.Client.CoreV1().Pods(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	m := !q.listing && err == nil && p.UID == o.UID && q.Selector.Matches(labels.Set(p.Labels))
	if len(q.pods) < maxSelectedPods {
		q.pods[o.UID] = m
	}
	return m
}

// maxSelectedPods bounds the memory of the selector's answers in a long
// watch.
const maxSelectedPods = 100000

// restartFromEvent decodes the structured values of a RestartedInPlace
// Event. The container must be the one the Event is about.
func restartFromEvent(e corev1.Event) (agentapi.Restart, bool) {
	var r agentapi.Restart
	v := e.Annotations[contract.EventAnnotationRestart]
	if v == "" || len(v) > agentapi.MaxAnnotation || json.Unmarshal([]byte(v), &r) != nil {
		return r, false
	}
	if r.Container == "" || e.InvolvedObject.FieldPath != "spec.containers{"+r.Container+"}" {
		return r, false
	}
	return r, true
}

// AgentNodes is the set of nodes that run a node agent pod (in
// agentNamespace, label agentapi.AgentLabel), for restart-injector check.
func AgentNodes(ctx context.Context, client kubernetes.Interface, agentNamespace string) (map[string]bool, error) {
	return agentNodes(ctx, client, agentNamespace)
}

// agentNodes maps each node that runs a node agent pod (agentNamespace,
// label agentapi.AgentLabel) to it.
func agentNodes(ctx context.Context, client kubernetes.Interface, agentNamespace string) (map[string]bool, error) {
	nodes := map[string]bool{}
	opts := metav1.ListOptions{LabelSelector: agentapi.AgentLabel, Limit: 500}
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

// trustedEvent reports whether e is the node agent's: its source and
// reportingController are the agent's component, its reportingInstance is
// its source host, that node runs a node agent pod, and one of the keys
// its agents published verifies the Event's signature (signing.go). An
// Event names its writer nowhere the API server checks; the signature is
// what whoever may create Events in a namespace (the default edit role
// may) cannot copy onto another pod, container or count
// (docs/observability.md, "Who can forge a row").
func trustedEvent(e corev1.Event, agentNodes map[string]bool, keys map[string][]ed25519.PublicKey) bool {
	return e.Source.Component == agentapi.Component && e.ReportingController == agentapi.Component &&
		e.Source.Host != "" && e.ReportingInstance == e.Source.Host && agentNodes[e.Source.Host] &&
		agentapi.SignedByOneOf(e, keys[e.Source.Host])
}

// signedEventTime is the time the agent signed into e
// (contract.EventAnnotationTime), and true; else eventTime(e), and false.
func signedEventTime(e corev1.Event) (time.Time, bool) {
	if v := e.Annotations[contract.EventAnnotationTime]; v != "" && len(v) <= 64 {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t, true
		}
	}
	return eventTime(e), false
}

func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}
