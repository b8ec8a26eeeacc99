package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// Group restarts (the RestartGroup action; docs/gang.md). A group is the
// pods of one namespace that share the labels of the first groupLabels
// entry a pod has all of. Its state is one GroupRestart object in that
// namespace (GroupResource), named from the group: the generation, the
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
// done here.

// GroupResource is the GroupRestart custom resource
// (deploy/components/node-agent-groups/crd.yaml).
var GroupResource = schema.GroupVersionResource{Group: "restart-supervisor.dev", Version: "v1alpha1", Resource: "grouprestarts"}

// GroupKind is its kind.
const GroupKind = "GroupRestart"

// groupLabels name a pod's group: the first entry whose labels the pod has
// all of. An explicit contract.LabelGroup wins; then the labels each
// workload's controller puts on its pods.
var groupLabels = [][]string{
	{contract.LabelGroup},
	// JobSet (and Kubeflow Trainer v2's TrainJob, which runs one): the
	// whole JobSet, every replicated job, as JobSet's own InPlaceRestart
	// restarts it.
	{"jobset.sigs.k8s.io/jobset-name"},
	// LeaderWorkerSet: one group (leader and workers) of the set.
	{"leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index"},
	// Kubeflow training-operator v1 (PyTorchJob, TFJob, MPIJob, ...).
	{"training.kubeflow.org/job-name"},
	// KubeRay: the Ray cluster.
	{"ray.io/cluster"},
	// A plain Job (batch.kubernetes.io/job-name since 1.27).
	{"batch.kubernetes.io/job-name"},
}

// GroupOf returns the group of a pod: its key ("label=value,...") and the
// selector of its pods; ok false when it has none.
func GroupOf(pod *corev1.Pod) (key string, sel labels.Set, ok bool) {
	for _, names := range groupLabels {
		set := labels.Set{}
		for _, n := range names {
			v, has := pod.Labels[n]
			if !has || v == "" {
				break
			}
			set[n] = v
		}
		if len(set) == len(names) {
			return set.String(), set, true
		}
	}
	return "", nil, false
}

// groupMember reports whether pod takes part in group restarts: it has a
// group and a container whose supervisor config uses RestartGroup (the
// injector wraps every container of such a pod), and is not being deleted
// (KEP-4438: no new pod-wide restart then), nor finished.
func groupMember(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, _, ok := GroupOf(pod); !ok {
		return false
	}
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == contract.EnvConfig && strings.Contains(e.Value, `"RestartGroup"`) {
				return true
			}
		}
	}
	return false
}

// GroupObjectName is the GroupRestart object's name for group key.
func GroupObjectName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "group-" + hex.EncodeToString(sum[:10])
}

// groupState is what the agent reads of a GroupRestart object.
type groupState struct {
	namespace, name string
	key             string
	generation      uint64
	maxRestarts     int64 // -1: no limit
	cause           statevol.GroupCause
	// causeTime is when the current generation was made.
	causeTime       time.Time
	nodes           map[string]nodeReport
	resourceVersion string
}

// nodeReport is one agent's report in spec.nodes.
type nodeReport struct {
	Generation uint64 `json:"generation"`
	Members    int    `json:"members"`
	Stopped    int    `json:"stopped"`
	// Started: members that have started again in the round.
	Started int `json:"started"`
}

func groupFromObject(u *unstructured.Unstructured) groupState {
	g := groupState{namespace: u.GetNamespace(), name: u.GetName(), resourceVersion: u.GetResourceVersion(), maxRestarts: -1,
		nodes: map[string]nodeReport{}}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	g.key, _ = spec["group"].(string)
	g.generation = uint64(asInt(spec["generation"]))
	if v, ok := spec["maxRestarts"]; ok {
		g.maxRestarts = asInt(v)
	}
	if c, ok := spec["cause"].(map[string]any); ok {
		g.cause.Pod, _ = c["pod"].(string)
		g.cause.Container, _ = c["container"].(string)
		g.cause.ExitCode = int32(asInt(c["exitCode"]))
		if ts, ok := c["time"].(string); ok {
			g.causeTime, _ = time.Parse(time.RFC3339, ts)
		}
	}
	g.cause.Generation, g.cause.Group = g.generation, g.key
	if nodes, ok := spec["nodes"].(map[string]any); ok {
		for n, v := range nodes {
			m, _ := v.(map[string]any)
			g.nodes[n] = nodeReport{Generation: uint64(asInt(m["generation"])), Members: int(asInt(m["members"])), Stopped: int(asInt(m["stopped"])),
				Started: int(asInt(m["started"]))}
		}
	}
	return g
}

func asInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	case json.Number:
		i, _ := n.Int64()
		return i
	}
	return 0
}

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
	reported       nodeReport
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
		id := m.pod.Namespace + "/" + GroupObjectName(m.key)
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
			rep := nodeReport{Generation: r.generation}
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodes": map[string]any{g.a.cfg.NodeName: rep}}})
			if _, err := g.client.Resource(GroupResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
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
				st := groupFromObject(u)
				samples = append(samples, groupSample{namespace: ms[0].pod.Namespace, group: ms[0].key, generation: st.generation})
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
		if !ok || !groupMember(pod) {
			continue
		}
		key, _, _ := GroupOf(pod)
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

// takeRequests turns each new request of member m into the group's next
// generation, or a refusal. A request is decided from the informer's copy
// of the group's object where that copy suffices (a newer generation under
// way, a round not over), so that a pod writing a thousand requests costs
// its node's group loop file reads, not a thousand API calls; only a
// request that can make the next generation goes to the API server, and
// of those at most one per group a step (spent: by group object key):
// the next ones are looked at again at the next step, by when the
// informer holds what the first made. Only the requests of containers of
// the pod's spec are taken, so that the names in the group's object and
// Events are the spec's, not whatever bytes a pod put in a file name.
func (g *groups) takeRequests(ctx context.Context, m localMember, spent map[string]bool) {
	reqs, errs := statevol.GroupRequests(m.dir)
	g.a.mu.Lock()
	g.a.logErrors(errs)
	g.a.mu.Unlock()
	id := m.pod.Namespace + "/" + GroupObjectName(m.key)
	for _, r := range reqs {
		if !specContainer(m.pod, r.Container) {
			continue
		}
		hk := string(m.pod.UID) + "/" + r.Container
		if g.handled[hk] == r.ID {
			continue
		}
		switch d, refused := g.decideFromStore(id, m.key, r); d {
		case storeUnderWay:
			g.handled[hk] = r.ID
			continue
		case storeRoundOn:
			continue // looked at again at the next step
		case storeRefused:
			g.handled[hk] = r.ID
			g.refuse(m, r, refused)
			continue
		}
		if spent[id] {
			continue // one API decision per group a step
		}
		spent[id] = true
		g.handled[hk] = r.ID
		if refused, err := g.request(ctx, m, r); errors.Is(err, errRoundUnderWay) {
			delete(g.handled, hk) // looked at again at the next step
		} else if err != nil {
			g.a.log.Warn("group restart request", "pod", m.pod.Namespace+"/"+m.pod.Name, "container", r.Container, "err", err)
			delete(g.handled, hk) // tried again at the next step
		} else if refused != "" {
			g.refuse(m, r, refused)
		}
	}
}

// refuse answers request r of member m with a refusal.
func (g *groups) refuse(m localMember, r statevol.GroupRequest, refused string) {
	if err := statevol.AnswerGroup(m.dir, r, refused); err != nil {
		g.a.log.Warn("answer group restart request", "pod", m.pod.Namespace+"/"+m.pod.Name, "err", err)
	}
	g.a.log.Info("group restart refused", "pod", m.pod.Namespace+"/"+m.pod.Name, "container", r.Container, "group", m.key, "reason", refused)
}

// specContainer reports whether name is a container (or init container)
// of pod's spec.
func specContainer(pod *corev1.Pod, name string) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				return true
			}
		}
	}
	return false
}

// storeDecision is what the informer's copy of a group's object says of a
// request.
type storeDecision int

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

func (g *groups) decideFromStore(id, key string, r statevol.GroupRequest) (storeDecision, string) {
	obj, ok, _ := g.objects.GetByKey(id)
	u, isU := obj.(*unstructured.Unstructured)
	if !ok || !isU {
		return storeAsk, ""
	}
	st := groupFromObject(u)
	switch {
	case st.key != key:
		return storeAsk, "" // the API server's answer names the clash
	case st.generation > r.Observed:
		return storeUnderWay, ""
	case !roundOver(st, time.Now()):
		return storeRoundOn, ""
	}
	if refused := budgetSpent(st); refused != "" {
		return storeRefused, refused
	}
	return storeAsk, ""
}

// budgetSpent is the refusal of a request when the group has had its
// limit of restarts, else "".
func budgetSpent(st groupState) string {
	if st.maxRestarts >= 0 && int64(st.generation) >= st.maxRestarts {
		return fmt.Sprintf("group %s has had %d group restarts, its limit (%s)", st.key, st.generation, contract.AnnotationGroupMaxRestarts)
	}
	return ""
}

// request takes in request r of member m: the next generation of the
// group when r saw the current one, nothing when a newer one is under way
// (it answers r), a refusal past the budget.
func (g *groups) request(ctx context.Context, m localMember, r statevol.GroupRequest) (refused string, err error) {
	res := g.client.Resource(GroupResource).Namespace(m.pod.Namespace)
	name := GroupObjectName(m.key)
	for try := 0; try < 5; try++ {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			u = newGroupObject(m.pod, name, m.key)
			u, err = res.Create(ctx, u, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
		}
		if err != nil {
			return "", err
		}
		st := groupFromObject(u)
		if st.key != m.key {
			return "", fmt.Errorf("%s/%s names group %q, not %q", m.pod.Namespace, name, st.key, m.key)
		}
		if st.generation > r.Observed {
			return "", nil // the restart it asks for is under way
		}
		if !roundOver(st, time.Now()) {
			// A request during a round: taken once the round is over,
			// so that a member that floods requests makes at most one
			// generation per round.
			return "", errRoundUnderWay
		}
		if refused := budgetSpent(st); refused != "" {
			return refused, nil
		}
		next := st.generation + 1
		if len(u.GetOwnerReferences()) == 0 {
			if o := groupOwner(m.pod); o != nil {
				u.SetOwnerReferences([]metav1.OwnerReference{*o}) // an object made before owners were set
			}
		}
		spec := u.Object["spec"].(map[string]any)
		spec["generation"] = int64(next)
		spec["cause"] = map[string]any{"pod": m.pod.Name, "container": r.Container, "exitCode": int64(r.ExitCode),
			"time": time.Now().UTC().Format(time.RFC3339)}
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another rank's request came first: read again
		}
		if err != nil {
			return "", err
		}
		g.a.log.Info("group restart", "group", m.key, "namespace", m.pod.Namespace, "generation", next, "pod", m.pod.Name, "container", r.Container, "exitCode", r.ExitCode)
		ann := map[string]string{"restart-supervisor.dev/group": m.key, "restart-supervisor.dev/group-generation": strconv.FormatUint(next, 10)}
		msg := fmt.Sprintf("pod %s, container %s exited with %d: restarting every container of group %s in place (generation %d)",
			m.pod.Name, r.Container, r.ExitCode, m.key, next)
		// On the pod whose exit asked for it, and on the pod's controller
		// (a Job, a LeaderWorkerSet's StatefulSet), where the workload's
		// own Events are.
		refs := []*corev1.ObjectReference{podRef(m.pod)}
		if o := metav1.GetControllerOf(m.pod); o != nil {
			refs = append(refs, &corev1.ObjectReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID, Namespace: m.pod.Namespace})
		}
		for _, ref := range refs {
			signed := g.a.signer.sign(ReasonGroupRestarted, ref, ann)
			g.a.sink.remember(ref, msg, signed)
			g.a.recorder.AnnotatedEventf(ref, signed, corev1.EventTypeWarning, ReasonGroupRestarted, "%s", msg)
		}
		return "", nil
	}
	return "", errors.New("the group object keeps changing")
}

// errRoundUnderWay: the request waits until the group's round is over.
var errRoundUnderWay = errors.New("the group's round is under way")

// roundOver reports whether the group's current round is over: every
// node that reported for it reported all its members started again in
// it, or GroupStopWait has passed since it was made, after which the
// agents release their members anyway. A generation made earlier would
// reach members still waiting in the round, which one start then answers
// for both (podstate's round): two generations, one restart.
func roundOver(st groupState, now time.Time) bool {
	if st.generation == 0 || now.Sub(st.causeTime) > GroupStopWait {
		return true
	}
	reported := false
	for _, rep := range st.nodes {
		if rep.Generation != st.generation {
			continue
		}
		reported = true
		if rep.Started < rep.Members {
			return false
		}
	}
	return reported
}

// ReasonGroupRestarted is the Event a group restart records on the pod
// whose exit asked for it.
const ReasonGroupRestarted = "GroupRestartedInPlace"

func newGroupObject(pod *corev1.Pod, name, key string) *unstructured.Unstructured {
	spec := map[string]any{"group": key, "generation": int64(0)}
	if v, ok := pod.Annotations[contract.AnnotationGroupMaxRestarts]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil && n >= 0 {
			spec["maxRestarts"] = n
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GroupResource.GroupVersion().String(), "kind": GroupKind,
		"metadata": map[string]any{"name": name, "namespace": pod.Namespace},
		"spec":     spec,
	}}
	if o := groupOwner(pod); o != nil {
		u.SetOwnerReferences([]metav1.OwnerReference{*o})
	}
	return u
}

// JobSet's labels on its pods (sigs.k8s.io/jobset, api/jobset/v1alpha2
// jobset_types.go: JobSetNameKey, JobSetUIDKey).
const (
	jobSetNameLabel = "jobset.sigs.k8s.io/jobset-name"
	jobSetUIDLabel  = "jobset.sigs.k8s.io/jobset-uid"
)

// groupOwner is the owner of the GroupRestart object of pod's group, so
// that the garbage collector deletes the object with the workload: the
// JobSet of a JobSet's pod (its Jobs are recreated when it restarts, and
// the group is the whole JobSet), else the pod's controller (a Job, a
// training job, a RayCluster, a StatefulSet), else none (bare pods with
// the group label: the object stays until deleted). Not a controller
// reference and without blockOwnerDeletion: the object is a record, and
// the agent has no rights on the workload.
func groupOwner(pod *corev1.Pod) *metav1.OwnerReference {
	if name, uid := pod.Labels[jobSetNameLabel], pod.Labels[jobSetUIDLabel]; name != "" && uid != "" {
		return &metav1.OwnerReference{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: name, UID: types.UID(uid)}
	}
	if c := metav1.GetControllerOf(pod); c != nil {
		return &metav1.OwnerReference{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, UID: c.UID}
	}
	return nil
}

// carryOut delivers the group's current generation to ms (this node's
// members of one group), reports their stop and releases them.
func (g *groups) carryOut(ctx context.Context, ms []localMember) {
	ns, name := ms[0].pod.Namespace, GroupObjectName(ms[0].key)
	id := ns + "/" + name
	obj, exists, err := g.objects.GetByKey(id)
	if err != nil || !exists {
		return
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	st := groupFromObject(u)
	if st.generation == 0 || st.key != ms[0].key {
		return
	}
	r := g.rounds[id]
	if r == nil || r.generation != st.generation {
		r = &groupRound{generation: st.generation, delivered: time.Now(), podGen: map[string]uint64{}, released: map[string]bool{}, deliveryFailed: map[string]bool{}}
		r.expected = g.expectedMembers(ctx, ms[0])
		g.rounds[id] = r
	}
	stopped, started := 0, 0
	for _, m := range ms {
		uid := string(m.pod.UID)
		n, ok := r.podGen[uid]
		if !ok {
			if prev, had := statevol.GroupRound(m.dir, st.generation); had {
				n, ok = prev, true // delivered before this agent started
			} else if statevol.LastGroup(m.dir) < st.generation {
				var err error
				n, _, err = statevol.DeliverGroup(m.dir, st.cause)
				if err != nil {
					// Tried again at every step; said once a round, since a
					// pod can keep its own volume failing (a flooded
					// pod-restarts/, a full disk).
					if !r.deliveryFailed[uid] {
						r.deliveryFailed[uid] = true
						g.a.log.Warn("deliver group restart; trying again at every step", "pod", ns+"/"+m.pod.Name, "generation", st.generation, "err", err)
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
	rep := nodeReport{Generation: st.generation, Members: len(ms), Stopped: stopped, Started: started}
	if rep != r.reported {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodes": map[string]any{g.a.cfg.NodeName: rep}}})
		if _, err := g.client.Resource(GroupResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			g.a.log.Warn("report group stop", "group", id, "err", err)
		} else {
			r.reported = rep
			st.nodes[g.a.cfg.NodeName] = rep
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
			g.a.log.Warn("group restart: not every pod of the group stopped within the bound; releasing this node's", "group", st.key, "generation", st.generation, "waited", GroupStopWait)
		}
	}
}

// allStopped reports whether every node with members of the group has
// reported all of them stopped for the current generation. A node's
// report counts the members it has now: fewer than expected when some
// left the round (a pod being deleted takes no pod-wide restart,
// KEP-4438), none when all of them did.
func allStopped(st groupState, expected map[string]int) bool {
	for node, want := range expected {
		rep, ok := st.nodes[node]
		if !ok || rep.Generation != st.generation || rep.Stopped < min(want, rep.Members) {
			return false
		}
	}
	return true
}

// expectedMembers lists the group's members in the API, per node, once per
// round: the nodes whose agents must report them stopped.
func (g *groups) expectedMembers(ctx context.Context, m localMember) map[string]int {
	_, sel, _ := GroupOf(m.pod)
	out := map[string]int{}
	list, err := g.a.cfg.Client.CoreV1().Pods(m.pod.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		g.a.log.Warn("list group members", "group", m.key, "err", err)
		out[g.a.cfg.NodeName] = 1
		return out
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName == "" || !groupMember(p) {
			continue
		}
		if k, _, _ := GroupOf(p); k != m.key {
			continue
		}
		out[p.Spec.NodeName]++
	}
	return out
}
