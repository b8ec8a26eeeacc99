package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// The rows of this file are the cases a line-by-line read of the kubelet
// (k8s.io/kubernetes v1.37.2) found the table never exercised: the upstream
// Job e2e as written, termination messages, repeated pod restarts, the
// stop order of a pod restart, and a restart the kubelet makes itself (an
// in-place resize). docs/pod-level.md and docs/supervisor.md say what each
// shows.

// upstreamJobScenario is test/e2e/apps/job.go's "containers restarted by
// container restart policy should not trigger PodFailurePolicy" (v1.34.4
// and v1.37.2, the same test) as written: an indexed-less Job of one pod,
// pod Never, its container OnFailure without rules, the "failOnce" command
// (exit 1 on the first run, 0 after), podFailurePolicy FailJob on exit 1,
// backoffLimit 1. The container's own restart must keep the pod from
// failing, so the Job completes with one pod. Through the webhook the
// fields travel in the rules annotation (createJob), as a user of a gate-off
// cluster writes them.
func upstreamJobScenario(ctx context.Context, e *env, name string) result {
	c := shell("c", onceScript("exit 1", "exit 0"), policy(corev1.ContainerRestartPolicyOnFailure))
	return runJob(ctx, e, name, c, nil)
}

// termMessage classifies a container's final termination message by the
// words each run left: the first run's file, the last run's file, the last
// run's log (what FallbackToLogsOnError shows).
func termMessage(msg string, first, last, logged string) string {
	var parts []string
	if strings.Contains(msg, first) {
		parts = append(parts, "the first run's file")
	}
	if strings.Contains(msg, last) {
		parts = append(parts, "the last run's file")
	}
	if strings.Contains(msg, logged) {
		parts = append(parts, "the log")
	}
	if len(parts) == 0 {
		return "empty"
	}
	return strings.Join(parts, " and ")
}

// terminationMessageScenario: the kubelet gives every container instance
// an empty termination-message file (kuberuntime_container.go makeMounts,
// v1.37.2) and, under FallbackToLogsOnError, shows the log's tail only when
// the file is empty and the exit is not 0 (convertToKubeContainerStatus). So
// a message an earlier in-place run wrote must not become the final one,
// and a last run that wrote none must fall back to the log. Container a
// (File) writes first-a and exits 42, then writes last-a and exits 1;
// container b (FallbackToLogsOnError) writes first-b and exits 42, then
// only prints last-b to its log and exits 1.
func terminationMessageScenario(ctx context.Context, e *env, name string) result {
	script := func(n string) string {
		return fmt.Sprintf("mark %s; if [ -e /data/%s.ran ]; then %s; sleep 0.2; mark %s; exit 1; fi; touch /data/%s.ran; "+
			"echo first-%s > /dev/termination-log; sleep 0.2; mark %s; exit 42",
			markStart, n, map[string]string{"a": "echo last-a > /dev/termination-log", "b": "echo logged-b"}[n], markExit, n, n, markExit)
	}
	a := shell("a", script("a"), policy(corev1.ContainerRestartPolicyNever), restartIn(42))
	b := shell("b", script("b"), policy(corev1.ContainerRestartPolicyNever), restartIn(42))
	b.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, a, b), name)); err != nil {
		return result{err: err}
	}
	pod, o, err := e.waitPod(ctx, name, "a", scenarioTimeout, func(p *corev1.Pod, _ observation) bool {
		for _, n := range []string{"a", "b"} {
			if cs := containerStatus(p, n); cs == nil || cs.State.Terminated == nil {
				return false
			}
		}
		return terminal(p.Status.Phase)
	})
	if err != nil {
		return result{err: err}
	}
	r := fromObservation(pod, o)
	ob := observe(pod, "b", e.containerLogs(ctx, pod, "b"), e.events(name, "b"))
	msgA := containerStatus(pod, "a").State.Terminated.Message
	msgB := containerStatus(pod, "b").State.Terminated.Message
	r.outcome = fmt.Sprintf("%s, a %s, b %s; message of a: %s; of b: %s", pod.Status.Phase, restartWord(o.restarted), restartWord(ob.restarted),
		termMessage(msgA, "first-a", "last-a", "logged-a"), termMessage(msgB, "first-b", "last-b", "logged-b"))
	r.notes = append(r.notes, fmt.Sprintf("a: %q", oneLine(msgA)), fmt.Sprintf("b: %d lines, last %q", strings.Count(strings.TrimSpace(msgB), "\n")+1, lastLine(msgB)))
	return r
}

// oneLine joins a message's lines for a table cell, shortened.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(s), "\n", " / ")), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return oneLine(lines[len(lines)-1])
}

// repeatedRounds is how many pod restarts repeatedPodRestartsScenario makes.
const repeatedRounds = 3

// repeatedPodRestartsScenario: three pod restarts, with a solo restart of
// the source between each two (upstream's e2e "RestartAllContainers after a
// container restart", repeated). Container a has Restart In [1] and
// RestartAllContainers In [42]; its runs alternate: once b has started
// again, exit 42 (a pod restart), then exit 1 (a restarted alone), then
// exit 42, ...; b has no rules. Upstream every member of a pod restart is
// started in the same sync, with no back-off between pod restarts
// (kuberuntime_manager.go getContainersToReset and doBackOff, v1.37.2): a
// must start each round with b (within startedTogether), not a back-off
// later.
func repeatedPodRestartsScenario(ctx context.Context, e *env, name string) result {
	// Run n (0-based) waits for b's start number n/2+1 (b has started once
	// more after each round), then: even n below 2*rounds exits 42, odd
	// exits 1, the last runs on.
	a := shell("a", fmt.Sprintf(`mark %s; n=$(cat /data/a.runs 2>/dev/null || echo 0); echo $((n+1)) > /data/a.runs; `+
		`if [ "$n" -ge %d ]; then sleep 3600; fi; want=$((n/2+1)); `+
		`until [ "$(grep -c '^%s ' /events/b 2>/dev/null)" -ge "$want" ]; do sleep 0.1; done; sleep 1; mark %s; `+
		`if [ $((n%%2)) -eq 0 ]; then exit 42; fi; exit 1`, markStart, 2*repeatedRounds, markStart, markExit),
		policy(corev1.ContainerRestartPolicyNever),
		rule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpIn, 1),
		rule(corev1.ContainerRestartRuleActionRestartAllContainers, corev1.ContainerRestartRuleOnExitCodesOpIn, 42))
	b := shell("b", "mark "+markStart+"; sleep 3600", nil)
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, a, b), name)); err != nil {
		return result{err: err}
	}
	// Three solo restarts wait the crash back-off natively (10 s, 20 s, …).
	if _, _, err := e.waitPod(ctx, name, "a", 2*scenarioTimeout, func(_ *corev1.Pod, o observation) bool {
		return o.starts >= 2*repeatedRounds+1
	}); err != nil {
		return result{err: err}
	}
	pod, ob, err := e.secondRun(ctx, name, "b", 3*time.Second)
	if err != nil {
		return result{err: err}
	}
	oa := observe(pod, "a", e.containerLogs(ctx, pod, "a"), e.events(name, "a"))
	r := fromObservation(pod, oa)
	starts := func(c string) []time.Duration {
		var out []time.Duration
		for _, ev := range e.events(name, c) {
			if ev.kind == markStart {
				out = append(out, ev.at)
			}
		}
		return out
	}
	sa, sb := starts("a"), starts("b")
	// Round k (1-based) starts a's run 2k-1 (0-based) and b's start k.
	together := true
	for k := 1; k <= repeatedRounds && 2*k-1 < len(sa) && k < len(sb); k++ {
		d := sa[2*k-1] - sb[k]
		r.notes = append(r.notes, fmt.Sprintf("round %d: a started %+.2fs after b", k, d.Seconds()))
		if d < -startedTogether || d > startedTogether {
			together = false
		}
	}
	word := "a and b started together in each round"
	if !together {
		word = "a and b started apart in a round"
	}
	r.outcome = fmt.Sprintf("%s, a ran %d×, b started %d×, %s", pod.Status.Phase, oa.starts, ob.starts, word)
	return r
}

// startedTogether bounds how far apart two members of one pod restart may
// start and still count as started together: far below a crash back-off's
// first step (10 s), which is what the row tells apart. Natively the
// kubelet starts every regular container of the round in one sync, one
// after another (kuberuntime_manager.go, SyncPod's start loop, v1.35.4 and
// v1.37.2), 0.07–0.17 s apart here; but on v1.35.4 the first round of a pod
// started a 0.13–1.67 s before b in 10 native runs (a start left to the
// next sync, which that kubelet reaches only after its next relist, every
// 1 s: genericPlegRelistPeriod, kubelet.go:212), where v1.37.2 relists on
// demand after a sync that changed something (kubelet.go:2321-2326).
// Upstream's own e2e tests of the action assert no timing at all.
const startedTogether = 2500 * time.Millisecond

// stopOrderContainers is how many containers without rules stopOrderScenario
// runs beside the source; each takes 1 s to stop.
const stopOrderContainers = 3

// stopOrderScenario: upstream a pod restart stops the running containers
// one after another, each waited for (kuberuntime_manager.go, the
// ContainersToReset loop, v1.37.2); the supervisors stop every member at
// once (docs/pod-level.md "Stop order"). The source exits 42 under
// RestartAllContainers once the three others run; each of them records the
// stop signal when it comes and takes 1 s to exit.
func stopOrderScenario(ctx context.Context, e *env, name string) result {
	last := fmt.Sprintf("c%d", stopOrderContainers-1)
	src := shell("source", fmt.Sprintf("mark %s; if [ -e /data/source.ran ]; then sleep 3600; fi; touch /data/source.ran; "+
		"until [ -e /events/%s ]; do sleep 0.1; done; sleep 1; mark %s; exit 42", markStart, last, markExit),
		policy(corev1.ContainerRestartPolicyNever),
		rule(corev1.ContainerRestartRuleActionRestartAllContainers, corev1.ContainerRestartRuleOnExitCodesOpIn, 42))
	containers := []corev1.Container{src}
	for i := range stopOrderContainers {
		containers = append(containers, shell(fmt.Sprintf("c%d", i),
			"mark "+markStart+"; trap 'mark "+markStop+"; sleep 1; mark "+markExit+"; exit 0' TERM; sleep 3600 & wait", nil))
	}
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, containers...), name)); err != nil {
		return result{err: err}
	}
	pod, _, err := e.secondRun(ctx, name, last, 3*time.Second)
	if err != nil {
		return result{err: err}
	}
	osrc := observe(pod, "source", e.containerLogs(ctx, pod, "source"), e.events(name, "source"))
	r := fromObservation(pod, osrc)
	var stops []time.Duration
	twice := true
	for i := range stopOrderContainers {
		n, seen := fmt.Sprintf("c%d", i), 0
		for _, ev := range e.events(name, n) {
			switch ev.kind {
			case markStop:
				stops = append(stops, ev.at)
			case markStart:
				seen++
			}
		}
		twice = twice && seen == 2
	}
	sort.Slice(stops, func(i, j int) bool { return stops[i] < stops[j] })
	order := "stop signals not all seen"
	if len(stops) == stopOrderContainers {
		spread := stops[len(stops)-1] - stops[0]
		order = "stopped at once"
		// One after another, each waited for: the last signal comes at
		// least (n-1) × 1 s after the first.
		if spread >= time.Duration(stopOrderContainers-1)*900*time.Millisecond {
			order = "stopped one after another"
		}
		r.notes = append(r.notes, fmt.Sprintf("stop signals over %.2fs", spread.Seconds()))
	}
	started := "each started twice"
	if !twice {
		started = "not each started twice"
	}
	r.outcome = fmt.Sprintf("%s, %s, %s", pod.Status.Phase, order, started)
	return r
}

// resizeScenario: a restart the kubelet makes itself, an in-place resize of
// the memory limit under resizePolicy RestartContainer, must start the next
// run at once: the kubelet measures the crash back-off from the last crash
// only (kuberuntime_manager.go doBackOff: a container that was running
// when the sync began has no back-off, v1.37.2). The workload exits 42
// three times (in-place restarts on the curve 0, 10 s, 20 s), then runs;
// its memory limit is raised from 64Mi to 80Mi, and the first run after it
// exits 42 once more: restarted on a fresh curve (curveWord). Pod Always: a
// pod Never takes only resizePolicy NotRequired (validation.go
// validateResizePolicy).
func resizeScenario(ctx context.Context, e *env, name string) result {
	// Runs 1 to 3 exit 42 (back-off 0, 10 s, 20 s); run 4 waits for the
	// resize's stop; run 5, the first after the resize, exits 42 once
	// more; run 6 stays. The back-off key holds the resources
	// (GetBackoffKey, kuberuntime/helpers.go:193-207, v1.37.2): the
	// resize's start makes a new entry, so run 5's crash waits the first
	// step (10 s), not the old curve's fourth (40 s).
	c := shell("c", fmt.Sprintf("mark %s; n=$(cat /data/c.runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/c.runs; "+
		"if [ $n -eq 4 ] || [ $n -ge 6 ]; then trap 'mark %s; exit 143' TERM; sleep 3600 & wait; fi; "+
		"sleep 0.2; mark %s; exit 42", markStart, markExit, markExit),
		policy(corev1.ContainerRestartPolicyNever), restartIn(42))
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	c.ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyAlways, 5, c), name)); err != nil {
		return result{err: err}
	}
	if _, _, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return o.starts >= 4 }); err != nil {
		return result{err: err}
	}
	time.Sleep(time.Second)
	if err := e.resizeMemoryLimit(ctx, name, "c", "80Mi"); err != nil {
		return result{err: err}
	}
	// The workload's own record says when it started again; the kubelet's
	// status (restartCount, the resources it applied) follows at its next
	// sync, which on a loaded v1.34.4 node came after the new run had
	// started: wait for both, the status up to statusSlack.
	if _, _, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return o.starts >= 6 }); err != nil {
		return result{err: err}
	}
	pod, o, err := e.waitPod(ctx, name, "c", statusSlack, func(p *corev1.Pod, o observation) bool {
		cs := containerStatus(p, "c")
		return cs != nil && cs.State.Running != nil && cs.Resources != nil &&
			cs.Resources.Limits.Memory().Cmp(resource.MustParse("80Mi")) == 0
	})
	if pod == nil {
		return result{err: err}
	}
	r := fromObservation(pod, o)
	if len(o.latencies) < 5 {
		return result{err: fmt.Errorf("%d restarts recorded, want 5", len(o.latencies))}
	}
	r.restarted, r.latency = true, o.latencies[3]
	when := "at once"
	if r.latency > 5*time.Second {
		when = fmt.Sprintf("after a %.0fs back-off", r.latency.Seconds())
	}
	// What the kubelet's status says of the resize is a note: on v1.35.4
	// the native run's status still showed restartCount 1 and no applied
	// limit 30 s after the resized container had started again, while
	// v1.37.2 showed both; the row is about the restart's timing.
	limit := "status: limit not applied"
	if cs := containerStatus(pod, "c"); cs != nil && cs.Resources != nil {
		if l, ok := cs.Resources.Limits[corev1.ResourceMemory]; ok && l.Cmp(resource.MustParse("80Mi")) == 0 {
			limit = "status: limit 80Mi"
		}
	}
	r.outcome = fmt.Sprintf("%s, restarted by the resize %s, the crash after it restarted %s", pod.Status.Phase, when,
		curveWord(o.latencies[4]))
	r.notes = append(r.notes, fmt.Sprintf("resize restart after %.2fs, the crash after it %.2fs", r.latency.Seconds(), o.latencies[4].Seconds()), limit)
	return r
}

// curveWord says which back-off curve the first crash after a resize was
// restarted on. The kubelet's back-off key holds the container's resources
// (GetBackoffKey, kuberuntime/helpers.go:187-200 at v1.35.4, 193-207 at
// v1.37.2), so the resized container is on a fresh curve: its first crash
// waits at most the first step (10 s), against the old curve's 40 s after
// three crashes. Where on the fresh curve depends on whether the
// resize's own restart already made the new key's first entry (doBackOff's
// Next): v1.37.2 always showed a full step here, v1.35.4 a full step in 4
// native runs and a restart at once in 2 (0.87 s, 1.00 s), the same pod in
// the same setup. Both are the fresh curve that the row tells from the old
// one; the figure is in the notes.
func curveWord(l time.Duration) string {
	if l < 10*time.Second+18*time.Second {
		return "on a fresh curve"
	}
	return fmt.Sprintf("after %.1fs, the old curve", l.Seconds())
}

// latencyWord says how a kill→start latency compares with the kubelet's
// back-off: at once (within the kubelet's sync and the PLEG's relist,
// which took up to 6.5 s for a first restart on a loaded 2-core v1.34.4
// node and 8.7 s on a v1.35.4 one: below the full step's band, which
// starts a second before the first step, 10 s, ends), or after a full step of
// step, or the figure itself. A kubelet retries a refused start late:
// v1.37.2 after the time left plus up to half of it again
// (wait.Jitter(…, 0.5), pod_workers.go:1538-1547), v1.34.4 after
// Jitter(10 s, 0.5) whatever is left (completeWork, pod_workers.go:1510-1524,
// backOffPeriod kubelet.go:216), so a refused start can come up to 15 s
// after the step ends (19.3 s for a 10 s step on a loaded v1.34.4 node).
func latencyWord(l, step time.Duration) string {
	switch {
	case l < atOnce:
		return "at once"
	case l >= step-time.Second && l < step+18*time.Second:
		return "after a full step"
	}
	return fmt.Sprintf("after %.1fs", l.Seconds())
}

// atOnce bounds a restart without back-off: the kubelet's own latency,
// up to where a first step's band begins (latencyWord).
const atOnce = 9 * time.Second

// probeKillBackoffScenario: four liveness kills. Natively the kubelet
// kills the container and tries to start it in the same sync, where
// doBackOff asks about the instance that exited before
// (kuberuntime_manager.go:2080-2107, v1.37.2): kill 1 has none (at once,
// no step), kill 2 finds it with no entry yet (at once, first step),
// kill 3 finds it 5 s ago, under the 10 s step (refused: a full step
// after the kill), kill 4 finds it more than 20 s ago (at once). Runs 1-3
// last 5 s, run 4 12 s, so that every case is clear of the boundaries.
func probeKillBackoffScenario(ctx context.Context, e *env, name string) result {
	c := withProbes(shell("c", `trap 'mark `+markExit+`; exit 143' TERM; mark `+markStart+`; touch /tmp/healthy; `+
		`n=$(cat /data/$C.runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/$C.runs; `+
		`case $n in 1|2|3) sleep 5 ;; 4) sleep 12 ;; *) sleep 3600 ;; esac; rm -f /tmp/healthy; while :; do sleep 0.1; done`,
		policy(corev1.ContainerRestartPolicyAlways)), execProbe(0, 1, 1, "cat", "/tmp/healthy"), nil)
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, c), name)); err != nil {
		return result{err: err}
	}
	pod, o, err := e.waitPod(ctx, name, "c", 3*scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return len(o.latencies) >= 4 })
	if err != nil {
		return result{err: err}
	}
	r := fromObservation(pod, o)
	words := make([]string, 4)
	for i, l := range o.latencies[:4] {
		words[i] = latencyWord(l, 10*time.Second)
		r.notes = append(r.notes, fmt.Sprintf("kill %d → start %.2fs", i+1, l.Seconds()))
	}
	r.outcome = fmt.Sprintf("%s, 4 liveness kills, restarted %s", pod.Status.Phase, strings.Join(words, ", "))
	return r
}

// startupProbeKillScenario: a startup probe that never succeeds in the
// first run (its file is made only in the second) kills the container
// after failureThreshold × periodSeconds, and the container's policy
// (Always) restarts it (kuberuntime_manager.go, "For probe failures, use
// container-level restart policy only", v1.37.2); the second run starts.
func startupProbeKillScenario(ctx context.Context, e *env, name string) result {
	c := withProbes(shell("c", `trap 'mark `+markExit+`; exit 143' TERM; mark `+markStart+`; rm -f /tmp/started; `+
		`if [ -e /data/$C.ran ]; then touch /tmp/started; fi; touch /data/$C.ran; while :; do sleep 0.1; done`,
		policy(corev1.ContainerRestartPolicyAlways)), nil, execProbe(0, 1, 3, "cat", "/tmp/started"))
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, c), name)); err != nil {
		return result{err: err}
	}
	if _, _, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return o.starts >= 2 }); err != nil {
		return result{err: err}
	}
	// A second kill would come within failureThreshold × periodSeconds
	// of the second start: give it the time to show.
	time.Sleep(6 * time.Second)
	pod, o, err := e.waitPod(ctx, name, "c", statusSlack, func(p *corev1.Pod, _ observation) bool { return p.Status.Phase != corev1.PodPending })
	if pod == nil {
		return result{err: err}
	}
	r := fromObservation(pod, o)
	r.outcome = fmt.Sprintf("%s, killed by the startup probe %d×, started %d×", pod.Status.Phase, o.exits, o.starts)
	if len(o.latencies) > 0 {
		r.notes = append(r.notes, fmt.Sprintf("kill → start %.2fs", o.latencies[0].Seconds()))
	}
	return r
}

// resizeInPlaceScenario: a container that crashed three times (back-off
// 0, 10 s, 20 s) is resized in place (memory, NotRequired: no restart)
// and then crashes again. The kubelet's back-off key holds the resources
// (GetBackoffKey, kuberuntime/helpers.go:193-207, v1.37.2): the new key
// has no entry and the restart comes at once, not after the old curve's
// 40 s. The workload waits until its cgroup shows the new limit.
func resizeInPlaceScenario(ctx context.Context, e *env, name string) result {
	c := shell("c", `mark `+markStart+`; n=$(cat /data/$C.runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/$C.runs; `+
		`f=/sys/fs/cgroup/memory.max; [ -e $f ] || f=/sys/fs/cgroup/memory/memory.limit_in_bytes; `+
		`if [ $n -le 3 ]; then sleep 0.5; mark `+markExit+`; exit 42; fi; `+
		`if [ $n -eq 4 ]; then l=$(cat $f); while [ "$(cat $f)" = "$l" ]; do sleep 0.1; done; sleep 0.5; mark `+markExit+`; exit 42; fi; sleep 3600`,
		policy(corev1.ContainerRestartPolicyNever), restartIn(42))
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	c.ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.NotRequired}}
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyAlways, 5, c), name)); err != nil {
		return result{err: err}
	}
	if _, _, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return o.starts >= 4 }); err != nil {
		return result{err: err}
	}
	if err := e.resizeMemoryLimit(ctx, name, "c", "80Mi"); err != nil {
		return result{err: err}
	}
	pod, o, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return o.starts >= 5 })
	if err != nil {
		return result{err: err}
	}
	r := fromObservation(pod, o)
	last := o.latencies[len(o.latencies)-1]
	r.outcome = fmt.Sprintf("%s, the crash after the resize restarted %s", pod.Status.Phase, latencyWord(last, 10*time.Second))
	for i, l := range o.latencies {
		r.notes = append(r.notes, fmt.Sprintf("restart %d after %.2fs", i+1, l.Seconds()))
	}
	return r
}

// backoffCompared adds to a row that waits for two restarts how the second
// compares with the kubelet's first step (10 s): the first restart of a
// container comes at once and the second a full step later, natively and
// supervised, or the figure says otherwise.
func backoffCompared(run func(context.Context, *env, string) result) func(context.Context, *env, string) result {
	return func(ctx context.Context, e *env, name string) result {
		r := run(ctx, e, name)
		if r.err != nil || len(r.latencies) < 2 {
			return r
		}
		r.outcome = fmt.Sprintf("%s %s, then %s", r.outcome, latencyWord(r.latencies[0], 10*time.Second),
			latencyWord(r.latencies[1], 10*time.Second))
		return r
	}
}

// recordingProbe makes probe p of container record each of its checks as
// a "probe-<kind>" line in the container's events file before it runs
// its command, wherever it runs (the kubelet's exec in the container, or
// the supervisor's child with the container's mounts).
func recordingProbe(kind, container string, p *corev1.Probe) *corev1.Probe {
	p.Exec.Command = append([]string{"sh", "-c",
		`read up _ < /proc/uptime; echo "probe-` + kind + ` $up" >> /events/` + container + `; exec "$@"`, "sh"},
		p.Exec.Command...)
	return p
}

// probed is a positive control for a row about what a probe must not do:
// after the row, each named probe (recordingProbe) must have run at least
// once within probedWait, or the row says it never ran.
func probed(run func(context.Context, *env, string) result, container string, kinds ...string) func(context.Context, *env, string) result {
	return func(ctx context.Context, e *env, name string) result {
		r := run(ctx, e, name)
		if r.err != nil {
			return r
		}
		deadline := time.Now().Add(probedWait)
		for _, k := range kinds {
			for probeChecks(e.events(name, container), k) == 0 && time.Now().Before(deadline) {
				time.Sleep(500 * time.Millisecond)
			}
		}
		var never []string
		for _, k := range kinds {
			n := probeChecks(e.events(name, container), k)
			r.notes = append(r.notes, fmt.Sprintf("%s checks: %d", k, n))
			if n == 0 {
				never = append(never, k)
			}
		}
		if len(never) > 0 {
			r.outcome += ", " + strings.Join(never, " and ") + " probe never ran"
		} else {
			r.outcome += ", probed"
		}
		return r
	}
}

// probedWait bounds probed's wait for a first check: a startup probe of
// period 2 s and the liveness after it, on a loaded node.
const probedWait = 20 * time.Second

func probeChecks(evs []event, kind string) int {
	n := 0
	for _, ev := range evs {
		if ev.kind == "probe-"+kind {
			n++
		}
	}
	return n
}

// startsCounted adds how many times container's workload started to a
// row's outcome: a kill that comes before the workload can record its
// exit (a probe's check at once) shows only as one start too many.
func startsCounted(container string, run func(context.Context, *env, string) result) func(context.Context, *env, string) result {
	return func(ctx context.Context, e *env, name string) result {
		r := run(ctx, e, name)
		if r.err != nil {
			return r
		}
		starts := 0
		for _, ev := range e.events(name, container) {
			if ev.kind == markStart {
				starts++
			}
		}
		r.outcome += fmt.Sprintf(", started %d×", starts)
		return r
	}
}

// resizeMemoryLimit resizes container's memory limit in pod name through
// the resize subresource. The kubelet's status updates change the object
// between the read and the resize: it is read again on a conflict.
func (e *env) resizeMemoryLimit(ctx context.Context, name, container, limit string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := e.c.Client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == container {
				pod.Spec.Containers[i].Resources.Limits[corev1.ResourceMemory] = resource.MustParse(limit)
			}
		}
		_, err = e.c.Client.CoreV1().Pods(e.ns).UpdateResize(ctx, name, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("resize: %w", err)
	}
	return nil
}
