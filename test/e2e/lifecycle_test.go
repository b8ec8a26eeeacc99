package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// Scenarios for the touch-points of docs/supervisor.md "Lifecycle" beyond
// the exit decision: init containers, the grace period and the back-off
// across a hand-over to the kubelet.

// initScenario: a non-sidecar init container with restartPolicy Never and
// Restart NotIn [1] exits 0. Upstream it is initialized without consulting
// the rules (computeInitContainerActions), so the pod goes on to its
// containers; a supervisor that applied the rule would restart it forever.
func initScenario(ctx context.Context, e *env, name string) result {
	ini := shell("init", exitScript(0), policy(corev1.ContainerRestartPolicyNever), restartNotIn(1))
	app := shell("c", "mark "+markStart+"; sleep 3600", nil)
	// A wrongly restarted init container never lets c start: the wait
	// times out and the outcome says what happened instead.
	run, err := runInitPod(ctx, e, name, ini, app)
	if err != nil {
		return result{err: err}
	}
	term := "not terminated"
	if run.status != nil && run.status.State.Terminated != nil {
		term = fmt.Sprintf("exit %d (%s)", run.status.State.Terminated.ExitCode, run.status.State.Terminated.Reason)
	}
	mainWord := "c not started"
	if run.c.starts > 0 {
		mainWord = "c started"
	}
	r := run.result()
	r.outcome = fmt.Sprintf("%s, init ran %d×, %s, %s", run.pod.Status.Phase, run.init.starts, term, mainWord)
	return r
}

// initPodRun is what a pod of one init container ("init") and one regular
// container ("c") showed once c ran.
type initPodRun struct {
	pod     *corev1.Pod
	init, c observation
	status  *corev1.ContainerStatus // the init container's; nil until the kubelet reports it
}

// runInitPod creates a pod of restartPolicy Never whose init container ini
// runs before c, both on the scenario's volumes, and waits until c has
// started and the pod is Running, then 3 s more, in which another run of
// either would show. A wait that times out with the pod present is not an
// error: the observation then says what happened instead.
func runInitPod(ctx context.Context, e *env, name string, ini, c corev1.Container) (initPodRun, error) {
	spec := e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, c), name)
	ini.VolumeMounts = append(ini.VolumeMounts, spec.Containers[0].VolumeMounts...)
	spec.InitContainers = []corev1.Container{ini}
	if err := e.createPod(ctx, name, spec); err != nil {
		return initPodRun{}, err
	}
	pod, _, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(p *corev1.Pod, o observation) bool {
		return o.starts >= 1 && p.Status.Phase == corev1.PodRunning
	})
	if pod == nil || ctx.Err() != nil {
		return initPodRun{}, err
	}
	time.Sleep(3 * time.Second)
	if p, _, err := e.waitPod(ctx, name, "c", time.Second, func(*corev1.Pod, observation) bool { return true }); err == nil {
		pod = p
	}
	run := initPodRun{
		pod:  pod,
		init: observe(pod, "init", e.logs(ctx, name, "init", false), e.events(name, "init")),
		c:    observe(pod, "c", nil, e.events(name, "c")),
	}
	for i := range pod.Status.InitContainerStatuses {
		if pod.Status.InitContainerStatuses[i].Name == "init" {
			run.status = &pod.Status.InitContainerStatuses[i]
		}
	}
	return run, nil
}

// result fills the columns every scenario has from the init container's
// observation and status; the caller writes the outcome.
func (run initPodRun) result() result {
	r := result{phase: string(run.pod.Status.Phase), supRestarts: run.init.supervisorRestarts, restarted: run.init.restarted, latency: run.init.latency}
	if run.status != nil {
		r.kubeletRestarts = run.status.RestartCount
	}
	return r
}

// graceScenario: a workload that checkpoints for 30 s on SIGTERM, in a pod
// with terminationGracePeriodSeconds 40, deleted with the pod's own grace
// period. Upstream the runtime waits the 40 s, so the checkpoint finishes
// and the container exits 0. A supervisor with a shorter timer of its own
// (it used to SIGKILL after 25 s) cuts it short.
func graceScenario(ctx context.Context, e *env, name string) result {
	const (
		grace      = 40
		checkpoint = 30
	)
	c := shell("c", fmt.Sprintf("trap 'mark TERM; sleep %d; echo checkpoint done; mark DONE; exit 0' TERM; mark %s; sleep 3600 & wait",
		checkpoint, markStart), policy(corev1.ContainerRestartPolicyNever), restartIn(42))
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, grace, c), name)); err != nil {
		return result{err: err}
	}
	pod, _, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(p *corev1.Pod, o observation) bool {
		cs := containerStatus(p, "c")
		return o.starts >= 1 && cs != nil && cs.State.Running != nil
	})
	if err != nil {
		return result{err: err}
	}
	time.Sleep(time.Second) // the trap is set once START is recorded; let the shell reach wait
	w, err := e.c.Client.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		return result{err: err}
	}
	defer w.Stop()
	start := time.Now()
	if err := e.c.Client.CoreV1().Pods(e.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil { // the pod's grace period
		return result{err: err}
	}
	// Every status the kubelet writes while the pod terminates comes
	// through the watch, including the terminated state it writes just
	// before the pod object goes.
	var (
		exit       *corev1.ContainerStateTerminated
		sawLogLine bool
		gone       bool
		timeout    = time.After(2 * grace * time.Second)
		poll       = time.NewTicker(time.Second)
	)
	defer poll.Stop()
	for !gone {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return result{err: fmt.Errorf("pod %s: watch closed before the pod was gone", name)}
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod {
				if cs := containerStatus(p, "c"); cs != nil && cs.State.Terminated != nil {
					exit = cs.State.Terminated
				}
			}
			gone = ev.Type == watch.Deleted
		case <-poll.C:
			// The log is readable until the kubelet removes the container.
			for _, l := range e.logs(ctx, name, "c", false) {
				sawLogLine = sawLogLine || strings.Contains(l.text, "checkpoint done")
			}
			if _, err := e.c.Client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				gone = true
			}
		case <-timeout:
			return result{err: fmt.Errorf("pod %s still present %ds after delete", name, 2*grace)}
		case <-ctx.Done():
			return result{err: ctx.Err()}
		}
	}
	took := time.Since(start)
	var term, done time.Duration = -1, -1
	for _, ev := range e.events(name, "c") {
		switch ev.kind {
		case "TERM":
			term = ev.at
		case "DONE":
			done = ev.at
		}
	}
	r := result{phase: "deleted", supRestarts: -1}
	if o := observe(pod, "c", e.logs(ctx, name, "c", false), nil); o.supervisorRestarts >= 0 {
		r.supRestarts = o.supervisorRestarts
	}
	var parts []string
	switch {
	case term < 0:
		parts = append(parts, "no SIGTERM seen")
	case done < 0:
		parts = append(parts, "checkpoint cut short")
	case done-term < (checkpoint-1)*time.Second:
		parts = append(parts, fmt.Sprintf("checkpoint ended after %.0fs", (done-term).Seconds()))
	default:
		parts = append(parts, "checkpoint done")
		r.notes = append(r.notes, fmt.Sprintf("SIGTERM → checkpoint done %.1fs", (done-term).Seconds()))
	}
	if exit != nil {
		parts = append(parts, fmt.Sprintf("exit %d", exit.ExitCode))
	} else {
		parts = append(parts, "exit code not seen")
	}
	d := deletion{took: took, exit: exit}
	if exit != nil {
		d.stopped = exit.FinishedAt.Sub(start)
	}
	parts = append(parts, d.graceOutcome())
	r.outcome = strings.Join(parts, ", ")
	r.notes = append(r.notes, d.notes()...)
	if sawLogLine {
		r.notes = append(r.notes, `log line "checkpoint done" read`)
	}
	return r
}

// backoffWant are the kubelet's CrashLoopBackOff delays for the first five
// exits of a container: the first restart at once, then 10 s doubling.
var backoffWant = []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second}

// backoffEarly is how much earlier than its delay a restart may be
// measured: the exit is recorded just before the workload exits.
const backoffEarly = time.Second

// backoffOK reports whether the restart after exit i came after its delay
// and before the next step of the curve. The kubelet cannot be held to a
// few seconds: while a container is in back-off it re-syncs the pod every
// 10-15 s (pod_workers.go, Jitter(backOffPeriod 10 s, 0.5)), so it restarts
// at the first sync after the delay, up to 15 s late natively. A count off
// by one in either direction lands in another step and fails. The first
// restart has no delay; on a loaded node the kubelet took up to 11 s to
// make it, so it is held to that re-sync bound (15 s) instead.
func backoffOK(i int, got time.Duration) bool {
	want := backoffWant[i]
	next := 2 * want
	if i == 0 {
		next = 15 * time.Second
	}
	return got >= want-backoffEarly && got < next
}

// backoffScenario: container Always + Restart In [42] in a pod Always; the
// workload exits 42, 42, 1, 42, 42 (a count in the emptyDir) and then
// stays up. Upstream every exit restarts it with the one back-off of the
// container: 0, 10, 20, 40, 80 s. Supervised, the 42s restart in place and
// the 1 is handed over to the kubelet, whose own count has seen one exit
// and restarts at once; the next supervisor reads the count from the
// pod's state volume and waits the rest of the 20 s.
func backoffScenario(ctx context.Context, e *env, name string) result {
	codes := []int{42, 42, 1, 42, 42}
	var cases []string
	for i, code := range codes {
		cases = append(cases, fmt.Sprintf("%d) code=%d;;", i+1, code))
	}
	// $(...) that names no variable is left alone by the kubelet's
	// expansion of $(VAR) references.
	script := fmt.Sprintf("mark %s; echo run >> /data/runs; n=$(wc -l < /data/runs); "+
		"case $n in %s *) sleep 3600;; esac; sleep 0.2; mark %s; exit $code",
		markStart, strings.Join(cases, " "), markExit)
	c := shell("c", script, policy(corev1.ContainerRestartPolicyAlways), restartIn(42))
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyAlways, 5, c), name)); err != nil {
		return result{err: err}
	}
	var total time.Duration
	for _, d := range backoffWant {
		total += d
	}
	pod, o, err := e.waitPod(ctx, name, "c", total+time.Duration(len(codes))*10*time.Second+scenarioTimeout/3,
		func(_ *corev1.Pod, o observation) bool { return len(o.latencies) >= len(codes) })
	if err != nil {
		if pod == nil {
			return result{err: err}
		}
		err = fmt.Errorf("%w; restarts seen after %s", err, fmtGaps(o.latencies))
		return result{err: err}
	}
	if !o.counted() {
		if p, o2, err := e.waitPod(ctx, name, "c", 5*time.Second, func(_ *corev1.Pod, o observation) bool { return o.counted() }); err == nil {
			pod, o = p, o2
		}
	}
	r := fromObservation(pod, o)
	var off []string
	for i, want := range backoffWant {
		if got := o.latencies[i]; !backoffOK(i, got) {
			off = append(off, fmt.Sprintf("restart %d after %.1fs for a %.0fs delay", i+1, got.Seconds(), want.Seconds()))
		}
	}
	if len(off) == 0 {
		r.outcome += fmt.Sprintf(", first restart within 15 s, then each delay at least %s s and short of the next step", fmtWant(backoffWant[1:]))
	} else {
		r.outcome += ", " + strings.Join(off, ", ")
	}
	var late []string
	for i, want := range backoffWant {
		late = append(late, fmt.Sprintf("%+.1f", (o.latencies[i]-want).Seconds()))
	}
	r.notes = append(r.notes, "over the upstream delay "+strings.Join(late, ", ")+" s")
	r.notes = append(r.notes, "exit → start "+fmtGaps(o.latencies))
	return r
}

func fmtGaps(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.2f", d.Seconds()))
	}
	return strings.Join(s, ", ") + " s"
}

func fmtWant(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.0f", d.Seconds()))
	}
	return strings.Join(s, ", ")
}

// preStopScenario: upstream a pod marked for deletion has no container
// restarted (pkg/kubelet/container/helpers.go ShouldContainerBeRestarted,
// v1.37.2) from before its preStop hook runs. A hook that makes the
// workload exit (nginx -s quit) with a code its rules restart therefore
// ends the container, with that code, before the stop signal. The hook
// goes on for 5 s: a supervisor that learnt of the deletion from the stop
// signal alone restarted the workload in place meanwhile.
func preStopScenario(ctx context.Context, e *env, name string) result {
	const grace = 20
	c := shell("c", fmt.Sprintf("mark %s; while [ ! -e /tmp/quit ]; do sleep 0.1; done; mark %s; exit 42", markStart, markExit),
		policy(corev1.ContainerRestartPolicyNever), restartIn(42))
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "touch /tmp/quit; sleep 5"}},
	}}
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, grace, c), name)); err != nil {
		return result{err: err}
	}
	pod, o, err := e.waitPod(ctx, name, "c", scenarioTimeout, func(p *corev1.Pod, o observation) bool {
		cs := containerStatus(p, "c")
		return o.starts >= 1 && cs != nil && cs.State.Running != nil
	})
	if err != nil {
		return result{err: err}
	}
	time.Sleep(time.Second)
	r := fromObservation(pod, o)
	d, err := e.deleteAndWait(ctx, name, "c", grace, grace*time.Second+goneSlack)
	if err != nil {
		return result{err: err}
	}
	exit := "exit not seen"
	if d.exit != nil {
		exit = fmt.Sprintf("exit %d", d.exit.ExitCode)
	}
	after := "no restart after delete"
	if d.restartedAfter {
		after = "restarted after delete"
	}
	r.outcome = exit + ", " + after
	r.notes = append(r.notes, d.notes()...)
	r.phase = "deleted"
	return r
}
