package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// The rows of this file are the controllers that count restartCount
// (docs/supervisor.md, "Controllers that read restartCount") and the kills
// the kernel makes (an out-of-memory kill): what the kubelet does natively
// beside what a wrapped container does under its limits.

// budgetRuns is how many runs the restart-budget row's workload exits 42
// before it stays up: one more than its budget of 3, so that a supervisor
// honouring the budget hands the fourth exit over, and one that did not
// would be left running with a Job that never fails.
const budgetRuns = 4

// budgetJobScenario is the Job a restart budget exists for (issue "Play
// well with the controllers that count restarts"): pod OnFailure,
// backoffLimit 1, container Never + Restart In [42], and a budget of 3 in
// the rules annotation (no field holds one). The Job controller fails an
// OnFailure Job once the sum of its pods' restartCount reaches backoffLimit
// (pkg/controller/job/job_controller.go pastBackoffLimitOnFailure,
// k8s.io/kubernetes v1.37.2), and KEP-5307's rule restarts count there.
// Natively the first exit 42 is a kubelet restart: restartCount 1, the Job
// fails. Wrapped, the supervisor restarts it in place three times (the Job
// sees nothing), hands the fourth exit over (the injected container has no
// rules left, so the pod's OnFailure restarts it): restartCount 1, and the
// Job fails as natively. Both end the same; a wrapped pod must also show
// exactly budgetRuns exits before the kubelet's restart.
func budgetJobScenario(ctx context.Context, e *env, name string) result {
	one := int32(1)
	script := fmt.Sprintf("mark %s; n=$(cat /data/$C.runs 2>/dev/null || echo 0); echo $((n+1)) > /data/$C.runs; "+
		"if [ \"$n\" -lt %d ]; then sleep 0.2; mark %s; exit 42; fi; sleep 3600", markStart, budgetRuns, markExit)
	c := shell("c", script, policy(corev1.ContainerRestartPolicyNever), restartIn(42))
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: batchv1.JobSpec{
			Parallelism: &one, Completions: &one, BackoffLimit: &one,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
					contract.AnnotationRules: `{"c":{"restartBudget":{"maxRestarts":3}}}`,
				}},
				Spec: e.withVolumes(podSpec(corev1.RestartPolicyOnFailure, 5, c), name),
			},
		},
	}
	if err := e.createJob(ctx, job); err != nil {
		return result{err: err}
	}
	var (
		cond     *batchv1.JobCondition
		restarts int32
		wrapped  bool
	)
	deadline := time.Now().Add(scenarioTimeout)
	for cond == nil {
		pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
		if err != nil {
			return result{err: err}
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			_, w := p.Annotations[contract.AnnotationStatus]
			wrapped = wrapped || w
			if cs := containerStatus(p, "c"); cs != nil {
				restarts = max(restarts, cs.RestartCount)
			}
		}
		j, err := e.c.Client.BatchV1().Jobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return result{err: err}
		}
		for i, jc := range j.Status.Conditions {
			if (jc.Type == batchv1.JobComplete || jc.Type == batchv1.JobFailed) && jc.Status == corev1.ConditionTrue {
				cond = &j.Status.Conditions[i]
			}
		}
		if cond == nil && time.Now().After(deadline) {
			return result{err: fmt.Errorf("job %s: neither Complete nor Failed after %s (restartCount %d)", name, scenarioTimeout, restarts)}
		}
		time.Sleep(300 * time.Millisecond)
	}
	o := observe(&corev1.Pod{}, "c", nil, e.events(name, "c"))
	exits := o.exits
	r := result{phase: string(cond.Type), kubeletRestarts: restarts, supRestarts: -1, restarted: o.restarted, latency: o.latency}
	r.outcome = fmt.Sprintf("%s (%s), restartCount %d", cond.Type, cond.Reason, restarts)
	if wrapped {
		// The runs before the kubelet's restart: three in place and the
		// one handed over. A later run stays up, so no more exits come.
		r.supRestarts = exits - 1
		if exits != budgetRuns {
			return result{err: fmt.Errorf("job %s: wrapped, %d exits 42 before the Job ended, want %d (3 in place under the budget, the fourth handed over)", name, exits, budgetRuns)}
		}
		r.notes = append(r.notes, fmt.Sprintf("%d in-place restarts first (restartBudget 3), the fourth exit handed over", exits-1))
	} else {
		r.notes = append(r.notes, fmt.Sprintf("%d exits 42: the first restarted by the kubelet", exits))
	}
	return r
}

// oomScenario: the kernel's OOM killer kills the workload, and a rule on
// 137 restarts it. Container Never + Restart In [137], memory limit 48Mi;
// the first run reads /dev/zero into memory (busybox tail keeps it all),
// the second exits 0. Natively the kubelet restarts it and reports the
// kill as lastState.terminated.reason OOMKilled (the runtime's OOM event);
// wrapped, only the workload is killed (the OOM killer picks the largest
// process of the cgroup, and on cgroup v1 it kills one process: the
// kubelet's singleProcessOOMKill, which v1 cannot set false), the
// supervisor restarts it in place and tells it OOMKilled from the cgroup's
// own counter (supervise/oom.go), in its log line and the status document.
func oomScenario(ctx context.Context, e *env, name string) result {
	// The first run's last record is made just before it starts to fill
	// its memory; the second run lasts 2 s, so that a poll sees the
	// kubelet's lastState of the first (a terminal pod's status may no
	// longer carry it).
	c := shell("c", fmt.Sprintf("mark %s; if [ -e /data/$C.ran ]; then sleep 2; mark %[2]s; exit 0; fi; touch /data/$C.ran; mark %[2]s; exec tail /dev/zero", markStart, markExit),
		policy(corev1.ContainerRestartPolicyNever), restartIn(137))
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("48Mi")},
	}
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, c), name)); err != nil {
		return result{err: err}
	}
	var killed *corev1.ContainerStateTerminated
	pod, _, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(p *corev1.Pod, _ observation) bool {
		if cs := containerStatus(p, "c"); cs != nil && killed == nil {
			if t := cs.LastTerminationState.Terminated; t != nil {
				killed = t.DeepCopy()
			} else if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				killed = t.DeepCopy()
			}
		}
		return terminal(p.Status.Phase)
	})
	if err != nil {
		return result{err: err}
	}
	o := observe(pod, "c", nil, e.events(name, "c"))
	cs := containerStatus(pod, "c")
	r := result{phase: string(pod.Status.Phase), kubeletRestarts: cs.RestartCount, supRestarts: -1, restarted: o.restarted, latency: o.latency}
	starts := o.starts
	reported := "not reported"
	_, wrapped := pod.Annotations[contract.AnnotationStatus]
	if wrapped {
		r.supRestarts = starts - 1
		for _, l := range e.containerLogs(ctx, pod, "c") {
			if strings.Contains(l.text, "exitReason=OOMKilled") {
				reported = "reported OOMKilled"
				note := "supervisor's log of the exit:"
				for _, f := range strings.Fields(l.text) {
					if strings.HasPrefix(f, "exitCode=") || strings.HasPrefix(f, "signal=") || strings.HasPrefix(f, "exitReason=") {
						note += " " + f
					}
				}
				r.notes = append(r.notes, note)
				break
			}
		}
	} else if killed != nil {
		if killed.Reason == "OOMKilled" {
			reported = "reported OOMKilled"
		}
		r.notes = append(r.notes, fmt.Sprintf("kubelet: the first run terminated with exit %d, reason %s", killed.ExitCode, killed.Reason))
	}
	// The kubelet's final state of the container, in both modes: natively
	// the second run is a new container (Completed); under the supervisor
	// the same container, which containerd marked OOMKilled for its life.
	final := "no final state"
	if t := cs.State.Terminated; t != nil {
		final = fmt.Sprintf("final state exit %d %s", t.ExitCode, t.Reason)
	}
	r.outcome = fmt.Sprintf("%s, %s, the kill %s, %s", pod.Status.Phase, restartWord(starts > 1), reported, final)
	return r
}
