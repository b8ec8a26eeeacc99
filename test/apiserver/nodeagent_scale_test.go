//go:build podstart

package apiserver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// TestNodeAgentAtNodeScale runs the built node agent, at its default
// interval (2 s), over 10 and then 110 supervised pods on its node (110: the
// kubelet's default --max-pods), each pod's state volume laid out as the
// kubelet's under a pods directory of the test's, against a real
// kube-apiserver. It measures, for docs/observability.md: the CPU of one
// scan (the process's utime+stime over 10 intervals), its peak RSS, and the
// time from a status document's write to the metric and to the
// RestartedInPlace Event for 10 pods in turn. Figures, logged; what it
// asserts is that every pod's restart reaches both. Build tag podstart:
// `make podstart` runs it, not `make test`.
func TestNodeAgentAtNodeScale(t *testing.T) {
	env, client := startAPIServer(t, kubeAssets(t), true)
	ctx := context.Background()
	dir := t.TempDir()
	bin := buildInjector(t, dir)
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "scale-admin", Groups: []string{"system:masters"}})
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentapi.AgentNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, n := range []int{10, 110} {
		podsDir := filepath.Join(dir, fmt.Sprintf("pods-%d", n))
		for ; created < n; created++ {
			createPod(t, client, fmt.Sprintf("p-%03d", created), agentNode, "app")
		}
		// Every pod so far, by name (the list's order).
		all, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var pods []*corev1.Pod
		for i := range all.Items {
			pods = append(pods, &all.Items[i])
			writeStatus(t, stateDir(t, podsDir, all.Items[i].UID), "app", 0, 0, false)
		}

		port := freePort(t)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		var logs testutil.SyncBuffer
		agent := exec.Command(bin, "node-agent", "--kubeconfig="+admin, "--kubelet-pods-dir="+podsDir,
			fmt.Sprintf("--metrics-listen=%s", addr), "--log-format=text")
		agent.Env = append(os.Environ(), "NODE_NAME="+agentNode)
		agent.Stdout, agent.Stderr = &logs, &logs
		must(t, agent.Start())
		stop := func() {
			_ = agent.Process.Kill()
			_ = agent.Wait()
		}
		waitFor(t, fmt.Sprintf("every one of %d pods' series", n), 60*time.Second, func(context.Context) (bool, error) {
			body, err := tryScrape(addr)
			got := strings.Count(body, "restart_supervisor_container_restarts_total{")
			return err == nil && got == n, fmt.Errorf("%d series: %v", got, err)
		})

		// CPU of one scan: 10 intervals with nothing changing.
		before := cpuTicks(t, agent.Process.Pid)
		time.Sleep(20 * time.Second)
		// Ticks of 10 ms over 10 scans: a tick is one millisecond a scan.
		perScan := float64(cpuTicks(t, agent.Process.Pid) - before)

		// A restart of each of the last 10 pods in turn (none restarted
		// before): write → metric, write → Event. The i-th write waits
		// i/10 of an interval first, so that the writes fall at every
		// phase of the scan rather than just after the scan that ended
		// the previous wait.
		var toMetric, toEvent []time.Duration
		for i, p := range pods[n-10:] {
			time.Sleep(time.Duration(i) * 2 * time.Second / 10)
			start := time.Now()
			writeStatus(t, stateDir(t, podsDir, p.UID), "app", 1, 0, false)
			waitMetric(t, addr, series("restart_supervisor_container_restarts_total", "namespace", "default", "pod", p.Name, "container", "app", "uid", string(p.UID)), "1")
			toMetric = append(toMetric, time.Since(start))
			waitFor(t, "the Event of "+p.Name, 30*time.Second, func(ctx context.Context) (bool, error) {
				l, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
					FieldSelector: "involvedObject.uid=" + string(p.UID) + ",reason=" + agentapi.ReasonRestarted})
				return err == nil && len(l.Items) > 0, err
			})
			toEvent = append(toEvent, time.Since(start))
		}
		hwm := testutil.ProcStatusKiB(t, agent.Process.Pid, "VmHWM")
		stop()
		slices.Sort(toMetric)
		slices.Sort(toEvent)
		t.Logf("%d pods: %.0f ms CPU a scan, peak RSS %.1f MiB; write → metric median %v, max %v; write → Event median %v, max %v",
			n, perScan, float64(hwm)/1024, toMetric[5].Round(time.Millisecond), toMetric[9].Round(time.Millisecond),
			toEvent[5].Round(time.Millisecond), toEvent[9].Round(time.Millisecond))
	}
}

// cpuTicks is the process's utime+stime, in clock ticks (proc(5): fields
// 14 and 15 of /proc/pid/stat; 100 a second on Linux).
func cpuTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b)[strings.LastIndex(string(b), ")")+2:])
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
}
