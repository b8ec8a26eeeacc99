//go:build training

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// The queue rows' Kueue (hack/kueue.sh, v0.17.0) runs with waitForPodsReady
// on: its default timeout for the first PodsReady, a short recoveryTimeout
// for a PodsReady that turned false (Kueue's default is the timeout), and
// its default requeuing back-off.
const (
	kueuePodsReadyTimeout = 5 * time.Minute
	kueueRecoveryTimeout  = 5 * time.Second
	kueueRequeueBase      = 60
	// kueueLoad is the queue rows' model loading (train.py --load-time) in
	// the rows with a readiness probe: un-Ready from a start to the first
	// step for longer than kueueRecoveryTimeout.
	kueueLoad = 8
	// kueueReadyFile is train.py's --ready-file, the readiness probe's.
	kueueReadyFile = "/tmp/training"
	// kueueStep is the queue rows' step (train.py --step-time): the fault
	// at step 25 comes some 5 s after the start, once Kueue has seen every
	// pod Ready; with the harness's millisecond steps it could come before
	// the first PodsReady, which Kueue times against the first timeout
	// (5 min) instead of recoveryTimeout.
	kueueStep = 0.2
)

// kueueScenario: the first scenario's ranks as a JobSet a queue admits.
var kueueScenario = &trainingScenario{id: "kueue", world: 2, queue: true,
	title: "A queue that keeps the job: Kueue's admission across a restart",
	text: "The first scenario's two ranks as a JobSet (one replicated Job of two pods) labelled `" + cluster.KueueQueueLabel +
		": " + cluster.KueueQueue + "`, admitted by Kueue v0.17.0 (`hack/kueue.sh`, built from the module proxy; its JobSet " +
		"integration, one ClusterQueue with room for every job) with `waitForPodsReady` on: `timeout: %[2]s` (the default) for the " +
		"first PodsReady, `recoveryTimeout: %[3]s` for a PodsReady that turned false, and the default requeuing back-off " +
		"(`backoffBaseSeconds: %[4]d`). Kueue's PodsReady for a JobSet is every replicated Job's pods Ready or succeeded " +
		"(`pkg/controller/jobs/jobset/jobset_controller.go` `PodsReady`, v0.17.0); past the recoveryTimeout it evicts the " +
		"workload: it suspends the JobSet, which deletes its pods, and admits it again after the back-off. Each step takes " +
		"%[7]g s (`--step-time %[7]g`), so that Kueue has seen every pod Ready before rank 1 exits 42 at step %[1]d (with " +
		"millisecond steps the fault could come before the first PodsReady, which Kueue times against `timeout`). In place, the rule is `RestartGroup` on 1, 42 and 137 (the JobSet's pods are one group by their " +
		"`jobset.sigs.k8s.io/jobset-name`); recreated, JobSet's `failurePolicy.maxRestarts: 3`. The rows marked *readiness " +
		"probe* give the trainer a readiness probe that says \"this rank is training\" (`test -e %[5]s`, every second; " +
		"train.py removes the file at its start and makes it after its first step) and %[6]d s of model loading before the " +
		"rendezvous (`--load-time %[6]d`), so that a restart, in place or not, makes the pods un-Ready for longer than the " +
		"recoveryTimeout. *Fault → JobSet Completed* runs from rank 1's fault line to the poll that saw the JobSet " +
		"Completed: a job that Kueue evicted waits for its back-off and is run again. The times after it are sampled every " +
		"0.2 s: *PodsReady false* is how long Kueue's Workload showed " +
		"`PodsReady` false after it had first been true, *admission lost* how long no Workload of the JobSet was `Admitted`, " +
		"*quota, no pod running* how long its quota stayed reserved (`QuotaReserved`) with none of its pods Running once " +
		"one had run (the waste of kubernetes-sigs/kueue#14811); each the worst run's."}

// kueuePaths are the queue rows.
func kueuePaths() []trainingPath {
	exit42 := []string{"exit42"}
	return []trainingPath{
		{id: "kueue-group", name: "in place, restart-supervisor RestartGroup", scenario: kueueScenario, faults: exit42, supervised: true,
			jobSet: func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error) {
				return kueueJobSet(e, name, ckpt, port, fault, true, false)
			}},
		{id: "kueue-jobset", name: "all pods recreated, JobSet failurePolicy.maxRestarts 3", scenario: kueueScenario, faults: exit42,
			jobSet: func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error) {
				return kueueJobSet(e, name, ckpt, port, fault, false, false)
			}},
		{id: "kueue-group-ready", name: "in place, restart-supervisor RestartGroup; readiness probe", scenario: kueueScenario, faults: exit42, supervised: true,
			jobSet: func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error) {
				return kueueJobSet(e, name, ckpt, port, fault, true, true)
			}},
		{id: "kueue-jobset-ready", name: "all pods recreated, JobSet failurePolicy.maxRestarts 3; readiness probe", scenario: kueueScenario, faults: exit42,
			jobSet: func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error) {
				return kueueJobSet(e, name, ckpt, port, fault, false, true)
			}},
	}
}

// kueueJobSet is the queue rows' JobSet: in place under RestartGroup
// (through the injector) or recreated by JobSet; with ready, the trainer
// loads for kueueLoad seconds and has a readiness probe on its first step.
func kueueJobSet(e *env, name, ckpt string, port int, fault []string, inPlace, ready bool) (*unstructured.Unstructured, error) {
	fault = slices.Concat(fault, []string{"--step-time", strconv.FormatFloat(kueueStep, 'f', -1, 64)})
	if ready {
		fault = slices.Concat(fault, []string{"--load-time", strconv.Itoa(kueueLoad), "--ready-file", kueueReadyFile})
	}
	job, err := trainingJob(e, name, ckpt, port, fault, false)
	if err != nil {
		return nil, err
	}
	if ready {
		job.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-e", kueueReadyFile}}},
			PeriodSeconds: 1,
		}
	}
	if inPlace {
		job.Spec.Template.Annotations = map[string]string{contract.AnnotationRules: trainingGroupRules}
	}
	js, err := trainingJobSet(e, name, job)
	if err != nil {
		return nil, err
	}
	js.SetLabels(map[string]string{cluster.KueueQueueLabel: cluster.KueueQueue})
	if inPlace {
		return e.mutateObject(context.Background(), js)
	}
	return js, nil
}

// kueueOptions are the harness's Kueue settings when a selected path is a
// queue row (Kueue's webhooks then see every Job the other rows create,
// and pass over those without a queue), else none.
func kueueOptions(t *testing.T, repo string, paths []trainingPath) cluster.KueueOptions {
	if !slices.ContainsFunc(paths, func(p trainingPath) bool { return p.scenario.queue }) {
		return cluster.KueueOptions{}
	}
	dir := hackDir(t, repo, "KUEUE_DIR", "kueue.sh", "Kueue")
	return cluster.KueueOptions{Dir: dir, PodsReadyTimeout: kueuePodsReadyTimeout, RecoveryTimeout: kueueRecoveryTimeout, RequeueBaseSeconds: kueueRequeueBase}
}

// queueTrack is what one run's JobSet went through in Kueue, from samples
// of its Workloads and pods (queueTrack.sample, every poll of the run).
type queueTrack struct {
	workloads map[types.UID]int // each Workload's evictions, the most its status counted
	reasons   map[string]bool   // the evictions' reasons
	last      time.Time
	// Seen so far: a Workload Admitted, PodsReady, a pod Running, a pod
	// Succeeded (the job ending).
	admitted, ready, ran, ending bool
	// What the last poll saw, counted until the next: no Workload
	// Admitted, PodsReady false, quota reserved with no pod Running (each
	// only once the first was seen).
	wasLost, wasUnready, wasIdle bool
	// Time spent, after each of those was first seen, not Admitted, with
	// PodsReady false, and with quota reserved and no pod Running.
	admissionLost, unready, idleQuota time.Duration
}

// sample adds one poll: the JobSet's Workloads, its pods' count Running,
// and whether one of them has Succeeded: the job's end, after which
// neither PodsReady nor the quota says anything of a restart (a finished
// pod is not Running, and the Workload keeps its quota until it is marked
// finished), so nothing is counted from then on. The time since the last
// poll is counted in the state that poll saw.
func (q *queueTrack) sample(now time.Time, workloads []unstructured.Unstructured, running int, ending bool) {
	if q.workloads == nil {
		q.workloads, q.reasons = map[types.UID]int{}, map[string]bool{}
	}
	admitted, ready, reserved := false, false, false
	for _, w := range workloads {
		conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["status"] != "True" {
				continue
			}
			switch m["type"] {
			case "Admitted":
				admitted = true
			case "PodsReady":
				ready = true
			case "QuotaReserved":
				reserved = true
			}
		}
		evictions, _, _ := unstructured.NestedSlice(w.Object, "status", "schedulingStats", "evictions")
		n := 0
		for _, ev := range evictions {
			m, _ := ev.(map[string]any)
			count, _, _ := unstructured.NestedInt64(m, "count")
			n += int(count)
			if r, _ := m["reason"].(string); r != "" {
				q.reasons[r] = true
			}
		}
		q.workloads[w.GetUID()] = max(q.workloads[w.GetUID()], n)
	}
	if !q.last.IsZero() && !q.ending {
		dt := now.Sub(q.last)
		if q.wasLost {
			q.admissionLost += dt
		}
		if q.wasUnready {
			q.unready += dt
		}
		if q.wasIdle {
			q.idleQuota += dt
		}
	}
	q.last = now
	q.admitted, q.ready, q.ran = q.admitted || admitted, q.ready || ready, q.ran || running > 0
	q.ending = q.ending || ending
	q.wasLost, q.wasUnready, q.wasIdle = q.admitted && !admitted, q.ready && !ready, q.ran && reserved && running == 0
}

// evictions is the run's evictions, over every Workload it had.
func (q *queueTrack) evictions() int {
	n := 0
	for _, c := range q.workloads {
		n += c
	}
	return n
}

// sampleQueue reads the Workloads Kueue made for the JobSet js (owned by
// it) and its pods, and adds them to q; it returns every pod's UID seen.
func sampleQueue(ctx context.Context, e *env, dyn dynamic.Interface, js *unstructured.Unstructured, q *queueTrack, pods map[types.UID]bool) error {
	list, err := dyn.Resource(cluster.WorkloadResource).Namespace(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var own []unstructured.Unstructured
	for _, w := range list.Items {
		for _, ref := range w.GetOwnerReferences() {
			if ref.UID == js.GetUID() {
				own = append(own, w)
			}
		}
	}
	running, succeeded, err := countPods(ctx, e, "jobset.sigs.k8s.io/jobset-name="+js.GetName(), pods)
	if err != nil {
		return err
	}
	q.sample(time.Now(), own, running, succeeded > 0)
	return nil
}

// countPods adds the UIDs of the pods selector selects to seen and returns
// how many of them are Running and how many Succeeded.
func countPods(ctx context.Context, e *env, selector string, seen map[types.UID]bool) (running, succeeded int, err error) {
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		seen[p.UID] = true
		switch p.Status.Phase {
		case corev1.PodRunning:
			running++
		case corev1.PodSucceeded:
			succeeded++
		}
	}
	return running, succeeded, nil
}

// queueHead is the queue table's head.
const queueHead = "| Path | Fault | Runs | Fault → first step after resume, median | worst | Steps lost | Final loss = unfaulted | Fault → JobSet Completed, median | worst | Pods created | Kueue evictions | PodsReady false | Admission lost | Quota, no pod running | JobSet |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"

// queueRow is one row of the queue table.
func queueRow(p trainingPath, f trainingFault, rs []trainingRun) string {
	var secs, completed []float64
	worst, worstCompleted := 0.0, 0.0
	pods, lost, states, reasons := map[int]bool{}, map[int]bool{}, map[string]bool{}, map[string]bool{}
	failed, evictions, evicted := 0, 0, 0
	var unready, lostAdmission, idle time.Duration
	for _, r := range rs {
		if r.err != nil {
			failed++
			continue
		}
		secs = append(secs, r.rec.seconds)
		worst = max(worst, r.rec.seconds)
		c := float64(r.finished.UnixNano())/1e9 - r.rec.faultAt
		completed = append(completed, c)
		worstCompleted = max(worstCompleted, c)
		pods[r.pods], lost[r.rec.stepsLost], states[r.state] = true, true, true
		if q := r.queue; q != nil {
			evictions += q.evictions()
			if q.evictions() > 0 {
				evicted++
			}
			for k := range q.reasons {
				reasons[k] = true
			}
			unready, lostAdmission, idle = max(unready, q.unready), max(lostAdmission, q.admissionLost), max(idle, q.idleQuota)
		}
	}
	runsCell := strconv.Itoa(len(rs))
	if failed > 0 {
		runsCell += fmt.Sprintf(" (%d failed)", failed)
	}
	if len(secs) == 0 {
		return fmt.Sprintf("| %s | %s | %s | – | – | – | – | – | – | – | – | – | – | – | – |\n", p.name, f.name, runsCell)
	}
	evictCell := "0"
	if evictions > 0 {
		evictCell = fmt.Sprintf("%d in %d of %d runs (%s)", evictions, evicted, len(secs), joinKeys(reasons))
	}
	secsOf := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	return fmt.Sprintf("| %s | %s | %s | %.2f s | %.2f s | %s | %d of %d | %.1f s | %.1f s | %s | %s | %s | %s | %s | %s |\n", p.name, f.name, runsCell, medianOf(secs), worst, joinInts(lost),
		len(secs), len(rs), medianOf(completed), worstCompleted, joinInts(pods), evictCell, secsOf(unready), secsOf(lostAdmission), secsOf(idle), joinKeys(states))
}
