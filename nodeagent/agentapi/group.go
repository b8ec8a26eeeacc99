package agentapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// The GroupRestart object: which group a pod belongs to, the object's
// name and resource, and what the agent reads of it.

// GroupResource is the GroupRestart custom resource
// (deploy/components/node-agent-groups/crd.yaml).
var GroupResource = schema.GroupVersionResource{Group: "restart-supervisor.dev", Version: "v1alpha1", Resource: "grouprestarts"}

// GroupKind is its kind.
const GroupKind = "GroupRestart"

// GroupLabels name a pod's group: the first entry whose labels the pod has
// all of. An explicit contract.LabelGroup wins; then the labels each
// workload's controller puts on its pods.
var GroupLabels = [][]string{
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
	for _, names := range GroupLabels {
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

// GroupMember reports whether pod takes part in group restarts: it has a
// group and a container whose supervisor config uses RestartGroup (the
// injector wraps every container of such a pod), and is not being deleted
// (KEP-4438: no new pod-wide restart then), nor finished.
func GroupMember(pod *corev1.Pod) bool {
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

// GroupState is what the agent reads of a GroupRestart object.
type GroupState struct {
	Namespace, Name string
	Key             string
	Generation      uint64
	MaxRestarts     int64 // -1: no limit
	Cause           statevol.GroupCause
	// CauseTime is when the current generation was made.
	CauseTime       time.Time
	Nodes           map[string]NodeReport
	ResourceVersion string
}

// NodeReport is one agent's report in spec.nodes.
type NodeReport struct {
	Generation uint64 `json:"generation"`
	Members    int    `json:"members"`
	Stopped    int    `json:"stopped"`
	// Started: members that have started again in the round.
	Started int `json:"started"`
}

func GroupFromObject(u *unstructured.Unstructured) GroupState {
	g := GroupState{Namespace: u.GetNamespace(), Name: u.GetName(), ResourceVersion: u.GetResourceVersion(), MaxRestarts: -1,
		Nodes: map[string]NodeReport{}}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	g.Key, _ = spec["group"].(string)
	g.Generation = uint64(asInt(spec["generation"]))
	if v, ok := spec["maxRestarts"]; ok {
		g.MaxRestarts = asInt(v)
	}
	if c, ok := spec["cause"].(map[string]any); ok {
		g.Cause.Pod, _ = c["pod"].(string)
		g.Cause.Container, _ = c["container"].(string)
		g.Cause.ExitCode = int32(asInt(c["exitCode"]))
		if ts, ok := c["time"].(string); ok {
			g.CauseTime, _ = time.Parse(time.RFC3339, ts)
		}
	}
	g.Cause.Generation, g.Cause.Group = g.Generation, g.Key
	if nodes, ok := spec["nodes"].(map[string]any); ok {
		for n, v := range nodes {
			m, _ := v.(map[string]any)
			g.Nodes[n] = NodeReport{Generation: uint64(asInt(m["generation"])), Members: int(asInt(m["members"])), Stopped: int(asInt(m["stopped"])),
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

// RoundOver reports whether the group's current round is over: every
// node that reported for it reported all its members started again in
// it, or GroupStopWait has passed since it was made, after which the
// agents release their members anyway. A generation made earlier would
// reach members still waiting in the round, which one start then answers
// for both (podstate's round): two generations, one restart.
func RoundOver(st GroupState, now time.Time, stopWait time.Duration) bool {
	if st.Generation == 0 || now.Sub(st.CauseTime) > stopWait {
		return true
	}
	reported := false
	for _, rep := range st.Nodes {
		if rep.Generation != st.Generation {
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

// RoundText is how far the current generation's round has come, from the
// node agents' reports of it: "done" once every member has started again,
// else the members stopped or started so far of those reported.
func (g GroupState) RoundText() string {
	if g.Generation == 0 {
		return "-"
	}
	var members, stopped, started int
	for _, r := range g.Nodes {
		if r.Generation != g.Generation {
			continue
		}
		members += r.Members
		stopped += r.Stopped
		started += r.Started
	}
	switch {
	case members == 0:
		return "delivering"
	case started >= members:
		return "done"
	case stopped < members:
		return fmt.Sprintf("stopping %d/%d", stopped, members)
	default:
		return fmt.Sprintf("starting %d/%d", started, members)
	}
}
