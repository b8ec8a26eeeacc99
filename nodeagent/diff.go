package nodeagent

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// This file is the agent's decision, with no I/O: given what the agent
// knew of a pod after the previous scan and the pod's documents in this
// scan, diffPod says which Events to record and what the metrics read. The
// API calls (agent.go) only carry its answer out.

// podInfo is what the diff needs of a pod from the informer.
type podInfo struct {
	namespace, name, uid string
	containers           map[string]bool // init and regular containers
	// createdSinceStart: the pod was created after this agent started,
	// so no other agent can have reported its restarts.
	createdSinceStart bool
}

// podInfoOf reads pod as the diff needs it. The API server stores
// creationTimestamp in whole seconds, so a pod created in the second the
// agent started counts as created after it: taking it for older would drop
// its first restarts (they come within a second at back-off 0, before a
// scan sees the pod), where the other error, a pod created in that same
// second just before a restarted agent came up, at worst repeats Events its
// previous agent recorded.
func podInfoOf(pod *corev1.Pod, started time.Time) podInfo {
	p := podInfo{namespace: pod.Namespace, name: pod.Name, uid: string(pod.UID), containers: map[string]bool{},
		createdSinceStart: !pod.CreationTimestamp.Time.Before(started.Truncate(time.Second))}
	for _, c := range pod.Spec.InitContainers {
		p.containers[c.Name] = true
	}
	for _, c := range pod.Spec.Containers {
		p.containers[c.Name] = true
	}
	return p
}

// podState is what the agent keeps of one pod between scans.
type podState struct {
	containers map[string]containerCount
	// gen is the highest pod restart generation seen; genSeen is false
	// until a scan has seen a document of the pod.
	gen     uint64
	genSeen bool
}

// containerCount keeps a container's restart counter monotonic across its
// supervisors.
//
// When the document carries restartsTotal (the count the supervisor
// carries across hand-overs in the state volume, as it carries the
// back-off), that is the count. Otherwise it is rebuilt: the kubelet
// restarting the container starts a new supervisor whose document counts
// from 0 again; base is what the previous supervisors counted, and a
// document whose count went down belongs to a new supervisor, so the last
// count seen is added to base. Either way the total never goes down.
type containerCount struct {
	base, last int
	seen       bool
	// handedOver is when the exit of the last hand-over reported
	// (HandedOverToKubelet) happened.
	handedOver time.Time
}

func (c containerCount) total() int { return c.base + c.last }

// sample is one container's metrics as of the last scan.
type sample struct {
	namespace, pod, uid, container string
	restarts                       int
	podRestarts                    uint64
	lastExit                       *int32
	// lastReason is the last exit's reason when it is one of
	// exitReasons, else "".
	lastReason string
	inBackoff  bool
}

// exitReasons are the reasons of an exit that a series may carry as a
// label: the document is the pod's to write, and a label value it chose
// freely would be a series per value.
var exitReasons = map[string]bool{"OOMKilled": true, "Stalled": true}

// event is one Event the diff asks for, to be recorded times times
// (at most maxEventsPerScan).
type event struct {
	reason string
	// container is the container of a RestartedInPlace; "" for a
	// PodRestartedInPlace, which is on the pod.
	container string
	times     int
	restart   agentapi.Restart  // RestartedInPlace
	handOver  agentapi.HandOver // HandedOverToKubelet
	podGen    uint64            // PodRestartedInPlace: the pod restart generation
}

// podDiff is diffPod's answer.
type podDiff struct {
	state   podState
	events  []event
	samples []sample
	// counts are the per-container totals of the documents read, for the
	// annotation.
	counts map[string]int
}

// maxEventsPerScan bounds the Events one container can make the agent
// record in one scan, whatever its document claims; the correlator
// aggregates and rate-limits them further.
const maxEventsPerScan = 25

// diffPod compares one pod's documents with what the previous scans saw
// (prev; nil for a pod not seen before). started is when this agent
// started. Documents under a name that is none of the pod's containers are
// ignored: no series, Event or generation an adversary can invent.
func diffPod(prev *podState, pod podInfo, docs []Doc, started time.Time) podDiff {
	next := podState{containers: map[string]containerCount{}}
	if prev != nil {
		for k, v := range prev.containers {
			next.containers[k] = v
		}
		next.gen, next.genSeen = prev.gen, prev.genSeen
	}
	out := podDiff{counts: map[string]int{}}
	var valid []Doc
	var podGen uint64
	for _, d := range docs {
		if !pod.containers[d.Container] {
			continue
		}
		valid = append(valid, d)
		podGen = max(podGen, d.Generation)
	}
	for _, d := range valid {
		seen := next.containers[d.Container].seen
		c, n := countRestarts(next.containers[d.Container], d, pod.createdSinceStart, started)
		total := c.total()
		if n > 0 {
			out.events = append(out.events, event{reason: agentapi.ReasonRestarted, container: d.Container,
				times: min(n, maxEventsPerScan), restart: agentapi.RestartOf(d.Status, total)})
		}
		// A hand-over a limit caused, once per exit: a pod first seen by
		// a restarted agent has it reported only when it came after
		// this agent started, as a restart.
		if d.HandOver != nil && d.LastExit != nil && !d.LastExit.At.Equal(c.handedOver) {
			if seen || pod.createdSinceStart || d.LastExit.At.After(started) {
				out.events = append(out.events, event{reason: agentapi.ReasonHandedOver, container: d.Container, times: 1, handOver: agentapi.HandOverOf(d.Status, total)})
			}
			c.handedOver = d.LastExit.At
		}
		next.containers[d.Container] = c
		s := sample{namespace: pod.namespace, pod: pod.name, uid: pod.uid, container: d.Container,
			restarts: total, podRestarts: podGen, inBackoff: d.State == contract.PhaseBackingOff}
		if d.LastExit != nil {
			code := d.LastExit.Code
			s.lastExit = &code
			if exitReasons[d.LastExit.Reason] {
				s.lastReason = d.LastExit.Reason
			}
		}
		out.samples = append(out.samples, s)
		out.counts[d.Container] = total
	}
	if len(valid) > 0 {
		var n uint64
		next.gen, next.genSeen, n = countPodRestarts(next.gen, next.genSeen, podGen, pod.createdSinceStart)
		if n > 0 {
			out.events = append(out.events, event{reason: agentapi.ReasonPodRestarted, times: int(min(n, maxEventsPerScan)), podGen: podGen})
		}
	}
	out.state = next
	return out
}

// countRestarts advances a container's counter by its document d and says
// how many of the restarts are new, to be recorded as Events.
func countRestarts(c containerCount, d Doc, podIsNew bool, started time.Time) (containerCount, int) {
	prevTotal := c.total()
	if d.RestartsTotal != nil {
		// Carried across hand-overs by the supervisor: the count itself.
		// base is kept so that a later document without the field (an
		// older supervisor) goes on from here.
		c.base, c.last = max(0, *d.RestartsTotal-d.Restarts), d.Restarts
	} else {
		if c.seen && d.Restarts < c.last {
			c.base += c.last // a new supervisor counts from 0
		}
		c.last = d.Restarts
	}
	if c.seen && c.total() < prevTotal {
		c.base, c.last = prevTotal-d.Restarts, d.Restarts // never backwards
	}
	n := 0
	switch {
	case !c.seen:
		// First sight. A pod created after this agent started has had no
		// other agent: all its restarts are new (the first one, at
		// back-off 0, often comes before the informer or a scan has seen
		// the pod). Otherwise (the agent restarted) past restarts were
		// reported by the agent that saw them, and only a restart after
		// this agent started is new.
		switch {
		case podIsNew && d.Restarts > 0:
			n = c.total()
		case d.LastRestart != nil && d.LastRestart.At.After(started) && d.Restarts > 0:
			n = 1
		}
	case c.total() > prevTotal:
		n = c.total() - prevTotal
	}
	c.seen = true
	return c, n
}

// countPodRestarts advances a pod's highest generation gen by the highest
// of this scan's documents, podGen, and says how many pod restarts are
// new. A pod first seen (or first seen by a restarted agent) sets the
// baseline: the documents do not date a generation. A pod created after
// this agent started is the exception, as for container restarts: every
// generation is new.
func countPodRestarts(gen uint64, seen bool, podGen uint64, podIsNew bool) (uint64, bool, uint64) {
	var n uint64
	switch {
	case seen && podGen > gen:
		n = podGen - gen
	case !seen && podGen > 0 && podIsNew:
		n = podGen
	}
	return max(gen, podGen), true, n
}
