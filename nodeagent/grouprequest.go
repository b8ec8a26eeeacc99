package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// Taking in the requests of a node's group members (group.go's first
// duty): each decided from the watched copy of the group's object where
// that settles it, else by an update of the object to the next
// generation, or refused past the group's budget.

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
	g.host.logRefused(errs)
	id := m.pod.Namespace + "/" + agentapi.GroupObjectName(m.key)
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
			g.log.Warn("group restart request", "pod", m.pod.Namespace+"/"+m.pod.Name, "container", r.Container, "err", err)
			delete(g.handled, hk) // tried again at the next step
		} else if refused != "" {
			g.refuse(m, r, refused)
		}
	}
}

// refuse answers request r of member m with a refusal.
func (g *groups) refuse(m localMember, r statevol.GroupRequest, refused string) {
	if err := statevol.AnswerGroup(m.dir, r, refused); err != nil {
		g.log.Warn("answer group restart request", "pod", m.pod.Namespace+"/"+m.pod.Name, "err", err)
	}
	g.log.Info("group restart refused", "pod", m.pod.Namespace+"/"+m.pod.Name, "container", r.Container, "group", m.key, "reason", refused)
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

func (g *groups) decideFromStore(id, key string, r statevol.GroupRequest) (storeDecision, string) {
	obj, ok, _ := g.objects.GetByKey(id)
	u, isU := obj.(*unstructured.Unstructured)
	if !ok || !isU {
		return storeAsk, ""
	}
	st := agentapi.GroupFromObject(u)
	switch {
	case st.Key != key:
		return storeAsk, "" // the API server's answer names the clash
	case st.Generation > r.Observed:
		return storeUnderWay, ""
	case !agentapi.RoundOver(st, time.Now(), GroupStopWait):
		return storeRoundOn, ""
	}
	if refused := budgetSpent(st); refused != "" {
		return storeRefused, refused
	}
	return storeAsk, ""
}

// budgetSpent is the refusal of a request when the group has had its
// limit of restarts, else "".
func budgetSpent(st agentapi.GroupState) string {
	if st.MaxRestarts >= 0 && int64(st.Generation) >= st.MaxRestarts {
		return fmt.Sprintf("group %s has had %d group restarts, its limit (%s)", st.Key, st.Generation, contract.AnnotationGroupMaxRestarts)
	}
	return ""
}

// request takes in request r of member m: the next generation of the
// group when r saw the current one, nothing when a newer one is under way
// (it answers r), a refusal past the budget.
func (g *groups) request(ctx context.Context, m localMember, r statevol.GroupRequest) (refused string, err error) {
	res := g.client.Resource(agentapi.GroupResource).Namespace(m.pod.Namespace)
	name := agentapi.GroupObjectName(m.key)
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
		st := agentapi.GroupFromObject(u)
		if st.Key != m.key {
			return "", fmt.Errorf("%s/%s names group %q, not %q", m.pod.Namespace, name, st.Key, m.key)
		}
		if st.Generation > r.Observed {
			return "", nil // the restart it asks for is under way
		}
		if !agentapi.RoundOver(st, time.Now(), GroupStopWait) {
			// A request during a round: taken once the round is over,
			// so that a member that floods requests makes at most one
			// generation per round.
			return "", errRoundUnderWay
		}
		if refused := budgetSpent(st); refused != "" {
			return refused, nil
		}
		next := st.Generation + 1
		if len(u.GetOwnerReferences()) == 0 {
			if o := groupOwner(m.pod); o != nil {
				u.SetOwnerReferences([]metav1.OwnerReference{*o}) // an object made before owners were set
			}
		}
		spec := u.Object["spec"].(map[string]any)
		spec["generation"] = int64(next)
		spec["cause"] = map[string]any{"pod": m.pod.Name, "container": r.Container, "exitCode": int64(r.ExitCode),
			"time": time.Now().UTC().Format(time.RFC3339)}
		// This agent decides the round's release (groupcoord.go).
		spec["coordinator"] = g.host.node()
		delete(spec, "nodes") // the reports of the design before GroupRestartReport
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another rank's request came first: read again
		}
		if err != nil {
			return "", err
		}
		g.log.Info("group restart", "group", m.key, "namespace", m.pod.Namespace, "generation", next, "pod", m.pod.Name, "container", r.Container, "exitCode", r.ExitCode)
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
			g.host.recordGroupEvent(ref, msg, ann)
		}
		return "", nil
	}
	return "", errors.New("the group object keeps changing")
}

// errRoundUnderWay: the request waits until the group's round is over.
var errRoundUnderWay = errors.New("the group's round is under way")

func newGroupObject(pod *corev1.Pod, name, key string) *unstructured.Unstructured {
	spec := map[string]any{"group": key, "generation": int64(0)}
	if v, ok := pod.Annotations[contract.AnnotationGroupMaxRestarts]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil && n >= 0 {
			spec["maxRestarts"] = n
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": agentapi.GroupResource.GroupVersion().String(), "kind": agentapi.GroupKind,
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
