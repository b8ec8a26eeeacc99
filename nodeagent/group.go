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
// namespace (agentapi.GroupResource), named from the group: the generation,
// the budget, the last cause, the coordinator and how far the round has
// come; and one GroupRestartReport per node with members
// (agentapi.ReportResource), which only that node's agent writes. Every
// agent
//
//   - takes in the requests its node's members write into their state
//     volumes and turns each into the next generation of the object, by
//     an update conditioned on the resourceVersion, so that of several
//     ranks failing at once exactly one generation results; the agent
//     that makes it is the round's coordinator;
//   - delivers each new generation to its node's members as a pod
//     restart (statevol.DeliverGroup);
//   - reports its node's members in its own report object, once when all
//     of them have stopped and once when all have started again: writers
//     never conflict, and a round costs each node two writes;
//   - releases its members once the coordinator has marked the round
//     released, or after GroupStopWait.
//
// The coordinator (groupcoord.go) alone watches the group's reports, and
// marks the round released once every node with members has reported
// them stopped, then done once every one reported them started: one
// write each, one change for every agent to see. The supervisor stays
// free of network code: everything in the API is done here. The requests:
// grouprequest.go; the watches: groupwatch.go.

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
	// reported is the last report written for this generation.
	reported agentapi.NodeReport
	// sentStopped, sentStarted: the node's two reports of the round are
	// written.
	sentStopped, sentStarted bool
	// troubled: a write of this round failed; read: when the object was
	// last read by hand since (carryOut).
	troubled bool
	read     time.Time
}

// RereadAfterTrouble is how often an agent whose write of a round failed
// reads the group's object itself until the round's release: client-go
// retries a watch refused with "connection refused" after a growing
// back-off, up to about 8 s after a 10 s outage, and says nothing of it.
var RereadAfterTrouble = time.Second

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
	// coord is the rounds this agent coordinates (groupcoord.go).
	coord *coordination
	// reportMade: this node's report object of the group (namespace/name
	// of the GroupRestart) exists, so that a report is one patch.
	reportMade map[string]bool
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
	// A change of a watched object wakes the loop at once, so that a
	// generation, a release or a report costs no wait for the next tick;
	// the tick reads the members' files.
	kick := make(chan struct{}, 1)
	w := newGroupWatches(a.cfg.Dynamic, agentapi.GroupResource, byName, kick)
	defer w.stopAll()
	rw := newGroupWatches(a.cfg.Dynamic, agentapi.ReportResource, reportsOf, kick)
	defer rw.stopAll()
	g := newGroups(a, a.log, a.cfg.Dynamic, w, &coordination{reports: rw, rounds: map[string]*coordRound{}})
	t := time.NewTicker(a.cfg.GroupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.step(ctx)
		case <-kick:
			g.step(ctx)
		}
	}
}

func newGroups(host groupHost, log *slog.Logger, client dynamic.Interface, w *groupWatches, c *coordination) *groups {
	return &groups{host: host, log: log, client: client, objects: w, watches: w, rounds: map[string]*groupRound{},
		handled: map[string]string{}, coord: c, reportMade: map[string]bool{}}
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
		// coordinator would wait for this node's stop until
		// GroupStopWait.
		if r.reported.Members > 0 || !r.sentStopped {
			if st, ok := g.objectState(id); ok && st.Generation == r.generation {
				if err := g.writeReport(ctx, st, agentapi.NodeReport{Generation: r.generation}); err != nil && !apierrors.IsNotFound(err) {
					g.log.Warn("report group members gone", "group", id, "err", err)
					continue // again at the next step
				}
			}
		}
		delete(g.rounds, id)
		delete(g.reportMade, id)
	}
	g.coordinate(ctx, watched)
	var samples []groupSample
	for id, ms := range byGroup {
		if st, ok := g.objectState(id); ok {
			samples = append(samples, groupSample{namespace: ms[0].pod.Namespace, group: ms[0].key, generation: st.Generation})
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
// members of one group), reports their stop and start and releases them:
// the decisions are planRelease's, reportDue's and nodeReportOf's, pure;
// what is read and written here is their input and their outcome.
func (g *groups) carryOut(ctx context.Context, ms []localMember) {
	st, r, ok := g.currentRound(ms)
	if !ok {
		return
	}
	ms = slices.DeleteFunc(slices.Clone(ms), func(m localMember) bool { return joinedAfter(m.pod, st) })
	states := g.deliverAndRead(st, r, ms)
	rep := nodeReportOf(st.Generation, len(ms), states, r.released)
	if reportDue(rep, r) {
		if err := g.writeReport(ctx, st, rep); err != nil {
			r.troubled = true
			g.log.Warn("report group members", "group", st.Namespace+"/"+st.Name, "err", err)
		} else {
			r.reported = rep
			r.sentStopped = r.sentStopped || rep.Stopped >= rep.Members
			r.sentStarted = r.sentStarted || rep.Started >= rep.Members
		}
	}
	if r.troubled && st.Released < r.generation && time.Since(r.read) >= RereadAfterTrouble {
		// A write of this round failed (the API server gone): the watch
		// of the object may be behind by client-go's back-off, which a
		// refused watch does not report. Read the object by hand until
		// the release.
		r.read = time.Now()
		if u, err := g.client.Resource(agentapi.GroupResource).Namespace(st.Namespace).Get(ctx, st.Name, metav1.GetOptions{}); err == nil {
			if fresh := agentapi.GroupFromObject(u); fresh.Generation == st.Generation {
				st = fresh
			}
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
			g.log.Warn("group restart: the round was not released within the bound; releasing this node's members", "group", st.Key, "generation", st.Generation, "waited", GroupStopWait)
		}
	}
}

// joinedAfter reports whether pod was made after the group's current
// generation (a JobSet or Job replacing a failed pod during the round):
// it takes no part in that round, which it would hold until its first
// container started (an image pull can take minutes), and starts fresh
// anyway; it takes part in the next. Both times are whole seconds (the
// cause's RFC 3339 time, the API's creation timestamp), so a pod made in a
// later second than the cause was made after it; one made in the same
// second takes part.
func joinedAfter(pod *corev1.Pod, st agentapi.GroupState) bool {
	return !st.CauseTime.IsZero() && pod.CreationTimestamp.Time.After(st.CauseTime)
}

// reportDue says whether this node's report of the round is to be
// written now: once when every member has stopped, once when every one
// has started again; two writes a round whatever the members do between.
func reportDue(rep agentapi.NodeReport, r *groupRound) bool {
	return !r.sentStopped && rep.Stopped >= rep.Members || !r.sentStarted && rep.Started >= rep.Members && rep.Members > 0
}

// writeReport writes this node's report of the group st: its own object,
// which no other agent writes, made on the first report and patched after
// (a merge patch: no read, no conflict).
func (g *groups) writeReport(ctx context.Context, st agentapi.GroupState, rep agentapi.NodeReport) error {
	id := st.Namespace + "/" + st.Name
	res := g.client.Resource(agentapi.ReportResource).Namespace(st.Namespace)
	name := agentapi.ReportName(st.Name, g.host.node())
	spec := map[string]any{"node": g.host.node(), "generation": int64(rep.Generation), "members": int64(rep.Members),
		"stopped": int64(rep.Stopped), "started": int64(rep.Started)}
	if !g.reportMade[id] {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": agentapi.ReportResource.GroupVersion().String(), "kind": agentapi.ReportKind,
			"metadata": map[string]any{"name": name, "namespace": st.Namespace, "labels": map[string]any{agentapi.LabelReportOf: st.Name}},
			"spec":     spec,
		}}
		if st.UID != "" {
			// Deleted with the group's object, by the garbage collector.
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: agentapi.GroupResource.GroupVersion().String(), Kind: agentapi.GroupKind, Name: st.Name, UID: st.UID}})
		}
		_, err := res.Create(ctx, u, metav1.CreateOptions{})
		if err == nil {
			g.reportMade[id] = true
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	patch, _ := json.Marshal(map[string]any{"spec": spec})
	if _, err := res.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			delete(g.reportMade, id) // made again at the next step
		}
		return err
	}
	g.reportMade[id] = true
	return nil
}

// objectState is the watched copy of the group object id (namespace/name).
func (g *groups) objectState(id string) (agentapi.GroupState, bool) {
	obj, exists, err := g.objects.GetByKey(id)
	if err != nil || !exists {
		return agentapi.GroupState{}, false
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return agentapi.GroupState{}, false
	}
	return agentapi.GroupFromObject(u), true
}

// currentRound is the group's current generation, from the watched copy
// of its object, and this node's round of it (begun here when new).
func (g *groups) currentRound(ms []localMember) (agentapi.GroupState, *groupRound, bool) {
	id := ms[0].pod.Namespace + "/" + agentapi.GroupObjectName(ms[0].key)
	st, ok := g.objectState(id)
	if !ok || st.Generation == 0 || st.Key != ms[0].key {
		return st, nil, false
	}
	r := g.rounds[id]
	if r == nil || r.generation != st.Generation {
		r = &groupRound{generation: st.Generation, delivered: time.Now(), podGen: map[string]uint64{}, released: map[string]bool{}, deliveryFailed: map[string]bool{}}
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
// whether the coordinator released the round (all): none until then, or
// until stopWait has passed since the round reached this node, after
// which the members the round reached are released stopped or not (a
// node agent that died, a node cut off, a coordinator gone); a member is
// released once, and only once it has stopped unless late.
func planRelease(st agentapi.GroupState, r *groupRound, states []memberState, now time.Time, stopWait time.Duration) (release []string, all bool) {
	all = st.Released >= r.generation
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
