package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// kubeletRestartMoment is when restartAllKubeletRestartScenario restarts
// the kubelet: while the pod restart stops the containers, or while its
// new round starts (the init container runs again).
type kubeletRestartMoment int

const (
	duringCleanup kubeletRestartMoment = iota
	duringStartup
)

// kubeletRestartContainers is how many containers without rules the pod
// has beside the one that announces the pod restart. Upstream uses 10 to
// make the round long; here each one's SIGTERM trap takes 1 s instead, so
// that a 2-core node keeps up.
const kubeletRestartContainers = 3

// restartAllKubeletRestartScenario: upstream's e2e_node
// "RestartAllContainersWithKubeletRestarts" (test/e2e_node/
// restart_all_containers_test.go, v1.36.3): a pod restart, with the kubelet
// restarted in its middle, must still end with every container restarted
// once and running. Upstream's kubelet keeps the round in the pod's
// AllContainersRestarting condition; the supervisors keep it in the pod
// state volume, which a kubelet restart does not touch. Natively the
// kubelet is restarted once the source container has exited (cleanup) or
// once the init container runs again (start-up); the harness sees both
// moments in the containers' own records, the same in both modes.
func restartAllKubeletRestartScenario(moment kubeletRestartMoment) func(context.Context, *env, string) result {
	return func(ctx context.Context, e *env, name string) result {
		const grace = 5
		src := shell("source", fmt.Sprintf("mark %s; if [ -e /data/source.ran ]; then sleep 3600; fi; touch /data/source.ran; "+
			"until [ -e /events/c%d ]; do sleep 0.1; done; sleep 0.5; mark %s; exit 42", markStart, kubeletRestartContainers-1, markExit),
			policy(corev1.ContainerRestartPolicyNever),
			rule(corev1.ContainerRestartRuleActionRestartAllContainers, corev1.ContainerRestartRuleOnExitCodesOpIn, 42))
		containers := []corev1.Container{src}
		names := []string{"source"}
		for i := range kubeletRestartContainers {
			n := fmt.Sprintf("c%d", i)
			containers = append(containers, shell(n,
				"mark "+markStart+"; trap 'sleep 1; mark "+markExit+"; exit 0' TERM; sleep 3600 & wait", nil))
			names = append(names, n)
		}
		spec := e.withVolumes(podSpec(corev1.RestartPolicyNever, grace, containers...), name)
		if moment == duringStartup {
			// Long enough that the kubelet's restart falls inside the
			// init container's second run.
			ini := shell("init", "mark "+markStart+"; sleep 8; mark "+markExit, nil)
			ini.VolumeMounts = append(ini.VolumeMounts, spec.Containers[0].VolumeMounts...)
			spec.InitContainers = []corev1.Container{ini}
			names = append([]string{"init"}, names...)
		}
		if err := e.createPod(ctx, name, spec); err != nil {
			return result{err: err}
		}
		// The moment to restart the kubelet at, from the containers' records.
		trigger, what := "source", func(o observation) bool { return o.exits >= 1 }
		if moment == duringStartup {
			trigger, what = "init", func(o observation) bool { return o.starts >= 2 }
		}
		if _, _, err := e.waitPod(ctx, name, trigger, scenarioTimeout, func(_ *corev1.Pod, o observation) bool { return what(o) }); err != nil {
			return result{err: err}
		}
		began := time.Now()
		if err := e.c.RestartKubelet(ctx); err != nil {
			return result{err: err}
		}
		restartTook := time.Since(began)
		last := names[len(names)-1]
		pod, _, err := e.secondRun(ctx, name, last, 3*time.Second)
		if err != nil {
			return result{err: err}
		}
		osrc := observe(pod, "source", e.containerLogs(ctx, pod, "source"), e.events(name, "source"))
		r := fromObservation(pod, osrc)
		var counts []string
		twice := true
		for _, n := range names {
			starts := 0
			for _, ev := range e.events(name, n) {
				if ev.kind == markStart {
					starts++
				}
			}
			twice = twice && starts == 2
			counts = append(counts, fmt.Sprintf("%s=%d", n, starts))
		}
		running := 0
		for _, st := range pod.Status.ContainerStatuses {
			if st.State.Running != nil {
				running++
			}
		}
		allRunning := running == len(pod.Spec.Containers)
		if twice && allRunning {
			r.outcome = fmt.Sprintf("%s, every container started twice and running", pod.Status.Phase)
		} else {
			r.outcome = fmt.Sprintf("%s, starts %s, %d of %d running", pod.Status.Phase, strings.Join(counts, " "), running, len(pod.Spec.Containers))
		}
		r.notes = append(r.notes, fmt.Sprintf("kubelet restarted in %.1fs", restartTook.Seconds()))
		return r
	}
}
