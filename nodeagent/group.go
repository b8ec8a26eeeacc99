package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// Group restarts (the RestartGroup action; docs/gang.md). A group is the
// pods of one namespace that share the labels of the first groupLabels
// entry a pod has all of. Its state is one GroupRestart object in that
// namespace (agentapi.GroupResource), named from the group: the generation, the
// budget, the last cause, and each node agent's report of its node's
// members for the current generation. Every agent
//
//   - takes in the requests its node's members write into their state
//     volumes and turns each into the next generation of the object, by
//     an update conditioned on the resourceVersion, so that of several
//     ranks failing at once exactly one generation results;
//   - delivers each new generation to its node's members as a pod
//     restart (statevol.DeliverGroup);
//   - reports how many of its node's members have stopped for it, in its
//     own key of spec.nodes (a merge patch: agents never overwrite each
//     other);
//   - releases its members once every node with members of the group has
//     reported all of them stopped, or after GroupStopWait.
//
// The supervisor stays free of network code: everything in the API is
// done here. The group's object and a pod's group: groupobject.go; the
// requests: grouprequest.go; the watches of the objects: groupwatch.go.

// groupRound is one group generation as this agent carries it out on its
// node.
type groupRound struct {
	generation uint64
	delivered  time.Time
	// podGen is the pod generation that carries it, per local pod UID.
	podGen map[string]uint64
	// released: per local pod UID.
	released map[string]bool
	// deliveryFailed: per local pod UID, the delivery failed and was
	// logged in this round.
	deliveryFailed map[string]bool
	reported       agentapi.NodeReport
	// expected is the group's members per node, listed once when the
	// round began.
	expected map[string]int
}

// groups is the agent's group state, owned by groupLoop's goroutine.
type groups struct {
	a      *Agent
	client dynamic.Interface
	// objects is the watched copy of the GroupRestart objects of the
	// groups with members on this node: watches (groupwatch.go).
	objects interface {
		GetByKey(key string) (any, bool, error)
	}
	watches *groupWatches
	// rounds by namespace/name of the object.
	rounds map[string]*groupRound
	// handled is the last request ID taken in, by pod UID/container.
	handled map[string]string
}

// groupSample is one group with members on this node, for the metrics.
type groupSample struct {
	namespace, group string
	generation       uint64
}

// GroupStopWait bounds the wait for every pod of a group to stop before
// the members on this node are released all the same: a node agent that
// died, a node cut off. The supervisors' own bound is longer
// (statevol.GroupReleaseWait).
var GroupStopWait = 30 * time.Second

func (a *Agent) groupLoop(ctx context.Context) {
	w := newGroupWatches(a.cfg.Dynamic)
	defer w.stopAll()
	g := &groups{a: a, client: a.cfg.Dynamic, objects: w, watches: w, rounds: map[string]*groupRound{}, handled: map[string]string{}}
	t := time.NewTicker(a.cfg.GroupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.step(ctx)
		}
	}
}

// localMember is one of this node's group members.
type localMember struct {
	pod *corev1.Pod
	key string
	dir string
	fd  int
}

// step is one look at this node's group members: their requests, the
// groups' objects, deliveries, reports and releases.
func (g *groups) step(ctx context.Context) {
	members := g.localMembers()
	defer func() {
		for _, m := range members {
			unix.Close(m.fd)
		}
	}()
	byGroup := map[string][]localMember{}
	for _, m := range members {
		id := m.pod.Namespace + "/" + agentapi.GroupObjectName(m.key)
		byGroup[id] = append(byGroup[id], m)
	}
	g.forgetHandled(members)
	watched := map[string]bool{}
	for id := range byGroup {
		watched[id] = true
	}
	for id := range g.rounds {
		watched[id] = true // until its node report says the members left
	}
	g.watches.keep(ctx, watched)
	spent := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(byGroup)) {
		ms := byGroup[id]
		for _, m := range ms {
			g.takeRequests(ctx, m, spent)
		}
		g.carryOut(ctx, ms)
	}
	for id, r := range g.rounds {
		if _, ok := byGroup[id]; ok {
			continue
		}
		// Every member of the group on this node has left the round
		// (its pod is being deleted or has finished): say so, or the
		// other nodes' agents would wait for this node's stop until
		// GroupStopWait.
		if r.reported.Members > 0 {
			ns, name, _ := strings.Cut(id, "/")
			rep := agentapi.NodeReport{Generation: r.generation}
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodes": map[string]any{g.a.cfg.NodeName: rep}}})
			if _, err := g.client.Resource(agentapi.GroupResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				g.a.log.Warn("report group members gone", "group", id, "err", err)
				continue // again at the next step
			}
		}
		delete(g.rounds, id)
	}
	var samples []groupSample
	for id, ms := range byGroup {
		if obj, ok, _ := g.objects.GetByKey(id); ok {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				st := agentapi.GroupFromObject(u)
				samples = append(samples, groupSample{namespace: ms[0].pod.Namespace, group: ms[0].key, generation: st.Generation})
			}
		}
	}
	g.a.mu.Lock()
	g.a.groupSamples = samples
	g.a.mu.Unlock()
}

// forgetHandled drops the requests remembered for pods that are no longer
// this node's group members (deleted, finished, moved): the record would
// otherwise grow with every pod the node ever ran.
func (g *groups) forgetHandled(members []localMember) {
	live := make(map[string]bool, len(members))
	for _, m := range members {
		live[string(m.pod.UID)] = true
	}
	for hk := range g.handled {
		if uid, _, _ := strings.Cut(hk, "/"); !live[uid] {
			delete(g.handled, hk)
		}
	}
}

// localMembers returns this node's group members whose state volume is
// there, each with a descriptor of it opened without following a link.
func (g *groups) localMembers() []localMember {
	a := g.a
	root, err := unix.Open(a.cfg.PodsDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(root)
	var out []localMember
	for _, obj := range a.pods.List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !agentapi.GroupMember(pod) {
			continue
		}
		key, _, _ := agentapi.GroupOf(pod)
		fd, err := openDirBeneath(root, append([]string{string(pod.UID)}, statePath...))
		if err != nil {
			continue // not started yet, or no state volume
		}
		out = append(out, localMember{pod: pod, key: key, fd: fd, dir: fmt.Sprintf("/proc/self/fd/%d", fd)})
	}
	return out
}

// statePath is a pod's state volume below its directory.
var statePath = statusPath[:len(statusPath)-1]

const (
	// storeAsk: the copy does not settle it (no object yet, or its round
	// is over): the API server decides.
	storeAsk storeDecision = iota
	// storeUnderWay: a generation newer than the one the request saw is
	// under way; the request is answered by it.
	storeUnderWay
	// storeRoundOn: the current round is not over; the request waits.
	storeRoundOn
	// storeRefused: the group's budget is spent.
	storeRefused
)

// carryOut delivers the group's current generation to ms (this node's
// members of one group), reports their stop and releases them.
func (g *groups) carryOut(ctx context.Context, ms []localMember) {
	ns, name := ms[0].pod.Namespace, agentapi.GroupObjectName(ms[0].key)
	id := ns + "/" + name
	obj, exists, err := g.objects.GetByKey(id)
	if err != nil || !exists {
		return
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	st := agentapi.GroupFromObject(u)
	if st.Generation == 0 || st.Key != ms[0].key {
		return
	}
	r := g.rounds[id]
	if r == nil || r.generation != st.Generation {
		r = &groupRound{generation: st.Generation, delivered: time.Now(), podGen: map[string]uint64{}, released: map[string]bool{}, deliveryFailed: map[string]bool{}}
		r.expected = g.expectedMembers(ctx, ms[0])
		g.rounds[id] = r
	}
	stopped, started := 0, 0
	for _, m := range ms {
		uid := string(m.pod.UID)
		n, ok := r.podGen[uid]
		if !ok {
			if prev, had := statevol.GroupRound(m.dir, st.Generation); had {
				n, ok = prev, true // delivered before this agent started
			} else if statevol.LastGroup(m.dir) < st.Generation {
				var err error
				n, _, err = statevol.DeliverGroup(m.dir, st.Cause)
				if err != nil {
					// Tried again at every step; said once a round, since a
					// pod can keep its own volume failing (a flooded
					// pod-restarts/, a full disk).
					if !r.deliveryFailed[uid] {
						r.deliveryFailed[uid] = true
						g.a.log.Warn("deliver group restart; trying again at every step", "pod", ns+"/"+m.pod.Name, "generation", st.Generation, "err", err)
					}
					continue
				}
				ok = true
			}
			if !ok {
				continue // a newer round reached it already
			}
			r.podGen[uid] = n
		}
		if statevol.GroupStopped(m.dir, n) {
			stopped++
		}
		if r.released[uid] && statevol.GroupStarted(m.dir, n) {
			started++
		}
	}
	rep := agentapi.NodeReport{Generation: st.Generation, Members: len(ms), Stopped: stopped, Started: started}
	if rep != r.reported {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodes": map[string]any{g.a.cfg.NodeName: rep}}})
		if _, err := g.client.Resource(agentapi.GroupResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			g.a.log.Warn("report group stop", "group", id, "err", err)
		} else {
			r.reported = rep
			st.Nodes[g.a.cfg.NodeName] = rep
		}
	}
	all := allStopped(st, r.expected)
	late := time.Since(r.delivered) > GroupStopWait
	if !all && !late {
		return
	}
	for _, m := range ms {
		uid := string(m.pod.UID)
		n, ok := r.podGen[uid]
		if !ok || r.released[uid] || !statevol.GroupStopped(m.dir, n) && !late {
			continue
		}
		if err := statevol.ReleaseGroup(m.dir, n); err != nil {
			g.a.log.Warn("release group round", "pod", ns+"/"+m.pod.Name, "err", err)
			continue
		}
		r.released[uid] = true
		if !all {
			g.a.log.Warn("group restart: not every pod of the group stopped within the bound; releasing this node's", "group", st.Key, "generation", st.Generation, "waited", GroupStopWait)
		}
	}
}

// allStopped reports whether every node with members of the group has
// reported all of them stopped for the current generation. A node's
// report counts the members it has now: fewer than expected when some
// left the round (a pod being deleted takes no pod-wide restart,
// KEP-4438), none when all of them did.
func allStopped(st agentapi.GroupState, expected map[string]int) bool {
	for node, want := range expected {
		rep, ok := st.Nodes[node]
		if !ok || rep.Generation != st.Generation || rep.Stopped < min(want, rep.Members) {
			return false
		}
	}
	return true
}

// expectedMembers lists the group's members in the API, per node, once per
// round: the nodes whose agents must report them stopped.
func (g *groups) expectedMembers(ctx context.Context, m localMember) map[string]int {
	_, sel, _ := agentapi.GroupOf(m.pod)
	out := map[string]int{}
	list, err := g.a.cfg.Client.CoreV1().Pods(m.pod.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		g.a.log.Warn("list group members", "group", m.key, "err", err)
		out[g.a.cfg.NodeName] = 1
		return out
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName == "" || !agentapi.GroupMember(p) {
			continue
		}
		if k, _, _ := agentapi.GroupOf(p); k != m.key {
			continue
		}
		out[p.Spec.NodeName]++
	}
	return out
}
