package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
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

// groupHost is what the group loop needs of the agent around it: its
// node, its node's pods, the kubelet's pods directory, the group's
// members in the API, and where Events, refused files and the metrics'
// samples go. *Agent is one; the loop holds nothing else of it.
type groupHost interface {
	node() string
	nodePods() []*corev1.Pod
	podsDir() string
	listPods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error)
	recordGroupEvent(ref *corev1.ObjectReference, msg string, ann map[string]string)
	logRefused(errs []error)
	setGroupSamples(samples []groupSample)
}

// groups is the agent's group state, owned by groupLoop's goroutine.
type groups struct {
	host   groupHost
	log    *slog.Logger
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

// The agent as the group loop's host.

func (a *Agent) node() string    { return a.cfg.NodeName }
func (a *Agent) podsDir() string { return a.cfg.PodsDir }

func (a *Agent) nodePods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range a.pods.List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			out = append(out, pod)
		}
	}
	return out
}

func (a *Agent) listPods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error) {
	list, err := a.cfg.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (a *Agent) recordGroupEvent(ref *corev1.ObjectReference, msg string, ann map[string]string) {
	signed := a.signer.Sign(agentapi.ReasonGroupRestarted, ref, ann)
	a.sink.remember(ref, msg, signed)
	a.recorder.AnnotatedEventf(ref, signed, corev1.EventTypeWarning, agentapi.ReasonGroupRestarted, "%s", msg)
}

func (a *Agent) logRefused(errs []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.logErrors(errs)
}

func (a *Agent) setGroupSamples(samples []groupSample) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.groupSamples = samples
}

func (a *Agent) groupLoop(ctx context.Context) {
	w := newGroupWatches(a.cfg.Dynamic)
	defer w.stopAll()
	g := &groups{host: a, log: a.log, client: a.cfg.Dynamic, objects: w, watches: w, rounds: map[string]*groupRound{}, handled: map[string]string{}}
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
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodes": map[string]any{g.host.node(): rep}}})
			if _, err := g.client.Resource(agentapi.GroupResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				g.log.Warn("report group members gone", "group", id, "err", err)
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
	g.host.setGroupSamples(samples)
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
	root, err := unix.Open(g.host.podsDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(root)
	var out []localMember
	for _, pod := range g.host.nodePods() {
		if !agentapi.GroupMember(pod) {
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
// members of one group), reports their stop and releases them: the
// decisions are planRelease's and nodeReportOf's, pure; what is read and
// written here is their input and their outcome.
func (g *groups) carryOut(ctx context.Context, ms []localMember) {
	st, r, ok := g.currentRound(ctx, ms)
	if !ok {
		return
	}
	states := g.deliverAndRead(st, r, ms)
	rep := nodeReportOf(st.Generation, len(ms), states, r.released)
	if rep != r.reported {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodes": map[string]any{g.host.node(): rep}}})
		if _, err := g.client.Resource(agentapi.GroupResource).Namespace(st.Namespace).Patch(ctx, st.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			g.log.Warn("report group stop", "group", st.Namespace+"/"+st.Name, "err", err)
		} else {
			r.reported = rep
			st.Nodes[g.host.node()] = rep
		}
	}
	release, all := planRelease(st, r, states, time.Now(), GroupStopWait)
	for _, m := range ms {
		uid := string(m.pod.UID)
		if !slices.Contains(release, uid) {
			continue
		}
		if err := statevol.ReleaseGroup(m.dir, r.podGen[uid]); err != nil {
			g.log.Warn("release group round", "pod", m.pod.Namespace+"/"+m.pod.Name, "err", err)
			continue
		}
		r.released[uid] = true
		if !all {
			g.log.Warn("group restart: not every pod of the group stopped within the bound; releasing this node's", "group", st.Key, "generation", st.Generation, "waited", GroupStopWait)
		}
	}
}

// currentRound is the group's current generation, from the watched copy
// of its object, and this node's round of it (begun here when new: its
// delivery time, the members expected per node).
func (g *groups) currentRound(ctx context.Context, ms []localMember) (agentapi.GroupState, *groupRound, bool) {
	id := ms[0].pod.Namespace + "/" + agentapi.GroupObjectName(ms[0].key)
	obj, exists, err := g.objects.GetByKey(id)
	if err != nil || !exists {
		return agentapi.GroupState{}, nil, false
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return agentapi.GroupState{}, nil, false
	}
	st := agentapi.GroupFromObject(u)
	if st.Generation == 0 || st.Key != ms[0].key {
		return st, nil, false
	}
	r := g.rounds[id]
	if r == nil || r.generation != st.Generation {
		r = &groupRound{generation: st.Generation, delivered: time.Now(), podGen: map[string]uint64{}, released: map[string]bool{}, deliveryFailed: map[string]bool{}}
		r.expected = g.expectedMembers(ctx, ms[0])
		g.rounds[id] = r
	}
	return st, r, true
}

// memberState is what one member's volume says of the round, as a step
// read it: the pod generation that carries the round (0 when it has not
// reached the pod), whether the pod's members have stopped for it, and
// whether they have started again.
type memberState struct {
	uid              string
	podGen           uint64
	stopped, started bool
}

// deliverAndRead delivers the round to each member it has not reached
// (statevol.DeliverGroup, exactly once per pod and generation; found
// again in the volume after an agent restart) and reads where each
// member is in it.
func (g *groups) deliverAndRead(st agentapi.GroupState, r *groupRound, ms []localMember) []memberState {
	var out []memberState
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
						g.log.Warn("deliver group restart; trying again at every step", "pod", m.pod.Namespace+"/"+m.pod.Name, "generation", st.Generation, "err", err)
					}
				} else {
					ok = true
				}
			}
			if ok {
				r.podGen[uid] = n
			}
		}
		state := memberState{uid: uid}
		if ok {
			// Not reached: a delivery failed, or a newer round reached
			// the pod already.
			state.podGen = n
			state.stopped = statevol.GroupStopped(m.dir, n)
			state.started = r.released[uid] && statevol.GroupStarted(m.dir, n)
		}
		out = append(out, state)
	}
	return out
}

// nodeReportOf is this node's report of round generation: its members,
// how many of those the round reached have stopped, and how many of the
// released ones have started again.
func nodeReportOf(generation uint64, members int, states []memberState, released map[string]bool) agentapi.NodeReport {
	rep := agentapi.NodeReport{Generation: generation, Members: members}
	for _, s := range states {
		if s.podGen == 0 {
			continue
		}
		if s.stopped {
			rep.Stopped++
		}
		if released[s.uid] && s.started {
			rep.Started++
		}
	}
	return rep
}

// planRelease says which of this node's members to release now, and
// whether every node has reported its members stopped (all): none until
// then, or until stopWait has passed since the round reached this node,
// after which the members the round reached are released stopped or not
// (a node agent that died, a node cut off); a member is released once.
func planRelease(st agentapi.GroupState, r *groupRound, states []memberState, now time.Time, stopWait time.Duration) (release []string, all bool) {
	all = allStopped(st, r.expected)
	late := now.Sub(r.delivered) > stopWait
	if !all && !late {
		return nil, all
	}
	for _, s := range states {
		if s.podGen == 0 || r.released[s.uid] || !s.stopped && !late {
			continue
		}
		release = append(release, s.uid)
	}
	return release, all
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
	pods, err := g.host.listPods(ctx, m.pod.Namespace, sel.AsSelector())
	if err != nil {
		g.log.Warn("list group members", "group", m.key, "err", err)
		out[g.host.node()] = 1
		return out
	}
	for i := range pods {
		p := &pods[i]
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
