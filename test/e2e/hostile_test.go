package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The rows of this file are what one member of a pod can do to the
// others on the real kubelet: a member killed whole, as the kernel kills a
// container under memory.oom.group=1 (the kubelet's default on cgroup v2
// since 1.28) or a runtime that SIGKILLs its init, must not keep another
// member from ending.

// envKillKey marks the container deadMemberScenario kills from the node,
// in the environment of its PID 1 (the supervisor where it is wrapped),
// so that the test finds that process among the node's.
const envKillKey = "E2E_KILL_KEY"

// deadMemberScenario: a (Never + RestartAllContainers In [42]) finishes
// its work and exits 0; b (no rules) runs until the node SIGKILLs its
// container's PID 1, which ends every process of its PID namespace, as a
// whole-container OOM kill does. Natively a ends at once, b ends 137, and
// the pod fails. Wrapped, a's supervisor waits in Ended for the pod's other
// regular members to end (upstream the containers of a pod that may
// restart all of them end together, docs/pod-level.md); b's status
// document still says running, since nothing of b wrote it again: only
// the lock b's supervisor held, which the kernel drops with the process,
// tells a that b is gone. Without it a waited for ever (issue "Hostile
// input, round three", H3).
func deadMemberScenario(ctx context.Context, e *env, name string) result {
	a := shell("a", fmt.Sprintf("mark %s; until [ -e /events/b ]; do sleep 0.1; done; sleep 0.5; mark %s; exit 0", markStart, markExit),
		policy(corev1.ContainerRestartPolicyNever),
		rule(corev1.ContainerRestartRuleActionRestartAllContainers, corev1.ContainerRestartRuleOnExitCodesOpIn, 42))
	b := shell("b", "mark "+markStart+"; sleep 3600", nil)
	key := e.ns + "/" + name + "/b"
	b.Env = append(b.Env, corev1.EnvVar{Name: envKillKey, Value: key})
	if err := e.createPod(ctx, name, e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, a, b), name)); err != nil {
		return result{err: err}
	}
	// b is killed once a's work has ended: a's exit is on record and a has
	// had a second to reach its wait.
	deadline := time.Now().Add(scenarioTimeout)
	for {
		if o := observe(&corev1.Pod{}, "a", nil, e.events(name, "a")); o.exits > 0 {
			break
		}
		if time.Now().After(deadline) {
			return result{err: fmt.Errorf("pod %s: a did not exit within %s", name, scenarioTimeout)}
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second)
	before, err := e.c.Client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return result{err: err}
	}
	aEndedBefore := false
	if cs := containerStatus(before, "a"); cs != nil && cs.State.Terminated != nil {
		aEndedBefore = true
	}
	pid, err := containerInit(envKillKey + "=" + key)
	if err != nil {
		return result{err: fmt.Errorf("pod %s: %w", name, err)}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return result{err: fmt.Errorf("pod %s: kill -9 %d: %w", name, pid, err)}
	}
	killed := time.Now()
	var ended time.Duration
	pod, _, err := e.waitPod(ctx, name, "a", scenarioTimeout, func(p *corev1.Pod, _ observation) bool {
		if cs := containerStatus(p, "a"); ended == 0 && cs != nil && cs.State.Terminated != nil {
			ended = time.Since(killed)
		}
		return terminal(p.Status.Phase)
	})
	if err != nil {
		return result{err: err}
	}
	exit := func(c string) string {
		cs := containerStatus(pod, c)
		if cs == nil || cs.State.Terminated == nil {
			return c + " not ended"
		}
		return fmt.Sprintf("%s exited %d", c, cs.State.Terminated.ExitCode)
	}
	r := fromObservation(pod, observe(pod, "a", nil, e.events(name, "a")))
	r.outcome = fmt.Sprintf("%s, %s, %s", pod.Status.Phase, exit("a"), exit("b"))
	if aEndedBefore {
		r.notes = append(r.notes, "a's end was in the pod's status before b's kill")
	} else {
		// Natively too when the kubelet's status sync lags a's exit.
		r.notes = append(r.notes, fmt.Sprintf("a's end in the pod's status %.2fs after b's kill (grace period 5 s)", ended.Seconds()))
	}
	return r
}

// containerInit returns the node's PID of the process that is PID 1 of its
// own PID namespace and whose environment holds the line env: the init of
// the one container the test marked so.
func containerInit(env string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var found []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "environ"))
		if err != nil || !bytes.Contains(append(append([]byte{0}, environ...), 0), []byte("\x00"+env+"\x00")) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				found = append(found, pid)
			}
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%d processes are PID 1 of their namespace with %s in their environment, want 1", len(found), env)
	}
	return found[0], nil
}
