package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// result is one scenario's outcome in one mode. outcome is the comparable
// part (what the workload and the pod did); the rest is reported alongside.
type result struct {
	outcome         string
	phase           string
	kubeletRestarts int32
	supRestarts     int // -1: the supervisor logged nothing (not wrapped, or native)
	restarted       bool
	latency         time.Duration // exit → next start, when restarted (0: below the 10 ms resolution)
	notes           []string
	err             error
}

// scenario is one row of the conformance table. want gives the expected
// outcome per mode; a supervised expectation that differs from the native
// one is a documented limitation and must say why in limitation.
type scenario struct {
	name, desc     string
	supervisedOnly bool
	want           map[mode]string
	limitation     string
	run            func(ctx context.Context, e *env, name string) result
}

const scenarioTimeout = 90 * time.Second

func restartWord(restarted bool) string {
	if restarted {
		return "restarted"
	}
	return "not restarted"
}

func fromObservation(pod *corev1.Pod, o observation) result {
	r := result{phase: string(pod.Status.Phase), kubeletRestarts: o.kubeletRestarts, supRestarts: o.supervisorRestarts}
	if o.restarted {
		r.restarted, r.latency = true, o.latency
	}
	r.outcome = fmt.Sprintf("%s, %s", pod.Status.Phase, restartWord(o.restarted))
	if o.held {
		r.outcome += ", held idle"
	}
	return r
}

// exitScenario runs one container and waits until the workload restarted
// (or, with untilTerminal, until the pod is terminal), the pod is terminal,
// or the supervisor holds the container.
func exitScenario(podPolicy corev1.RestartPolicy, untilTerminal bool, c corev1.Container, tweaks ...func(*corev1.PodSpec)) func(context.Context, *env, string) result {
	return exitScenarioN(podPolicy, untilTerminal, 1, c, tweaks...)
}

// exitScenarioN is exitScenario waiting for the given number of restarts;
// from the second one on, the time to each is reported (back-off).
func exitScenarioN(podPolicy corev1.RestartPolicy, untilTerminal bool, restarts int, c corev1.Container, tweaks ...func(*corev1.PodSpec)) func(context.Context, *env, string) result {
	return func(ctx context.Context, e *env, name string) result {
		spec := e.withVolumes(podSpec(podPolicy, 5, c), name)
		for _, t := range tweaks {
			t(&spec)
		}
		if err := e.createPod(ctx, name, spec); err != nil {
			return result{err: err}
		}
		pod, o, err := e.waitPod(ctx, name, c.Name, scenarioTimeout, func(p *corev1.Pod, o observation) bool {
			return terminal(p.Status.Phase) || o.held || (!untilTerminal && len(o.latencies) >= restarts)
		})
		if err != nil {
			return result{err: err}
		}
		if !o.counted() {
			// The workload's own record comes first; give the kubelet's
			// status (or the supervisor's log) a moment to show the restarts.
			if p, o2, err := e.waitPod(ctx, name, c.Name, 5*time.Second, func(_ *corev1.Pod, o observation) bool {
				return o.counted()
			}); err == nil {
				pod, o = p, o2
			}
		}
		if pod.Status.Phase == corev1.PodPending {
			// A restart in place can come before the kubelet's first
			// status update; wait for the phase to settle.
			if p, o2, err := e.waitPod(ctx, name, c.Name, 10*time.Second, func(p *corev1.Pod, _ observation) bool {
				return p.Status.Phase != corev1.PodPending
			}); err == nil {
				pod, o = p, o2
			}
		}
		if o.held {
			// Let the kubelet settle: a Hold must not turn into a restart.
			time.Sleep(3 * time.Second)
			if pod, o, err = e.waitPod(ctx, name, c.Name, time.Second, func(*corev1.Pod, observation) bool { return true }); err != nil {
				return result{err: err}
			}
		}
		r := fromObservation(pod, o)
		for i, l := range o.latencies {
			if i > 0 {
				r.notes = append(r.notes, fmt.Sprintf("restart %d after %.2fs", i+1, l.Seconds()))
			}
		}
		return r
	}
}

func scenarios() []scenario {
	never, always := corev1.RestartPolicyNever, corev1.RestartPolicyAlways
	cNever, cAlways := policy(corev1.ContainerRestartPolicyNever), policy(corev1.ContainerRestartPolicyAlways)
	same := func(s string) map[mode]string { return map[mode]string{native: s, supervised: s} }
	return []scenario{{
		name: "A", desc: "pod Never, container Never + Restart In [42], exit 42 (twice: the second restart shows the back-off)",
		want: same("Running, restarted"),
		run:  exitScenarioN(never, false, 2, shell("c", exitScript(42), cNever, restartIn(42))),
	}, {
		name: "B", desc: "pod Never, container Never + Restart In [42], exit 1",
		want: same("Failed, not restarted"),
		run:  exitScenario(never, false, shell("c", exitScript(1), cNever, restartIn(42))),
	}, {
		name: "C", desc: "pod Always, container Never, exit 1",
		want: map[mode]string{native: "Failed, not restarted", supervised: "Running, not restarted, held idle"},
		limitation: "A kubelet without the feature restarts every exited container of an Always pod, so the supervisor " +
			"cannot hand the exit over; it keeps the container alive with no workload (rules.Plan Hold). The workload is " +
			"not restarted, as upstream, but the pod stays Running instead of turning Failed.",
		run: exitScenario(always, false, shell("c", exitScript(1), cNever)),
	}, {
		name: "D", desc: "pod Never, container Always, exit 1",
		want: same("Running, restarted"),
		run:  exitScenario(never, false, shell("c", exitScript(1), cAlways)),
	}, {
		name: "E", desc: "pod Always, no container policy, exit 1",
		want: same("Running, restarted"),
		run:  exitScenario(always, false, shell("c", exitScript(1), nil)),
	}, {
		name: "NotIn", desc: "pod Never, container Never + Restart NotIn [0]; exit 3, then exit 0",
		want: same("Succeeded, restarted"),
		run:  exitScenario(never, true, shell("c", onceScript("exit 3", "exit 0"), cNever, restartNotIn(0))),
	}, {
		name: "Signals", desc: "pod Never, container Never + Restart In [137]; kill -9 of itself, then exit 0 (shareProcessNamespace: a PID namespace's init ignores SIGKILL from inside)",
		want: same("Succeeded, restarted"),
		run: exitScenario(never, true, shell("c", onceScript("kill -9 $$$$", "exit 0"), cNever, restartIn(137)), // $$ is the API's escape of $
			func(s *corev1.PodSpec) { s.ShareProcessNamespace = ptr(true) }),
	}, {
		name: "Job", desc: "Job, podFailurePolicy FailJob on exit 1; container Never + Restart In [42] (fields and the rules annotation); exit 42, then exit 0",
		want: same("Complete, pod Succeeded, restarted"),
		run:  jobScenario,
	}, {
		name: "DeleteInBackoff", desc: "delete (grace 10 s) while the workload waits in back-off after exit 42 (Restart In [42])",
		want: same("gone within the grace period, no restart after delete"),
		run:  deleteScenario(true),
	}, {
		name: "DeleteRunning", desc: "delete (grace 10 s) while running; SIGTERM trap exits 143 under Restart In [143]",
		want: same("gone within the grace period, no restart after delete"),
		run:  deleteScenario(false),
	}, {
		name: "StopSignal", desc: "image with STOPSIGNAL SIGQUIT, container Always; delete (grace 10 s) while running, the SIGQUIT trap exits 3 (supervised: the pod sets RESTART_SUPERVISOR_STOP_SIGNALS, since the injector reads STOPSIGNAL only from images it looks up)",
		want: same("gone within the grace period, no restart after delete, stopped by SIGQUIT"),
		run:  stopSignalScenario,
	}, {
		name: "InitExit0", desc: "pod Never, init container Never + Restart NotIn [1] exits 0 (initialized without the rules, as computeInitContainerActions)",
		want: same("Running, init ran 1×, exit 0 (Completed), c started"),
		run:  initScenario,
	}, {
		name: "Grace", desc: "terminationGracePeriodSeconds 40, delete with the pod's grace; the SIGTERM trap checkpoints for 30 s (past the supervisor's old 25 s SIGKILL), then exits 0",
		want: same("checkpoint done, exit 0, gone within the grace period"),
		run:  graceScenario,
	}, {
		name: "BackoffHandOver", desc: "pod Always, container Always + Restart In [42]; exits 42, 42, 1, 42, 42, then stays up (supervised: the 1 goes to the kubelet, the next supervisor keeps the count)",
		want: same("Running, restarted, first restart within 15 s, then each delay at least 10, 20, 40, 80 s and short of the next step"),
		run:  backoffScenario,
	}, {
		name: "RestartAllContainers", desc: "two containers, shared emptyDir; one exits 42 under RestartAllContainers In [42]",
		supervisedOnly: true,
		want:           map[mode]string{supervised: "Running, both restarted once, emptyDir kept"},
		run:            restartAllScenario,
	}}
}

func jobScenario(ctx context.Context, e *env, name string) result {
	one := int32(1)
	spec := e.withVolumes(podSpec(corev1.RestartPolicyNever, 5,
		shell("c", onceScript("exit 42", "exit 0"), policy(corev1.ContainerRestartPolicyNever), restartIn(42))), name)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: batchv1.JobSpec{
			Parallelism: &one, Completions: &one, BackoffLimit: &one,
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action: batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr("c"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1},
				},
			}}},
			// An API server with the gate off drops the fields from stored
			// templates (docs/webhook.md); the annotation carrier survives.
			// Both modes run the same manifest.
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
					"restart-supervisor.dev/rules": `{"c":{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}}`,
				}},
				Spec: spec,
			},
		},
	}
	if err := e.createJob(ctx, job); err != nil {
		return result{err: err}
	}
	var state string
	deadline := time.Now().Add(scenarioTimeout)
	for state == "" {
		j, err := e.c.Client.BatchV1().Jobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return result{err: err}
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				state = string(c.Type)
			}
		}
		if state == "" && time.Now().After(deadline) {
			return result{err: fmt.Errorf("job %s: neither Complete nor Failed after %s", name, scenarioTimeout)}
		}
		time.Sleep(300 * time.Millisecond)
	}
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
	if err != nil || len(pods.Items) == 0 {
		return result{err: fmt.Errorf("job %s: no pods: %v", name, err)}
	}
	pod := &pods.Items[0]
	o := observe(pod, "c", e.containerLogs(ctx, pod, "c"), e.events(name, "c"))
	r := fromObservation(pod, o)
	r.outcome = fmt.Sprintf("%s, pod %s, %s", state, pod.Status.Phase, restartWord(o.restarted))
	if len(pods.Items) > 1 {
		r.notes = append(r.notes, fmt.Sprintf("%d pods created", len(pods.Items)))
	}
	return r
}

func deleteScenario(inBackoff bool) func(context.Context, *env, string) result {
	return func(ctx context.Context, e *env, name string) result {
		const grace = 10
		c := shell("c", exitScript(42), policy(corev1.ContainerRestartPolicyNever), restartIn(42))
		if !inBackoff {
			c = shell("c", fmt.Sprintf("trap 'mark %s; exit 143' TERM; mark %s; sleep 3600 & wait", markExit, markStart),
				policy(corev1.ContainerRestartPolicyNever), restartIn(143))
		}
		if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, grace, c), name)); err != nil {
			return result{err: err}
		}
		_, _, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(p *corev1.Pod, o observation) bool {
			if inBackoff {
				// Second exit: both the kubelet and the supervisor now wait 10 s.
				return o.exits >= 2 && o.lastIsExit
			}
			return o.starts >= 1
		})
		if err != nil {
			return result{err: err}
		}
		time.Sleep(time.Second)
		// The state just before the delete (status and logs lag the
		// workload's own record a little).
		pod, o, err := e.waitPod(ctx, name, "c", 5*time.Second, func(_ *corev1.Pod, o observation) bool { return o.counted() })
		if err != nil && pod == nil {
			return result{err: err}
		}
		r := fromObservation(pod, o)
		took, restartedAfter, err := e.deleteAndWait(ctx, name, "c", grace, 2*grace*time.Second)
		if err != nil {
			return result{err: err}
		}
		within := "gone within the grace period"
		if took > grace*time.Second+3*time.Second { // the kubelet's sync adds up to a few seconds
			within = "gone after the grace period"
		}
		after := "no restart after delete"
		if restartedAfter {
			after = "restarted after delete"
		}
		r.outcome = within + ", " + after
		r.notes = append(r.notes, fmt.Sprintf("delete → gone %.1fs", took.Seconds()))
		r.phase = "deleted"
		return r
	}
}

// stopSignalScenario: the runtime stops a container with its image's
// STOPSIGNAL. Natively the pod's deletion then ends the container whatever
// its policy; a supervisor that took SIGQUIT for an ordinary signal would
// judge the workload's exit 3 by the container policy Always and restart
// it in place while the pod is being deleted.
func stopSignalScenario(ctx context.Context, e *env, name string) result {
	const grace = 10
	c := shell("c", fmt.Sprintf("trap 'mark %s; exit 3' QUIT; mark %s; sleep 3600 & wait", markExit, markStart),
		policy(corev1.ContainerRestartPolicyAlways))
	c.Image = cluster.BusyboxQuitImage
	c.Env = append(c.Env, corev1.EnvVar{Name: contract.EnvStopSignals, Value: "SIGTERM,SIGINT,SIGQUIT"})
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, grace, c), name)); err != nil {
		return result{err: err}
	}
	pod, o, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return o.starts >= 1 })
	if err != nil {
		return result{err: err}
	}
	time.Sleep(time.Second)
	r := fromObservation(pod, o)
	took, restartedAfter, err := e.deleteAndWait(ctx, name, "c", grace, 2*grace*time.Second)
	if err != nil {
		return result{err: err}
	}
	parts := []string{"gone within the grace period", "no restart after delete", "not stopped by SIGQUIT"}
	if took > grace*time.Second+3*time.Second {
		parts[0] = "gone after the grace period"
	}
	if restartedAfter {
		parts[1] = "restarted after delete"
	}
	for _, ev := range e.events(name, "c") {
		if ev.kind == markExit {
			parts[2] = "stopped by SIGQUIT"
		}
	}
	r.outcome = strings.Join(parts, ", ")
	r.notes = append(r.notes, fmt.Sprintf("delete → gone %.1fs", took.Seconds()))
	r.phase = "deleted"
	return r
}

func restartAllScenario(ctx context.Context, e *env, name string) result {
	// a exits only once b runs: a RestartAllContainers before b's first
	// start has nothing to restart in b.
	a := shell("a", fmt.Sprintf("mark %s; if [ -e /data/a.ran ]; then echo kept-marker; sleep 3600; fi; touch /data/a.ran; "+
		"until [ -e /events/b ]; do sleep 0.1; done; sleep 0.5; mark %s; exit 42", markStart, markExit),
		policy(corev1.ContainerRestartPolicyNever),
		rule(corev1.ContainerRestartRuleActionRestartAllContainers, corev1.ContainerRestartRuleOnExitCodesOpIn, 42))
	b := shell("b", "mark "+markStart+"; sleep 3600", nil)
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, a, b), name)); err != nil {
		return result{err: err}
	}
	_, _, err := e.waitPod(ctx, name, "b", scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return o.starts >= 2 })
	if err != nil {
		return result{err: err}
	}
	time.Sleep(2 * time.Second) // a second, unwanted restart would show by now
	pod, ob, _ := e.waitPod(ctx, name, "b", time.Second, func(*corev1.Pod, observation) bool { return true })
	la := e.containerLogs(ctx, pod, "a")
	oa := observe(pod, "a", la, e.events(name, "a"))
	kept := false
	for _, l := range la {
		kept = kept || strings.Contains(l.text, "kept-marker")
	}
	r := fromObservation(pod, oa)
	switch {
	case oa.starts == 2 && ob.starts == 2 && kept:
		r.outcome = fmt.Sprintf("%s, both restarted once, emptyDir kept", pod.Status.Phase)
	default:
		r.outcome = fmt.Sprintf("%s, a started %d×, b started %d×, marker kept %v", pod.Status.Phase, oa.starts, ob.starts, kept)
	}
	r.notes = append(r.notes, fmt.Sprintf("supervisor restarts a=%d b=%d", oa.supervisorRestarts, ob.supervisorRestarts))
	return r
}

func ptr[T any](v T) *T { return &v }
