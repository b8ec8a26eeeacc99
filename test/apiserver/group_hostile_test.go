package apiserver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/nodeagent"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// A pod of namespace evil, on node-a, floods its state volume with
// statevol.MaxGroupRequests group requests while its own group's round is
// under way (each would wait, and was asked about again at every step),
// and one of its files is named with terminal control bytes. A victim
// group of namespace default has a member on node-a and one on node-b,
// both under the real supervisor, each node with its own agent (its
// client bounded as the binary's, nodeagent.ClientConfig). The victim member on node-b
// exits 42: both members must restart, neither before the other's run
// ended (the barrier, not GroupStopWait's release), and a request named
// with control bytes must make no generation. Before the requests were
// decided from the informer's copy, node-a's group loop spent about 20 s
// on one step of the flood (one GET per file; 205 s at client-go's
// default pace, when node-b released its member alone after
// GroupStopWait and the victim's runs overlapped).
func TestGroupFloodInAnotherNamespaceStallsNoGroup(t *testing.T) {
	env, client, dir, bin := startGroupTest(t)
	podsDirs := map[string]string{}
	for _, n := range []string{"node-a", "node-b"} {
		podsDirs[n] = filepath.Join(dir, n, "pods")
		must(t, os.MkdirAll(podsDirs[n], 0o750))
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	ctx := context.Background()

	// The flooding pod and its group's object, whose round stays on.
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "evil"}}, metav1.CreateOptions{})
	must(t, err)
	evil := groupPod(t, client, "evil", "evil-0", "node-a", "evil", "")
	evilState := stateDir(t, podsDirs["node-a"], evil.UID)
	evilKey := contract.LabelGroup + "=evil"
	_, err = dyn.Resource(agentapi.GroupResource).Namespace("evil").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": agentapi.GroupResource.GroupVersion().String(), "kind": agentapi.GroupKind,
		"metadata": map[string]any{"name": agentapi.GroupObjectName(evilKey)},
		"spec": map[string]any{"group": evilKey, "generation": int64(1),
			// A round made now whose other node never reports its member
			// started: under way for the whole test.
			"cause":       map[string]any{"pod": "evil-0", "container": "rank", "exitCode": int64(42), "time": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
			"coordinator": "node-z"},
	}}, metav1.CreateOptions{})
	must(t, err)
	reqDir := filepath.Join(evilState, contract.GroupDir)
	must(t, os.MkdirAll(reqDir, 0o777))
	for i := 0; i < statevol.MaxGroupRequests-1; i++ {
		must(t, os.WriteFile(filepath.Join(reqDir, fmt.Sprintf("%sc%04d", contract.GroupRequestPrefix, i)),
			fmt.Appendf(nil, `{"id":"flood-%d","exitCode":42,"observed":1}`, i), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(reqDir, contract.GroupRequestPrefix+"rank"), []byte(`{"id":"flood-rank","exitCode":42,"observed":1}`), 0o644))

	// The victim group: a member on each node.
	type member struct {
		pod                 *corev1.Pod
		state, log, trigger string
		out                 *testutil.SyncBuffer
	}
	var victims []*member
	for i, node := range []string{"node-a", "node-b"} {
		p := groupPod(t, client, "default", fmt.Sprintf("victim-%d", i), node, "victim", "")
		victims = append(victims, &member{pod: p, state: stateDir(t, podsDirs[node], p.UID),
			log: filepath.Join(dir, p.Name+".log"), trigger: filepath.Join(dir, p.Name+".exit"), out: &testutil.SyncBuffer{}})
	}
	for _, n := range []string{"node-a", "node-b"} {
		startGroupAgent(t, env.Config, n, podsDirs[n])
	}
	for _, m := range victims {
		// Each run logs its start and end, and exits 42 when the test
		// puts its trigger file.
		script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s
trap 'echo "end $(date +%%s%%N)" >> %[1]s; exit 0' TERM
while :; do
  if [ -e %[2]s ]; then rm -f %[2]s; echo "end $(date +%%s%%N)" >> %[1]s; exit 42; fi
  sleep 0.05
done`, m.log, m.trigger)
		startMember(t, bin, m.state, script, m.out)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s supervisor:\n%s", m.pod.Name, tail(m.out.String(), 30))
			}
		})
	}
	waitFor(t, "both victims' first run", 30*time.Second, func(context.Context) (bool, error) {
		return len(readRuns(t, victims[0].log)) == 1 && len(readRuns(t, victims[1].log)) == 1, nil
	})
	// Let node-a's agent see the flood for a few steps before the exit.
	waitFor(t, "node-a's agent delivering the evil group's round", 30*time.Second, func(context.Context) (bool, error) {
		_, ok := statevol.GroupRound(evilState, 1)
		return ok, nil
	})
	time.Sleep(time.Second)

	exitAt := time.Now()
	must(t, os.WriteFile(victims[1].trigger, nil, 0o644))
	// Within GroupStopWait, after which the agents release their members
	// without the barrier: a restart by the barrier comes well before it
	// (0.3-4 s unloaded), a stalled node's after it (about 40 s with the
	// agent's client, 205 s at client-go's default pace).
	waitFor(t, "both victims' second run", nodeagent.GroupStopWait, func(context.Context) (bool, error) {
		return len(readRuns(t, victims[0].log)) >= 2 && len(readRuns(t, victims[1].log)) >= 2, nil
	})
	r0, r1 := readRuns(t, victims[0].log), readRuns(t, victims[1].log)
	if len(r0) != 2 || len(r1) != 2 {
		t.Fatalf("victims ran %d and %d times, want 2 each", len(r0), len(r1))
	}
	for _, pair := range [][2][]rankRun{{r0, r1}, {r1, r0}} {
		if pair[0][0].end.IsZero() || !pair[0][1].start.After(pair[1][0].end) {
			t.Errorf("a victim started again (%s) before the other's run ended (%s): the barrier did not hold",
				pair[0][1].start.Format(time.StampMicro), pair[1][0].end.Format(time.StampMicro))
		}
	}
	last := r0[1].start
	if r1[1].start.After(last) {
		last = r1[1].start
	}
	t.Logf("with %d requests in another namespace's volume on node-a: exit → both victims running again: %s",
		statevol.MaxGroupRequests, last.Sub(exitAt).Round(time.Millisecond))

	// A request named with control bytes, seeing the victim's current
	// generation, then a real one: only the real one makes a generation,
	// and its cause names the spec's container.
	victimName := agentapi.GroupObjectName(contract.LabelGroup + "=victim")
	waitFor(t, "the victim's round over", 40*time.Second, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, victimName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		done, _, _ := unstructured.NestedInt64(o.Object, "spec", "done")
		return done == 1, nil
	})
	vreq := filepath.Join(victims[0].state, contract.GroupDir)
	must(t, os.MkdirAll(vreq, 0o777))
	must(t, os.WriteFile(filepath.Join(vreq, contract.GroupRequestPrefix+"x\x1b[2J\x07"), []byte(`{"id":"esc","exitCode":42,"observed":1}`), 0o644))
	time.Sleep(time.Second) // five group steps
	must(t, os.WriteFile(victims[0].trigger, nil, 0o644))
	waitFor(t, "the real request's generation", 30*time.Second, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, victimName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		gen, _, _ := unstructured.NestedInt64(o.Object, "spec", "generation")
		container, _, _ := unstructured.NestedString(o.Object, "spec", "cause", "container")
		if gen >= 2 && container != "rank" {
			return false, fmt.Errorf("generation %d was made by container %q, not the spec's %q", gen, container, "rank")
		}
		return gen == 2, nil
	})
}

// GroupRestart objects of other nodes' groups are not the agent's to
// hold: 20,000 of them in the cluster (one per Job that ever had a group
// restart), none with a member on the agent's node, and the agent binary
// (with --groups) stays under its 128 Mi limit while it carries out a
// group restart of its own node's pod. A cluster-wide informer held them
// all: 194 MiB.
func TestAgentHoldsOnlyItsNodesGroups(t *testing.T) {
	env, client, dir, _ := startGroupTest(t)
	ctx := context.Background()
	bin := buildInjector(t, dir)
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "groups-admin", Groups: []string{"system:masters"}})
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "history"}}, metav1.CreateOptions{})
	must(t, err)

	// The history: as a finished Job's group leaves it, its last round
	// done, with a cause.
	const historical = 20000
	started := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < historical; i += 16 {
				key := fmt.Sprintf("batch.kubernetes.io/job-name=train-%05d", i)
				_, err := dyn.Resource(agentapi.GroupResource).Namespace("history").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": agentapi.GroupResource.GroupVersion().String(), "kind": agentapi.GroupKind,
					"metadata": map[string]any{"name": agentapi.GroupObjectName(key)},
					"spec": map[string]any{"group": key, "generation": int64(3),
						"cause":       map[string]any{"pod": fmt.Sprintf("train-%05d-0-abcde", i), "container": "trainer", "exitCode": int64(42), "time": "2026-11-01T10:00:00Z"},
						"coordinator": "gpu-node-001", "released": int64(3), "done": int64(3), "members": int64(8)},
				}}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create the history: %v", err)
	}
	t.Logf("%d GroupRestart objects made in %s", historical, time.Since(started).Round(time.Second))

	podsDir := filepath.Join(dir, "pods")
	p := groupPod(t, client, "default", "rank-0", "node-a", "mine", "")
	state := stateDir(t, podsDir, p.UID)
	var logs testutil.SyncBuffer
	agent := exec.Command(bin, "node-agent", "--kubeconfig="+admin, "--kubelet-pods-dir="+podsDir, "--groups",
		fmt.Sprintf("--metrics-listen=127.0.0.1:%d", freePort(t)), "--log-format=text")
	agent.Env = append(os.Environ(), "NODE_NAME=node-a")
	agent.Stdout, agent.Stderr = &logs, &logs
	must(t, agent.Start())
	t.Cleanup(func() {
		_ = agent.Process.Kill()
		_ = agent.Wait()
		if t.Failed() {
			t.Logf("agent:\n%s", tail(logs.String(), 30))
		}
	})
	// Its own node's group works: a request makes generation 1 and the
	// agent delivers it to the pod's volume.
	must(t, os.MkdirAll(filepath.Join(state, contract.GroupDir), 0o777))
	must(t, os.WriteFile(filepath.Join(state, contract.GroupDir, contract.GroupRequestPrefix+"rank"), []byte(`{"id":"r1","exitCode":42,"observed":0}`), 0o644))
	waitFor(t, "the agent's delivery of its own group's generation", 60*time.Second, func(context.Context) (bool, error) {
		_, ok := statevol.GroupRound(state, 1)
		return ok, nil
	})
	time.Sleep(5 * time.Second) // its steady state: scans and group steps
	hwm := testutil.ProcStatusKiB(t, agent.Process.Pid, "VmHWM")
	const limitKiB = 128 * 1024 // the chart's and the manifests' memory limit
	t.Logf("agent with %d other groups in the cluster: peak RSS %.1f MiB", historical, float64(hwm)/1024)
	if hwm >= limitKiB {
		t.Errorf("agent peak RSS %.1f MiB, at or over its %d MiB limit", float64(hwm)/1024, limitKiB/1024)
	}
}

// A GroupRestart object goes with its workload: the agent makes it owned
// by the pod's controller (here a Job), and the garbage collector (a real
// kube-controller-manager, garbagecollector only) deletes it once the Job
// is deleted. Objects were never deleted before.
func TestGroupObjectGoesWithItsWorkload(t *testing.T) {
	env, client, dir, _ := startGroupTest(t)
	ctx := context.Background()
	startGarbageCollector(t, env, dir)
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	job, err := client.BatchV1().Jobs("default").Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec: batchv1.JobSpec{ManualSelector: ptr.To(true), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "train"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "train"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "rank", Image: "busybox"}}}}}},
		metav1.CreateOptions{})
	must(t, err)
	podsDir := filepath.Join(dir, "pods")
	must(t, os.MkdirAll(podsDir, 0o750))
	p := groupPod(t, client, "default", "train-0", "node-a", "train", "", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}
	})
	state := stateDir(t, podsDir, p.UID)
	startGroupAgent(t, env.Config, "node-a", podsDir)
	must(t, os.MkdirAll(filepath.Join(state, contract.GroupDir), 0o777))
	must(t, os.WriteFile(filepath.Join(state, contract.GroupDir, contract.GroupRequestPrefix+"rank"), []byte(`{"id":"r1","exitCode":42,"observed":0}`), 0o644))
	name := agentapi.GroupObjectName(contract.LabelGroup + "=train")
	waitFor(t, "the group's generation 1", 30*time.Second, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		gen, _, _ := unstructured.NestedInt64(o.Object, "spec", "generation")
		return gen == 1, nil
	})
	o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != job.UID || refs[0].Kind != "Job" {
		t.Fatalf("owner references %+v, want the Job %s", refs, job.UID)
	}
	must(t, client.BatchV1().Jobs("default").Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}))
	deleted := time.Now()
	waitFor(t, "the garbage collector's deletion of the group's object", 90*time.Second, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	t.Logf("the Job's deletion → its GroupRestart object gone: %s", time.Since(deleted).Round(100*time.Millisecond))
}

// startGarbageCollector runs kube-controller-manager with only the
// garbage collector against env until the test ends.
func startGarbageCollector(t *testing.T, env *envtest.Environment, dir string) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "hack", "kube-binaries.sh"), "kube-controller-manager")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kube-controller-manager: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	kcm := filepath.Join(lines[len(lines)-1], "kube-controller-manager")
	admin := kubeconfigFor(t, env, dir, "gc", envtest.User{Name: "gc-admin", Groups: []string{"system:masters"}})
	var logs testutil.SyncBuffer
	gc := exec.Command(kcm, "--kubeconfig", admin, "--controllers", "garbagecollector", "--leader-elect=false", "--secure-port=0")
	gc.Stdout, gc.Stderr = &logs, &logs
	must(t, gc.Start())
	t.Cleanup(func() {
		_ = gc.Process.Kill()
		_ = gc.Wait()
		if t.Failed() {
			t.Logf("kube-controller-manager:\n%s", tail(logs.String(), 20))
		}
	})
}
