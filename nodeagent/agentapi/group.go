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
	"k8s.io/apimachinery/pkg/types"

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
	UID             types.UID
	Key             string
	Generation      uint64
	MaxRestarts     int64 // -1: no limit
	Cause           statevol.GroupCause
	// CauseTime is when the current generation was made.
	CauseTime time.Time
	// Coordinator is the node whose agent made the current generation
	// and decides its release, from the nodes' reports.
	Coordinator string
	// Released is the last generation whose members every node reported
	// stopped; Done the last whose members every node reported started
	// again. Members is the count the nodes reported at the release.
	Released, Done  uint64
	Members         int
	ResourceVersion string
}

// ReportResource is the GroupRestartReport custom resource
// (deploy/components/node-agent-groups/crd.yaml): one per group and node,
// written by that node's agent only, read by the group's coordinator.
var ReportResource = schema.GroupVersionResource{Group: "restart-supervisor.dev", Version: "v1alpha1", Resource: "grouprestartreports"}

// ReportKind is its kind.
const ReportKind = "GroupRestartReport"

// LabelReportOf names the GroupRestart object a report is of, so that the
// coordinator watches only that group's reports.
const LabelReportOf = "restart-supervisor.dev/group-restart"

// ReportName is the name of node's report of the group whose object is
// named object: the object's name and 16 hex digits of the node name's
// SHA-256 (a node name may be 253 bytes).
func ReportName(object, node string) string {
	sum := sha256.Sum256([]byte(node))
	return object + "-" + hex.EncodeToString(sum[:8])
}

// NodeReport is one agent's report of its node's members for a generation:
// written once when every member there stopped (Stopped = Members), once
// when every one released started again (Started = Members), and with
// Members 0 when the last left the round.
type NodeReport struct {
	Node       string `json:"node"`
	Generation uint64 `json:"generation"`
	Members    int    `json:"members"`
	Stopped    int    `json:"stopped"`
	// Started: members that have started again in the round.
	Started int `json:"started"`
}

func GroupFromObject(u *unstructured.Unstructured) GroupState {
	g := GroupState{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion(), MaxRestarts: -1}
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
	g.Coordinator, _ = spec["coordinator"].(string)
	g.Released, g.Done = uint64(asInt(spec["released"])), uint64(asInt(spec["done"]))
	g.Members = int(asInt(spec["members"]))
	return g
}

// ReportFromObject reads a GroupRestartReport.
func ReportFromObject(u *unstructured.Unstructured) NodeReport {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	r := NodeReport{Generation: uint64(asInt(spec["generation"])), Members: int(asInt(spec["members"])),
		Stopped: int(asInt(spec["stopped"])), Started: int(asInt(spec["started"]))}
	r.Node, _ = spec["node"].(string)
	return r
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

// RoundOver reports whether the group's current round is over: its
// coordinator saw every node report its members started again (Done), or
// GroupStopWait has passed since it was made, after which the agents
// release their members anyway. A generation made earlier would reach
// members still waiting in the round, which one start then answers for
// both (podstate's round): two generations, one restart.
func RoundOver(st GroupState, now time.Time, stopWait time.Duration) bool {
	return st.Generation == 0 || st.Done >= st.Generation || now.Sub(st.CauseTime) > stopWait
}

// ReasonGroupRestarted is the Event a group restart records on the pod
// whose exit asked for it.
const ReasonGroupRestarted = "GroupRestartedInPlace"

// RoundText is how far the current generation's round has come, from
// what its coordinator wrote and, where read (nil: not), the nodes'
// reports: "done" once every node reported its members started again;
// "starting s/m" once released (s members started again of the m
// released); else "stopping", with the nodes that reported all their
// members stopped.
func (g GroupState) RoundText(reports []NodeReport) string {
	var nodes, started int
	for _, r := range reports {
		if r.Generation == g.Generation {
			nodes++
			started += r.Started
		}
	}
	switch {
	case g.Generation == 0:
		return "-"
	case g.Done >= g.Generation:
		return "done"
	case g.Released >= g.Generation && reports != nil:
		return fmt.Sprintf("starting %d/%d", started, g.Members)
	case g.Released >= g.Generation:
		return fmt.Sprintf("starting, %d members", g.Members)
	case nodes > 0:
		return fmt.Sprintf("stopping, %d nodes stopped", nodes)
	default:
		return "stopping"
	}
}
