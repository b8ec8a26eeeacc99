package nodeagent

import (
	"context"
	"encoding/json"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// Coordinating a round (group.go): the agent that made a generation
// watches that group's reports, one per node, and decides the round's two
// steps once, each as one write of the group's object that every agent of
// the group sees as one change: released (every node with members
// reported them stopped: the barrier) and done (every node reported them
// started again: the next generation may come). It lists the group's
// members once per round, for the nodes that must report. An agent that
// restarts finds its rounds again in the objects (spec.coordinator); a
// coordinator that is gone for good leaves the round to the agents'
// GroupStopWait.

// coordination is the rounds this agent coordinates, by namespace/name of
// the group's object, and the watches of their reports.
type coordination struct {
	reports reportSource
	rounds  map[string]*coordRound
}

// reportSource holds the reports of the groups it is told to keep.
type reportSource interface {
	keep(ctx context.Context, ids map[string]bool)
	list(id string) []any
}

// coordRound is one generation this agent coordinates.
type coordRound struct {
	generation uint64
	// expected is the group's members per node, listed once when the
	// round began: the nodes that must report.
	expected map[string]int
	// looked is when the reports were last read whole (or the round
	// began), relist how long after it they are read again; sent, per
	// step, the resourceVersion of the copy whose decision was written.
	looked time.Time
	relist time.Duration
	sent   map[string]string
}

// coordinate carries each round this agent coordinates, among the groups
// ids it watches, one step further.
func (g *groups) coordinate(ctx context.Context, ids map[string]bool) {
	if g.coord == nil {
		return
	}
	now := time.Now()
	keep := map[string]bool{}
	for id := range ids {
		st, ok := g.objectState(id)
		if !ok || st.Coordinator != g.host.node() {
			delete(g.coord.rounds, id)
			continue
		}
		// The reports stay watched while this agent coordinates the
		// group, between rounds too: the rank that fails again is most
		// often the same one.
		keep[id] = true
		if agentapi.RoundOver(st, now, GroupStopWait) {
			delete(g.coord.rounds, id)
			continue
		}
		c := g.coord.rounds[id]
		if c == nil || c.generation != st.Generation {
			expected, err := g.expectedMembers(ctx, st)
			if err != nil {
				g.log.Warn("list group members", "group", st.Key, "err", err)
				continue // again at the next step
			}
			c = &coordRound{generation: st.Generation, expected: expected, looked: now, relist: ReportRelist, sent: map[string]string{}}
			g.coord.rounds[id] = c
		}
		reports := reportsFor(st.Generation, g.coord.reports.list(id))
		step := nextStep(st, c.expected, reports)
		if step == "" && now.Sub(c.looked) > c.relist {
			// The watch has not brought every report: one read of them
			// all, after ReportRelist, then after twice as long each
			// time (a few lists a round at most). The first watch of
			// the reports after the API server started waits for its
			// watch cache: changes made meanwhile came 2 s late
			// (v1.34.4, a fresh server); a watch cut by an outage misses
			// them until it is back.
			c.looked = now
			list, err := g.client.Resource(agentapi.ReportResource).Namespace(st.Namespace).List(ctx,
				metav1.ListOptions{LabelSelector: labels.Set{agentapi.LabelReportOf: st.Name}.String()})
			if err == nil {
				// Not doubled while the server does not answer: the
				// first read once it is back comes within ReportRelist.
				c.relist *= 2
				items := make([]any, 0, len(list.Items))
				for i := range list.Items {
					items = append(items, &list.Items[i])
				}
				reports = reportsFor(st.Generation, items)
				step = nextStep(st, c.expected, reports)
			}
		}
		// Written once per step and copy of the object: the watch brings
		// the write back before the next decision.
		if rv, sent := c.sent[step]; step == "" || sent && rv == st.ResourceVersion {
			continue
		}
		spec := map[string]any{step: int64(st.Generation)}
		if step == "released" {
			members := 0
			for _, rep := range reports {
				members += rep.Members
			}
			spec["members"] = int64(members)
		}
		// Conditioned on the copy the decision read: a stale
		// coordinator never moves a newer round.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": st.ResourceVersion}, "spec": spec})
		_, err := g.client.Resource(agentapi.GroupResource).Namespace(st.Namespace).Patch(ctx, st.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			c.sent[step] = st.ResourceVersion
		case !apierrors.IsConflict(err):
			g.log.Warn("group round "+step, "group", st.Key, "generation", st.Generation, "err", err)
		}
	}
	g.coord.reports.keep(ctx, keep)
}

// ReportRelist is how long the coordinator waits on its watch of the
// reports before it reads them all once; it waits twice as long before
// each next read of the round. A node's report is about 400 bytes.
var ReportRelist = 300 * time.Millisecond

// reportsFor is the reports of generation among objs, by node.
func reportsFor(generation uint64, objs []any) map[string]agentapi.NodeReport {
	out := map[string]agentapi.NodeReport{}
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			if rep := agentapi.ReportFromObject(u); rep.Generation == generation {
				out[rep.Node] = rep
			}
		}
	}
	return out
}

// nextStep is the coordinator's decision on round st from the nodes'
// reports of it: "released" once every node expected to have members
// reported all it has stopped, "done" once released and every one
// reported all started again, "" while waiting. A node's report counts
// the members it has now: fewer than listed when some left the round (a
// pod being deleted takes no pod-wide restart, KEP-4438), none when all
// of them did.
func nextStep(st agentapi.GroupState, expected map[string]int, reports map[string]agentapi.NodeReport) string {
	all := func(count func(agentapi.NodeReport) int) bool {
		for node, want := range expected {
			rep, ok := reports[node]
			if !ok || count(rep) < min(want, rep.Members) {
				return false
			}
		}
		return true
	}
	switch {
	case st.Released < st.Generation:
		if all(func(r agentapi.NodeReport) int { return r.Stopped }) {
			return "released"
		}
	case st.Done < st.Generation:
		if all(func(r agentapi.NodeReport) int { return r.Started }) {
			return "done"
		}
	}
	return ""
}

// expectedMembers lists the group's members in the API, per node, once per
// round: the nodes whose agents must report them.
func (g *groups) expectedMembers(ctx context.Context, st agentapi.GroupState) (map[string]int, error) {
	sel, err := labels.ConvertSelectorToLabelsMap(st.Key)
	if err != nil {
		return nil, err
	}
	pods, err := g.host.listPods(ctx, st.Namespace, sel.AsSelector())
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || !agentapi.GroupMember(p) || joinedAfter(p, st) {
			continue
		}
		if k, _, _ := agentapi.GroupOf(p); k != st.Key {
			continue
		}
		out[p.Spec.NodeName]++
	}
	return out, nil
}
